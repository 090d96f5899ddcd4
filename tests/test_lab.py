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
from test_book_html import CHROMIUM_ARGS, browser, platform_fonts  # noqa: F401  (browser: the shared fixture)

pytestmark = [pytest.mark.book, pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "book" / "03_attention.ipynb"  # exercises, solutions, admonitions, math and a figure
WORKBOOK = ROOT / "workbooks" / CHAPTER.name
RUN_ALL_TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _jupyter_lab(folder: pathlib.Path, lab_args: list[str] | None = None) -> Iterator[str]:
    """Start JupyterLab on ``folder`` (or, with ``lab_args``, as those arguments say, from the repository
    root, as `make lab` does); its settings and runtime files go to ``folder/.lab``. Yield its URL for a
    path, with the token; stop it afterwards."""
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
    where = [f"--ServerApp.root_dir={folder}", "--ip", "127.0.0.1", "--allow-root"] if lab_args is None else lab_args
    cmd = [
        sys.executable, "-m", "jupyterlab", *where, "--no-browser",
        f"--port={port}", f"--ServerApp.token={token}", "--ServerApp.port_retries=0",
        f"--LabApp.user_settings_dir={folder / '.lab' / 'settings'}",
        f"--LabApp.workspaces_dir={folder / '.lab' / 'workspaces'}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.news_url=None",
    ]  # fmt: skip
    log = (folder / ".lab" / "server.log").open("w")
    cwd = folder if lab_args is None else ROOT
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
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
      // what a collapsed cell shows instead of its code (JupyterLab: the code's first line)
      entry.placeholder = cell.inputHidden
        ? cell.node.querySelector('.jp-InputPlaceholder .jp-PlaceholderText')?.innerText ?? null : null;
    } else if (m.type === 'markdown') {
      const r = cell.node.querySelector('.jp-RenderedMarkdown, .jp-RenderedMySTMarkdown, .myst');
      entry.rendered = cell.rendered;
      entry.text = r ? r.innerText : null;
      entry.admonitions = cell.node.querySelectorAll('aside, .admonition').length;
      entry.details = Array.from(cell.node.querySelectorAll('details')).map(d => d.open);
      // jupyterlab-myst flags a citation it cannot resolve (a {cite} role: it cannot read references.bib)
      entry.citeWarnings = cell.node.querySelectorAll(
        '[title="Citation Not Found"], [title="Citation Has No Label"]').length;
    }
    out.cells.push(entry);
  }
  return out;
}"""


@pytest.fixture(scope="session")  # one server per worker, however the worker interleaves modules
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
    # ... and what they show gives nothing away: the placeholder names the exercise, the output is the verdict
    placeholders = [c["placeholder"] for c in solutions]
    assert all(p and p.startswith("# Solution of ex-03-") for p in placeholders), placeholders
    for cell in solutions:
        printed = "".join(o["text"] or "" for o in cell["outputs"]).splitlines()
        assert printed and all(line.startswith("✅ PASS ") for line in printed), f"{cell['placeholder']}: {printed}"

    # Citations read as author and year, never as a key flagged "Citation Not Found".
    assert sum(c["citeWarnings"] for c in markdown) == 0, "jupyterlab-myst flags citations it cannot resolve"
    prose = " ".join(c["text"] or "" for c in markdown)
    assert "(Vaswani et al., 2017)" in prose and "{cite}" not in prose
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


# A line of a notebook's prose or code, as JupyterLab styles it, for _drawn_with to probe.
_FONT_PROBE = """family => {
  const div = document.createElement('div');
  div.id = 'font-probe-' + family;
  div.style.fontFamily = `var(--jp-${family}-font-family)`;
  div.innerHTML = '<span>我爱</span> NLP <span>✅</span> PASS';
  document.body.appendChild(div);
}"""


def _drawn_with(page, selector: str, text: str) -> list[dict]:
    """The fonts the renderer drew the span holding ``text`` inside ``selector`` with (after web fonts load)."""
    page.evaluate("async text => { await document.fonts.load('16px \"Course CJK\"', text);"
                  " await document.fonts.load('16px \"Course Symbols\"', text); await document.fonts.ready; }",
                  text)
    texts = page.evaluate("s => Array.from(document.querySelectorAll(s + ' span')).map(e => e.textContent)", selector)
    return platform_fonts(page, f"{selector} span:nth-of-type({texts.index(text) + 1})")


def test_make_lab_opens_the_workbooks_with_the_chapters_beside_them(browser, tmp_path: pathlib.Path) -> None:  # noqa: F811
    """JupyterLab started as `make lab` starts it (its arguments read from the Makefile): the repository
    root is served, the browser lands in workbooks/, the chapters are in book/, and the book's build
    folders (_ext, _static, _templates) are not in the file browser; Chinese text and ✅ are drawn with the
    fonts the course installs."""
    from test_skeleton import _make_calls

    (lab,) = _make_calls(tmp_path / "make", "lab")
    assert lab["argv"][0] == "lab"
    with _jupyter_lab(tmp_path, lab_args=lab["argv"][1:]) as url:
        base, token = url.split("/lab/tree/")[0], url.rsplit("token=", 1)[1]

        def listing(path: str) -> set[str]:
            with urllib.request.urlopen(f"{base}/api/contents/{path}?token={token}", timeout=30) as r:
                return {item["name"] for item in json.load(r)["content"]}

        assert {"book", "workbooks", "companion", "README.md"} <= listing("")
        book = listing("book")
        assert CHAPTER.name in book and not book & {"_ext", "_static", "_templates"}, sorted(book)
        assert WORKBOOK.name in listing("workbooks")
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            page = context.new_page()
            page.goto(f"{base}/?token={token}", wait_until="load")  # what the browser `make lab` opens gets
            page.wait_for_url("**/lab/tree/workbooks*", timeout=60_000)
            item = page.locator(".jp-DirListing-itemText", has_text=WORKBOOK.name)
            item.first.wait_for(timeout=60_000)  # the file browser lists the workbooks folder
            crumbs = page.locator(".jp-BreadCrumbs").first.inner_text()
            assert "workbooks" in crumbs, crumbs
            # Chinese and the checks' ✅ in a notebook's prose (content font) and code or output (code font) are
            # drawn with the fonts the course installs (binder/jupyter_lab_config.py), not as empty boxes: the
            # test machine has no CJK or emoji font of its own.
            for family in ("content", "code"):
                page.evaluate(_FONT_PROBE, family)
                for text, wanted in (("我爱", "Noto Sans CJK SC"), ("✅", "DejaVu Sans")):
                    fonts = _drawn_with(page, f"#font-probe-{family}", text)
                    assert len(fonts) == 1 and wanted in fonts[0]["familyName"] and fonts[0]["isCustomFont"], (
                        f"{text} in JupyterLab's {family} font: {fonts}"
                    )
        finally:
            context.close()
