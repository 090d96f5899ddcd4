"""Generate the exercise workbooks, ``workbooks/*.ipynb``, from the chapter notebooks (``make workbooks``).

A workbook is its chapter with the solutions taken out, for a learner to work in:

- the same text, code, outputs and figures, in the same order, with a note on top saying which chapter it
  is the workbook of and where the solutions are;
- every ``:::{solution}`` directive is cut out of the markdown (a cell left empty is dropped), every cell
  tagged ``solution`` is dropped, and so is everything between ``:::{solution-start}`` and ``:::{solution-end}``;
- cells tagged ``exercise`` (the stub, the buggy attempt, ``my_prediction = None`` ...) are kept with their
  ``check(...)`` call, but without outputs or execution count: the learner has not run them yet;
- what the chapter says about its own solutions ("the solutions are folded away below each exercise") is
  said as it is true of the workbook: they are in the chapter (:data:`CHAPTER_ONLY`).

The output is deterministic: the same chapter always gives a byte-identical workbook (no timestamps; the
format nbformat and JupyterLab write). ``tests/test_workbooks.py`` regenerates every workbook in memory
and compares, so a chapter edited without ``make workbooks`` (or ``make notebooks``) fails the tests.

Usage: ``python scripts/make_workbooks.py`` (every chapter) or ``python scripts/make_workbooks.py
book/03_attention.ipynb`` (some chapters; other paths given are ignored).
"""

from __future__ import annotations

import copy
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import nbtools  # noqa: E402  (scripts/nbtools.py: shared notebook helpers)

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "workbooks"
_SOLUTION = re.compile(r"^\s*(:{3,}|`{3,})\{solution\}", re.M)
_GATE_START = re.compile(r"^\s*(:{3,}|`{3,})\{solution-start\}")
_GATE_END = re.compile(r"^\s*(:{3,}|`{3,})\{solution-end\}")
# What a chapter says about where its solutions are, and what its workbook says instead.
CHAPTER_ONLY = [
    (
        re.compile(r"the\s+solutions?\s+(?:is|are)\s+folded\s+away\s+below\s+each\s+exercise", re.I),
        "the solutions are not in this workbook but in the chapter (see the note at the top)",
    ),
]


def chapters() -> list[pathlib.Path]:
    """The notebooks that get a workbook: the numbered chapters and the notebook appendices."""
    numbered = sorted(p for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    return numbered + sorted((ROOT / "book" / "appendix").glob("*.ipynb"))


def workbook_path(chapter: pathlib.Path) -> pathlib.Path:
    """``book/03_attention.ipynb`` -> ``workbooks/03_attention.ipynb``; appendices get an ``appendix_`` prefix."""
    if chapter.parent.name == "appendix":
        return OUT / f"appendix_{chapter.name}"
    return OUT / chapter.name


def _title(nb: dict) -> str:
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            match = re.search(r"^#\s+(.+?)\s*$", nbtools.source(cell), re.M)
            if match:
                return match.group(1)
    return "this chapter"


def _note(chapter: pathlib.Path, title: str) -> dict:
    rel = chapter.relative_to(ROOT).as_posix()
    if chapter.parent.name == "appendix":
        which = f"the appendix *{title}*"
    else:
        which = f"chapter {int(chapter.name[:2])}, *{title}*"
    text = (
        f"> **Workbook of {which}.** Generated from `{rel}` by `make workbooks`: the chapter's text and figures, "
        "with every solution removed.\n"
        ">\n"
        "> Each exercise has a code cell for your answer (a stub to write, an attempt to fix, or `None` to "
        "replace with your prediction or choice), ending with a `check(...)` that prints ✅ PASS, or ❌ FAIL "
        "with a hint. Run the cells from the top: the first one installs the `companion` package where it is "
        "missing.\n"
        ">\n"
        f"> **Where the solutions are:** in the chapter itself, `{rel}` (in JupyterLab started by `make lab`, "
        "the `book` folder beside this one; or the chapter's page in the HTML book), in a collapsed cell and a "
        "*Solution* dropdown below each exercise. To see which exercises you have solved, save this file and run "
        "`python -m companion.exercises progress` with its path."
    )
    return {"cell_type": "markdown", "id": "workbook-note", "metadata": {}, "source": nbtools._lines(text)}


def is_solution(cell: dict) -> bool:
    """A cell the workbook drops whole: tagged ``solution``, or a markdown cell that is only ``{solution}``
    directives."""
    if "solution" in cell.get("metadata", {}).get("tags", []):
        return True
    return cell["cell_type"] == "markdown" and not strip_solutions(nbtools.source(cell)).strip()


def strip_solutions(text: str) -> str:
    """``text`` without its ``{solution}`` directives: from the opening fence (``:::{solution} ...``) to the
    line that closes it (the same fence alone on a line), both included."""
    out: list[str] = []
    fence: str | None = None
    for line in text.splitlines(keepends=True):
        if fence is None:
            match = _SOLUTION.match(line)
            if match:
                fence = match.group(1)
                continue
            out.append(line)
        elif line.strip() == fence:
            fence = None
    kept = "".join(out)
    return kept.rstrip("\n") + "\n" if kept.strip() and text.endswith("\n") else kept.rstrip("\n")


def make_workbook(chapter: pathlib.Path) -> str:
    """The workbook of ``chapter``, as the text of an .ipynb file."""
    nb = nbtools.json.loads(chapter.read_text(encoding="utf-8"))
    cells: list[dict] = [_note(chapter, _title(nb))]
    gated = False
    for cell in nb["cells"]:
        text = nbtools.source(cell) if cell["cell_type"] == "markdown" else ""
        if _GATE_START.match(text):
            gated = True
        if gated:
            gated = not _GATE_END.match(text)
            continue
        if is_solution(cell):
            continue
        cell = copy.deepcopy(cell)
        if cell["cell_type"] == "markdown" and _SOLUTION.search(text):
            cell["source"] = nbtools._lines(strip_solutions(text))
        if cell["cell_type"] == "markdown":
            text = nbtools.source(cell)
            for pattern, instead in CHAPTER_ONLY:
                text = pattern.sub(instead, text)
            if text != nbtools.source(cell):
                cell["source"] = nbtools._lines(text)
        if cell["cell_type"] == "code" and "exercise" in cell.get("metadata", {}).get("tags", []):
            cell["outputs"] = []
            cell["execution_count"] = None
        cells.append(cell)
    nbtools.set_cell_ids({"cells": cells})  # the chapter's ids; any missing one gets a stable new id
    workbook = {**nb, "cells": cells}
    return nbtools.dumps(workbook)


def main(argv: list[str]) -> int:
    wanted = {pathlib.Path(a).resolve() for a in argv}
    OUT.mkdir(exist_ok=True)
    for chapter in chapters():
        if wanted and chapter.resolve() not in wanted:
            continue
        path, text = workbook_path(chapter), make_workbook(chapter)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            nbtools.write_atomic(path, text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
