"""``python -m companion.exercises``: the course's exercises, and a learner's progress through them.

    python -m companion.exercises                      # every exercise, grouped by chapter
    python -m companion.exercises list [--book DIR]    # the same; DIR holds the chapter notebooks
    python -m companion.exercises checks               # every check target, grouped by chapter
    python -m companion.exercises progress PATH [--run]

``list`` reads the exercises (label, form, check targets, title) from the chapter notebooks: ``--book``, or
the ``book/`` folder of the source checkout the package runs from. Without notebooks it lists the check
targets of each chapter, as ``checks`` does.

``progress`` takes a notebook (a workbook, or a chapter you worked in) or a folder of them and prints
each exercise's status, read from the verdicts stored in the file: SOLVED (every check printed ✅ PASS),
NOT YET (❌ FAIL, or the cell raised), TO DO (the stub still says "not implemented yet" / "no answer
yet"), NOT RUN (no output). Save the notebook after running it, or pass ``--run`` to execute a copy top
to bottom first (needs nbclient and a Jupyter kernel; the file is not modified).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from companion.exercises import CHAPTERS, _notebooks

_SOURCE_BOOK = pathlib.Path(__file__).resolve().parents[2] / "book"


def _chapter_notebooks(book: pathlib.Path) -> list[pathlib.Path]:
    return sorted(book.glob("[0-9][0-9]_*.ipynb")) + sorted((book / "appendix").glob("*.ipynb"))


def list_exercises(book: pathlib.Path | None) -> list[str]:
    """One block per chapter: its exercises with form and check targets (or its check targets alone)."""
    book = book if book is not None else (_SOURCE_BOOK if _SOURCE_BOOK.is_dir() else None)
    if book is None or not _chapter_notebooks(book):
        return list_checks() + ["", "(exercise labels come from the chapter notebooks: pass --book DIR)"]
    lines: list[str] = []
    for nb_path in _chapter_notebooks(book):
        exercises = _notebooks.exercises_in(_notebooks.load(nb_path))
        if not exercises:
            continue
        lines.append(f"{nb_path.stem} ({len(exercises)} exercises)")
        width = max(len(ex.label) for ex in exercises)
        for ex in exercises:
            lines.append(f"  {ex.label.ljust(width)}  {ex.form:<7}  {', '.join(ex.targets) or '-':<32}  {ex.title}")
    return lines


def list_checks() -> list[str]:
    lines = []
    for chapter, checks in CHAPTERS.items():
        lines.append(f"{chapter} ({len(checks)} check targets)")
        lines += [f"  {c.name:<32} {c.kind:<8}  {c.description}" for c in checks]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m companion.exercises", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    lister = sub.add_parser("list", help="every exercise, grouped by chapter (the default)")
    lister.add_argument("--book", type=pathlib.Path, help="folder of the chapter notebooks")
    sub.add_parser("checks", help="every check target, grouped by chapter")
    prog = sub.add_parser("progress", help="the status of each exercise in a notebook or a folder of them")
    prog.add_argument("path", type=pathlib.Path, help="a .ipynb file or a folder")
    prog.add_argument("--run", action="store_true", help="execute a copy first instead of reading stored outputs")
    args = parser.parse_args(argv)
    try:
        if args.command == "progress":
            lines = _notebooks.progress(args.path, run=args.run)
        elif args.command == "checks":
            lines = list_checks()
        else:
            lines = list_exercises(getattr(args, "book", None))
    except (ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
