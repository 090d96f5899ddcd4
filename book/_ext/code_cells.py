"""Sphinx extension: the HTML book shows a chapter's code as a reader needs it, not the notebook's plumbing.

The notebooks stay as they are (JupyterLab, Colab, nbval and the workbooks need every line); only what the
book shows changes, at read time, so the copy buttons copy what is shown and the search index holds it:

1. Lines for the tools, not the reader, leave the code cells: nbval's markers (``# NBVAL_IGNORE_OUTPUT``:
   the cell's next lines assert what matters, README "Portable outputs"), a formatter's ``# fmt: off/on``
   lines, and the trailing ``# fmt: skip`` / ``# noqa`` of a line.
2. The install snippet at the top of each chapter's first code cell (``scripts/nbtools.py``
   ``INSTALL_SNIPPET``: it installs ``companion`` on Colab or a bare Binder) leaves it too: a reader of the
   book has nothing to install there, and the notebook downloads keep it.
3. A code cell tagged ``solution`` is left out. Each exercise's solution is its ``:::{solution}`` dropdown,
   collapsed; the code cell after it holds the same answer again, written to be checked (nbval runs it, and
   its output is the check's verdict), and it showed as a second "Show code cell source" box with a visible
   ✅ PASS under every solution. The notebook and its download keep it.
"""

from __future__ import annotations

import pathlib
import re
import sys
from typing import Any

from docutils import nodes
from sphinx.transforms import SphinxTransform

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A whole line that only a tool reads: nbval's markers and a formatter's switches.
PLUMBING_LINE = re.compile(r"^[ \t]*#[ \t]*(?:NBVAL_[A-Z_]+|fmt:[ \t]*(?:off|on|skip))\b[^\n]*(?:\n|\Z)", re.M)
# A comment for a tool at the end of a line of code: a formatter's "fmt: skip", a linter's "noqa: E731".
PLUMBING_COMMENT = re.compile(
    r"[ \t]+#[ \t]*(?:fmt:[ \t]*skip|noqa\b[:\w, \t]*|type:[ \t]*ignore\b[\[\]\w, -]*)[ \t]*$", re.M
)


def _nbtools() -> Any:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import nbtools
    finally:
        sys.path.pop(0)
    return nbtools


def shown_code(text: str) -> str:
    """A code cell's source as the book shows it: without the install snippet and the tools' lines."""
    text = _nbtools().without_install_snippet(text)
    text = PLUMBING_COMMENT.sub("", PLUMBING_LINE.sub("", text))
    return text.lstrip("\n").rstrip()


class ReaderCodeCells(SphinxTransform):
    """Drop the solution code cells; strip the install snippet and the tools' lines from the others."""

    default_priority = 700  # after the translation of the Chinese edition (Locale, 20): code is not translated

    def apply(self, **kwargs: Any) -> None:
        for cell in list(self.document.findall(nodes.container)):
            if cell.get("nb_element") != "cell_code":
                continue
            if "solution" in cell.get("cell_metadata", {}).get("tags", []):
                cell.parent.remove(cell)
                continue
            for source in [c for c in cell.children if c.get("nb_element") == "cell_code_source"]:
                for block in list(source.findall(nodes.literal_block)):
                    text = shown_code(block.astext())
                    if text:
                        block.rawsource = text
                        block[:] = [nodes.Text(text)]
                    else:
                        block.parent.remove(block)
                if not source.children:  # the cell held only plumbing: show its output alone
                    cell.remove(source)
            if not cell.children:
                cell.parent.remove(cell)


def setup(app: Any) -> dict[str, Any]:
    app.add_transform(ReaderCodeCells)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
