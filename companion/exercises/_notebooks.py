"""The exercises of a chapter notebook or workbook: what they are, and how far a learner has got.

A chapter marks each exercise with a markdown cell ``:::{exercise} Title`` (with ``:label: ex-NN-slug``)
followed by one or more code cells tagged ``exercise`` that end with ``check("target", answer)``. This module
reads that structure from the .ipynb JSON (no Jupyter needed) and gives each exercise a status:

==========  =============================================================================================
status      meaning (from the check verdicts printed in the exercise cells' outputs)
==========  =============================================================================================
solved      every check in the exercise's cells printed ✅ PASS
to do       a check printed "not implemented yet" or "no answer yet" (the stub is untouched)
not yet     a check printed ❌ FAIL (an attempt that is not right yet), or the cell raised an error
not run     an exercise cell has no output (never run, or run and saved before it finished)
==========  =============================================================================================

Statuses come from the outputs stored in the file, so save the notebook after running it; with
``run=True`` the notebook is executed first (top to bottom, in a fresh kernel, through nbclient) and the
fresh outputs are used, leaving the file unchanged.

An exercise's form (write / fix / predict / choose) is read from its first cell's metadata,
``{"exercise": {"form": "write"}}``, which ``scripts/nbtools.py apply`` sets from the chapter (where the
code is still the stub or the buggy attempt): the learner's edits cannot change it. Without that metadata
the form is guessed from the code, as ``apply`` does.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass, field

_EXERCISE = re.compile(r"^\s*(:{3,}|`{3,})\{exercise\}[ \t]*(?P<title>.*)$", re.M)
_LABEL = re.compile(r"^\s*:label:\s*(?P<label>\S+)", re.M)
_CHECK_CALL = re.compile(r"""\bcheck\(\s*["'](?P<name>[^"']+)["']""")

STATUSES = ("solved", "not yet", "to do", "not run")
MARKS = {"solved": "✅", "not yet": "❌", "to do": "·", "not run": "?"}


@dataclass
class Exercise:
    """One exercise of a notebook: its label, title, form, check targets and the cells of its answer."""

    label: str  # "ex-03-sdpa" (or "exercise N" when the markdown has no :label:)
    title: str  # the title after :::{exercise}
    cells: list[int] = field(default_factory=list)  # indices of its code cells tagged "exercise"
    targets: list[str] = field(default_factory=list)  # check names called in those cells
    form: str = "?"  # write / fix / predict / choose
    status: str = "not run"


def source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


FORMS = ("write", "fix", "predict", "choose")


def guess_form(code: str, targets: list[str]) -> str:
    """The form of an exercise from its starting code (the chapter's, not a learner's): value checks are
    predict (choose, when the check has choices), a stub that raises NotImplementedError is write, any
    other function is fix."""
    from companion.exercises import CHECKS

    kinds = [CHECKS[t] for t in targets if t in CHECKS]
    if kinds and all(c.kind == "value" for c in kinds):
        return "choose" if all(c.choices for c in kinds) else "predict"
    if "NotImplementedError" in code:
        return "write"
    return "fix"


def stored_form(cell: dict) -> str | None:
    """The form kept in an exercise cell's metadata (``{"exercise": {"form": ...}}``), or None."""
    meta = cell.get("metadata", {}).get("exercise")
    form = meta.get("form") if isinstance(meta, dict) else None
    return form if form in FORMS else None


def output_text(cell: dict) -> str:
    """The text a code cell printed: streams, plain-text results and error names, in order."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(source({"source": out.get("text", "")}))
        elif out.get("output_type") in {"execute_result", "display_data"}:
            parts.append(source({"source": out.get("data", {}).get("text/plain", "")}))
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename', 'Error')}: {out.get('evalue', '')}\n")
    return "".join(parts)


def cell_status(cell: dict) -> str:
    """The status of one exercise cell from its stored outputs (see the module docstring)."""
    text = output_text(cell)
    if not cell.get("outputs"):
        return "not run"
    if "not implemented yet" in text or "no answer yet" in text:
        return "to do"
    if "❌" in text or any(o.get("output_type") == "error" for o in cell["outputs"]):
        return "not yet"
    if "✅" in text:
        return "solved"
    return "not run"  # ran, but no verdict printed (e.g. the check call was removed)


def exercises_in(nb: dict) -> list[Exercise]:
    """The exercises of a notebook (parsed JSON), in order, with their statuses from stored outputs."""
    found: list[Exercise] = []
    current: Exercise | None = None
    for i, cell in enumerate(nb.get("cells", [])):
        text = source(cell)
        if cell.get("cell_type") == "markdown":
            match = _EXERCISE.search(text)
            if match:
                label = _LABEL.search(text)
                name = label.group("label") if label else f"exercise {len(found) + 1}"
                current = Exercise(name, match.group("title").strip())
                found.append(current)
        elif cell.get("cell_type") == "code" and "exercise" in _tags(cell):
            if current is None:  # an exercise cell before any exercise text
                current = Exercise(f"exercise {len(found) + 1}", "")
                found.append(current)
            current.cells.append(i)
            current.targets += [t for t in _CHECK_CALL.findall(text) if t not in current.targets]
    for ex in found:
        cells = [nb["cells"][i] for i in ex.cells]
        stored = [stored_form(c) for c in cells if stored_form(c)]
        ex.form = stored[0] if stored else guess_form("".join(source(c) for c in cells), ex.targets)
        statuses = [cell_status(c) for c in cells] or ["not run"]
        ex.status = max(statuses, key=lambda s: {"solved": 0, "not run": 1, "to do": 2, "not yet": 3}[s])
    return found


def load(path: str | os.PathLike) -> dict:
    path = pathlib.Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read notebook {path}: {err}") from err


def execute(nb: dict, cwd: pathlib.Path, timeout: int = 600) -> dict:
    """Run a copy of the notebook top to bottom in a fresh kernel (errors allowed); return the run copy.

    What the kernel process itself writes to its stdout and stderr (its start-up log, such as ipykernel's
    warning about unencrypted TCP) is kept out of the terminal; it is shown only if the run fails.
    """
    import tempfile

    try:
        import nbclient
        import nbformat
        from nbformat.warnings import MissingIDFieldWarning
    except ImportError as err:  # the book extra, not a dependency of the package itself
        raise RuntimeError("running notebooks needs nbclient: pip install 'nbclient>=0.10' nbformat") from err
    # nbformat.reads joins list-valued sources and outputs into strings, as nbclient expects; a notebook
    # saved by an older Jupyter (cells without ids) is read without a warning, as Jupyter reads it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=MissingIDFieldWarning)
        node = nbformat.reads(json.dumps(nb), as_version=4)
    client = nbclient.NotebookClient(node, timeout=timeout, allow_errors=True, resources={"metadata": {"path": cwd}})
    with tempfile.TemporaryFile(mode="w+b") as kernel_log:
        try:
            client.execute(stdout=kernel_log, stderr=kernel_log)
        except Exception as err:  # a dead kernel, a cell past the time limit ...
            kernel_log.seek(0)
            log = kernel_log.read().decode("utf-8", "replace")[-3000:]
            where = f"\nthe kernel's log:\n{log}" if log else ""
            raise RuntimeError(f"running the notebook failed: {err}{where}") from err
    return json.loads(json.dumps(node))


# ------------------------------------------------------------------------------------------ quick runs

_CHILD = r"""
import contextlib, io, json, sys, traceback
notebooks = json.load(sys.stdin)
all_results = []
for sources in notebooks:
    results = []
    namespace = {"__name__": "__main__"}
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            exec(compile(sources[0], "<first cell>", "exec"), namespace)
        first_error = None
    except BaseException:
        first_error = traceback.format_exc()
    for i, src in enumerate(sources[1:]):
        if first_error:
            results.append("the first cell failed:\n" + first_error)
            continue
        buffer = io.StringIO()
        try:
            with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
                exec(compile(src, f"<exercise cell {i}>", "exec"), dict(namespace))
        except BaseException:
            buffer.write(traceback.format_exc())
        results.append(buffer.getvalue())
    all_results.append(results)
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(all_results, f)
"""


def run_exercise_cells(nb: dict, cwd: pathlib.Path, timeout: float = 300) -> list[tuple[int, str]]:
    """Run each ``exercise`` cell right after the notebook's first code cell (its imports and setup), each
    cell in its own copy of that namespace; return (cell index, printed text) pairs.

    Cheap compared with running the whole notebook, so exercise cells must be self-contained: they may use
    what the first code cell imports, nothing defined later in the chapter. Cells are plain Python (no
    IPython magics). A traceback in the text means the cell raised.
    """
    return run_exercise_cells_many([nb], cwd, timeout)[0]


def run_exercise_cells_many(
    notebooks: list[dict], cwd: pathlib.Path, timeout: float = 600
) -> list[list[tuple[int, str]]]:
    """:func:`run_exercise_cells` for several notebooks in one subprocess (torch is imported once)."""
    import tempfile

    plan, payload = [], []
    for nb in notebooks:
        cells = nb.get("cells", [])
        code = [i for i, c in enumerate(cells) if c.get("cell_type") == "code" and source(c).strip()]
        wanted = [i for i in code if "exercise" in _tags(cells[i])] if code else []
        plan.append(wanted)
        payload.append([source(cells[code[0]])] + [source(cells[i]) for i in wanted] if code else [""])
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        result = pathlib.Path(tmp) / "results.json"
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(result)],
            input=json.dumps(payload),
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0 or not result.exists():
            raise RuntimeError(f"running the exercise cells failed:\n{proc.stderr[-3000:]}")
        texts = json.loads(result.read_text(encoding="utf-8"))
    return [list(zip(wanted, found)) for wanted, found in zip(plan, texts)]


def summary_lines(name: str, exercises: list[Exercise]) -> list[str]:
    """The lines ``progress`` prints for one notebook."""
    solved = sum(ex.status == "solved" for ex in exercises)
    lines = [f"{name}: {solved} of {len(exercises)} exercises solved"]
    width = max((len(ex.label) for ex in exercises), default=0)
    for ex in exercises:
        targets = ", ".join(ex.targets) or "-"
        lines.append(
            f"  {MARKS[ex.status]} {ex.status.upper():<7}  {ex.label.ljust(width)}  {ex.form:<7}  {targets}"
            + (f"  ({ex.title})" if ex.title else "")
        )
    return lines


def notebooks_under(path: pathlib.Path) -> list[pathlib.Path]:
    """``path`` itself if it is a file, else the .ipynb files under it (sorted, checkpoints skipped)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ValueError(f"path={str(path)!r} is neither a notebook nor a folder")
    return sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def progress(path: str | os.PathLike, run: bool = False) -> list[str]:
    """Progress lines for a notebook or every notebook in a folder (see the module docstring)."""
    lines: list[str] = []
    total = solved = 0
    for nb_path in notebooks_under(pathlib.Path(path)):
        nb = load(nb_path)
        if run:
            nb = execute(nb, nb_path.parent)
        exercises = exercises_in(nb)
        if not exercises:
            continue
        total += len(exercises)
        solved += sum(ex.status == "solved" for ex in exercises)
        lines += summary_lines(nb_path.name, exercises)
    if not total:
        lines.append(f"no exercises found in {path}")
    elif len([line for line in lines if not line.startswith("  ")]) > 1:
        lines.append(f"in all: {solved} of {total} exercises solved")
    return lines
