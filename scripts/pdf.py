"""The whole book as one PDF per edition, printed by Chromium from the built HTML (issue 33): ``make pdf``.

    python scripts/pdf.py                       # both editions -> _build/pdf/transformers-piece-by-piece{,-zh}.pdf
    python scripts/pdf.py --edition zh          # one edition
    python scripts/pdf.py --pages book/03_attention book/05_positions --out-dir /tmp/x   # a few chapters (the test)

How it works, for each edition (English ``_build/html``, Chinese ``_build/html/zh``; ``make book`` builds them):

1. The book's order and part captions are read from the sidebar of the edition's root page (so the Chinese
   edition gets its translated captions). Each page's ``<article>`` is taken out of its HTML and put, in that
   order, into one document, ``_build/pdf/<name>.html``, after a cover page and a table of contents. Every
   ``id`` gets its page as a prefix, and every link to a page of the book becomes a link inside the document
   (``05_positions.html#rope`` -> ``#book-05_positions--rope``); links to files that are not pages (downloads,
   the index) become plain text, links to other sites stay. Collapsed parts (hidden code cells, dropdowns) are
   opened; a solution keeps its title, "Solution to Exercise 3.1", which marks it as one.
2. Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright, as in ``tests/test_book_html.py``) opens
   that document (its requests answered from ``_build``), with the book's stylesheets, its vendored MathJax
   (so formulas are typeset exactly as in the HTML) and its CJK web font (so the Chinese edition embeds the
   glyphs it uses), plus ``book/_static/print.css`` (page size, page numbers, wrapped code lines, no
   screen-only parts). A formula or table wider than the page is scaled down to fit. Chromium prints the
   document once; the page of every table-of-contents entry is read back from that PDF's named destinations
   and written into the contents, and a second print paints only those numbers.
3. pikepdf lays the numbers over the contents pages, writes the outline (bookmarks: part > chapter > section
   > subsection, from the pages' ``h1``-``h3``, each leading where Chromium put the heading) and the
   document information, and makes the PDF open on its outline.

Chromium prints links within the document as PDF links to named destinations, and page numbers in the
bottom margin (CSS ``@page`` margin boxes). Nothing reaches the network: Playwright answers the document's
requests from ``_build`` itself and aborts every other one.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime
import html
import io
import os
import pathlib
import posixpath
import re
import subprocess
import sys
import time
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = ROOT / "_build"
HTML = BUILD / "html"
OUT = BUILD / "pdf"
PRINT_CSS = ROOT / "book" / "_static" / "print.css"
CHROMIUM = pathlib.Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
NAME = "transformers-piece-by-piece"
#: The width of the text on an A4 page with print.css's margins (210 mm - 2 x 16 mm) in CSS pixels (96 per inch).
PAGE_TEXT_WIDTH_PX = round((210 - 2 * 16) / 25.4 * 96)
#: Headings deeper than this are left out of the outline (h1 chapter, h2 section, h3 subsection).
OUTLINE_DEPTH = 3


@dataclasses.dataclass(frozen=True)
class Edition:
    key: str  # "en" or "zh"
    html: pathlib.Path  # the edition's site root
    pdf_name: str  # the file name of its PDF
    label: str  # the edition, as the cover names it
    contents: str  # the heading of the table of contents
    version: str  # "Version" on the cover
    licence: str  # the licence line on the cover


EDITIONS = {
    "en": Edition("en", HTML, f"{NAME}.pdf", "English edition", "Contents", "Version",
                  "Code and text under the {licence} licence."),
    "zh": Edition("zh", HTML / "zh", f"{NAME}-zh.pdf", "中文版", "目录", "版本",
                  "代码与正文以 {licence} 许可证发布。"),
}


@dataclasses.dataclass
class Chapter:
    docname: str  # book/03_attention
    title: str  # "3. Self-attention", as the sidebar shows it
    part: str  # the part caption ("" for the root page)
    html: str = ""  # the article, ids and links rewritten
    # (level, its id here, its text as in the HTML (TeX inside, typeset in the contents), as plain text (bookmarks))
    headings: list[tuple[int, str, str, str]] = dataclasses.field(default_factory=list)


def anchor(docname: str, fragment: str = "") -> str:
    """The id, in the one document, of ``fragment`` on page ``docname`` (the page itself when empty)."""
    slug = docname.replace("/", "-")
    return f"{slug}--{fragment}" if fragment else slug


# ------------------------------------------------------------------------------------------------------------
# Reading the built pages
# ------------------------------------------------------------------------------------------------------------


def book_order(edition: Edition) -> list[Chapter]:
    """The pages in the sidebar's order, with their part captions: the root page first."""
    from bs4 import BeautifulSoup

    root = _root_docname()
    soup = BeautifulSoup((edition.html / f"{root}.html").read_text(encoding="utf-8"), "html.parser")
    nav = soup.select_one("nav.bd-links")
    if nav is None:
        raise ValueError(f"{edition.html}/{root}.html has no sidebar (nav.bd-links): is it the built book?")
    title = soup.select_one("h1")
    chapters = [Chapter(root, _text(title) if title else root, "")]
    part = ""
    base = posixpath.dirname(root)
    for el in nav.select("p.caption, li.toctree-l1 > a"):
        if el.name == "p":
            part = _text(el)
            continue
        href = el.get("href", "")
        if href in ("", "#") or href.startswith("http"):
            continue
        docname = posixpath.normpath(posixpath.join(base, href.split("#")[0]))[: -len(".html")]
        chapters.append(Chapter(docname, _text(el), part))
    return chapters


def _root_docname() -> str:
    import yaml

    return yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))["root"]


_TEX_SYMBOLS = {"top": "ᵀ", "cdot": "·", "times": "×", "le": "≤", "ge": "≥", "approx": "≈", "to": "→",
                "infty": "∞", "sum": "∑", "alpha": "α", "beta": "β", "gamma": "γ", "theta": "θ", "lambda": "λ",
                "mu": "μ", "sigma": "σ", "pi": "π", "epsilon": "ε", "ell": "ℓ", "in": "∈", "log": "log",
                "exp": "exp", "softmax": "softmax", "max": "max", "min": "min"}


def plain_math(tex: str) -> str:
    """A heading's inline TeX as plain text for a bookmark (bookmarks cannot show typeset maths):
    ``\\sqrt{d_{model}}`` -> ``√d_model``, ``O(T^2 d)`` stays, ``QK^\\top`` -> ``QKᵀ``."""
    text = re.sub(r"\^\s*\\top\b", "ᵀ", tex)
    previous = None
    while previous != text:  # innermost braces first
        previous = text
        text = re.sub(r"([_^])\{([^{}]*)\}", r"\1\2", text)
        text = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"\1/\2", text)
        text = re.sub(r"\\sqrt\{([^{}]*)\}", r"√\1", text)
        text = re.sub(r"\\(?:mathrm|text|mathbf|operatorname|mathit)\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\([A-Za-z]+)", lambda m: _TEX_SYMBOLS.get(m.group(1), m.group(1)), text)
    text = re.sub(r"\\[,;:! ]", " ", text)
    return re.sub(r"\s+", " ", text.replace("{", "").replace("}", "")).strip()


def _heading_text(h) -> str:
    """A heading's text, its maths (``\\(...\\)`` in the built HTML) made plain (``plain_math``)."""
    return re.sub(r"\\\((.*?)\\\)", lambda m: plain_math(m.group(1)), _text(h))


def _text(el) -> str:
    return re.sub(r"\s+", " ", el.get_text(" ", strip=True)).replace(" #", "").strip()


def read_chapter(edition: Edition, chapter: Chapter, docnames: set[str], to_site: str) -> None:
    """Fill ``chapter.html`` and ``chapter.headings`` from the built page.

    ``docnames``: the pages in this PDF (links to them stay links); ``to_site``: the relative address of the
    edition's site root from the one document (images and stylesheets are addressed through it)."""
    from bs4 import BeautifulSoup

    page = edition.html / f"{chapter.docname}.html"
    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    article = soup.select_one("article.bd-article")
    if article is None:
        raise ValueError(f"{page} has no <article class='bd-article'>")
    for el in article.select("a.headerlink, .prev-next-area, .toggle-button, button"):
        el.decompose()
    page_url = f"http://book/{chapter.docname}.html"
    for el in article.find_all(id=True):
        el["id"] = anchor(chapter.docname, el["id"])
    for a in article.find_all("a", href=True):
        target = urllib.parse.urlsplit(urllib.parse.urljoin(page_url, a["href"]))
        if target.hostname != "book":
            continue  # another site: the link stays
        path = target.path.lstrip("/")
        doc = path[: -len(".html")] if path.endswith(".html") else None
        if doc in docnames:
            a["href"] = "#" + anchor(doc, urllib.parse.unquote(target.fragment))
        else:
            a.unwrap()  # a download, the index, or a page left out of this PDF: plain text
    for el in article.find_all(["img", "source"]):
        for attr in ("src", "srcset"):
            if el.get(attr) and not el[attr].startswith("data:"):
                site_path = urllib.parse.urlsplit(urllib.parse.urljoin(page_url, el[attr])).path.lstrip("/")
                el[attr] = to_site + site_path
    # Collapsed parts open: <details> becomes a <div> (Chromium would not split an open <details> across pages).
    for details in article.find_all("details"):
        details.name = "div"
        details["class"] = [*details.get("class", []), "pdf-details"]
        summary = details.find("summary", recursive=False)
        if summary is not None:
            summary.name = "div"
            summary["class"] = [*summary.get("class", []), "pdf-summary"]
    for h in article.find_all(["h1", "h2", "h3"]):
        section = h.find_parent("section")
        if section is not None and section.get("id"):
            level = int(h.name[1])
            h_id = section["id"]
            chapter.headings.append((level, h_id, _text(h), _heading_text(h)))
    first = article.find("section")
    chapter.html = (
        f'<div class="pdf-chapter" id="{anchor(chapter.docname)}" data-docname="{chapter.docname}">'
        + (f'<p class="pdf-part-caption">{html.escape(chapter.part)}</p>' if chapter.part else "")
        + "".join(str(c) for c in article.contents)
        + "</div>"
    )
    if first is None:
        raise ValueError(f"{page}: the article has no <section>")


def page_head(edition: Edition, root_docname: str, to_site: str) -> tuple[str, str, str]:
    """(lang, stylesheets, MathJax) of the edition: the <link>s and the MathJax configuration of a page."""
    text = (edition.html / f"{root_docname}.html").read_text(encoding="utf-8")
    lang = re.search(r'<html[^>]*\blang="([^"]+)"', text).group(1)
    page_dir = posixpath.dirname(root_docname)

    def site(href: str) -> str:
        path = urllib.parse.urlsplit(urllib.parse.urljoin(f"http://book/{page_dir}/", href)).path.lstrip("/")
        return to_site + path

    hrefs = [re.search(r'href="([^"]+)"', tag).group(1) for tag in re.findall(r"<link\b[^>]*>", text)
             if 'rel="stylesheet"' in tag]  # in the page's order: later ones override earlier ones
    links = "".join(f'<link rel="stylesheet" href="{site(h)}">\n' for h in hrefs)
    config = re.search(r"<script>\s*(window\.MathJax = .*?)</script>", text, re.S)
    script = re.search(r'<script[^>]*src="([^"]*mathjax/tex-[^"]+)"', text)
    mathjax = ""
    if config and script:
        mathjax = f"<script>{config.group(1)}</script>\n<script defer src=\"{site(script.group(1))}\"></script>"
    return lang, links, mathjax


# ------------------------------------------------------------------------------------------------------------
# The one document: cover, contents, chapters
# ------------------------------------------------------------------------------------------------------------


def project_facts() -> dict[str, str]:
    """Title, authors, version, licence and commit (the commit only inside a git checkout)."""
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # (tomllib is Python 3.11+)
    version = re.search(r'^version\s*=\s*"([^"]+)"', pyproject, re.M)
    licence = re.search(r'^license\s*=\s*(?:\{\s*text\s*=\s*)?"([^"]+)"', pyproject, re.M)
    facts = {
        "title": config["title"],
        "author": config.get("author", ""),
        "version": version.group(1) if version else "",
        "licence": licence.group(1) if licence else "",
        "commit": "",
        "date": datetime.date.today().isoformat(),
    }
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        out = subprocess.run(["git", "log", "-1", "--format=%h %cs"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
        if len(out) == 2:
            facts["commit"], facts["date"] = out
    return facts


def front_matter(edition: Edition, chapters: list[Chapter], facts: dict[str, str]) -> str:
    version = f"{edition.version} {facts['version']}" + (f" · {facts['commit']}" if facts["commit"] else "")
    cover = f"""
<section class="pdf-cover" id="pdf-cover">
  <p class="pdf-cover-title">{html.escape(facts['title'])}</p>
  <p class="pdf-cover-edition">{html.escape(edition.label)}</p>
  <p class="pdf-cover-author">{html.escape(facts['author'])}</p>
  <p class="pdf-cover-version">{html.escape(version)} · {html.escape(facts['date'])}</p>
  <p class="pdf-cover-licence">{html.escape(edition.licence.format(licence=facts['licence']))}</p>
</section>"""
    rows = []
    part = None
    for ch in chapters:
        if ch.part != part and ch.part:
            rows.append(f'<li class="pdf-toc-part">{html.escape(ch.part)}</li>')
        part = ch.part
        for level, h_id, text, _ in ch.headings:
            if level > 2:
                continue
            rows.append(
                f'<li class="pdf-toc-l{level}"><a href="#{h_id}"><span class="pdf-toc-text">{html.escape(text)}</span>'
                f'<span class="pdf-toc-page" data-dest="{h_id}"></span></a></li>'
            )
    # Chromium writes a named destination only for an element some link points to: the outline needs one for
    # every heading down to OUTLINE_DEPTH, and for the contents.
    targets = "".join(f'<a href="#{h_id}"></a>' for ch in chapters for level, h_id, _, _ in ch.headings
                      if level > 2 and level <= OUTLINE_DEPTH) + '<a href="#pdf-contents"></a>'
    contents = (f'<nav class="pdf-targets" aria-hidden="true">{targets}</nav>'
                f'<section class="pdf-contents" id="pdf-contents"><h1 class="pdf-contents-title">'
                f'{html.escape(edition.contents)}</h1><ul>{"".join(rows)}</ul></section>')
    return cover + contents


def document(edition: Edition, chapters: list[Chapter], facts: dict[str, str], to_site: str) -> str:
    lang, links, mathjax = page_head(edition, chapters[0].docname, to_site)
    css = PRINT_CSS.read_text(encoding="utf-8")
    body = front_matter(edition, chapters, facts) + "\n".join(ch.html for ch in chapters)
    return f"""<!DOCTYPE html>
<html lang="{lang}" data-theme="light" data-mode="light">
<head>
<meta charset="utf-8">
<title>{html.escape(facts['title'])} ({html.escape(edition.label)})</title>
{links}<style>{css}</style>
{mathjax}
</head>
<body class="pdf-book">
<main id="main-content" class="bd-main"><div class="bd-content"><div class="bd-article-container">
<article class="bd-article">
{body}
</article></div></div></main>
</body>
</html>
"""


# ------------------------------------------------------------------------------------------------------------
# Printing
# ------------------------------------------------------------------------------------------------------------


#: The address the one document is opened at: Playwright answers every request to it from _build (no server),
#: and aborts every other request.
ORIGIN = "http://book.pdf.invalid/"


def _answer(route) -> None:
    url = route.request.url
    if url.startswith("data:"):
        route.continue_()
        return
    path = (BUILD / urllib.parse.unquote(urllib.parse.urlsplit(url).path).lstrip("/")).resolve()
    if url.startswith(ORIGIN) and path.is_relative_to(BUILD) and path.is_file():
        route.fulfill(path=path)
    else:
        route.abort()


_READY = """async () => {
  if (window.MathJax) {
    for (let i = 0; i < 400 && !(window.MathJax.startup && window.MathJax.startup.promise); i++)
      await new Promise(r => setTimeout(r, 25));
    await window.MathJax.startup.promise;
  }
  await document.fonts.ready;
  const imgs = Array.from(document.images);
  imgs.forEach(img => { img.loading = 'eager'; });
  await Promise.all(imgs.map(img => img.decode().catch(() => null)));
  // The window is as wide as the page's text: what is wider (a long formula, a wide table) is scaled down to
  // fit, and what still sticks out is reported (MathJax's clipped copy for screen readers is not drawn).
  const article = document.querySelector('article');
  const width = article.clientWidth;
  const wide = 'mjx-container[display="true"], table, .cell_output .output_html, .cell_output svg';
  for (const el of article.querySelectorAll(wide)) {
    if (el.scrollWidth > width + 1) el.style.zoom = (width / el.scrollWidth).toFixed(3);
  }
  const right = article.getBoundingClientRect().right + 1;
  const outside = Array.from(article.querySelectorAll('*')).filter(el => el.getBoundingClientRect().right > right
      && !el.closest('.pdf-targets, mjx-assistive-mml') && getComputedStyle(el).display !== 'none');
  return {math: document.querySelectorAll('mjx-container').length,
          errors: document.querySelectorAll('mjx-merror').length,
          broken: imgs.filter(i => !i.naturalWidth).map(i => i.src),
          outside: outside.slice(0, 20).map(el => (el.closest('.pdf-chapter') || {dataset: {}}).dataset.docname
              + ': <' + el.tagName.toLowerCase() + ' class="' + el.className + '">')};
}"""
# The second, small print: only the contents' page numbers are painted (everything keeps its place), and no
# running page numbers; it is laid over the first print's contents pages.
_NUMBERS_ONLY = """pages => {
  for (const el of document.querySelectorAll('.pdf-toc-page')) el.textContent = pages[el.dataset.dest] || '';
  document.body.classList.add('pdf-numbers-only');
  const style = document.createElement('style');
  style.textContent = '@page { @bottom-center { content: none; } }';
  document.head.appendChild(style);
}"""


def print_pdf(html_file: pathlib.Path) -> tuple[bytes, bytes, dict[str, object]]:
    """Print ``html_file`` (under _build): (the book, its contents' page numbers alone, counts).

    Chromium cannot number the contents itself (no ``target-counter()``): the document is printed once, the
    page of each entry is read from that PDF's named destinations, the numbers are written into the page, and
    a second print paints only those numbers (the cover and contents pages alone: the chapters are hidden
    after them, which moves nothing before them), to be laid over the first print's contents pages."""
    import pikepdf
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise FileNotFoundError(f"Chromium not found at {CHROMIUM}: install Debian's chromium (see .ci/run)")
    options = {"format": "A4", "print_background": True, "prefer_css_page_size": True}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": PAGE_TEXT_WIDTH_PX, "height": 1000})
            page.route("**/*", _answer)
            page.goto(ORIGIN + html_file.relative_to(BUILD).as_posix(), wait_until="load", timeout=600_000)
            page.emulate_media(media="print")
            ready = page.evaluate(_READY)
            if ready["errors"] or ready["broken"]:
                raise RuntimeError(f"{html_file.name}: {ready['errors']} TeX errors, images not loaded: "
                                   f"{ready['broken'][:5]}")
            book = page.pdf(**options, tagged=True)
            with pikepdf.open(io.BytesIO(book)) as pdf:
                pages = {name: index for name, (index, _) in destinations(pdf).items()}
            page.evaluate(_NUMBERS_ONLY, {name: str(index + 1) for name, index in pages.items()})
            numbers = page.pdf(**{**options, "print_background": False})  # transparent: the page shows through
        finally:
            browser.close()
    return book, numbers, ready


def destinations(pdf) -> dict[str, tuple[int, object]]:
    """Chromium's named destinations: name (without its slash) -> (0-based page index, destination array)."""
    index = {page.obj.objgen: i for i, page in enumerate(pdf.pages)}
    dests = pdf.Root.get("/Dests", {})
    return {str(name).lstrip("/"): (index[dests[name][0].objgen], dests[name]) for name in dests.keys()}


# ------------------------------------------------------------------------------------------------------------
# Contents' page numbers, outline and document information
# ------------------------------------------------------------------------------------------------------------


def finish(book: bytes, numbers: bytes, out: pathlib.Path, edition: Edition, chapters: list[Chapter],
           facts: dict[str, str]) -> int:
    """Write ``out``: the book with its contents' page numbers laid over it, the outline (part > chapter >
    section > subsection) and the document information; return its number of pages.

    Every heading is the target of a link (the contents, or the hidden list that ``front_matter`` adds), so
    Chromium gives it a named destination: its page and height there, where its bookmark leads."""
    import pikepdf

    with pikepdf.open(io.BytesIO(book)) as pdf, pikepdf.open(io.BytesIO(numbers)) as overlay:
        dests = destinations(pdf)
        first_chapter = min(index for name, (index, _) in dests.items() if not name.startswith("pdf-"))
        if len(overlay.pages) != first_chapter:
            raise RuntimeError(f"{out.name}: the cover and contents took {len(overlay.pages)} pages alone, "
                               f"{first_chapter} before the first chapter")
        for page, numbered in zip(pdf.pages, overlay.pages):
            page.add_overlay(numbered)

        def item(title: str, h_id: str) -> pikepdf.OutlineItem:
            if h_id not in dests:
                raise RuntimeError(f"{out.name}: no destination for {h_id!r} ({title!r})")
            return pikepdf.OutlineItem(title, destination=pikepdf.Array(dests[h_id][1]))

        with pdf.open_outline() as outline:
            outline.root.clear()  # Chromium's own outline, if any
            outline.root.append(item(edition.contents, "pdf-contents"))
            part = None
            parents: dict[int, pikepdf.OutlineItem] = {}
            for ch in chapters:
                if ch.part != part:
                    part = ch.part
                    if part:
                        parents[0] = item(part, ch.headings[0][1])
                        outline.root.append(parents[0])
                for level, h_id, _, text in ch.headings:
                    if level > OUTLINE_DEPTH:
                        continue
                    parents[level] = item(text, h_id)
                    parent = parents.get(level - 1) if (level > 1 or ch.part) else None
                    (parent.children if parent is not None else outline.root).append(parents[level])
                    for deeper in range(level + 1, OUTLINE_DEPTH + 1):
                        parents.pop(deeper, None)
        pdf.Root.PageMode = pikepdf.Name.UseOutlines
        with pdf.open_metadata(set_pikepdf_as_editor=False) as meta:
            meta["dc:title"] = f"{facts['title']} ({edition.label})"
            meta["dc:creator"] = [facts["author"]]
            meta["dc:description"] = f"{edition.version} {facts['version']} {facts['commit']}".strip()
        pdf.docinfo["/Title"] = f"{facts['title']} ({edition.label})"
        pdf.docinfo["/Author"] = facts["author"]
        pdf.save(out)
        return len(pdf.pages)


# ------------------------------------------------------------------------------------------------------------
# Putting it together
# ------------------------------------------------------------------------------------------------------------


def build(edition_key: str, pages: list[str] | None = None, out_dir: pathlib.Path = OUT) -> dict[str, object]:
    """Build one edition's PDF (or the PDF of ``pages`` only); return its path, page count and seconds."""
    edition = EDITIONS[edition_key]
    start = time.perf_counter()
    if not (edition.html / f"{_root_docname()}.html").is_file():
        raise FileNotFoundError(f"{edition.html} has no built book: run `make book` first")
    chapters = book_order(edition)
    facts = project_facts()
    facts["title"] = chapters[0].title  # the root page's title, in the edition's language
    if pages is not None:
        unknown = set(pages) - {ch.docname for ch in chapters}
        if unknown:
            raise ValueError(f"pages={sorted(unknown)} are not pages of the book; expected some of "
                             f"{[ch.docname for ch in chapters]}")
        chapters = [ch for ch in chapters if ch.docname in pages]
    out_dir.mkdir(parents=True, exist_ok=True)
    html_file = OUT / f"{pathlib.Path(edition.pdf_name).stem}{'-part' if pages else ''}.html"
    to_site = posixpath.relpath(edition.html.relative_to(BUILD).as_posix(), OUT.relative_to(BUILD).as_posix()) + "/"
    docnames = {ch.docname for ch in chapters}
    for ch in chapters:
        read_chapter(edition, ch, docnames, to_site)
    OUT.mkdir(parents=True, exist_ok=True)
    html_file.write_text(document(edition, chapters, facts, to_site), encoding="utf-8")
    pdf = out_dir / edition.pdf_name
    book, numbers, ready = print_pdf(html_file)
    n_pages = finish(book, numbers, pdf, edition, chapters, facts)
    return {"pdf": pdf, "pages": n_pages, "seconds": time.perf_counter() - start, "math": ready["math"],
            "outside": ready["outside"]}


def publish(pdf: pathlib.Path, edition: Edition) -> pathlib.Path:
    """Copy the PDF into the edition's site root, where the HTML book's download menu links to it."""
    target = edition.html / edition.pdf_name
    target.write_bytes(pdf.read_bytes())
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edition", choices=[*EDITIONS, "all"], default="all")
    parser.add_argument("--pages", nargs="+", help="only these pages (docnames such as book/03_attention)")
    parser.add_argument("--out-dir", type=pathlib.Path, default=OUT)
    args = parser.parse_args(argv)
    keys = list(EDITIONS) if args.edition == "all" else [args.edition]
    if len(keys) == 1:
        results = {keys[0]: build(keys[0], args.pages, args.out_dir)}
    else:  # one process (and one Chromium) per edition: two cores
      with concurrent.futures.ProcessPoolExecutor(max_workers=min(2, len(keys))) as pool:
          results = dict(zip(keys, pool.map(build, keys, [args.pages] * len(keys), [args.out_dir] * len(keys))))
    for key, result in results.items():
        pdf = result["pdf"]
        where = ""
        if args.pages is None and args.out_dir == OUT:
            where = f", linked from the book at {publish(pdf, EDITIONS[key]).relative_to(ROOT)}"
        print(f"{pdf.relative_to(ROOT) if pdf.is_relative_to(ROOT) else pdf}: {result['pages']} pages, "
              f"{pdf.stat().st_size / 2**20:.1f} MiB, {result['math']} formulas, {result['seconds']:.0f} s{where}")
        for element in result["outside"]:
            print(f"  warning: wider than the page: {element}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
