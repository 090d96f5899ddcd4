"""Sphinx extension: offer each chapter's exercise workbook as a download (issue 11).

``make workbooks`` writes ``workbooks/NN_topic.ipynb`` (the chapter without its solutions; the appendix
notebooks get an ``appendix_`` prefix). This extension copies those files into the built site under
``workbooks/`` and adds a "workbook" entry to the download menu of each page that has one, beside the
theme's ``.ipynb`` (the chapter itself, solutions included), source and PDF entries. The link is a plain
relative link, so it works offline and from ``file://``.
"""

from __future__ import annotations

import pathlib
import shutil

from sphinx.application import Sphinx

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKBOOKS = ROOT / "workbooks"


def workbook_name(docname: str) -> str:
    """``book/03_attention`` -> ``03_attention.ipynb``; ``book/appendix/mini_gpt`` -> ``appendix_mini_gpt.ipynb``."""
    path = pathlib.PurePosixPath(docname)
    prefix = "appendix_" if path.parent.name == "appendix" else ""
    return f"{prefix}{path.name}.ipynb"


def add_workbook_button(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    name = workbook_name(pagename)
    if not (WORKBOOKS / name).exists():
        return
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            group["buttons"].insert(
                1,
                {
                    "type": "link",
                    "url": context["pathto"](f"workbooks/{name}", 1),
                    "text": "workbook",
                    "tooltip": "Download the exercise workbook (this chapter without its solutions)",
                    "icon": "fas fa-pencil-alt",
                    "label": "download-workbook-button",
                },
            )


def copy_workbooks(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html" or not WORKBOOKS.is_dir():
        return
    target = pathlib.Path(app.outdir) / "workbooks"
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(WORKBOOKS.glob("*.ipynb")):
        shutil.copyfile(path, target / path.name)


def setup(app: Sphinx) -> dict:
    # After sphinx-book-theme builds its header buttons (priority 501).
    app.connect("html-page-context", add_workbook_button, priority=600)
    app.connect("build-finished", copy_workbooks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
