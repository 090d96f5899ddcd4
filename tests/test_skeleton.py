"""Tests that keep the course's skeleton honest: packaging, pins, table of contents, notebook conventions."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
sys.path.insert(0, str(ROOT / "scripts"))
import nbtools  # noqa: E402  (scripts/nbtools.py: the install snippet and JupyterLab's metadata)


def _toc_files() -> list[str]:
    """Every `file:` entry of _toc.yml plus its root, as paths without suffix."""
    text = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    root = re.search(r"^root:\s*(\S+)", text, re.M)
    assert root, "_toc.yml has no root"
    return [root.group(1)] + re.findall(r"^\s*-?\s*file:\s*(\S+)", text, re.M)


def test_import_companion_loads_no_jupyter_or_matplotlib() -> None:
    code = (
        "import sys, companion, companion.attention, companion.models\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'IPython', 'ipykernel', 'jupyter_client', 'jupyter_core', 'nbformat', 'matplotlib', 'notebook'})\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "", f"importing companion loaded: {out.strip()}"


def test_every_toc_entry_exists_and_every_notebook_is_listed() -> None:
    entries = _toc_files()
    assert len(entries) == len(set(entries)), "a file is listed twice in _toc.yml"
    for entry in entries:
        matches = [p for p in ROOT.glob(entry + ".*") if p.suffix in {".md", ".ipynb"}]
        assert matches, f"_toc.yml lists {entry}, which does not exist"
    listed = {str(pathlib.Path(e)) for e in entries}
    for nb in NOTEBOOKS:
        assert str(nb.relative_to(ROOT).with_suffix("")) in listed, f"{nb.relative_to(ROOT)} is not in _toc.yml"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_starts_with_setup_and_is_executed_cleanly(nb_path: pathlib.Path) -> None:
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    assert code, f"{nb_path.name} has no code"
    first = "".join(code[0]["source"])
    assert first.startswith(nbtools.INSTALL_SNIPPET), (
        f"{nb_path.name}: the first code cell must start with the install snippet (scripts/nbtools.py apply)"
    )
    assert "setup_notebook(" in first[len(nbtools.INSTALL_SNIPPET) :], (
        f"{nb_path.name}: first code cell must call setup_notebook after the install snippet"
    )
    skipped = [c for c in code if "skip-execution" in c.get("metadata", {}).get("tags", [])]  # never run: no outputs
    assert all(c.get("execution_count") is None and not c.get("outputs") for c in skipped), "a skipped cell has output"
    counts = [c.get("execution_count") for c in code if c not in skipped]
    assert None not in counts, f"{nb_path.name} has unexecuted cells; run `make notebooks`"
    assert counts == list(range(counts[0], counts[0] + len(counts))), f"{nb_path.name} was not run top to bottom"
    text = json.dumps([c.get("outputs", []) for c in code])
    assert str(ROOT) not in text and "site-packages" not in text, f"{nb_path.name}: an output shows a machine path"
    assert not re.search(r" at 0x[0-9a-f]{6,}", text), f"{nb_path.name}: an output shows a memory address"
    for cell in code:
        tags = cell.get("metadata", {}).get("tags", [])
        assert ("skip-execution" in tags) == ("nbval-skip" in tags), "tag skip-execution and nbval-skip together"
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error" or "raises-exception" in tags, f"{nb_path.name}: a cell errors"
        src = "".join(cell["source"])
        if "NBVAL_IGNORE_OUTPUT" in src:  # an assert statement, or companion.experiments' assert_clear (raises)
            assert re.search(r"\bassert |\bassert_clear\(", src), (
                f"{nb_path.name}: a cell ignored by nbval must assert what matters"
            )


def _pins(lines: list[str]) -> dict[str, str]:
    pins = {}
    for line in lines:
        m = re.match(r"^\s*-?\s*([A-Za-z0-9_.\-\[\]]+)==([^\s#]+)", line)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def test_environment_yml_agrees_with_requirements() -> None:
    req = _pins((ROOT / "requirements.txt").read_text().splitlines())
    env_text = (ROOT / "environment.yml").read_text()
    env = _pins(env_text.splitlines())
    assert req == env, f"pins differ: {set(req.items()) ^ set(env.items())}"
    assert req["torch"] == "2.13.0", "torch must be pinned to the local CPU build 2.13.0"
    assert re.search(r"python=3\.\d+", env_text)
    assert "-e .[book,dev]" in env_text and "-e .[book,dev]" in (ROOT / "requirements.txt").read_text()
    for name in ("jupyter-book", "jupyterlab", "nbval", "numpy", "matplotlib"):
        assert name in req, f"{name} is not pinned"
    assert req["jupyter-book"].startswith("1."), "Jupyter Book must be 1.x (2.x is a different tool)"


def test_requirements_pin_every_dependency_of_what_they_pin() -> None:
    """scripts/install_pins.py installs the pins with --no-deps: every requirement of a pinned distribution
    (markers evaluated here, the companion's book and dev extras included) must itself be pinned, at a version
    it accepts."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    pinned = _pins((ROOT / "requirements.txt").read_text().splitlines())
    pins = {re.sub(r"[-_.]+", "-", k): v for k, v in pinned.items()}
    todo = [(name, ()) for name in pins] + [("transformers-piece-by-piece", ("book", "dev"))]
    missing = []
    for name, extras in todo:
        for text in md.requires(name) or []:
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (*extras, "")):
                continue
            dep = re.sub(r"[-_.]+", "-", req.name.lower())
            if dep not in pins or not req.specifier.contains(pins[dep].replace("+cpu", ""), prereleases=True):
                missing.append(f"{name} needs {text!r}, pinned: {pins.get(dep)}")
    assert not missing, "requirements.txt is not a complete lock:\n" + "\n".join(missing)


def test_install_pins_splits_the_lock_between_processes() -> None:
    import install_pins

    lines = ["# comment", "", "a==1", "torch==2.13.0", "b==2  # why", "c==3", "d==4", "-e .[book,dev]"]
    groups = install_pins.split_requirements(lines, processes=4)
    assert groups == [["torch==2.13.0"], ["a==1", "c==3"], ["b==2", "d==4"], ["-e .[book,dev]"]]  # 4 processes
    everything = install_pins.split_requirements((ROOT / "requirements.txt").read_text().splitlines())
    flat = [line for group in everything for line in group]
    assert len(flat) == len(set(flat)) == len(_pins((ROOT / "requirements.txt").read_text().splitlines())) + 1
    with pytest.raises(ValueError, match="processes must be an int >= 2, got 1"):
        install_pins.split_requirements(lines, processes=1)


def test_config_has_what_the_course_relies_on() -> None:
    cfg = (ROOT / "_config.yml").read_text()
    assert re.search(r'execute_notebooks:\s*"off"', cfg)
    assert re.search(r"only_build_toc_files:\s*true", cfg)
    assert cfg.count("url: https://github.com/") == 1, "the repository URL must be set in one place"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_metadata_is_what_jupyterlab_writes_on_save(nb_path: pathlib.Path) -> None:
    """JupyterLab 4 saves kernelspec (display name "Python 3 (ipykernel)") and the kernel's language_info; any
    other key or value would show up as a diff the first time a reader saves a chapter."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] == 5
    assert set(nb["metadata"]) == {"kernelspec", "language_info"}, f"{nb_path.name}: {sorted(nb['metadata'])}"
    assert nb["metadata"]["kernelspec"] == nbtools.KERNELSPEC, "run `make notebooks` (or scripts/nbtools.py apply)"
    info, expected = nb["metadata"]["language_info"], nbtools.language_info()
    assert set(info) == set(expected) and re.fullmatch(r"3\.\d+\.\d+", info["version"])
    assert {k: v for k, v in info.items() if k != "version"} == {k: v for k, v in expected.items() if k != "version"}
    ids = [c.get("id") for c in nb["cells"]]
    assert None not in ids and len(set(ids)) == len(ids), f"{nb_path.name}: cell ids missing or repeated"
    assert nb_path.read_text(encoding="utf-8") == nbtools.dumps(nb), f"{nb_path.name} is not in nbformat's layout"


def test_all_notebooks_record_the_same_python() -> None:
    infos = [json.loads(p.read_text(encoding="utf-8"))["metadata"]["language_info"] for p in NOTEBOOKS]
    versions = {info.get("version") for info in infos}
    assert len(versions) == 1, f"chapters were run with different Pythons: {versions}; run `make notebooks`"


def _run_snippet(importable: bool) -> list[list[str]]:
    """Execute the install snippet with ``companion`` importable or not; return the commands it ran."""
    import builtins
    import io
    import types

    calls: list[list[str]] = []

    def popen(cmd: list[str], **kwargs: object) -> types.SimpleNamespace:
        calls.append(list(cmd))
        return types.SimpleNamespace(stdout=io.StringIO("Successfully installed companion\n"), wait=lambda: 0)

    fake_subprocess = types.SimpleNamespace(Popen=popen, PIPE=-1, STDOUT=-2)
    real_import = builtins.__import__
    attempts = {"companion": 0}

    def fake_import(name, *args, **kwargs):
        if name == "subprocess":
            return fake_subprocess
        if name == "companion":
            attempts["companion"] += 1
            if not importable and attempts["companion"] == 1:  # missing until the install ran
                raise ModuleNotFoundError("No module named 'companion'", name="companion")
        return real_import(name, *args, **kwargs)

    namespace = {"__builtins__": {**vars(builtins), "__import__": fake_import}}
    exec(compile(nbtools.INSTALL_SNIPPET, "<snippet>", "exec"), namespace)
    return calls


def test_install_snippet_installs_from_the_repository_only_when_companion_is_missing() -> None:
    assert _run_snippet(importable=True) == []
    (cmd,) = _run_snippet(importable=False)
    url = nbtools.repository_url()
    assert cmd[1:] == ["-m", "pip", "install", f"git+{url}"]  # not --quiet: pip's progress is shown
    assert url.startswith("https://github.com/") and f"url: {url}" in (ROOT / "_config.yml").read_text()
    code = nbtools.INSTALL_SNIPPET.replace("`pip install companion`", "")  # the comment that warns against it
    assert not re.search(r"pip install (-\S+ )*companion\b", code) and '"companion"' not in code


def test_a_failed_install_ends_the_cell_with_one_line_saying_what_to_do(tmp_path: pathlib.Path) -> None:
    """Colab without access to the repository: pip's own output is shown as it comes, then one line says
    what failed and what to do, with no traceback. Run by IPython (as in a notebook, in a fresh process),
    with ``companion`` missing and a repository URL nothing answers (127.0.0.1, port 9): pip really fails."""
    url = "https://127.0.0.1:9/nobody/transformers-piece-by-piece"
    (tmp_path / "cell.py").write_text(nbtools.install_snippet(url) + "print('not reached')\n", encoding="utf-8")
    driver = (
        "import pathlib, sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "sys.modules['companion'] = None  # import companion raises ModuleNotFoundError\n"
        "result = InteractiveShell().run_cell(pathlib.Path('cell.py').read_text())\n"
        "print('ERROR TYPE:', type(result.error_in_exec).__name__)\n"
        "error = result.error_in_exec\n"
        "print('CHAINED:', error.__cause__ is not None or not error.__suppress_context__)\n"
    )
    env = {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython"), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_NO_INPUT": "1", "GIT_TERMINAL_PROMPT": "0"}  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", driver], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert "ERROR TYPE: InstallError" in out and "CHAINED: False" in out, out
    assert "Collecting git+https://127.0.0.1:9/" in out, out  # pip's progress, printed line by line
    shown = [line for line in out.splitlines() if "InstallError:" in line]
    assert shown == [
        f"InstallError: pip could not install git+{url} (see its output above). Without access to GitHub, "
        "clone it elsewhere, copy the folder here and run: pip install ./transformers-piece-by-piece"
    ], out
    assert "Traceback" not in out and "not reached" not in out, out


def test_jupyterlab_myst_is_pinned_everywhere() -> None:
    req = _pins((ROOT / "requirements.txt").read_text().splitlines())
    env = _pins((ROOT / "environment.yml").read_text().splitlines())
    assert req.get("jupyterlab_myst") == env.get("jupyterlab_myst") == "2.7.0"  # spelled as `pip freeze` does
    book_extra = re.search(r"^book = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S)
    assert book_extra and '"jupyterlab-myst==2.7.0"' in book_extra.group(1)


def test_binder_environment_is_lean() -> None:
    """Binder builds binder/ first: the package with its book extra and jupyterlab-myst, no dev tools."""
    text = (ROOT / "binder" / "environment.yml").read_text()
    norm = lambda pins: {k.replace("_", "-"): v for k, v in pins.items()}  # noqa: E731
    env, req = norm(_pins(text.splitlines())), norm(_pins((ROOT / "requirements.txt").read_text().splitlines()))
    project = (ROOT / "pyproject.toml").read_text()
    lists = [re.search(rf"^{key} = \[(.*?)^\]", project, re.M | re.S) for key in ("dependencies", "book")]
    needed = re.findall(r'^\s+"([A-Za-z0-9_.\-]+)[<>=!~\[;" ]', "".join(m.group(1) for m in lists if m), re.M)
    assert len(needed) >= 12
    for name in needed:
        assert name.lower().replace("_", "-") in env, f"binder/environment.yml lacks {name}"
    assert env["jupyterlab-myst"] == "2.7.0" and env["torch"] == req["torch"]
    for dev in ("pytest", "ruff", "hypothesis", "playwright", "transformers", "pytest-xdist", "tokenizers"):
        assert dev not in env, f"binder/environment.yml pins the dev tool {dev}"
    for name, version in env.items():
        assert req.get(name) == version, f"binder pins {name}=={version}, requirements.txt {req.get(name)}"
    post = (ROOT / "binder" / "postBuild").read_text()
    assert "pip install --no-deps ." in post and "pip install companion" not in post


# Words the editorial pass (issue 10) removed because they were wrong: a wrong Chinese term for logits
# (对数几率 is log-odds), a NAND-flash name for FlashAttention, and "exactly zero" for float32 underflow.
BANNED_PHRASES = ("闪存注意力", "对数几率", "exactly zero")


def _book_sources() -> list[pathlib.Path]:
    return sorted(
        p
        for p in [*ROOT.glob("book/**/*.ipynb"), *ROOT.glob("book/**/*.md")]
        if "_build" not in p.parts and ".ipynb_checkpoints" not in p.parts
    )


@pytest.mark.parametrize("phrase", BANNED_PHRASES)
def test_withdrawn_wording_does_not_come_back(phrase: str) -> None:
    found = [
        str(p.relative_to(ROOT))
        for p in _book_sources()
        if phrase.lower() in p.read_text(encoding="utf-8").lower()
    ]
    assert not found, f"{phrase!r} is back in {found}"


def _make_calls(tmp_path: pathlib.Path, *args: str) -> list[dict]:
    """Run ``make ARGS`` with fake ``jupyter`` and ``python`` programs that record their arguments and the
    network switches in their environment, instead of running anything; return the recorded calls."""
    fake_bin, record = tmp_path / "bin", tmp_path / "calls.jsonl"
    fake_bin.mkdir(parents=True)
    recorder = (
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"with open({str(record)!r}, 'a') as f:\n"
        "    env = {k: v for k, v in os.environ.items() if k in ('HF_HUB_OFFLINE', 'TRANSFORMERS_OFFLINE')}\n"
        "    f.write(json.dumps({'prog': os.path.basename(sys.argv[0]), 'argv': sys.argv[1:], 'env': env}) + '\\n')\n"
    )
    for name in ("jupyter", "python"):
        (fake_bin / name).write_text(recorder)
        (fake_bin / name).chmod(0o755)
    stamp = tmp_path / "stamp"  # newer than requirements.txt: make reinstalls nothing
    stamp.touch()
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "MAKEFLAGS")}
    cmd = ["make", "-s", f"BIN={fake_bin}", f"STAMP={stamp}", *args]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=60)
    return [json.loads(line) for line in record.read_text().splitlines()]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lab_serves_the_repository_opening_the_workbooks_and_stays_online(tmp_path: pathlib.Path) -> None:
    """`make lab` serves the repository root (chapters in book/, workbooks/ beside them), opens the workbooks
    folder, hides the book's build folders from the file browser, and does not switch the Hugging Face Hub
    off (chapter 11 may download GPT-2 there); the targets that build, test and re-run the course do."""
    (lab,) = _make_calls(tmp_path / "lab", "lab", "LAB_ARGS=--no-browser")
    args = lab["argv"]
    assert lab["prog"] == "jupyter" and args[0] == "lab" and "--no-browser" in args
    assert "--ServerApp.root_dir=." in args and "--LabApp.default_url=/lab/tree/workbooks" in args
    assert not any(a.startswith("book") or a.endswith("book/") for a in args), args  # not served from book/
    (hidden,) = [a.split("=", 1)[1] for a in args if a.startswith("--ContentsManager.hide_globs=")]
    assert {"_ext", "_static", "_templates", "__pycache__"} <= set(json.loads(hidden))
    assert lab["env"] == {}, f"make lab exports {lab['env']}"
    (execute, *_) = _make_calls(tmp_path / "notebooks", "notebooks", "NB=book/03_attention.ipynb")
    assert execute["argv"][0] == "nbconvert"
    assert execute["env"] == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


# ------------------------------------------------------------------------------------ citations


def _citations():
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        import citations
    finally:
        sys.path.pop(0)
    return citations


def test_a_citation_link_stands_for_its_role() -> None:
    """book/_ext/citations.py turns the links back into the roles sphinxcontrib-bibtex reads; in a notebook's
    JSON too (the extension sees the raw file), and nothing else."""
    cite = _citations()
    labels = {"a": ("Vaswani et al.", "2017"), "b": ("黄艺龙", "2026")}
    parenthetical = nbtools.citation_link("cite", ["a", "b"], labels)
    textual = nbtools.citation_link("cite:t", ["a"], labels)
    assert parenthetical == "[(Vaswani et al., 2017; 黄艺龙, 2026)](#cite:a,b)"
    assert textual == "[Vaswani et al. (2017)](#cite:t:a)"
    text = f"as shown {parenthetical}; {textual} says, see [the docs](#other) and `{{cite}}`."
    assert cite.to_roles(text) == "as shown {cite}`a,b`; {cite:t}`a` says, see [the docs](#other) and `{cite}`."
    as_json = json.dumps({"source": [f"one {textual}\n", "two [x](#y)\n"]})
    assert json.loads(cite.to_roles(as_json))["source"] == ["one {cite:t}`a`\n", "two [x](#y)\n"]
    with pytest.raises(ValueError, match="not in book/references.bib"):
        nbtools.citation_link("cite", ["nope"], labels)


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.name)
def test_citations_are_links_jupyterlab_can_show(nb_path: pathlib.Path) -> None:
    """No ``{cite}`` role in a notebook's markdown (jupyterlab-myst would show the bare key flagged "Citation
    Not Found"): every citation is a link whose text is made from book/references.bib by
    ``scripts/nbtools.py apply``, and whose keys are in the bibliography."""
    cite, labels = _citations(), nbtools.citation_labels()
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = nbtools.source(cell)
        role = cite.ROLE.search(text)
        assert not role, f"{nb_path.name}: {role.group(0)} (run scripts/nbtools.py apply)"
        for link in cite.LINK.finditer(text):
            keys = cite.keys_of(link["keys"])
            assert link.group(0) == nbtools.citation_link(link["role"], keys, labels), (
                f"{nb_path.name}: {link.group(0)} is out of step with references.bib (run scripts/nbtools.py apply)"
            )


# ------------------------------------------------------------------------------------ Run All offline


@pytest.mark.slow
def test_cells_kept_from_the_build_run_offline_with_a_one_line_message(tmp_path: pathlib.Path, monkeypatch) -> None:
    """A cell tagged ``skip-execution`` is not run by the build or nbval, but JupyterLab's and Colab's Run
    All run it: offline (nothing cached, the Hub out of reach) it must print one line and go on, never
    raise. Each such cell of every chapter and workbook runs right after the notebook's first code cell."""
    from companion.exercises import _notebooks

    books = []
    for nb_path in NOTEBOOKS + sorted((ROOT / "workbooks").glob("*.ipynb")):  # the chapters and their workbooks
        cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
        code = [c for c in cells if c["cell_type"] == "code" and nbtools.source(c).strip()]
        skipped = [c for c in code if "skip-execution" in c.get("metadata", {}).get("tags", [])]
        if skipped:  # the runner runs the cells tagged "exercise" after the first code cell
            books.append((nb_path, {"cells": [code[0]] + [{**c, "metadata": {"tags": ["exercise"]}} for c in skipped]}))
    assert books, "no chapter has a skip-execution cell (chapter 11's GPT-2 download had one)"
    for name, value in {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}.items():
        monkeypatch.setenv(name, value)  # the runner's subprocess inherits them
    runs = _notebooks.run_exercise_cells_many([nb for _, nb in books], ROOT / "book")
    for (nb_path, _), run in zip(books, runs):
        for _, text in run:
            assert "Traceback" not in text, f"{nb_path.name}: a skip-execution cell raised offline:\n{text}"
            assert len(text.strip().splitlines()) == 1, f"{nb_path.name}: offline it printed:\n{text}"
