"""The exercise workbooks are in step with the chapters, hold no solution, and their stubs fail helpfully.

- ``workbooks/*.ipynb`` equal what ``scripts/make_workbooks.py`` makes from today's chapters (regenerated in
  memory, byte for byte), one per chapter, none left over;
- no workbook has a solution cell, every exercise cell lost its outputs, and the note on top names the chapter;
- every cell tagged ``exercise`` fails its check with a ❌ FAIL verdict and a hint (or "not implemented yet"
  / "no answer yet"), never a traceback: each runs right after its chapter's first code cell, all chapters
  in one subprocess (about 10 s);
- every chapter's solution passes: the solution cells ``assert check(...)``, and nbval (``make test``)
  re-runs them and compares their stored ✅ PASS, so here the stored verdict is read, not recomputed; and a
  solution never redefines a name the learner's exercise cell defines (Run All keeps the learner's attempt);
- ``python -m companion.exercises`` lists the exercises and reports progress from a workbook.
"""

from __future__ import annotations

import ast
import json
import pathlib
import re
import subprocess
import sys

import pytest

from companion.exercises import CHECKS, _notebooks
from companion.exercises.__main__ import main as exercises_main

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import make_workbooks  # noqa: E402

CHAPTERS = make_workbooks.chapters()
IDS = [p.stem for p in CHAPTERS]


def _nb(path: pathlib.Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _tags(cell: dict) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def test_every_chapter_has_a_workbook_and_nothing_else_is_there() -> None:
    expected = {make_workbooks.workbook_path(c).name for c in CHAPTERS}
    found = {p.name for p in (ROOT / "workbooks").glob("*.ipynb")}
    assert found == expected, f"run `make workbooks`: missing {expected - found}, stale {found - expected}"
    assert len(CHAPTERS) >= 12  # chapters 00-10 and the mini-GPT appendix, at least


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_workbook_is_in_step_with_its_chapter(chapter: pathlib.Path) -> None:
    path = make_workbooks.workbook_path(chapter)
    assert path.exists(), f"{path.name} is missing: run `make workbooks`"
    assert path.read_text(encoding="utf-8") == make_workbooks.make_workbook(chapter), (
        f"{path.relative_to(ROOT)} is out of step with {chapter.relative_to(ROOT)}: run `make workbooks`"
    )


def test_generation_is_deterministic(tmp_path: pathlib.Path) -> None:
    chapter = CHAPTERS[3]
    assert make_workbooks.make_workbook(chapter) == make_workbooks.make_workbook(chapter)


def test_the_generator_drops_solutions_and_clears_exercise_outputs(tmp_path: pathlib.Path, monkeypatch) -> None:
    """A hand-made chapter: what goes, what stays."""
    md = lambda text, **meta: {"cell_type": "markdown", "id": f"m{len(cells)}", "metadata": meta, "source": text}  # noqa: E731

    def code(text: str, tags: list[str], out: str = "x\n") -> dict:
        return {
            "cell_type": "code",
            "id": f"c{len(cells)}",
            "metadata": {"tags": tags},
            "execution_count": 1,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": out}],
            "source": text,
        }

    cells: list[dict] = []
    for make in [
        lambda: md("# Demo chapter\n"),
        lambda: code("import companion\ncompanion.setup_notebook()\n", []),
        lambda: md(":::{exercise} Stable softmax\n:label: ex-99-demo\nFix it.\n:::\n"),
        lambda: code('def my_fn(x):\n    raise NotImplementedError\n_ = check("softmax", my_fn)\n', ["exercise"]),
        lambda: md(":::{solution} ex-99-demo\n:class: dropdown\nThe answer.\n:::\n"),
        lambda: code('assert check("softmax", my_fn_solution)\n', ["hide-input", "solution"], "✅ PASS\n"),
        lambda: md("::::{solution-start} ex-99-demo\n"),
        lambda: code("gated = 1\n", []),
        lambda: md("::::{solution-end}\n"),
        lambda: md("Text after.\n"),
        lambda: md("Why it fails.\n\n:::{solution} ex-99-other\n:class: dropdown\nhidden\n:::\n"),
    ]:
        cells.append(make())
    book = tmp_path / "book"
    book.mkdir()
    chapter = book / "99_demo.ipynb"
    chapter.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    monkeypatch.setattr(make_workbooks, "ROOT", tmp_path)
    wb = json.loads(make_workbooks.make_workbook(chapter))
    sources = [_notebooks.source(c) for c in wb["cells"]]
    assert "Workbook of chapter 99, *Demo chapter*" in sources[0] and "`book/99_demo.ipynb`" in sources[0]
    assert sources[1:] == [
        "# Demo chapter\n",
        "import companion\ncompanion.setup_notebook()\n",
        ":::{exercise} Stable softmax\n:label: ex-99-demo\nFix it.\n:::\n",
        'def my_fn(x):\n    raise NotImplementedError\n_ = check("softmax", my_fn)\n',
        "Text after.\n",
        "Why it fails.\n",
    ]
    assert wb["cells"][2]["outputs"] and wb["cells"][2]["execution_count"] == 1  # ordinary code keeps its output
    assert wb["cells"][4]["outputs"] == [] and wb["cells"][4]["execution_count"] is None  # the exercise is fresh


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_workbook_has_no_solution(chapter: pathlib.Path) -> None:
    wb = _nb(make_workbooks.workbook_path(chapter))
    note = _notebooks.source(wb["cells"][0])
    assert note.startswith("> **Workbook of ") and chapter.relative_to(ROOT).as_posix() in note
    for cell in wb["cells"]:
        assert not make_workbooks.is_solution(cell), f"a solution is left: {_notebooks.source(cell)[:80]!r}"
        text = _notebooks.source(cell)
        assert "{solution" not in text, f"solution markup is left: {text[:80]!r}"
        if "exercise" in _tags(cell):
            assert cell["outputs"] == [] and cell["execution_count"] is None
    assert set(wb["metadata"]) == {"kernelspec", "language_info"}


# ------------------------------------------------------------------------------------ the exercises themselves


@pytest.fixture(scope="module")
def stub_verdicts() -> dict[str, list[tuple[int, str]]]:
    """What each workbook's exercise cells print when run after the first code cell (one subprocess)."""
    books = [_nb(make_workbooks.workbook_path(c)) for c in CHAPTERS]
    runs = _notebooks.run_exercise_cells_many(books, ROOT / "book")
    return dict(zip(IDS, runs))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_every_exercise_has_a_cell_and_a_check(chapter: pathlib.Path) -> None:
    nb = _nb(chapter)
    exercises = _notebooks.exercises_in(nb)
    for ex in exercises:
        assert ex.cells, f"{chapter.name} {ex.label}: no code cell tagged 'exercise' follows it"
        assert ex.targets, f"{chapter.name} {ex.label}: its exercise cells call no check(...)"
        unknown = [t for t in ex.targets if t not in CHECKS]
        assert not unknown, f"{chapter.name} {ex.label}: unknown check targets {unknown}"
        assert ex.label.startswith("ex-"), f"{chapter.name}: exercise without :label: ({ex.title!r})"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_each_stub_fails_its_check_with_a_helpful_message(chapter: pathlib.Path, stub_verdicts) -> None:
    wb = _nb(make_workbooks.workbook_path(chapter))
    for index, text in stub_verdicts[chapter.stem]:
        where = f"{chapter.name}, exercise cell {_notebooks.source(wb['cells'][index])[:60]!r}"
        assert "Traceback" not in text, f"{where} raised instead of printing a verdict:\n{text}"
        assert "❌ FAIL " in text, f"{where}: the starting point should fail its check:\n{text}"
        assert "✅ PASS" not in text, f"{where}: part of the starting point already passes:\n{text}"
        helpful = ("Hint: ", "not implemented yet", "no answer yet")
        assert any(h in text for h in helpful), f"{where}: the FAIL verdict gives no hint:\n{text}"


def _defined_names(code: str) -> set[str]:
    """Top-level names a cell defines (functions, classes, assignments), minus the throwaway ``_``."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names - {"_"}


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_each_solution_passes_and_keeps_the_learners_names(chapter: pathlib.Path) -> None:
    nb = _nb(chapter)
    exercise_names: set[str] = set()
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and "exercise" in _tags(cell):
            exercise_names |= _defined_names(_notebooks.source(cell))
    solutions = [c for c in nb["cells"] if c["cell_type"] == "code" and "solution" in _tags(c)]
    assert len(solutions) >= len([e for e in _notebooks.exercises_in(nb) if e.cells]), (
        f"{chapter.name}: fewer solution cells (tag 'solution') than exercises"
    )
    for cell in solutions:
        code = _notebooks.source(cell)
        assert "assert check(" in code, f"{chapter.name}: a solution cell does not assert its check: {code[:80]!r}"
        assert cell["metadata"].get("jupyter", {}).get("source_hidden") is True, (
            f"{chapter.name}: solution cell not collapsed (run scripts/nbtools.py apply): {code[:60]!r}"
        )
        out = _notebooks.output_text(cell)
        assert "✅ PASS" in out and "❌" not in out, f"{chapter.name}: a solution's stored verdict: {out[:200]!r}"
        clash = _defined_names(code) & exercise_names
        assert not clash, f"{chapter.name}: a solution redefines the learner's {sorted(clash)} (use *_solution)"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_a_closed_solution_shows_nothing_but_its_verdict(chapter: pathlib.Path) -> None:
    """Until the learner opens it, a solution cell shows its first line (JupyterLab's placeholder of a
    collapsed cell) and its output (JupyterLab and the HTML book): the line names the exercise, and the
    output is the check's ✅ PASS verdict and nothing else (no number, no table that gives an answer)."""
    nb = _nb(chapter)
    labels = [ex.label for ex in _notebooks.exercises_in(nb)]
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or "solution" not in _tags(cell):
            continue
        code = _notebooks.source(cell)
        first = code.splitlines()[0]
        assert re.fullmatch(r"# Solution of (\S+)", first) and first.split()[-1] in labels, (
            f"{chapter.name}: a solution cell starts with {first!r} (run scripts/nbtools.py apply)"
        )
        kinds = {o["output_type"] for o in cell["outputs"]}
        assert kinds == {"stream"}, f"{chapter.name} {first}: outputs {sorted(kinds)}, only the verdict is allowed"
        extra = [line for line in _notebooks.output_text(cell).splitlines() if not line.startswith("✅ PASS ")]
        assert not extra, f"{chapter.name} {first}: prints more than its verdict: {extra} (assert it instead)"


def test_nbtools_apply_is_idempotent_and_collapses_solutions(tmp_path: pathlib.Path) -> None:
    import os

    import nbtools

    nb = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": "# T\n\nAs shown {cite}`vaswani2017attention`.\n"},
            {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1, "source": "import companion\n"},
            {"cell_type": "markdown", "metadata": {}, "source": ":::{exercise} S\n:label: ex-99-s\nStable.\n:::\n"},
            {"cell_type": "code", "metadata": {"tags": ["exercise"]}, "outputs": [], "execution_count": 2,
             "source": "def f(x, dim=-1):\n    raise NotImplementedError\n_ = check('softmax', f)\n"},
            {"cell_type": "code", "metadata": {"tags": ["hide-input", "solution"]}, "outputs": [],
             "execution_count": 3, "source": "assert check('softmax', f_solution)\n"},
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                     "language_info": {"name": "python", "version": "3.11.7"}, "widgets": {}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }  # fmt: skip
    path = tmp_path / "99_demo.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert nbtools.apply(path) is True
    first = path.read_text(encoding="utf-8")
    assert nbtools.apply(path) is False and path.read_text(encoding="utf-8") == first  # idempotent
    done = json.loads(first)
    assert _notebooks.source(done["cells"][1]) == nbtools.INSTALL_SNIPPET + "import companion\n"
    solution = done["cells"][4]
    assert solution["metadata"]["jupyter"] == {"source_hidden": True}
    # JupyterLab shows a collapsed cell's first line: it names the exercise, nothing of its answer
    assert _notebooks.source(solution) == "# Solution of ex-99-s\nassert check('softmax', f_solution)\n"
    assert done["cells"][3]["metadata"]["exercise"] == {"form": "write"}  # from the stub, kept for progress
    cited = "[(Vaswani et al., 2017)](#cite:vaswani2017attention)"  # a citation JupyterLab can show
    assert _notebooks.source(done["cells"][0]) == f"# T\n\nAs shown {cited}.\n"
    assert done["metadata"]["kernelspec"] == nbtools.KERNELSPEC and "widgets" not in done["metadata"]
    assert done["metadata"]["language_info"]["version"] == "3.11.7"
    assert len({c["id"] for c in done["cells"]}) == 5
    assert first == nbtools.dumps(done)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


# ------------------------------------------------------------------------------------ the command line


def _fake_notebook(statuses: dict[str, str]) -> dict:
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1, "source": "import x\n"}]
    outputs = {
        "solved": "✅ PASS softmax: all 6 cases match\n",
        "not yet": "❌ FAIL softmax: case 'dim=0' differs\n   Hint: use dim\n",
        "to do": "❌ FAIL softmax: not implemented yet — Exercise ex-99-a: write it\n",
        "not run": None,
    }
    for label, status in statuses.items():
        cells.append(
            {"cell_type": "markdown", "metadata": {}, "source": f":::{{exercise}} T {label}\n:label: {label}\n:::\n"}
        )
        text = outputs[status]
        cells.append(
            {
                "cell_type": "code",
                "metadata": {"tags": ["exercise"]},
                "execution_count": None if text is None else 2,
                "outputs": [] if text is None else [{"output_type": "stream", "name": "stdout", "text": text}],
                "source": 'def f(x):\n    raise NotImplementedError\n_ = check("softmax", f)\n',
            }
        )
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_progress_reads_each_exercises_status_from_stored_outputs(tmp_path: pathlib.Path, capsys) -> None:
    wanted = {"ex-99-a": "solved", "ex-99-b": "not yet", "ex-99-c": "to do", "ex-99-d": "not run"}
    (tmp_path / "99_demo.ipynb").write_text(json.dumps(_fake_notebook(wanted)), encoding="utf-8")
    (tmp_path / "98_other.ipynb").write_text(json.dumps(_fake_notebook({"ex-98-a": "solved"})), encoding="utf-8")
    found = {ex.label: ex.status for ex in _notebooks.exercises_in(_nb(tmp_path / "99_demo.ipynb"))}
    assert found == wanted
    assert exercises_main(["progress", str(tmp_path / "99_demo.ipynb")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "99_demo.ipynb: 1 of 4 exercises solved"
    assert out[1].startswith("  ✅ SOLVED   ex-99-a  write    softmax")
    assert out[2].startswith("  ❌ NOT YET  ex-99-b") and out[3].startswith("  · TO DO    ex-99-c")
    assert out[4].startswith("  ? NOT RUN  ex-99-d")
    assert exercises_main(["progress", str(tmp_path)]) == 0  # a folder: every notebook, then a total
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("98_other.ipynb") and out[-1] == "in all: 2 of 5 exercises solved"


def test_progress_rejects_a_bad_path(tmp_path: pathlib.Path, capsys) -> None:
    assert exercises_main(["progress", str(tmp_path / "missing.ipynb")]) == 2
    assert "is neither a notebook nor a folder" in capsys.readouterr().err
    (tmp_path / "broken.ipynb").write_text("{not json")
    assert exercises_main(["progress", str(tmp_path / "broken.ipynb")]) == 2
    assert "cannot read notebook" in capsys.readouterr().err


def test_progress_can_run_the_notebook_first(tmp_path: pathlib.Path, capsys) -> None:
    """--run executes a copy in a kernel: a stub solved in the file but never run is seen as solved. The
    sources are lists of lines, as Jupyter writes them."""
    nb = _fake_notebook({"ex-99-a": "not run"})
    nb["cells"][0]["source"] = ["from companion.exercises import check\n"]
    nb["cells"][2]["source"] = [
        "def f(x, dim=-1):\n",
        "    e = (x - x.amax(dim, keepdim=True)).exp()\n",
        "    return e / e.sum(dim, keepdim=True)\n",
        '_ = check("softmax", f)\n',
    ]
    nb["metadata"] = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    path = tmp_path / "99_demo.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    before = path.read_text(encoding="utf-8")
    assert exercises_main(["progress", str(path), "--run"]) == 0
    assert "1 of 1 exercises solved" in capsys.readouterr().out
    assert path.read_text(encoding="utf-8") == before  # the learner's file is not touched


def _progress_rows(text: str) -> dict[str, tuple[str, str]]:
    """``label -> (status, form)`` from the lines ``progress`` prints."""
    rows = {}
    for line in text.splitlines():
        found = re.match(r"^  \S+ (SOLVED|NOT YET|TO DO|NOT RUN)\s+(\S+)\s+(write|fix|predict|choose)\s", line)
        if found:
            rows[found.group(2)] = (found.group(1), found.group(3))
    return rows


def test_progress_reads_every_committed_workbook() -> None:
    """The committed workbooks as a learner gets them: every exercise is there, not run yet, with the form
    its chapter gives it."""
    out = subprocess.run([sys.executable, "-m", "companion.exercises", "progress", str(ROOT / "workbooks")],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout  # fmt: skip
    rows = _progress_rows(out)
    for chapter in CHAPTERS:
        for ex in _notebooks.exercises_in(_nb(chapter)):
            assert rows.get(ex.label) == ("NOT RUN", ex.form), f"{chapter.name} {ex.label}: {rows.get(ex.label)}"
    assert out.splitlines()[-1].startswith("in all: 0 of ")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=IDS)
def test_each_exercise_records_its_form(chapter: pathlib.Path) -> None:
    """``scripts/nbtools.py apply`` records each exercise's form in its cells' metadata, from the text ("**Fix.**")
    or, where the text does not say, from the starting code; the workbook keeps it."""
    import copy

    import nbtools

    nb, wb = _nb(chapter), _nb(make_workbooks.workbook_path(chapter))
    fresh = copy.deepcopy(nb)  # the forms apply would record today
    for cell in fresh["cells"]:
        cell.get("metadata", {}).pop("exercise", None)
    nbtools.set_exercise_forms(fresh)
    expected = {ex.label: ex.form for ex in _notebooks.exercises_in(fresh)}
    kept = {c["id"]: c for c in wb["cells"]}
    for ex in _notebooks.exercises_in(nb):
        cells = [nb["cells"][i] for i in ex.cells]
        forms = {_notebooks.stored_form(c) for c in cells}
        assert forms == {expected[ex.label]}, f"{chapter.name} {ex.label}: forms {forms} (run nbtools.py apply)"
        assert all(kept[c["id"]]["metadata"]["exercise"] == {"form": ex.form} for c in cells)


def test_the_form_is_the_exercises_not_the_learners(tmp_path: pathlib.Path) -> None:
    """A learner who writes the function of a "write" exercise (the stub's NotImplementedError gone) or
    replaces None by a number still sees the exercise's own form."""
    wb = _nb(ROOT / "workbooks" / "03_attention.ipynb")
    forms = {ex.label: ex.form for ex in _notebooks.exercises_in(wb)}
    for ex in _notebooks.exercises_in(wb):
        for i in ex.cells:
            wb["cells"][i]["source"] = ["def my_attention(q, k, v, mask=None):\n", "    return q\n",
                                        f"_ = check({ex.targets[0]!r}, my_attention)\n"]  # fmt: skip
    assert {ex.label: ex.form for ex in _notebooks.exercises_in(wb)} == forms
    assert forms["ex-03-sdpa"] == "write" and forms["ex-03-cost"] == "predict"


@pytest.mark.slow
def test_progress_runs_a_committed_workbook_quietly() -> None:
    """``progress --run`` on a workbook as committed (sources as lists of lines): it runs, every exercise
    fails or is still to do (the stubs), and nothing else is printed: no kernel warning."""
    name = "03_attention.ipynb"
    proc = subprocess.run([sys.executable, "-m", "companion.exercises", "progress", "--run", f"workbooks/{name}"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "", f"printed on stderr: {proc.stderr[-2000:]}"
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{name}: 0 of 6 exercises solved", proc.stdout
    rows = _progress_rows(proc.stdout)
    assert len(lines) == 1 + len(rows) == 7, proc.stdout
    chapter = {ex.label: ex.form for ex in _notebooks.exercises_in(_nb(ROOT / "book" / name))}
    assert {label: form for label, (_, form) in rows.items()} == chapter
    assert {status for status, _ in rows.values()} <= {"NOT YET", "TO DO"}, proc.stdout


def test_workbooks_say_where_the_solutions_are() -> None:
    """A workbook never claims what only its chapter has ("folded away below each exercise"): where the
    chapter says so, the workbook says the solutions are in the chapter, and its note says where that is."""
    for chapter in CHAPTERS:
        chapter_text = " ".join(_notebooks.source(c) for c in _nb(chapter)["cells"] if c["cell_type"] == "markdown")
        wb = _nb(make_workbooks.workbook_path(chapter))
        text = " ".join(_notebooks.source(c) for c in wb["cells"] if c["cell_type"] == "markdown")
        assert "folded away" not in text, f"{chapter.name}'s workbook says its solutions are folded away"
        assert "**Where the solutions are:** in the chapter itself, `" in _notebooks.source(wb["cells"][0])
        if "folded away below each exercise" in chapter_text:
            assert "the solutions are not in this workbook but in the chapter" in text


def test_list_groups_the_exercises_by_chapter(capsys) -> None:
    assert exercises_main([]) == 0
    out = capsys.readouterr().out
    for chapter in CHAPTERS:
        if _notebooks.exercises_in(_nb(chapter)):
            assert f"\n{chapter.stem} (" in "\n" + out
    assert exercises_main(["list", "--book", str(ROOT / "tests")]) == 0  # no chapters there: the check targets
    assert "(exercise labels come from the chapter notebooks: pass --book DIR)" in capsys.readouterr().out
    assert exercises_main(["checks"]) == 0
    out = capsys.readouterr().out
    for name in CHECKS:
        assert f"  {name} " in out


# ------------------------------------------------------------------------------------ in the HTML book


@pytest.mark.book
def test_each_chapter_page_offers_its_workbook_for_download(built_book) -> None:
    """The download menu of a chapter page links to its workbook, copied into the site (book/_ext/workbooks.py)."""
    import re

    for chapter in CHAPTERS:
        page = built_book.html / chapter.relative_to(ROOT).with_suffix(".html")
        html = page.read_text(encoding="utf-8")
        links = re.findall(r'<a href="([^"]+)"[^>]*class="[^"]*btn-download-workbook-button', html)
        assert len(links) == 1, f"{page.name}: {len(links)} workbook links"
        target = (page.parent / links[0]).resolve()
        assert target.is_file(), f"{page.name} links to {links[0]}, which is not in the build"
        assert target.read_bytes() == make_workbooks.workbook_path(chapter).read_bytes()
