"""Sphinx extension: the whole book as a PDF in every page's download menu (issue 33).

``make pdf`` (``scripts/pdf.py``) prints each edition to one PDF and copies it into that edition's site root:
``transformers-piece-by-piece.pdf`` beside the English ``index.html``, ``transformers-piece-by-piece-zh.pdf``
beside the Chinese one (``zh/``). This extension adds a "book (PDF)" entry to the download menu of every page,
after the theme's entries (the page's ``.ipynb``, source, and its own print to PDF), linking to its edition's
file. The link is a plain relative link: it works offline and from ``file://``. Until ``make pdf`` has run,
the file is not there; Sphinx does not check the link, so ``make book`` (``-n -W``) stays clean.
"""

from __future__ import annotations

from sphinx.application import Sphinx

#: The PDF's file name (in the site root) per edition: scripts/pdf.py writes these names.
PDF_NAMES = {"en": "transformers-piece-by-piece.pdf", "zh": "transformers-piece-by-piece-zh.pdf"}


def edition_of(language: str | None) -> str:
    return "zh" if (language or "").lower().replace("-", "_").split("_")[0] == "zh" else "en"


def add_pdf_button(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    chinese = edition_of(app.config.language) == "zh"
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            group["buttons"].append(
                {
                    "type": "link",
                    "url": context["pathto"](PDF_NAMES[edition_of(app.config.language)], 1),
                    "text": "整本书 (PDF)" if chinese else "book (PDF)",
                    "tooltip": "下载整本书的 PDF" if chinese else "Download the whole book as one PDF",
                    "icon": "fas fa-book",
                    "label": "download-book-pdf-button",
                },
            )


def setup(app: Sphinx) -> dict:
    # After sphinx-book-theme builds its header buttons (priority 501), like book/_ext/workbooks.py.
    app.connect("html-page-context", add_pdf_button, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
