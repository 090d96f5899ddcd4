"""Sphinx extension: accessibility fixes where Jupyter Book's parts write HTML (issue 15).

myst-nb writes a cell whose input is hidden (tag ``hide-input``) as ``<details>`` with
``<summary aria-label="Toggle hidden content">`` around the visible text "Show code cell source". A screen
reader then announces a name that does not contain the words a sighted reader sees, which fails WCAG 2.5.3
"Label in Name" (axe rule ``label-content-name-mismatch``, serious). This extension writes the same
``<details>`` without the aria-label, so the summary's name is its visible text.

docutils writes the bibliography as ``<div role="list">`` around entries with the DPub role
``doc-biblioentry``, which ARIA 1.2 deprecates (axe ``aria-deprecated-role``); a list whose children are
not list items fails ``aria-required-children`` (critical). The entries are written as ``role="listitem"``.

The theme's toolbar buttons have the same defect; they are fixed by the template overrides in
``book/_templates/components/``.
"""

from __future__ import annotations

from html import escape

from docutils import nodes
from sphinx.application import Sphinx


def visit_hide_cell_input(self, node) -> None:
    classes = " ".join(node["classes"])
    self.body.append(f'<details class="admonition hide {classes}">\n')
    self.body.append("<summary>\n")  # the accessible name is the visible "Show code cell source"
    self.body.append(f'<p class="collapsed admonition-title">{escape(node["prompt_show"])}</p>\n')
    self.body.append(f'<p class="expanded admonition-title">{escape(node["prompt_hide"])}</p>\n')
    self.body.append("</summary>\n")


def depart_hide_cell_input(self, node) -> None:
    self.body.append("</details>\n")


def visit_citation(self, node) -> None:
    # As docutils' HTML writer, but each entry is a plain list item of the citation list.
    if not isinstance(node.previous_sibling(), type(node)):
        self.body.append('<div role="list" class="citation-list">\n')
    self.body.append(self.starttag(node, "div", classes=[node.tagname], role="listitem"))


def depart_citation(self, node) -> None:
    self.body.append("</div>\n")
    if not isinstance(node.next_node(descend=False, siblings=True), type(node)):
        self.body.append("</div>\n")


def _override_myst_nb(app: Sphinx) -> None:
    from myst_nb.sphinx_ import HideCodeCellNode

    app.add_node(HideCodeCellNode, override=True, html=(visit_hide_cell_input, depart_hide_cell_input))
    app.add_node(nodes.citation, override=True, html=(visit_citation, depart_citation))


def setup(app: Sphinx) -> dict:
    # After every extension is set up, so that this handler replaces myst-nb's instead of clashing with it.
    app.connect("builder-inited", _override_myst_nb)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
