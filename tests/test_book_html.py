"""The built HTML book is offline, self-contained and works in a real browser.

Two layers, both marked ``book`` (``make test`` runs them last, after the unit tests and nbval):

1. Static checks of ``_build/html``: the build had no warning, no page or stylesheet loads anything from
   another host, MathJax is the vendored copy, chapters are numbered, launch and download buttons exist.
2. Every page opened in Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright) from a server on
   127.0.0.1, with every request to any other host blocked and recorded: no console error, no failed or
   remote request, math typeset by MathJax with no raw TeX left, every image decoded, copy buttons on
   code, search finds "attention", Chinese prose drawn with the bundled CJK font. Screenshots of three
   pages (home, the chapter with the most math, the bibliography) and of the search results go to
   ``_build/screenshots/``.

Without Chromium the browser tests skip, unless ``REQUIRE_BROWSER=1`` (set by ``.ci/run``): then they fail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import html.parser
import http.server
import os
import pathlib
import re
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator

import pytest

pytestmark = pytest.mark.book

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHROMIUM = pathlib.Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = ROOT / "_build" / "screenshots"
CJK_WEBFONT_FAMILY = "Course CJK"  # book/_static/custom.css
CJK_SOURCE_FAMILY = "Noto Sans CJK SC"  # the font the web font is subset from


# --------------------------------------------------------------------------------------------------
# Which pages exist: read from _toc.yml at collection time, so each page is its own test.
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TocPart:
    caption: str
    numbered: bool
    files: tuple[str, ...]


def _toc() -> tuple[str, list[TocPart]]:
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))

    def files(entries: list[dict]) -> list[str]:
        out = []
        for entry in entries or []:
            if "file" in entry:
                out.append(entry["file"])
            out += files(entry.get("sections", []))
        return out

    parts = [
        TocPart(p.get("caption", ""), bool(p.get("numbered", False)), tuple(files(p.get("chapters", []))))
        for p in toc.get("parts", [])
    ]
    if "chapters" in toc:
        parts.append(TocPart("", bool(toc.get("numbered", False)), tuple(files(toc["chapters"]))))
    return toc["root"], parts


def _source(docname: str) -> pathlib.Path:
    for suffix in (".ipynb", ".md"):
        if (ROOT / (docname + suffix)).exists():
            return ROOT / (docname + suffix)
    raise FileNotFoundError(f"_toc.yml lists {docname}, which has no .ipynb or .md file")


TOC_ROOT, TOC_PARTS = _toc()
DOCNAMES = [TOC_ROOT] + [f for part in TOC_PARTS for f in part.files]
NOTEBOOKS = [d for d in DOCNAMES if (ROOT / (d + ".ipynb")).exists()]
PAGES = ["index.html", *(d + ".html" for d in DOCNAMES), "genindex.html", "search.html"]
ZH = "zh/"  # the Chinese edition: the same page paths under zh/ (scripts/i18n.py, issue 14)
ZH_PAGES = [ZH + p for p in PAGES]
# The colour rules (light and dark scheme) depend on the stylesheets and on the kinds of element a page holds,
# not on its text: they run on pages that together hold every kind (prose, code and outputs, maths, tables,
# dropdowns, exercises, figures), which keeps the browser tests within the time budget of `make test`.
COLOUR_PAGES = {TOC_ROOT + ".html", "book/05_positions.html", "book/10_scaling.html", "book/11_train_your_gpt.html",
                "book/appendix/glossary.html"}
# The Chinese pages are the English pages' templates and structure with translated prose (tests/test_i18n.py checks
# that a translation keeps the markup: links, roles, emphasis): the other WCAG rules run on every English page and
# on the Chinese pages that hold every kind of element (COLOUR_PAGES) and one page of each other template (the
# index, search, the bibliography). Every Chinese page still gets all the other checks of its visit: nothing from
# another host, no console error, math typeset, images, copy buttons, <html lang>, the language switch.
BIBLIOGRAPHY = next((d for d in DOCNAMES if d.endswith("bibliography")), DOCNAMES[-1]) + ".html"
ZH_AUDIT_PAGES = {ZH + p for p in COLOUR_PAGES | {"genindex.html", "search.html", BIBLIOGRAPHY}}


def test_the_colour_audit_pages_are_pages_of_the_book() -> None:
    assert COLOUR_PAGES <= set(PAGES), COLOUR_PAGES - set(PAGES)
    assert ZH_AUDIT_PAGES <= set(ZH_PAGES), ZH_AUDIT_PAGES - set(ZH_PAGES)


# --------------------------------------------------------------------------------------------------
# Static checks of the HTML files
# --------------------------------------------------------------------------------------------------

# Tag -> attributes through which a page makes the browser fetch something.
_FETCHING = {
    "script": ("src",),
    "link": ("href",),
    "img": ("src", "srcset"),
    "iframe": ("src",),
    "source": ("src", "srcset"),
    "video": ("src", "poster"),
    "audio": ("src",),
    "embed": ("src",),
    "object": ("data",),
    "track": ("src",),
    "input": ("src",),
}


class _Resources(html.parser.HTMLParser):
    """Collect (tag, attribute, value) for every attribute that makes the browser fetch something."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []
        self.style_text: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in _FETCHING.get(tag, ()):
                for part in value.split(","):
                    if part.strip():
                        self.found.append((tag, name, part.strip().split()[0]))
            if name == "style":
                self.style_text.append(value)
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.style_text.append(data)


def _is_remote(url: str) -> bool:
    """True for an address on another host: http(s)://, protocol-relative //host, ws(s)://."""
    url = url.strip().strip("'\"")
    return bool(re.match(r"^(?:[a-z][a-z0-9+.-]*:)?//", url, re.I)) and not url.lower().startswith("file:")


def _css_urls(text: str) -> list[str]:
    return re.findall(r"url\(\s*['\"]?([^'\")]+)", text) + re.findall(r"@import\s+['\"]([^'\"]+)", text)


def _html_files(html_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in html_dir.rglob("*.html") if "_sources" not in p.parts)


def test_build_is_clean_and_has_an_index(built_book) -> None:
    assert built_book.warnings == (), "\n".join(built_book.warnings)
    assert (built_book.html / "index.html").is_file()
    for docname in DOCNAMES:
        assert (built_book.html / (docname + ".html")).is_file(), f"{docname} listed in _toc.yml was not built"


def test_no_page_or_stylesheet_loads_from_another_host(built_book) -> None:
    remote = []
    for path in _html_files(built_book.html):
        parser = _Resources()
        parser.feed(path.read_text(encoding="utf-8"))
        rel = path.relative_to(built_book.html)
        remote += [f"{rel}: <{tag} {attr}={url!r}>" for tag, attr, url in parser.found if _is_remote(url)]
        remote += [f"{rel}: style url({u!r})" for u in _css_urls(" ".join(parser.style_text)) if _is_remote(u)]
    for css in sorted((built_book.html / "_static").rglob("*.css")):
        text = css.read_text(encoding="utf-8", errors="replace")
        remote += [f"{css.relative_to(built_book.html)}: url({u!r})" for u in _css_urls(text) if _is_remote(u)]
    assert not remote, "the book loads from other hosts:\n" + "\n".join(remote)


def test_the_parser_sees_remote_resources() -> None:
    """The static check above can fail: it spots each way a page could fetch from another host."""
    page = (
        '<script src="https://cdn.example.org/x.js"></script><link rel="stylesheet" href="//cdn.example.org/a.css">'
        '<img srcset="a.png 1x, https://img.example.org/b.png 2x"><div style="background: url(http://x.org/i.png)">'
        '<script src="_static/local.js"></script><a href="https://github.com/">a link is not a load</a>'
    )
    parser = _Resources()
    parser.feed(page)
    remote = [url for _, _, url in parser.found if _is_remote(url)]
    remote += [u for u in _css_urls(" ".join(parser.style_text)) if _is_remote(u)]
    assert remote == [
        "https://cdn.example.org/x.js",
        "//cdn.example.org/a.css",
        "https://img.example.org/b.png",
        "http://x.org/i.png",
    ]


def test_mathjax_is_the_vendored_copy_and_loaded_once(built_book) -> None:
    pages_with_math = 0
    for path in _html_files(built_book.html):
        text = path.read_text(encoding="utf-8")
        scripts = re.findall(r'<script[^>]*src="([^"]*(?:mathjax|MathJax|tex-[a-z-]+\.js)[^"]*)"', text)
        has_math = 'class="math notranslate nohighlight"' in text
        if has_math:
            pages_with_math += 1
            assert len(scripts) == 1, f"{path.name}: math needs exactly one MathJax script, found {scripts}"
        for src in scripts:
            local = (path.parent / urllib.parse.urlsplit(src).path).resolve()
            assert local.is_file(), f"{path.name}: MathJax script {src} is not in the build"
    if any("$" in _source(d).read_text(encoding="utf-8") for d in DOCNAMES):
        assert pages_with_math > 0, "the sources have $math$ but no page has MathJax math"
    assert (built_book.html / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()


def test_cjk_web_font_was_built(built_book) -> None:
    font = built_book.html / "_static" / "fonts" / "cjk-subset.woff"
    assert font.is_file() and font.read_bytes()[:4] == b"wOFF", "the CJK web font subset is missing"
    css = (built_book.html / "_static" / "custom.css").read_text(encoding="utf-8")
    assert f'font-family: "{CJK_WEBFONT_FAMILY}"' in css and "fonts/cjk-subset.woff" in css


def _title(page: str) -> tuple[str | None, str]:
    """(Sphinx's section number or None, the rest of the title) of a page's <h1>."""
    # The article's <h1> (the print-only header repeats the title without its number).
    h1s = [h for h in re.findall(r"<h1[^>]*>(.*?)</h1>", page, re.S) if "headerlink" in h]
    assert h1s, "page has no <h1>"
    h1 = h1s[0]
    number = re.search(r'<span class="section-number">([^<]*)</span>', h1)
    text = re.sub(r"<[^>]+>", "", re.sub(r'<span class="section-number">[^<]*</span>', "", h1))
    return (number.group(1).strip().rstrip(".") if number else None), text.replace("#", "").strip()


def test_chapter_numbers_run_in_order_and_match_the_file_names(built_book) -> None:
    """Parts marked `numbered` get Sphinx's chapter numbers, continued across parts (multitoc numbering).

    A numbered chapter's title must not carry a number of its own ("1. 0. The big picture"), and a file
    named NN_topic must come out as chapter NN (in an unnumbered part, a title that starts with a number
    must start with NN), so that the book, the file names and the intro's chapter map agree.
    """
    numbers = []
    for part in TOC_PARTS:
        for docname in part.files:
            number, text = _title((built_book.html / (docname + ".html")).read_text(encoding="utf-8"))
            prefix = re.match(r"(\d+)_", docname.split("/")[-1])
            if not part.numbered:
                assert number is None, f"{docname} is in the unnumbered part {part.caption!r} yet numbered"
                own = re.match(r"^(\d+)\.\s", text)  # a hand-written "3. Self-attention" must agree too
                if own and prefix:
                    assert int(own.group(1)) == int(prefix.group(1)), f"{docname}: title {text!r}"
                continue
            assert number, f"{docname} is in the numbered part {part.caption!r} but its title has no number"
            assert not re.match(r"^\d+(\.\d+)*[.:]?\s", text), (
                f"{docname}: the title {text!r} carries its own number besides Sphinx's {number}"
            )
            numbers.append(int(number.split(".")[0]))
            if prefix:
                assert int(number.split(".")[0]) == int(prefix.group(1)), (
                    f"{docname} is chapter {number} in the book; its file name says {int(prefix.group(1))}"
                )
    assert numbers == list(range(1, len(numbers) + 1)), f"chapter numbers run {numbers}"


@pytest.mark.parametrize("docname", NOTEBOOKS or [pytest.param(None, marks=pytest.mark.skip("no notebook"))])
def test_notebook_pages_have_launch_and_download_buttons(built_book, docname: str) -> None:
    page = (built_book.html / (docname + ".html")).read_text(encoding="utf-8")
    cfg = (ROOT / "_config.yml").read_text(encoding="utf-8")
    repo = re.search(r"url:\s*https://github\.com/(\S+)", cfg).group(1)
    branch = re.search(r"^\s*branch:\s*(\S+)", cfg, re.M).group(1)
    binder = f"https://mybinder.org/v2/gh/{repo}/{branch}?urlpath=lab/tree/{docname}.ipynb"
    colab = f"https://colab.research.google.com/github/{repo}/blob/{branch}/{docname}.ipynb"
    assert binder in page, f"{docname}: no Binder launch button ({binder})"
    assert colab in page, f"{docname}: no Colab launch button ({colab})"
    name = docname.split("/")[-1]
    assert re.search(rf'href="[^"]*_sources/{re.escape(docname)}\.ipynb"', page), f"{name}: no .ipynb download"
    assert "btn-download-pdf-button" in page or "window.print()" in page, f"{name}: no PDF/print download"
    assert (ROOT / "environment.yml").is_file(), "Binder builds its image from environment.yml"


def test_figures_use_a_cjk_font_after_setup_notebook() -> None:
    """Chapters' matplotlib figures draw 我爱NLP with Noto Sans CJK SC (run in a fresh interpreter)."""
    code = "import companion, companion.plots as p; companion.setup_notebook(); print(p.resolved_font('我爱'))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "MPLBACKEND": "Agg"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "NotoSansCJKsc-Regular.otf"


# --------------------------------------------------------------------------------------------------
# In the browser
# --------------------------------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@contextlib.contextmanager
def _serve(directory: pathlib.Path) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 (a free port) from a background thread; yield the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def server(built_book) -> Iterator[str]:
    with _serve(built_book.html) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        message = f"Chromium not found at {CHROMIUM}: install it with `apt-get install chromium`"
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(message + " (REQUIRE_BROWSER=1 makes this a failure)", pytrace=False)
        pytest.skip(message)
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@dataclasses.dataclass
class Visit:
    """A page opened in the browser, and everything that went wrong while loading it."""

    page: object
    console_errors: list[str] = dataclasses.field(default_factory=list)
    remote_requests: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)


_LOCAL_HOSTS = {"127.0.0.1"}
# Resolves once MathJax (if the page loads it) has typeset the page.
_MATHJAX_DONE = """async () => {
  if (!window.MathJax) return 'none';
  for (let i = 0; i < 200 && !(window.MathJax.startup && window.MathJax.startup.promise); i++)
    await new Promise(r => setTimeout(r, 25));
  await window.MathJax.startup.promise;
  return 'typeset';
}"""
_IMAGES_DONE = """async () => {
  const imgs = Array.from(document.images);
  imgs.forEach(img => { img.loading = 'eager'; });
  await Promise.all(imgs.map(img => img.decode().catch(() => null)));
  return imgs.map(img => ({src: img.currentSrc || img.src, w: img.naturalWidth, ok: img.complete}));
}"""
# Visible text outside code, scripts and typeset math: raw TeX there means math was not rendered.
_PROSE_TEXT = """() => {
  // Search-result snippets quote the pages' source text, TeX included, by design; they are skipped too.
  const skip = 'PRE, CODE, SCRIPT, STYLE, TEXTAREA, MJX-CONTAINER, KBD, SAMP, .highlight, .cell_output, '
    + '#search-results';
  const root = document.querySelector('main') || document.body;
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const out = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || el.closest(skip) || !el.getClientRects().length) continue;
    out.push(n.nodeValue);
  }
  return out.join(' ');
}"""


@contextlib.contextmanager
def _visit(browser, url: str, *, wait_for_math: bool = True, lands_on: str | None = None) -> Iterator[Visit]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
    page = context.new_page()
    visit = Visit(page)

    def route(r) -> None:
        parts = urllib.parse.urlsplit(r.request.url)
        if parts.scheme in {"data", "blob", "about"} or parts.hostname in _LOCAL_HOSTS:
            r.continue_()
        else:
            visit.remote_requests.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page.on("console", lambda m: visit.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: visit.console_errors.append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: visit.failed.append(f"{r.url} ({r.failure})"))
    page.on("response", lambda r: visit.failed.append(f"{r.url} (HTTP {r.status})") if r.status >= 400 else None)
    try:
        page.goto(url, wait_until="load")
        if lands_on:  # a redirect: wait for the page it leads to
            page.wait_for_url(re.compile(re.escape(lands_on)), wait_until="load")
        if wait_for_math:
            page.evaluate(_MATHJAX_DONE)
        page.evaluate("async () => { await document.fonts.ready; }")  # web fonts, MathJax's included
        yield visit
    finally:
        context.close()


def _check_page(visit: Visit, name: str) -> None:
    page = visit.page
    assert not visit.remote_requests, f"{name} requested other hosts: {visit.remote_requests}"
    failed = [f for f in visit.failed if not any(r in f for r in visit.remote_requests)]
    assert not failed, f"{name}: requests failed: {failed}"
    assert not visit.console_errors, f"{name}: console errors: {visit.console_errors}"

    # Math: every math node typeset, no TeX error, no raw delimiters left in the prose.
    n_math = page.locator(".math").count()
    n_typeset = page.locator("mjx-container").count()
    if n_math:
        assert n_typeset >= n_math, f"{name}: {n_math} math nodes but {n_typeset} typeset by MathJax"
    assert page.locator("mjx-merror").count() == 0, f"{name}: MathJax reports a TeX error"
    prose = page.evaluate(_PROSE_TEXT)
    for raw in ("$$", "\\(", "\\)", "\\[", "\\]", "\\begin{", "\\frac"):
        assert raw not in prose, f"{name}: raw TeX {raw!r} left in the text: ...{_around(prose, raw)}..."

    # Images: every one decoded with a real size.
    for img in page.evaluate(_IMAGES_DONE):
        assert img["ok"] and img["w"] > 0, f"{name}: image did not load: {img['src']}"

    # Code: a copy button on every code block (sphinx-copybutton).
    n_code = page.locator("div.highlight pre").count()
    if n_code:
        n_buttons = page.locator("button.copybtn").count()
        assert n_buttons >= n_code, f"{name}: {n_code} code blocks but {n_buttons} copy buttons"


def _around(text: str, needle: str, width: int = 60) -> str:
    i = text.find(needle)
    return text[max(0, i - width) : i + width]


def test_the_browser_checks_can_fail(browser, tmp_path: pathlib.Path) -> None:
    """A page that breaks every rule: the harness sees the remote load, and the page checks reject it."""
    (tmp_path / "bad.html").write_text(
        "<html><body><main><p>Raw math $$x^2$$ here.</p>"
        '<script src="https://cdn.example.org/lib.js"></script><img src="missing.png">'
        "<script>console.error('boom')</script></main></body></html>",
        encoding="utf-8",
    )
    with _serve(tmp_path) as url, _visit(browser, url + "bad.html") as visit:
        assert visit.remote_requests == ["https://cdn.example.org/lib.js"]
        assert visit.console_errors and any("missing.png" in f for f in visit.failed)
        visit.remote_requests.clear()
        visit.console_errors.clear()
        visit.failed.clear()
        with pytest.raises(AssertionError, match="raw TeX"):
            _check_page(visit, "bad.html")


@functools.cache  # once per worker, not once per page
def _screenshot_pages(built_book) -> dict[str, str]:
    """Three representative pages: the home page, the chapter with the most math, the bibliography."""

    def math_count(docname: str) -> int:
        return (built_book.html / (docname + ".html")).read_text(encoding="utf-8").count('class="math')

    chapter = max(NOTEBOOKS or DOCNAMES, key=math_count)
    return {TOC_ROOT + ".html": "home", chapter + ".html": "chapter", BIBLIOGRAPHY: "bibliography"}


@pytest.mark.parametrize("path", PAGES + ZH_PAGES)
def test_page_works_offline_and_passes_the_axe_audit(built_book, browser, server: str, axe, path: str) -> None:
    """One visit per page of both editions: it loads with nothing from another host and no error, and passes
    the axe-core audit (see _audit_page and ZH_AUDIT_PAGES; the audit comes last, since it adds a style to the
    page)."""
    zh = path.startswith(ZH)
    page_path = path[len(ZH) :] if zh else path
    # index.html redirects to the root page
    lands_on = (ZH if zh else "") + TOC_ROOT + ".html" if page_path == "index.html" else None
    with _visit(browser, server + path, lands_on=lands_on) as visit:
        _check_page(visit, path)
        assert visit.page.locator("img.logo__image").count() >= 1, f"{path}: no logo"
        assert visit.page.locator('link[rel="icon"], link[rel="shortcut icon"]').count() >= 1, "no favicon"
        lang = visit.page.evaluate("document.documentElement.lang")
        assert lang == ("zh-CN" if zh else "en"), f"{path}: <html lang={lang!r}>"
        if page_path.endswith(".html") and page_path[:-5] in DOCNAMES:
            # The language switch leads to the same page in the other edition.
            href = visit.page.locator("a.language-switch").get_attribute("href")
            other = urllib.parse.urljoin(visit.page.url, href)
            assert other == server + (page_path if zh else ZH + page_path), f"{path}: switch goes to {other}"
        if page_path.endswith(".html") and page_path[:-5] in NOTEBOOKS:
            launch = visit.page.locator('a[href*="mybinder.org"], a[href*="colab.research.google.com"]')
            assert launch.count() >= 2, f"{path}: launch buttons missing"
        label = None if zh else _screenshot_pages(built_book).get(path)
        if label:  # for a human look (the README says where they are)
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            visit.page.screenshot(path=str(SCREENSHOTS / f"{label}.png"))
            assert (SCREENSHOTS / f"{label}.png").stat().st_size > 10_000, f"{label}.png looks empty"
        # index.html only redirects to the root page, audited itself
        if page_path != "index.html" and (not zh or path in ZH_AUDIT_PAGES):
            _audit_page(axe, visit.page, path, colours=path in COLOUR_PAGES)


def test_search_finds_attention(browser, server: str) -> None:
    with _visit(browser, server + "search.html?q=attention", wait_for_math=False) as visit:
        results = visit.page.locator("#search-results ul.search li")
        results.first.wait_for(timeout=20_000)
        assert results.count() > 0
        _check_page(visit, "search.html?q=attention")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        visit.page.screenshot(path=str(SCREENSHOTS / "search-attention.png"))


def _page_with(built_book, needle: str) -> str | None:
    for docname in DOCNAMES:
        if needle in (built_book.html / (docname + ".html")).read_text(encoding="utf-8"):
            return docname + ".html"
    return None


def platform_fonts(page, selector: str) -> list[dict]:
    """The fonts the renderer actually drew the text of the first element matching ``selector`` with."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    doc = cdp.send("DOM.getDocument", {"depth": -1})
    node = cdp.send("DOM.querySelector", {"nodeId": doc["root"]["nodeId"], "selector": selector})
    return cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node["nodeId"]})["fonts"]


@pytest.mark.parametrize("edition", ["", ZH])
def test_chinese_prose_renders_with_the_bundled_font(built_book, browser, server: str, edition: str) -> None:
    path = edition + (_page_with(built_book, "注意力") or TOC_ROOT + ".html")
    with _visit(browser, server + path) as visit:
        page = visit.page
        # Mark the first element of the prose whose own text holds Chinese characters.
        found = page.evaluate(
            """() => {
              const walker = document.createTreeWalker(document.querySelector('main'), NodeFilter.SHOW_TEXT);
              for (let n = walker.nextNode(); n; n = walker.nextNode()) {
                const el = n.parentElement;
                if (/[\\u4e00-\\u9fff]/.test(n.nodeValue) && !el.closest('pre, code') && el.getClientRects().length) {
                  el.setAttribute('data-cjk-probe', '1'); return n.nodeValue.trim();
                }
              }
              return null;
            }"""
        )
        assert found, f"{path}: no visible Chinese text to check"
        family = page.evaluate("() => getComputedStyle(document.querySelector('[data-cjk-probe]')).fontFamily")
        assert CJK_WEBFONT_FAMILY in family, f"the prose font stack has no CJK font: {family}"
        loaded = page.evaluate(
            f"""async () => {{
              await document.fonts.load('16px "{CJK_WEBFONT_FAMILY}"', '我爱');
              await document.fonts.ready;
              return document.fonts.check('16px "{CJK_WEBFONT_FAMILY}"', '我爱');
            }}"""
        )
        assert loaded, "the CJK web font did not load"
        fonts = platform_fonts(page, "[data-cjk-probe]")
        drawn = {f["familyName"] for f in fonts if f.get("isCustomFont")}
        assert any(CJK_SOURCE_FAMILY in f for f in drawn), f"{found!r} was drawn with {fonts}"
        _check_page(visit, path)


# --------------------------------------------------------------------------------------------------
# Exercises: solutions open where they are, hints are readable, citations are the bibliography's
# --------------------------------------------------------------------------------------------------

EXERCISE_PAGE = "book/03_attention.html"  # six exercises: fix, write, predict and choose


@pytest.mark.parametrize("edition", ["", ZH])
def test_clicking_a_solutions_title_opens_it_where_it_is(browser, server: str, edition: str) -> None:
    """A dropdown solution opens when its title is clicked anywhere, the words "Exercise 3.1 (...)" included,
    and the page stays where it is (the title no longer links back to the exercise above it). On the same
    page, the checks' ✅ and ❌ are drawn (_check_marks_are_drawn)."""
    with _visit(browser, server + edition + EXERCISE_PAGE) as visit:
        page = visit.page
        solutions = page.locator(".solution.dropdown")
        assert solutions.count() >= 4
        assert page.locator(".solution.dropdown > .admonition-title a").count() == 0, "a solution's title links away"
        for i in (0, 2):
            solution, body = solutions.nth(i), solutions.nth(i).locator("section").first
            assert not body.is_visible(), "a solution is open before it is clicked"
            title = solution.locator(".admonition-title")
            title.scroll_into_view_if_needed()
            before = page.evaluate("() => [location.href, window.scrollY]")
            box = title.bounding_box()
            page.mouse.click(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)  # on "Exercise 3.x (...)"
            body.wait_for(state="visible", timeout=5_000)
            after = page.evaluate("() => [location.href, window.scrollY]")
            assert after[0] == before[0] and abs(after[1] - before[1]) < 5, f"the page moved: {before} -> {after}"
        _check_page(visit, edition + EXERCISE_PAGE)
        _check_marks_are_drawn(page, edition + EXERCISE_PAGE)


@pytest.mark.parametrize("width", [1280, 400])
def test_long_hint_lines_wrap_instead_of_being_cut_off(browser, server: str, width: int) -> None:
    """A check's verdict and hint (the outputs of exercise and solution cells) wrap at the output box's
    width, on a wide screen and on a phone: no line of them is hidden past the right edge."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        page.goto(server + EXERCISE_PAGE, wait_until="load")
        boxes = page.evaluate(
            """() => Array.from(document.querySelectorAll('.cell.tag_exercise .cell_output pre'))
                 .map(p => ({text: p.textContent.slice(0, 60), scroll: p.scrollWidth, client: p.clientWidth,
                             hint: p.textContent.includes('Hint:')}))"""
        )
        assert sum(b["hint"] for b in boxes) >= 2, boxes  # the two fix exercises print hints
        cut = [b for b in boxes if b["scroll"] > b["client"] + 1]
        assert not cut, f"at {width}px these outputs are cut off: {cut}"
    finally:
        context.close()


def test_citations_in_the_chapters_are_the_bibliographys(built_book) -> None:
    """The chapters write citations as links JupyterLab can show ([(Vaswani et al., 2017)](#cite:...),
    book/_ext/citations.py); the book reads them as {cite} roles: every one becomes a link to its entry of
    the bibliography, and no link to "#cite:" is left on any page."""
    for docname in NOTEBOOKS:
        for edition in ("", ZH):
            page_html = (built_book.html / (edition + docname + ".html")).read_text(encoding="utf-8")
            assert "#cite:" not in page_html, f"{edition}{docname}: a citation link was not read as a citation"
    page_html = (built_book.html / EXERCISE_PAGE).read_text(encoding="utf-8")
    cited = re.findall(r'<a class="reference internal" href="appendix/bibliography\.html#[^"]+"', page_html)
    assert len(cited) >= 10, f"{EXERCISE_PAGE}: {len(cited)} citations link to the bibliography"


# --------------------------------------------------------------------------------------------------
# Code as a reader needs it (issue 31): no plumbing, each solution once, emoji drawn, nothing scrolls
# --------------------------------------------------------------------------------------------------


class _Cells(html.parser.HTMLParser):
    """The code cells of a page (``div.cell``): their classes, the text of their input and of their outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[dict] = []
        self._divs: list[str] = []  # the role of each open <div>: "cell", "input", "output" or ""
        self._in_pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "div":
            role = "cell" if "cell" in classes else "input" if "cell_input" in classes else ""
            role = "output" if "cell_output" in classes else role
            if role == "cell":
                self.cells.append({"classes": classes, "input": "", "outputs": ""})
            self._divs.append(role)
        elif tag == "pre":
            self._in_pre += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "div" and self._divs:
            self._divs.pop()
        elif tag == "pre":
            self._in_pre -= 1

    def handle_data(self, data: str) -> None:
        if self._in_pre and self.cells:
            part = next((r for r in reversed(self._divs) if r in ("input", "output")), None)
            if part:
                self.cells[-1]["input" if part == "input" else "outputs"] += data


def _code_cells(page_html: str) -> list[dict]:
    parser = _Cells()
    parser.feed(page_html)
    return parser.cells


def _nbtools():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import nbtools
    finally:
        sys.path.pop(0)
    return nbtools


_PLUMBING = re.compile(r"NBVAL_|#\s*fmt:|#\s*noqa|Colab / Binder: install|git\+https://")


def test_the_cell_parser_finds_plumbing() -> None:
    """The checks below can fail: the parser reads a cell's input apart from its output, and sees a marker."""
    page = (
        '<div class="cell tag_x docutils container"><div class="cell_input docutils container">'
        '<div class="highlight"><pre><span class="c1"># NBVAL_IGNORE_OUTPUT</span>\nx = 1</pre></div></div>'
        '<div class="cell_output docutils container"><div class="highlight"><pre>✅ PASS</pre></div></div></div>'
    )
    (cell,) = _code_cells(page)
    assert cell == {"classes": ["cell", "tag_x", "docutils", "container"], "input": "# NBVAL_IGNORE_OUTPUT\nx = 1",
                    "outputs": "✅ PASS"}
    assert _PLUMBING.search(cell["input"])


@pytest.mark.parametrize("edition", ["", ZH])
def test_code_cells_show_no_test_or_install_plumbing(built_book, edition: str) -> None:
    """nbval's markers, a formatter's switches and the install snippet stay in the notebooks and out of the
    book (book/_ext/code_cells.py); each chapter's first code cell starts where the snippet ends."""
    nbtools, marked = _nbtools(), 0
    for docname in NOTEBOOKS:
        import json

        nb = json.loads(_source(docname).read_text(encoding="utf-8"))
        sources = [nbtools.source(c) for c in nb["cells"] if c["cell_type"] == "code"]
        marked += sum("NBVAL_" in s for s in sources)
        assert sources[0].startswith(nbtools.INSTALL_SNIPPET), f"{docname}: the install snippet is not first"
        cells = _code_cells((built_book.html / (edition + docname + ".html")).read_text(encoding="utf-8"))
        shown = [c["input"] for c in cells if c["input"].strip()]
        plumbing = [m.group(0) for text in shown for m in [_PLUMBING.search(text)] if m]
        assert not plumbing, f"{edition}{docname}: code cells show {plumbing}"
        after = sources[0][len(nbtools.INSTALL_SNIPPET) :].strip().splitlines()[0]
        assert shown[0].strip().splitlines()[0] == after, f"{edition}{docname}: first cell {shown[0][:80]!r}"
    assert marked >= 10, f"only {marked} code cells carry an nbval marker: is the check above looking?"


@pytest.mark.parametrize("edition", ["", ZH])
def test_each_exercise_shows_its_solution_once(built_book, edition: str) -> None:
    """Every exercise is followed by exactly one solution, its dropdown; the notebooks' solution code cells (the
    same answer again, checked by nbval, with a ✅ PASS under it) are not in the book."""
    exercises = 0
    for docname in NOTEBOOKS:
        page_html = (built_book.html / (edition + docname + ".html")).read_text(encoding="utf-8")
        order = re.findall(r'<div class="(exercise|solution)( dropdown)? admonition"', page_html)
        kinds = "".join("S" if kind == "solution" else "E" for kind, _ in order)
        assert re.fullmatch(r"(ES)*", kinds), f"{edition}{docname}: exercises and solutions come as {kinds}"
        assert all(dropdown for kind, dropdown in order if kind == "solution"), f"{docname}: a solution is open"
        cells = _code_cells(page_html)
        solution_cells = [c["input"][:60] for c in cells if "tag_solution" in c["classes"]]
        solution_cells += [c["input"][:60] for c in cells if c["input"].startswith("# Solution of")]
        assert not solution_cells, f"{edition}{docname}: solution code cells shown besides the dropdown"
        exercises += kinds.count("E")
    assert exercises >= 50, f"only {exercises} exercises in the book"


# Emoji: the supplementary planes' pictographs and the BMP characters that default to emoji presentation
# (Unicode's Emoji_Presentation property), or any character asked to be drawn as one (followed by U+FE0F).
_EMOJI = re.compile(
    "[\U0001f000-\U0001faff]|[\u231a\u231b\u23e9-\u23ec\u23f0\u23f3\u25fd\u25fe\u2614\u2615\u2648-\u2653\u267f"
    "\u2693\u26a1\u26aa\u26ab\u26bd\u26be\u26c4\u26c5\u26ce\u26d4\u26ea\u26f2\u26f3\u26f5\u26fa\u26fd\u2705"
    "\u270a\u270b\u2728\u274c\u274e\u2753-\u2755\u2757\u2795-\u2797\u27b0\u27bf\u2b1b\u2b1c\u2b50\u2b55]|.\ufe0f"
)


@pytest.mark.parametrize("edition", ["", ZH])
def test_every_emoji_of_the_book_has_a_fallback_glyph(built_book, edition: str) -> None:
    """Each emoji a page shows is in the fallback font (book/_ext/offline_assets.py), and the stylesheet's
    unicode-range for that font names exactly the characters the font has."""
    html_dir = built_book.html / edition if edition else built_book.html
    used: set[str] = set()
    for path in _html_files(html_dir):
        if edition or path.relative_to(html_dir).parts[0] != ZH.rstrip("/"):
            used |= {m[0] for m in _EMOJI.findall(path.read_text(encoding="utf-8"))}
    covered = _font_characters(html_dir / "_static" / "fonts" / "emoji-fallback.woff")
    assert {"✅", "❌"} <= used, f"the checks' ✅ and ❌ are not in the pages: {used}"
    assert not used - covered, f"emoji without a fallback glyph: {sorted(used - covered)}"
    css = (html_dir / "_static" / "custom.css").read_text(encoding="utf-8")
    rule = re.search(r'@font-face\s*{[^}]*"Course Symbols"[^}]*unicode-range:([^;]*);', css)
    ranges = {chr(int(u, 16)) for u in re.findall(r"U\+([0-9A-F]+)", rule.group(1))}
    assert ranges == covered, f"custom.css unicode-range {sorted(ranges)} against the font's {sorted(covered)}"


_GLYPH_PROBE = """([text, within]) => {
  const walker = document.createTreeWalker(document.querySelector(within), NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.nodeValue.includes(text) && n.parentElement.getClientRects().length) {
      const span = document.createElement('span');  // just the emoji, so that its font is the only one
      span.id = 'glyph-probe'; span.textContent = text;
      n.parentElement.insertBefore(span, n); return n.parentElement.closest('pre') ? 'code' : 'prose';
    }
  }
  return null;
}"""


def _drawn_with(page, text: str, within: str = "main") -> tuple[str | None, list[dict]]:
    """Where ``text`` first shows inside ``within`` (code or prose), and the fonts the renderer drew it with."""
    where = page.evaluate(_GLYPH_PROBE, [text, within])
    if where is None:
        return None, []
    page.evaluate("async () => { await document.fonts.ready; }")
    fonts = platform_fonts(page, "#glyph-probe")
    page.evaluate("() => document.getElementById('glyph-probe').remove()")
    return where, fonts


def _is_a_real_glyph(fonts: list[dict]) -> bool:
    """Drawn by the book's fallback font (a web font) or by an emoji font of the machine, not as a box."""
    return bool(fonts) and all(f.get("isCustomFont") or "emoji" in f["familyName"].lower() for f in fonts)


def _check_marks_are_drawn(page, name: str) -> None:
    """✅ and ❌ in prose and in the checks' outputs are drawn with a glyph, on a machine with no emoji font too
    (the test machine has none: then the fallback font draws them). A screenshot goes to _build/screenshots/.
    Called from the visit of EXERCISE_PAGE in each edition (test_clicking_a_solutions_title_opens_it_where_it_is)."""
    # the exercises' introduction ("prints ✅ PASS or ❌ FAIL"), and a check's ❌ FAIL under an exercise
    probes = (("✅", "main", "prose"), ("❌", "main", "prose"), ("❌", "div.tag_exercise div.cell_output", "code"))
    for text, within, kind in probes:
        where, fonts = _drawn_with(page, text, within)
        assert where == kind, f"{name}: no visible {text} in {kind} ({where})"
        assert _is_a_real_glyph(fonts), f"{name}: {text} ({where}) drawn with {fonts}"
    output = page.locator("div.cell.tag_exercise div.cell_output").first
    output.scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    output.screenshot(path=str(SCREENSHOTS / f"check-marks{'-zh' if name.startswith(ZH) else ''}.png"))


# Chapters whose code lines are held to 92 columns, so that none of them wraps at 1280 px (issue 31). The others
# still have longer lines, which wrap at the code box's edge (custom.css) instead of scrolling; a chapter joins
# this set once its code is reformatted.
_HELD_TO_92_COLUMNS = {"book/12_family", "book/13_finetuning", "book/14_modern"}


def _columns(line: str) -> int:
    """The columns a line of code takes in a monospace font: a wide (CJK) character takes two."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)
# Every code cell's input and output of a page at a laptop's width: what it shows, what it would need, and
# how many columns of code its box holds (one line of 92 "x", measured in the box).
_CODE_BOXES = """() => {
  const out = [];
  for (const pre of document.querySelectorAll('div.cell pre')) {
    if (!pre.getClientRects().length) continue;  // in a collapsed cell
    const style = getComputedStyle(pre);
    const inner = pre.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const probe = document.createElement('span');  // a line of its own, unwrapped, in the box's font
    probe.style.cssText = 'display: inline-block; white-space: pre';
    probe.textContent = 'x'.repeat(92);
    pre.appendChild(probe);
    const columns = 92 * inner / probe.getBoundingClientRect().width;
    probe.remove();
    out.push({text: pre.textContent.slice(0, 50), scroll: pre.scrollWidth, client: pre.clientWidth,
              columns: Math.floor(columns + 1e-6)});
  }
  return out;
}"""


@pytest.mark.parametrize("docname", NOTEBOOKS)
def test_code_cells_fit_at_laptop_width(built_book, browser, server: str, docname: str) -> None:
    """At 1280 px, with both sidebars shown, a code cell holds 92 columns on a line, and no code cell's input
    or output needs scrolling sideways: a longer line wraps at the box's edge (custom.css). In the chapters
    of _HELD_TO_92_COLUMNS no line of code is longer, so none wraps."""
    if docname in _HELD_TO_92_COLUMNS:
        cells = _code_cells((built_book.html / (docname + ".html")).read_text(encoding="utf-8"))
        long = [line for c in cells for line in c["input"].splitlines() if _columns(line) > 92]
        assert not long, f"{docname}: {len(long)} lines of code over 92 columns, e.g. {long[0]!r}"
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.route("**/mathjax/**", lambda r: r.abort())  # the code's layout does not wait for the maths
        page.goto(server + docname + ".html", wait_until="load")
        page.evaluate("async () => { await document.fonts.ready; }")
        boxes = page.evaluate(_CODE_BOXES)
        assert len(boxes) >= 5, f"{docname}: only {len(boxes)} code boxes"
        narrow = {b["columns"] for b in boxes if b["columns"] < 92}
        assert not narrow, f"{docname}: code boxes hold only {sorted(narrow)} columns at 1280 px"
        scrolled = [b for b in boxes if b["scroll"] > b["client"] + 1]
        assert not scrolled, f"{docname}: {len(scrolled)} code boxes scroll sideways at 1280 px: {scrolled[:3]}"
    finally:
        context.close()


# --------------------------------------------------------------------------------------------------
# Accessibility (issue 15): alt text, axe-core audit in light and dark mode, keyboard, bold CJK
# --------------------------------------------------------------------------------------------------

_IMAGE_PATH = re.compile(r"(^|[/\\])[\w.-]+\.(png|jpe?g|gif|svg|webp)$|_images/", re.I)


class _Images(html.parser.HTMLParser):
    """Collect the attributes of every <img> of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images.append(dict(attrs))


def alt_text_problems(page_html: str) -> list[str]:
    """What is wrong with the alt texts of a page: a missing alt, an empty one on an image that is not
    marked decorative (role="presentation"/"none" or aria-hidden="true"), or one that is a file path."""
    parser = _Images()
    parser.feed(page_html)
    problems = []
    for img in parser.images:
        src, alt = img.get("src", "?"), img.get("alt")
        decorative = img.get("role") in {"presentation", "none"} or img.get("aria-hidden") == "true"
        if alt is None:
            problems.append(f"{src}: no alt attribute")
        elif not alt.strip() and not decorative:
            problems.append(f"{src}: empty alt text, and the image is not marked decorative")
        elif _IMAGE_PATH.search(alt.strip()):
            problems.append(f"{src}: the alt text is a file path ({alt!r})")
    return problems


def test_alt_text_check_can_fail() -> None:
    page = (
        '<img src="../_images/a.png" alt="../_images/a.png"><img src="b.png"><img src="c.png" alt="">'
        '<img src="d.png" alt="" role="presentation"><img src="e.png" alt="Bar chart: weights of one query">'
    )
    problems = alt_text_problems(page)
    assert len(problems) == 3 and "file path" in problems[0] and "no alt" in problems[1] and "empty" in problems[2]


def test_every_image_has_a_meaningful_alt_text(built_book) -> None:
    problems = []
    for path in _html_files(built_book.html):
        rel = path.relative_to(built_book.html)
        problems += [f"{rel}: {p}" for p in alt_text_problems(path.read_text(encoding="utf-8"))]
    assert not problems, "images without a meaningful alt text:\n" + "\n".join(problems)


@pytest.mark.parametrize("docname", NOTEBOOKS or [pytest.param(None, marks=pytest.mark.skip("no notebook"))])
def test_every_figure_cell_has_alt_text_in_its_metadata(docname: str) -> None:
    """The alt text lives in the cell metadata (mystnb.image.alt), so `make notebooks` keeps it."""
    import json

    nb = json.loads(_source(docname).read_text(encoding="utf-8"))
    missing = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        if any("image/png" in out.get("data", {}) for out in cell.get("outputs", [])):
            alt = cell.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt", "")
            if len(alt.strip()) < 20:
                missing.append(f"cell {i} ({''.join(cell['source'])[:40]!r})")
    assert not missing, f"{docname}: figure cells without a written alt text: {missing}"


# axe-core rules: WCAG 2.0-2.2 A and AA, plus the experimental ones among them (label-content-name-mismatch,
# WCAG 2.5.3, is experimental in axe and off unless asked for). Only violations are reported in detail
# (resultTypes): listing every passing node of a page with thousands of MathJax and code elements more than
# doubles the time of an audit.
_WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22a", "wcag22aa", "experimental"]
# The tag "experimental" also brings in the experimental rules that are no WCAG criterion at all (axe's
# best-practice review items): they are switched off, and they were a third of an audit's time (hidden-content
# visits every element). test_the_axe_audit_can_fail checks that this list is exactly those rules.
_NOT_WCAG = ["focus-order-semantics", "hidden-content"]
_AXE_OPTIONS = {
    "runOnly": {"type": "tag", "values": _WCAG_TAGS},
    "rules": {rule: {"enabled": False} for rule in _NOT_WCAG},
    "resultTypes": ["violations"],
}
# What changes between the light and the dark scheme is colour: the dark audit runs the colour rules.
_AXE_COLOUR_RULES = ["color-contrast", "link-in-text-block"]
_AXE_COLOUR_OPTIONS = {"runOnly": {"type": "rule", "values": _AXE_COLOUR_RULES}, "resultTypes": ["violations"]}
# The Chinese pages share the English pages' stylesheets, so their colours are audited on the English pages.
_AXE_NO_COLOUR_OPTIONS = {
    **_AXE_OPTIONS,
    "rules": {rule: {"enabled": False} for rule in _NOT_WCAG + _AXE_COLOUR_RULES},
}
# color-contrast is most of an audit's time, and most of that goes to highlighted code: ten thousand spans on
# a long page, in a few dozen colours. A span's contrast depends only on the kind of block it is in (cell
# input, cell output, prose) and on its classes and those of the spans around it (Pygments' token classes, a
# highlighted line, ANSI colours), so the colour audit reads the page without its code blocks, then one span
# of each such kind plus the smallest block of each kind (its plain text), visible ones -- marked by
# _MARK_CODE_SAMPLES.
_CODE = "div.highlight"
_CODE_SAMPLE = "[data-axe-code-sample]"
_MARK_CODE_SAMPLES = """() => {
  const seen = new Set(), smallest = {};
  const visible = (e) => e.getClientRects().length > 0;  // not inside a collapsed cell: axe skips hidden text
  for (const block of document.querySelectorAll('div.highlight')) {
    if (!visible(block)) continue;
    const kind = block.closest('.cell_input') ? 'input' : block.closest('.cell_output') ? 'output' : 'prose';
    const size = block.querySelectorAll('*').length;
    if (!(kind in smallest) || size < smallest[kind].size) smallest[kind] = {size, block};
    for (const span of block.querySelectorAll('span')) {
      if (!visible(span)) continue;
      const chain = [];
      for (let e = span; e !== block; e = e.parentElement) if (e.tagName === 'SPAN') chain.push(e.className);
      const key = kind + '|' + chain.join('<');
      if (!seen.has(key)) { seen.add(key); span.setAttribute('data-axe-code-sample', ''); }
    }
  }
  for (const {block} of Object.values(smallest)) block.setAttribute('data-axe-code-sample', '');
  return seen.size;
}"""
AXE_REPORT = ROOT / "_build" / "axe-report.txt"


@pytest.fixture(scope="module")
def axe():
    module = pytest.importorskip("axe_playwright_python.sync_playwright")
    AXE_REPORT.parent.mkdir(parents=True, exist_ok=True)
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # under `make test` (two workers) the Makefile empties it
        AXE_REPORT.write_text("", encoding="utf-8")
    return module.Axe()


def _audit(axe, page, name: str, options: dict = _AXE_OPTIONS, context: dict | None = None) -> None:
    """Run axe-core on the open page (or the ``context`` part of it): no serious or critical violation; the
    rest goes to the report."""
    page.add_style_tag(content=_NO_TRANSITIONS)
    result = axe.run(page, context=context, options=options).response
    severe, other = [], []
    for v in result["violations"]:
        line = f"{name}: {v['id']} ({v['impact']}, {len(v['nodes'])} nodes): " + "; ".join(
            n["html"][:100] for n in v["nodes"][:3]
        )
        (severe if v["impact"] in {"serious", "critical"} else other).append(line)
    with AXE_REPORT.open("a", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in severe + other)
    for line in other:
        print("axe, not serious:", line)  # listed in the test output (-rA) and in _build/axe-report.txt
    assert not severe, "axe-core found serious or critical WCAG violations:\n" + "\n".join(severe)


_NO_TRANSITIONS = "*, *::before, *::after { transition: none !important; animation: none !important; }"
_SET_SCHEME = """scheme => {  // what the theme's own light/dark button does
  document.documentElement.dataset.mode = scheme;
  document.documentElement.dataset.theme = scheme;
  return getComputedStyle(document.body).backgroundColor;
}"""


# Outside code the same holds: whether a text passes color-contrast depends on its computed colour, font size and
# weight (large text needs 3:1, not 4.5:1), text shadow, and the backgrounds and opacities of the elements it
# sits in; whether a link passes link-in-text-block, on its colour, its underline and the colour of the text
# around it. So the colour audit reads one element of each such combination, the first visible one
# (_MARK_COLOUR_SAMPLES): a few dozen on a page of thousands of paragraphs, table cells and links.
_COLOUR_SAMPLE = "[data-axe-colour-sample]"
_MARK_COLOUR_SAMPLES = """() => {
  const seen = new Set(), chains = new Map();
  const backgrounds = (el) => {  // the backgrounds and opacities from el up to the root, cached per element
    if (!el) return '';
    if (chains.has(el)) return chains.get(el);
    const s = getComputedStyle(el);
    let own = '';
    if (s.backgroundColor !== 'rgba(0, 0, 0, 0)' || s.backgroundImage !== 'none')
      own += s.backgroundColor + ' ' + s.backgroundImage + ';';
    if (s.opacity !== '1') own += 'opacity ' + s.opacity + ';';
    const chain = own + '<' + backgrounds(el.parentElement);
    chains.set(el, chain);
    return chain;
  };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let t = walker.nextNode(); t; t = walker.nextNode()) {
    const el = t.parentElement;
    if (!t.nodeValue.trim() || !el || el.closest('div.highlight') || !el.getClientRects().length) continue;
    const s = getComputedStyle(el), link = el.closest('a');
    const around = link && link.parentElement ? getComputedStyle(link.parentElement).color : '';
    const key = [s.color, s.fontSize, s.fontWeight, s.textShadow, backgrounds(el),
                 link ? 'link ' + getComputedStyle(link).textDecorationLine + ' in ' + around : ''].join('|');
    if (!seen.has(key)) { seen.add(key); el.setAttribute('data-axe-colour-sample', ''); }
  }
  return seen.size;
}"""


def _audit_colours(axe, page, name: str) -> None:
    """The colour rules on one element of each kind (_MARK_COLOUR_SAMPLES) and the code blocks' samples
    (_MARK_CODE_SAMPLES), in one run: axe builds its tree of the whole page on every run, about 1.5 s on a long
    page. The samples are marked again for each scheme: the dark one has other colours, maybe other kinds."""
    page.evaluate("() => document.querySelectorAll('[data-axe-colour-sample]').forEach("
                  "e => e.removeAttribute('data-axe-colour-sample'))")
    page.evaluate(_MARK_CODE_SAMPLES)
    page.evaluate(_MARK_COLOUR_SAMPLES)
    _audit(axe, page, name, _AXE_COLOUR_OPTIONS, {"include": [[_COLOUR_SAMPLE], [_CODE_SAMPLE]], "exclude": [[_CODE]]})


def _audit_page(axe, page, path: str, *, colours: bool) -> None:
    """Every page: all the WCAG rules but the colour ones, in the light scheme. With ``colours`` (the English
    pages of ``COLOUR_PAGES``; the others share their stylesheets): the colour rules in the light scheme, then
    again after switching the page to the dark scheme in place."""
    assert page.evaluate("document.documentElement.dataset.theme") == "light", f"{path} did not open in light"
    _audit(axe, page, f"{path} [light]", _AXE_NO_COLOUR_OPTIONS)
    if colours:
        _audit_colours(axe, page, f"{path} [light]")
        # _audit has switched transitions off: the colours change at once, not over a transition
        background = page.evaluate(_SET_SCHEME, "dark")
        red, green, blue = (int(c) for c in re.findall(r"\d+", background)[:3])
        assert max(red, green, blue) < 80, f"{path}: the dark scheme did not apply (background {background})"
        _audit_colours(axe, page, f"{path} [dark]")


def test_the_axe_audit_can_fail(browser, axe, tmp_path: pathlib.Path) -> None:
    (tmp_path / "bad.html").write_text(
        '<html><body><main><img src="x.png"><button aria-label="Close">Open menu</button>'
        '<p style="color:#bbb;background:#fff">faint text</p>'
        + "<p>ordinary text</p>" * 50
        + '<p style="color:#767676">grey on white</p>'  # 4.54:1, passes
        + '<div style="background:#ccc"><p style="color:#767676">grey on grey</p></div>'  # the same grey fails here
        + '<p>Some text around <a href="#" style="color:#222;text-decoration:none">a link like the text</a> in a '
        "paragraph of several words.</p>"
        '<div class="cell_input"><div class="highlight" style="background:#fff"><pre><span class="k">def</span> '
        '<span class="n" style="color:#ccc">faint_name</span>(): <span class="k">pass</span></pre></div></div>'
        "</main></body></html>",
        encoding="utf-8",
    )
    with _serve(tmp_path) as url:
        context = browser.new_context()
        try:
            page = context.new_page()
            page.goto(url + "bad.html")
            with pytest.raises(AssertionError, match="image-alt|html-has-lang|label-content-name-mismatch"):
                _audit(axe, page, "bad.html")
            with pytest.raises(AssertionError, match="image-alt") as caught:  # the Chinese pages' rule set
                _audit(axe, page, "bad.html", _AXE_NO_COLOUR_OPTIONS)
            assert "color-contrast" not in str(caught.value)
            with pytest.raises(AssertionError, match="color-contrast"):  # the dark scheme's rule set
                _audit(axe, page, "bad.html", _AXE_COLOUR_OPTIONS)
            # the colour audit leaves the code blocks out but brings back one span of each kind ('k' once, 'n'
            # once) and the smallest block: it finds the faint paragraph and the faint span
            with pytest.raises(AssertionError, match=r"color-contrast .*faint text") as caught:
                _audit(axe, page, "bad.html", _AXE_COLOUR_OPTIONS, {"exclude": [[_CODE]]})
            assert "faint_name" not in str(caught.value)
            # ... and of the rest one element of each colour, size, background and link style: 6 elements of 56
            # with text (a paragraph of each kind, the button, the link), among them the faint paragraph, the grey
            # one on grey (not only the grey one on white) and the link that only its colour, too close to the
            # text's, sets apart
            with pytest.raises(AssertionError) as caught:
                _audit_colours(axe, page, "bad.html")
            found = str(caught.value)
            assert re.search(r"color-contrast \(serious, 3 nodes\).*faint text.*grey on grey.*faint_name", found)
            assert "link-in-text-block" in found and "grey on white" not in found, found
            assert page.locator(_CODE_SAMPLE).count() == 3 and page.evaluate(_MARK_CODE_SAMPLES) == 2
            assert page.locator(_COLOUR_SAMPLE).count() == 6, page.locator(_COLOUR_SAMPLE).count()
            # _NOT_WCAG is what the tag "experimental" adds beyond WCAG in this axe-core
            tagless = page.evaluate(
                f"axe.getRules({_WCAG_TAGS!r}).filter(r => !r.tags.some(t => t.startsWith('wcag'))).map(r => r.ruleId)"
            )
            assert sorted(tagless) == _NOT_WCAG, tagless
        finally:
            context.close()


def _page_with_exercises(built_book) -> str:
    for docname in NOTEBOOKS:
        text = (built_book.html / (docname + ".html")).read_text(encoding="utf-8")
        if "solution" in text and "dropdown" in text and "highlight" in text:
            return docname + ".html"
    pytest.fail("no chapter page has an exercise solution dropdown")


def _tab_to(page, css_class: str, presses: int = 5) -> bool:
    """Press Tab (at most ``presses`` times) until the focused element has ``css_class``; whether it got there."""
    focused = f"document.activeElement.classList.contains('{css_class}')"
    for _ in range(presses):
        if page.evaluate(focused):
            return True
        page.keyboard.press("Tab")
    return page.evaluate(focused)


def test_dropdowns_and_copy_buttons_work_from_the_keyboard(built_book, browser, server: str) -> None:
    path = _page_with_exercises(built_book)
    with _visit(browser, server + path) as visit:
        page = visit.page
        page.context.grant_permissions(["clipboard-read", "clipboard-write"])
        # A solution dropdown: Tab reaches its toggle, Enter opens it, Enter closes it again.
        toggle = page.locator("div.solution.dropdown button.toggle-button, div.dropdown button.toggle-button").first
        toggle.wait_for(state="attached")
        box = toggle.locator("xpath=ancestor::div[contains(@class,'dropdown')][1]")
        page.evaluate("el => { const t = document.createElement('a'); t.href = '#'; t.id = 'kb-start';"
                      " el.parentElement.insertBefore(t, el); t.focus(); }", box.element_handle())
        assert _tab_to(page, "toggle-button"), "Tab never reached the toggle"
        assert "toggle-hidden" in (box.get_attribute("class") or ""), "the solution should start closed"
        page.keyboard.press("Enter")
        page.wait_for_function("el => !el.classList.contains('toggle-hidden')", arg=box.element_handle())
        page.keyboard.press("Enter")
        page.wait_for_function("el => el.classList.contains('toggle-hidden')", arg=box.element_handle())
        # A copy button: reachable with Tab from its code block, Enter copies the code.
        block = page.locator("div.cell div.highlight").first
        page.evaluate("el => { const t = document.createElement('a'); t.href = '#'; t.id = 'kb-code';"
                      " el.insertBefore(t, el.firstChild); t.focus(); }", block.element_handle())
        assert _tab_to(page, "copybtn"), "Tab never reached a copy button"
        page.keyboard.press("Enter")
        copied = page.evaluate("navigator.clipboard.readText()")
        code = block.locator("pre").inner_text()
        assert copied.strip() and copied.strip().splitlines()[0] in code
        # The first code cell, whose install snippet the book leaves out: the button copies what is shown.
        assert copied.strip() == code.strip() and not _PLUMBING.search(copied), copied[:200]


@pytest.mark.parametrize("edition", ["", ZH])
def test_bold_chinese_is_drawn_bold(built_book, browser, server: str, edition: str) -> None:
    """The CJK web font has one weight: it must be declared as 400 so the browser synthesises bold."""
    with _visit(browser, server + edition + TOC_ROOT + ".html") as visit:
        page = visit.page
        page.evaluate(
            """() => { const m = document.querySelector('main');
                 m.insertAdjacentHTML('afterbegin', '<p id="cjk-probe" style="font-size:40px">'
                   + '<span id="cjk-n">注意力机制</span> <strong id="cjk-b">注意力机制</strong></p>'); }"""
        )
        page.evaluate("async () => { await document.fonts.load('bold 40px \"Course CJK\"', '注意力'); }")

        def ink(selector: str) -> int:
            from io import BytesIO

            from PIL import Image

            img = Image.open(BytesIO(page.locator(selector).screenshot())).convert("L")
            return sum(1 for v in img.tobytes() if v < 128)  # mode "L": one byte a pixel

        normal, bold = ink("#cjk-n"), ink("#cjk-b")
        assert bold > 1.15 * normal, f"bold Chinese is not bold: {bold} dark pixels against {normal}"


# --------------------------------------------------------------------------------------------------
# The Chinese edition (issue 14): UI strings, font coverage, search, the language switch
# --------------------------------------------------------------------------------------------------

# English UI strings of the themes and extensions, and what the zh edition must say instead.
_UI_ENGLISH = ("Search this book", "Show code cell", "Hide code cell", "Click to show", "Click to hide",
               "Solution to", ">Exercise ", "Skip to main content", "Contents")
_UI_CHINESE = ("搜索本书", "显示代码", "点击显示", "练习", "解答", "跳转至主要内容", "目录")


def test_the_chinese_edition_has_chinese_ui_strings(built_book) -> None:
    zh = built_book.html / "zh"
    chapter = (zh / (_page_with_exercises(built_book))).read_text(encoding="utf-8")
    visible = re.sub(r"<script.*?</script>|<[^>]+>", " ", chapter, flags=re.S)
    for word in _UI_CHINESE:
        assert word in chapter, f"zh/{_page_with_exercises(built_book)}: no {word!r}"
    english = [w for w in _UI_ENGLISH if w in visible or f"'{w}" in chapter]
    assert not english, f"the zh edition still shows English UI strings: {english}"
    assert 'lang="zh-CN"' in chapter


def _font_characters(font: pathlib.Path) -> set[str]:
    from fontTools.ttLib import TTFont

    return {chr(c) for c in TTFont(str(font)).getBestCmap()}


@pytest.mark.parametrize("edition", ["", ZH])
def test_the_cjk_font_covers_every_chinese_character_of_its_edition(built_book, edition: str) -> None:
    """Each edition subsets the CJK font from its own pages (book/_ext/offline_assets.py): none is missing."""
    cjk = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
    html = built_book.html / edition if edition else built_book.html
    used: set[str] = set()
    for path in _html_files(html):
        if edition or path.relative_to(html).parts[0] != ZH.rstrip("/"):
            used |= set(cjk.findall(path.read_text(encoding="utf-8")))
    covered = _font_characters(html / "_static" / "fonts" / "cjk-subset.woff")
    assert len(used) > (1000 if edition else 100), f"only {len(used)} distinct Chinese characters"
    missing = sorted(used - covered)
    assert not missing, f"{edition or 'English'} edition: characters missing from the CJK font: {''.join(missing)}"


def test_search_finds_chinese_words_in_body_text(built_book, browser, server: str) -> None:
    """jieba segments the zh pages, so the search index has 注意力 as a word of the prose, not only of titles."""
    with _visit(browser, server + ZH + "search.html?q=注意力", wait_for_math=False) as visit:
        results = visit.page.locator("#search-results ul.search li")
        results.first.wait_for(timeout=20_000)
        titles = [t.strip() for t in results.locator("a").all_inner_texts()]
        assert len(titles) >= 5, f"only {titles}"
        assert any("注意力" not in t for t in titles), f"only pages whose title holds 注意力: {titles}"
        _check_page(visit, "zh/search.html?q=注意力")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        visit.page.screenshot(path=str(SCREENSHOTS / "search-zh.png"))


def test_the_language_switch_round_trips(built_book, browser, server: str) -> None:
    start = server + NOTEBOOKS[3] + ".html"
    with _visit(browser, start) as visit:
        page = visit.page
        page.locator("a.language-switch").click()
        page.wait_for_url(server + ZH + NOTEBOOKS[3] + ".html", wait_until="load")
        assert page.evaluate("document.documentElement.lang") == "zh-CN"
        assert page.locator("a.language-switch").inner_text().strip() == "English"
        page.locator("a.language-switch").click()
        page.wait_for_url(start, wait_until="load")
        assert page.evaluate("document.documentElement.lang") == "en"
        assert page.locator("a.language-switch").inner_text().strip() == "中文"
        _check_page(visit, NOTEBOOKS[3] + ".html (after the round trip)")
