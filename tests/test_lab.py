"""A chapter works in JupyterLab: Run All finishes without an error, MyST renders, solutions stay hidden.

JupyterLab (with jupyterlab-myst, from the book environment) is started on a copy of one chapter in a
temporary folder, bound to 127.0.0.1 with a random token and ``--allow-root`` (as `make lab` does), with
its settings, workspaces and runtime files in that folder too. Headless Chromium (Playwright, the same
browser as tests/test_book_html.py) opens the chapter and runs every cell; the test then reads the
notebook's state from the page (``window.jupyterapp``, exposed for the test only):

- every code cell ran, none produced an error output;
- MyST markup is rendered (admonitions are real boxes, no ``:::{`` left as text);
- every ``:::{solution}`` dropdown is closed, and every code cell tagged ``solution`` is collapsed
  (``source_hidden``), so the answer is not in view;
- saving the chapter (before running it) leaves the file byte-identical: its metadata is what JupyterLab
  writes;
- the chapter's workbook opens and runs too: every exercise cell prints ❌ FAIL without stopping Run All,
  and an endless loop handed to ``check`` is stopped by its time limit inside the Jupyter kernel.

Marked ``book`` (``make test`` runs it with the other browser tests); skipped without Chromium unless
``REQUIRE_BROWSER=1``. It takes about 30-50 s on a 2-core machine.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest
from test_book_html import CHROMIUM_ARGS, browser  # noqa: F401  (browser: the shared Chromium fixture)

pytestmark = pytest.mark.book

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "book" / "03_attention.ipynb"  # exercises, solutions, admonitions, math and a figure
WORKBOOK = ROOT / "workbooks" / CHAPTER.name
RUN_ALL_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _jupyter_lab(folder: pathlib.Path) -> Iterator[str]:
    """Start JupyterLab on ``folder``; yield its base URL with the token; stop it afterwards."""
    port, token = _free_port(), secrets.token_hex(16)
    settings = folder / ".lab" / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # Windowing off: every cell is in the page, so the test sees them all without scrolling.
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(folder / ".lab" / "runtime"),
        "JUPYTER_CONFIG_DIR": str(folder / ".lab" / "config"),
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "COMPANION_CHECK_TIME_LIMIT": "2",  # seconds per case of a check, in the kernels this server starts
    }
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
        "--ip", "127.0.0.1", f"--port={port}", f"--ServerApp.token={token}",
        f"--ServerApp.root_dir={folder}", "--ServerApp.port_retries=0",
        f"--LabApp.user_settings_dir={folder / '.lab' / 'settings'}",
        f"--LabApp.workspaces_dir={folder / '.lab' / 'workspaces'}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.news_url=None",
    ]  # fmt: skip
    log = (folder / ".lab" / "server.log").open("w")
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log_text = (folder / ".lab" / "server.log").read_text()
                    raise RuntimeError("JupyterLab did not start:\n" + log_text) from None
                time.sleep(0.3)
        yield f"{base}/lab/tree/{{path}}?reset&token={token}"  # reset: a fresh workspace, only that notebook
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


# Reads the open notebook's state from JupyterLab's model and the rendered page.
_STATE = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.widgets;
  const out = {kernel: panel.sessionContext.session?.kernel?.status, cells: []};
  for (const cell of cells) {
    const m = cell.model;
    const entry = {type: m.type, tags: m.getMetadata('tags') || [], inputHidden: cell.inputHidden,
                   source: m.sharedModel.getSource().slice(0, 80)};
    if (m.type === 'code') {
      entry.count = m.executionCount;
      entry.outputs = m.outputs.toJSON().map(o => ({type: o.output_type, ename: o.ename || null,
                                                    evalue: o.evalue || null, name: o.name || null,
                                                    text: o.text === undefined ? null : [].concat(o.text).join('')}));
      entry.prompt = cell.node.querySelector('.jp-InputPrompt')?.textContent || '';
    } else if (m.type === 'markdown') {
      const r = cell.node.querySelector('.jp-RenderedMarkdown, .jp-RenderedMySTMarkdown, .myst');
      entry.rendered = cell.rendered;
      entry.text = r ? r.innerText : null;
      entry.admonitions = cell.node.querySelectorAll('aside, .admonition').length;
      entry.details = Array.from(cell.node.querySelectorAll('details')).map(d => d.open);
    }
    out.cells.push(entry);
  }
  return out;
}"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[tuple[str, pathlib.Path]]:
    """JupyterLab on a folder holding a copy of the chapter and of its workbook; yields (url, folder)."""
    folder = tmp_path_factory.mktemp("lab")
    shutil.copy(CHAPTER, folder / CHAPTER.name)
    workbook = json.loads(WORKBOOK.read_text(encoding="utf-8"))
    # One more exercise cell in the workbook: an endless loop, which the check's time limit must stop
    # inside the Jupyter kernel (SIGALRM in the kernel's main thread).
    workbook["cells"].append(
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "endless-loop",
            "metadata": {"tags": ["exercise"]},
            "outputs": [],
            "source": "def endless(x, dim=-1):\n    while True:\n        pass\n\n\n_ = check('softmax', endless)\n",
        }
    )
    text = json.dumps(workbook, indent=1, ensure_ascii=False) + "\n"
    (folder / f"workbook_{WORKBOOK.name}").write_text(text, encoding="utf-8")
    with _jupyter_lab(folder) as url:
        yield url, folder


def _run_all(browser, url: str, path: str, save_first: bool = False) -> tuple[dict, list[str]]:  # noqa: F811
    """Open a notebook (and save it, unchanged, if ``save_first``), Run All, wait until every cell ran;
    return the notebook's state and page errors."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url, wait_until="load")
        page.wait_for_function(
            "path => window.jupyterapp && window.jupyterapp.shell.currentWidget?.context?.path === path"
            " && window.jupyterapp.shell.currentWidget.sessionContext?.session?.kernel?.status === 'idle'",
            arg=path,
            timeout=60_000,
        )
        if save_first:
            page.evaluate("() => window.jupyterapp.shell.currentWidget.context.save()")
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_function(
            """() => {
              const cells = window.jupyterapp.shell.currentWidget.content.widgets;
              const code = cells.filter(c => c.model.type === 'code');
              const busy = code.some(c => (c.node.querySelector('.jp-InputPrompt')?.textContent || '')
                                          .includes('*'));
              return !busy && code.every(c => c.model.executionCount !== null)
                && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle';
            }""",
            timeout=RUN_ALL_TIMEOUT_S * 1000,
            polling=500,
        )
        return page.evaluate(_STATE), errors
    finally:
        context.close()


def _ran_without_errors(state: dict) -> list[dict]:
    code = [c for c in state["cells"] if c["type"] == "code"]
    counts = [c["count"] for c in code]
    assert counts == list(range(counts[0], counts[0] + len(code))), f"cells did not all run in order: {counts}"
    errored = [(c["source"], o["ename"], o["evalue"]) for c in code for o in c["outputs"] if o["type"] == "error"]
    assert not errored, f"error outputs: {errored}"
    return code


def test_a_chapter_runs_in_jupyterlab_with_myst_rendered(browser, lab) -> None:  # noqa: F811
    start = time.monotonic()
    url, folder = lab
    state, errors = _run_all(browser, url.format(path=CHAPTER.name), CHAPTER.name, save_first=True)
    # Saved before running: the stored metadata and layout are what JupyterLab writes, so no diff.
    saved, original = (folder / CHAPTER.name).read_text(encoding="utf-8"), CHAPTER.read_text(encoding="utf-8")
    if saved != original:
        diff = difflib.unified_diff(original.splitlines(True), saved.splitlines(True), n=1)
        pytest.fail(f"saving {CHAPTER.name} in JupyterLab changed it:\n{''.join(list(diff)[:40])}")
    (folder / "chapter-state.json").write_text(json.dumps(state, indent=1, ensure_ascii=False))
    code = _ran_without_errors(state)  # Run All went through, in order, without an error
    markdown = [c for c in state["cells"] if c["type"] == "markdown"]

    # MyST is rendered by jupyterlab-myst: no raw directive fences, admonitions are boxes.
    raw = [c["text"][:80] for c in markdown if c["text"] and ":::{" in c["text"]]
    assert not raw, f"MyST markup left as text (is jupyterlab-myst installed and enabled?): {raw}"
    assert sum(c["admonitions"] for c in markdown) > 0, "no admonition was rendered"

    # Solutions are out of sight: dropdowns closed, solution code cells collapsed.
    details = [d for c in markdown for d in c["details"]]
    assert details and not any(details), f"solution dropdowns: {details} (True = open)"
    solutions = [c for c in code if "solution" in c["tags"]]
    assert solutions, f"{CHAPTER.name} has no code cell tagged 'solution'"
    shown = [c["source"] for c in solutions if not c["inputHidden"]]
    assert not shown, f"solution cells not collapsed (set metadata.jupyter.source_hidden): {shown}"
    assert not errors, f"page errors: {errors}"
    assert time.monotonic() - start < 90


def test_its_workbook_opens_and_runs_with_failing_stubs(browser, lab) -> None:  # noqa: F811
    url, folder = lab
    name = f"workbook_{WORKBOOK.name}"
    state, errors = _run_all(browser, url.format(path=name), name)
    (folder / "workbook-state.json").write_text(json.dumps(state, indent=1, ensure_ascii=False))
    code = _ran_without_errors(state)  # a failing check prints, it never stops Run All
    assert not any("solution" in c["tags"] for c in code)
    exercises = [c for c in code if "exercise" in c["tags"]]
    assert len(exercises) >= 2
    for cell in exercises:
        text = "".join(o["text"] or "" for o in cell["outputs"])
        assert "❌ FAIL " in text and "Traceback" not in text, f"{cell['source']!r} printed {text!r}"
    endless = "".join(o["text"] or "" for o in exercises[-1]["outputs"])
    assert "ran longer than the time limit (2 s) and was stopped" in endless, endless
    markdown = [c for c in state["cells"] if c["type"] == "markdown"]
    assert markdown[0]["text"].startswith("Workbook of chapter 3"), markdown[0]["text"][:80]
    assert not errors, f"page errors: {errors}"
