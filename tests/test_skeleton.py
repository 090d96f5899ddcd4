"""Tests that keep the course's skeleton honest: packaging, pins, table of contents, notebook conventions."""

from __future__ import annotations

import json
import pathlib
import re
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
        if "NBVAL_IGNORE_OUTPUT" in src:
            assert "assert " in src, f"{nb_path.name}: a cell ignored by nbval must assert what matters"


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
    import types

    calls: list[list[str]] = []
    fake_subprocess = types.SimpleNamespace(run=lambda cmd, check: calls.append(list(cmd)))
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
    assert cmd[1:] == ["-m", "pip", "install", "--quiet", f"git+{url}"]
    assert url.startswith("https://github.com/") and f"url: {url}" in (ROOT / "_config.yml").read_text()
    code = nbtools.INSTALL_SNIPPET.replace("`pip install companion`", "")  # the comment that warns against it
    assert not re.search(r"pip install (-\S+ )*companion\b", code) and '"companion"' not in code


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
