"""A Jupyter server extension of the course: JupyterLab's custom.css comes from binder/lab/ (see
binder/jupyter_lab_config.py, which enables it), and the fonts beside it from the packages that install them.

JupyterLab serves ``/custom/custom.css`` and the files beside it from ``ServerApp.static_custom_path``, which
is not a configurable setting (it is the Jupyter configuration folder's ``custom/``); this extension sets it
when it is linked to the server, before the server builds its web application, so that nothing is written
into the reader's own Jupyter configuration.
"""

from __future__ import annotations

import pathlib
from typing import Any

import mplfonts
from jupyter_core.paths import jupyter_runtime_dir

HERE = pathlib.Path(__file__).resolve().parent
# The emoji fallback font is written here at start-up (binder/jupyter_lab_config.py).
GENERATED_FONTS = pathlib.Path(jupyter_runtime_dir()) / "companion-fonts"


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "course_fonts"}]


def _link_jupyter_server_extension(serverapp: Any) -> None:
    serverapp.static_custom_path = [
        str(HERE / "lab"),  # custom.css
        str(pathlib.Path(mplfonts.__file__).parent / "fonts"),  # NotoSansCJKsc-Regular.otf
        str(GENERATED_FONTS),  # emoji-fallback.woff
    ]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    pass
