"""Sphinx extension that keeps the built HTML book offline and self-contained.

1. Thebe is switched off (``launch_buttons.thebe: false``), yet Jupyter Book always loads sphinx-thebe,
   which puts the address of its JavaScript bundle on a public CDN into every page (loaded only on a click,
   but still a remote reference) together with its loader script. With thebe off both are dropped.

2. The Chinese glyphs the book uses ship as a small web font, so that every page renders 中文 the same
   way on any machine, offline, without relying on the reader's system fonts. The full Noto Sans CJK SC
   font is 16 MB; the book uses a few hundred distinct Chinese characters. After the HTML is written,
   this extension collects every CJK character in the output pages and subsets Noto Sans CJK SC (the
   copy shipped by the ``mplfonts`` package, which the chapters' figures use too) down to those glyphs
   with fontTools, writing ``_static/fonts/cjk-subset.woff`` (tens to hundreds of KB).
   ``book/_static/custom.css`` declares it with ``@font-face`` and a ``unicode-range``, so the browser
   uses it only for CJK characters and keeps the theme's fonts for Latin text.

3. The emoji the book prints (every check's ✅ PASS or ❌ FAIL, 🤗 for Hugging Face) come from an emoji font,
   which many Linux machines lack: they showed as empty boxes. A second small web font maps each of them to a
   plain glyph of DejaVu Sans (the copy matplotlib ships): ✅ → ✔, ❌ → ✘, 🤗 → ☺. It comes last in the font
   stacks of ``custom.css``, after the emoji fonts, so a reader who has one still sees the coloured emoji.
   The page's text is unchanged (search and copy buttons see ✅), only the glyph drawn differs.
"""

from __future__ import annotations

import pathlib
import re

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

FONT_FILE = "NotoSansCJKsc-Regular.otf"
OUTPUT = pathlib.PurePosixPath("fonts/cjk-subset.woff")
# Must match the unicode-range of the @font-face rule in book/_static/custom.css.
CJK_RANGES = (
    (0x2E80, 0x2FDF),  # CJK radicals
    (0x3000, 0x303F),  # CJK symbols and punctuation 、。「」
    (0x3040, 0x30FF),  # kana
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFE30, 0xFE4F),  # CJK compatibility forms
    (0xFF00, 0xFFEF),  # full-width forms （），：
)
_CJK_RE = re.compile("[" + "".join(f"\\u{a:04x}-\\u{b:04x}" for a, b in CJK_RANGES) + "]")
# Always included, so that the CSS/test sample and common punctuation render even if no page uses them.
_ALWAYS = "我爱中文（），。：、"


def cjk_characters(html_dir: pathlib.Path) -> str:
    """Every distinct CJK character in the HTML pages and the search index under ``html_dir``, sorted."""
    chars = set(_ALWAYS)
    for path in [*html_dir.rglob("*.html"), *html_dir.glob("searchindex.js")]:
        if path.relative_to(html_dir).parts[0] == "zh":  # the Chinese edition, copied in: it has its own subset
            continue
        chars.update(_CJK_RE.findall(path.read_text(encoding="utf-8", errors="replace")))
    return "".join(sorted(chars))


def subset_font(source: pathlib.Path, text: str, target: pathlib.Path) -> None:
    """Write a WOFF font holding only the glyphs of ``text`` (and their layout features) from ``source``."""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    options = subset.Options()
    options.layout_features = ["*"]
    options.name_IDs = ["*"]
    options.notdef_outline = True
    font = TTFont(str(source), lazy=False)
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=text)
    subsetter.subset(font)
    target.parent.mkdir(parents=True, exist_ok=True)
    font.flavor = "woff"  # zlib-compressed; WOFF2 would need the brotli package
    font.save(str(target))


# Must match the unicode-range of the "Course Symbols" @font-face rule in book/_static/custom.css.
EMOJI_FALLBACK = {"✅": "✔", "❌": "✘", "🤗": "☺"}
EMOJI_OUTPUT = pathlib.PurePosixPath("fonts/emoji-fallback.woff")


def emoji_fallback_font(target: pathlib.Path, fallback: dict[str, str] = EMOJI_FALLBACK) -> None:
    """Write a WOFF font that draws each key of ``fallback`` with the DejaVu Sans glyph of its value."""
    import matplotlib
    from fontTools import subset
    from fontTools.ttLib import TTFont
    from fontTools.ttLib.tables._c_m_a_p import CmapSubtable

    font = TTFont(str(pathlib.Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"))
    glyphs = {ord(emoji): font.getBestCmap()[ord(plain)] for emoji, plain in fallback.items()}
    options = subset.Options()
    options.notdef_outline = True
    options.drop_tables += ["FFTM"]  # FontForge's timestamps, which the subsetter would report and drop
    subsetter = subset.Subsetter(options)
    subsetter.populate(glyphs=sorted(set(glyphs.values())))
    subsetter.subset(font)
    tables = []
    for fmt, encoding in ((4, 1), (12, 10)):  # Windows Unicode: BMP, then the full range (🤗 is U+1F917)
        table = CmapSubtable.newSubtable(fmt)
        table.platformID, table.platEncID, table.language = 3, encoding, 0
        table.cmap = {code: name for code, name in glyphs.items() if fmt == 12 or code <= 0xFFFF}
        tables.append(table)
    font["cmap"].tables = tables
    target.parent.mkdir(parents=True, exist_ok=True)
    font.flavor = "woff"
    font.save(str(target))


def _build_finished(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    import mplfonts

    source = pathlib.Path(mplfonts.__file__).parent / "fonts" / FONT_FILE
    if not source.exists():
        logger.warning("offline_assets: %s is missing from mplfonts at %s", FONT_FILE, source.parent)
        return
    out_dir = pathlib.Path(app.outdir)
    emoji_fallback_font(out_dir / "_static" / EMOJI_OUTPUT)
    text = cjk_characters(out_dir)
    subset_font(source, text, out_dir / "_static" / OUTPUT)
    logger.info("offline_assets: %d CJK characters -> _static/%s", len(text), OUTPUT)


def _thebe_enabled(app: Sphinx) -> bool:
    launch = (app.config.html_theme_options or {}).get("launch_buttons") or {}
    return str(launch.get("thebe", False)).lower() == "true"


def _is_thebe_asset(asset: object) -> bool:
    filename = str(getattr(asset, "filename", "") or "")
    body = str(getattr(asset, "attributes", {}).get("body", ""))
    return filename.endswith(("sphinx-thebe.js", "sphinx-thebe.css")) or "THEBE_JS_URL" in body


def _drop_thebe_assets(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: object) -> None:
    """Remove sphinx-thebe's loader, stylesheet and CDN address from the page when thebe is off."""
    if _thebe_enabled(app):
        return
    for key in ("script_files", "css_files"):
        if key in context:
            # in place: Sphinx restores its own lists after each page
            context[key][:] = [a for a in context[key] if not _is_thebe_asset(a)]


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("html-page-context", _drop_thebe_assets)
    app.connect("build-finished", _build_finished)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
