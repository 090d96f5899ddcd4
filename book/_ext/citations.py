"""Citations that read well in JupyterLab, Colab and on GitHub, and are real citations in the HTML book.

The chapters cite with links whose text is the author and year and whose target names the citation:

    as the notes explain [(黄艺龙, 2026)](#cite:notesA), and {cite:t} reads [Vaswani et al. (2017)](#cite:t:vaswani2017attention)

JupyterLab's MyST renderer (jupyterlab-myst) cannot read ``book/references.bib``: a ``{cite}`key``` role
there shows the bare key flagged "Citation Not Found", and Colab or GitHub show the role as written. A
link shows its text everywhere. For the book, this extension turns each such link back into the role it
stands for (``{cite}`notesA```, ``{cite:t}`vaswani2017attention```) when Sphinx reads a page
(``source-read``), before anything is parsed, so sphinxcontrib-bibtex formats and links the citation as
before, and the gettext messages of the Chinese edition (``scripts/i18n.py``) still hold the roles.

``scripts/nbtools.py apply`` writes the links: it turns every ``{cite}`` role of a chapter's markdown
into a link, with the text made from ``book/references.bib``, and refreshes the text of existing ones.
"""

from __future__ import annotations

import re
from typing import Any

# The role variants of sphinxcontrib-bibtex that the chapters may use.
ROLES = ("cite", "cite:p", "cite:t", "cite:ps", "cite:ts", "cite:ct", "cite:cts")

# [text](#cite:keys) or [text](#cite:t:keys): the text holds no brackets, quotes, backslashes or line
# breaks (so a match never spans two JSON strings of a notebook); keys are comma-separated bib keys.
LINK = re.compile(
    r"\[(?P<text>[^\[\]\"\\\n]*)\]\(#(?P<role>cite(?::(?:p|t|ps|ts|ct|cts))?):(?P<keys>[A-Za-z0-9_.\-]+(?:,[A-Za-z0-9_.\-]+)*)\)"
)
# {cite}`keys`, not written as inline code (`{cite}` in backticks is prose about the role)
ROLE = re.compile(
    r"(?<!`)\{(?P<role>cite(?::(?:p|t|ps|ts|ct|cts))?)\}`(?P<keys>\s*[A-Za-z0-9_.\-]+(?:\s*,\s*[A-Za-z0-9_.\-]+)*\s*)`"
)


def to_roles(text: str) -> str:
    """Every citation link of ``text`` as the ``{cite}`` role it stands for."""
    return LINK.sub(lambda m: f"{{{m['role']}}}`{m['keys']}`", text)


def keys_of(keys: str) -> list[str]:
    return [k.strip() for k in keys.split(",") if k.strip()]


def _on_source_read(app: Any, docname: str, source: list[str]) -> None:
    source[0] = to_roles(source[0])


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _on_source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
