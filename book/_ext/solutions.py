"""Sphinx extension: clicking a solution's title opens the solution.

sphinx-exercise titles a solution "Solution to Exercise 3.1 (A stable softmax)" and makes the part after
"Solution to" a link to the exercise. In a dropdown solution (``:class: dropdown``) the whole title is the
button that opens it (sphinx-togglebutton), so a click on that link both opened the solution and scrolled
the page away to the exercise, which is just above. This post-transform, run after sphinx-exercise has
written the titles, keeps the link's text and drops the link in the titles of dropdown solutions.

sphinx-togglebutton toggles only when the click lands on the title element itself (or its button), not on
an element inside it, so the text that was the link becomes ``<span class="solution-title-text">``, which
``book/_static/custom.css`` makes transparent to clicks (``pointer-events: none``).
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform


class UnlinkDropdownSolutionTitles(SphinxPostTransform):
    default_priority = 30  # after sphinx-exercise's title resolution (priorities 20-22)

    def run(self, **kwargs: Any) -> None:
        from sphinx_exercise.nodes import solution_node

        for solution in self.document.findall(solution_node):
            if "dropdown" not in solution.get("classes", []) or not solution.children:
                continue
            title = solution.children[0]
            if not isinstance(title, nodes.title):
                continue
            for reference in list(title.findall(nodes.reference)):
                reference.replace_self(nodes.inline("", "", *reference.children, classes=["solution-title-text"]))


def setup(app: Any) -> dict[str, Any]:
    app.add_post_transform(UnlinkDropdownSolutionTitles)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
