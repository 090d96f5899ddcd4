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
    assert "setup_notebook(" in "".join(code[0]["source"]), f"{nb_path.name}: first code cell must call setup_notebook"
    counts = [c.get("execution_count") for c in code]
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
