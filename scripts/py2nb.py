"""Turn a percent-format script into a chapter notebook (an authoring aid; the .ipynb is what ships).

Cells start with `# %%` (code) or `# %% [markdown]` (markdown, every line starting with "# " or "#").
Tags: `# %% tags=["hide-input"]`. Usage: `python scripts/py2nb.py draft.py book/03_attention.ipynb`,
then `make notebooks NB=book/03_attention.ipynb` to execute it.
"""

from __future__ import annotations

import json
import re
import sys

import nbformat

HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?:\s+tags=(?P<tags>\[.*\]))?\s*$")


def convert(text: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    cells: list[tuple[bool, list[str], list[str]]] = []
    for line in text.splitlines():
        m = HEADER.match(line)
        if m:
            cells.append((bool(m.group("md")), json.loads(m.group("tags")) if m.group("tags") else [], []))
        elif cells:
            cells[-1][2].append(line)
    for idx, (is_md, tags, lines) in enumerate(cells):
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if is_md:
            body = "\n".join(re.sub(r"^# ?", "", ln) for ln in lines)
            cell = nbformat.v4.new_markdown_cell(body)
        else:
            cell = nbformat.v4.new_code_cell("\n".join(lines))
        if tags:
            cell.metadata["tags"] = tags
        cell["id"] = f"cell-{idx:03d}"
        nb.cells.append(cell)
    nbformat.validator.normalize(nb)
    return nb


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        nb = convert(f.read())
    nbformat.write(nb, dst)


if __name__ == "__main__":
    main()
