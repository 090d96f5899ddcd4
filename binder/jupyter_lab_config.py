"""JupyterLab settings of the course (`make lab` passes this file; binder/postBuild installs it on Binder).

Chinese text in the chapters and workbooks (我爱NLP, the outputs of chapter 1's tokenizers, the glossary's
terms) needs a CJK font, and the checks' ✅ PASS / ❌ FAIL need an emoji font; a machine without them (a
bare Linux box or container) shows empty boxes. The course brings its own, as the HTML book does:

- Noto Sans CJK SC, the font the ``mplfonts`` package installs (a dependency of ``companion``, which the
  chapters' figures already use), served from that package's folder;
- the emoji fallback font of the book (``book/_ext/offline_assets.py``: ✅ → ✔, ❌ → ✘ from matplotlib's
  DejaVu Sans), written at start-up into the Jupyter runtime folder.

JupyterLab loads ``custom.css`` (``LabApp.custom_css``) from ``binder/lab/``, where the server extension
``binder/course_fonts.py`` points it; that stylesheet puts both fonts into JupyterLab's font stacks, each for
its own characters only (``unicode-range``). tests/test_lab.py checks that JupyterLab started as `make lab`
starts it draws Chinese with Noto Sans CJK SC and ✅ with the fallback font.
"""

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # course_fonts, imported by the server when it loads its extensions
sys.path.insert(0, str(HERE.parent / "book" / "_ext"))
try:
    from offline_assets import EMOJI_OUTPUT, emoji_fallback_font
finally:
    sys.path.pop(0)
from course_fonts import GENERATED_FONTS  # noqa: E402

emoji_fallback_font(GENERATED_FONTS / EMOJI_OUTPUT.name)

c = get_config()  # noqa: F821 - defined by Jupyter when it reads a configuration file
c.LabApp.custom_css = True
c.ServerApp.jpserver_extensions.update({"course_fonts": True})
