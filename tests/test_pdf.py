"""The PDF of the book (``make pdf``, ``scripts/pdf.py``), checked on a part of each edition.

``make pdf`` prints the whole book (a few minutes); this test prints two chapters and the bibliography of each
edition (``scripts/pdf.py --pages``, the same code path) from the built HTML and reads the PDFs with pypdf:
a plausible number of pages, every chapter's title on its first page and in the outline with its sections,
formulas typeset (no TeX source left in the text), every font embedded (a CJK one in the Chinese edition), every
page A4 with its text on the page, and every link leading somewhere: inside the PDF to a destination that
exists, outside only to web addresses. Like ``tests/test_book_html.py``, it needs Debian's Chromium and skips
without it, unless ``REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.book

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHROMIUM = pathlib.Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
# Two short chapters (the first with maths and citations) and the bibliography the citations link to.
PAGES = ["book/00_overview", "book/02_embeddings", "book/appendix/bibliography"]
EDITIONS = {"en": ("transformers-piece-by-piece.pdf", ""), "zh": ("transformers-piece-by-piece-zh.pdf", "zh")}
A4 = (595.3, 841.9)  # points
TEX = re.compile(r"\\(?:frac|sqrt|mathrm|text|top|begin|end|left|right|cdot|sum|quad|operatorname)\b|\$\$|\\\(")


# Printed once per test session: session-scoped (a worker that runs other modules' tests between these would
# end a module-scoped fixture and print again), and under pytest-xdist the first worker prints them into the
# session's shared temporary folder while the other waits on the lock and reads them (about 40 s of CPU saved).
@pytest.fixture(scope="session")
def pdfs(built_book, tmp_path_factory) -> dict[str, pathlib.Path]:
    from filelock import FileLock

    if not CHROMIUM.exists():  # a failure where .ci/run installed Chromium (REQUIRE_BROWSER=1), else a skip
        (pytest.fail if os.environ.get("REQUIRE_BROWSER") == "1" else pytest.skip)(f"no Chromium at {CHROMIUM}")
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the workers' folders share this one
    out = shared / "pdf"
    paths = {key: out / name for key, (name, _) in EDITIONS.items()}
    with FileLock(str(shared / "pdf.lock")):
        if not (out / "printed").is_file():
            out.mkdir(exist_ok=True)
            cmd = [sys.executable, str(ROOT / "scripts" / "pdf.py"), "--pages", *PAGES, "--out-dir", str(out)]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
            assert "wider than the page" not in proc.stdout, proc.stdout
            (out / "printed").write_text(proc.stdout, encoding="utf-8")
    assert all(p.is_file() for p in paths.values()), f"no PDFs in {out}: the worker that printed them failed"
    return paths


def _reader(path: pathlib.Path):
    from pypdf import PdfReader

    return PdfReader(path)


@pytest.fixture(scope="session")
def extracted(pdfs) -> dict[str, list[dict]]:
    """Per edition, per page: its text, its text outside code (not in a monospace font), the x of every text
    run, and its size: read once (pypdf's text extraction is the slow part of these tests)."""
    out = {}
    for edition, path in pdfs.items():
        pages = []
        for page in _reader(path).pages:
            prose: list[str] = []
            xs: list[float] = []

            def visit(text, cm, tm, font_dict, font_size, prose=prose, xs=xs) -> None:
                if not text.strip():
                    return
                xs.append(cm[0] * tm[4] + cm[2] * tm[5] + cm[4])
                if "Mono" not in str((font_dict or {}).get("/BaseFont", "")):
                    prose.append(text)

            text = page.extract_text(visitor_text=visit)
            pages.append({"text": text, "prose": " ".join(prose), "xs": xs,
                          "size": (float(page.mediabox.width), float(page.mediabox.height))})
        out[edition] = pages
    return out


def _chapters(built_book, edition: str) -> list[tuple[str, str, list[str]]]:
    """(docname, title, section titles) of each page in PAGES, from the built HTML (h1, then h2s): each title
    as its longest stretch of text outside maths (the PDF shows maths typeset, bookmarks as plain text)."""
    from bs4 import BeautifulSoup

    site = built_book.html / EDITIONS[edition][1]
    out = []
    for docname in PAGES:
        soup = BeautifulSoup((site / f"{docname}.html").read_text(encoding="utf-8"), "html.parser")
        article = soup.select_one("article.bd-article")
        for el in article.select("a.headerlink, span.section-number"):
            el.decompose()
        heads = []
        for h in article.find_all(["h1", "h2"]):
            pieces = re.split(r"\\\(.*?\\\)", re.sub(r"\s+", " ", h.get_text(" ", strip=True)))
            heads.append(max((p.strip() for p in pieces), key=len))
        out.append((docname, heads[0], heads[1:]))
    return out


def _outline(reader) -> list[tuple[int, str, int]]:
    """(depth, title, page index) of every bookmark, in order."""
    flat = []

    def walk(items: list, depth: int) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
            else:
                flat.append((depth, re.sub(r"\s+", " ", item.title), reader.get_destination_page_number(item)))

    walk(reader.outline, 0)
    return flat


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


@pytest.mark.parametrize("edition", EDITIONS)
def test_pages_titles_and_outline(built_book, pdfs, extracted, edition: str) -> None:
    texts = [page["text"] for page in extracted[edition]]
    chapters = _chapters(built_book, edition)
    # Cover, contents, then each page of the book on new pages: from 3 pages to a few dozen per chapter, and
    # pages that are neither nearly empty nor overfull on average.
    assert len(chapters) + 2 <= len(texts) <= 60 * len(chapters), len(texts)
    chars = sum(len(_squash(t)) for t in texts[2:]) / (len(texts) - 2)
    assert 400 < chars < 6000, f"{chars:.0f} characters per page on average"
    outline = _outline(_reader(pdfs[edition]))
    raw = [title for _, title, _ in outline if TEX.search(title) or "\\" in title]
    assert not raw, f"{edition}: bookmarks with TeX in their titles: {raw}"

    def bookmark(text: str, after: int = 0) -> int:
        """The index of the first bookmark from ``after`` on whose title contains ``text``."""
        found = [i for i, (_, title, _) in enumerate(outline) if i >= after and _squash(text) in _squash(title)]
        assert found, f"{edition}: no bookmark for {text!r} after {after}: {[t for _, t, _ in outline]}"
        return found[0]

    for docname, title, sections in chapters:
        at = bookmark(title)
        depth, _, first_page = outline[at]
        assert _squash(title) in _squash(texts[first_page]), f"{edition}: {docname}'s {title!r} not on its page"
        # The contents list the chapter and the number of its first page (laid over the contents page, the
        # numbers come after its text in the extraction: no line-by-line match).
        assert _squash(title) in _squash(texts[1]), f"{edition}: {title!r} is not in the contents"
        assert str(first_page + 1) in re.findall(r"\d+", texts[1]), f"{edition}: no page {first_page + 1} in contents"
        for section in sections:
            at = bookmark(section, at + 1)
            s_depth, _, s_page = outline[at]
            assert s_depth == depth + 1 and s_page >= first_page, (section, s_depth, depth, s_page, first_page)
            assert _squash(section) in _squash(texts[s_page]), f"{edition}: {section!r} is not on page {s_page}"


@pytest.mark.parametrize("edition", EDITIONS)
def test_formulas_are_typeset_and_text_stays_on_a4_pages(extracted, edition: str) -> None:
    math_pages = 0
    for number, page in enumerate(extracted[edition], 1):
        width, height = page["size"]
        assert abs(width - A4[0]) < 1 and abs(height - A4[1]) < 1, f"page {number} is {width} x {height} pt"
        # Outside code (which may hold TeX in strings, e.g. a plot's label), no TeX source is left.
        raw = TEX.search(page["prose"])
        around = page["prose"][max(0, raw.start() - 80) : raw.end() + 80] if raw else ""
        assert raw is None, f"{edition} page {number}: raw TeX {raw.group(0)!r}: ...{around}..."
        assert all(-1 <= x < width - 20 for x in page["xs"]), f"{edition} page {number}: text at x={max(page['xs'])}"
        math_pages += any(symbol in page["prose"] for symbol in "√∑∞")
    assert math_pages >= 3, f"{edition}: maths (√, ∑, ∞) on only {math_pages} pages"


def _fonts(resources, seen: set) -> list:
    """Every font dictionary in ``resources``, including those of the forms it draws."""
    fonts = []
    if resources is None or id(resources) in seen:
        return fonts
    seen.add(id(resources))
    resources = resources.get_object()
    for font in (resources.get("/Font") or {}).values():
        fonts.append(font.get_object())
    for xobject in (resources.get("/XObject") or {}).values():
        xobject = xobject.get_object()
        if xobject.get("/Subtype") == "/Form":
            fonts += _fonts(xobject.get("/Resources"), seen)
    for font in list(fonts):
        for sub in (font.get("/Resources"),):  # a Type 3 font's glyphs may use fonts too
            if sub is not None:
                fonts += _fonts(sub, seen)
    return fonts


def _embedded(font) -> bool:
    if font.get("/Subtype") == "/Type3":
        return "/CharProcs" in font  # its glyphs are drawings inside the PDF
    descriptor = font.get("/FontDescriptor")
    if font.get("/Subtype") == "/Type0":
        descriptor = font["/DescendantFonts"][0].get_object().get("/FontDescriptor")
    descriptor = descriptor.get_object() if descriptor is not None else {}
    return any(key in descriptor for key in ("/FontFile", "/FontFile2", "/FontFile3"))


def _unicode(font) -> str:
    cmap = font.get("/ToUnicode")
    return cmap.get_object().get_data().decode("latin-1") if cmap is not None else ""


def _has_cjk(cmap: str) -> bool:
    """A ToUnicode map that maps some glyph to a CJK ideograph (U+4E00-U+9FFF)."""
    return any(0x4E00 <= int(code, 16) <= 0x9FFF for code in re.findall(r"<([0-9A-Fa-f]{4})>", cmap))


@pytest.mark.parametrize("edition", EDITIONS)
def test_fonts_are_embedded(pdfs, extracted, edition: str) -> None:
    reader = _reader(pdfs[edition])
    fonts = {}
    for page in reader.pages:
        for font in _fonts(page.get("/Resources"), set()):
            fonts[id(font)] = font
    missing = [str(f.get("/BaseFont")) for f in fonts.values() if not _embedded(f)]
    assert not missing, f"{edition}: fonts not embedded: {missing}"
    prose = "".join(page["prose"] for page in extracted[edition])
    n_chinese = len(re.findall(r"[\u4e00-\u9fff]", prose))
    cjk_fonts = [f for f in fonts.values() if _has_cjk(_unicode(f))]
    # Both editions quote Chinese (我爱NLP, the Chinese terms); the Chinese edition's prose is Chinese.
    assert cjk_fonts, f"{edition}: no embedded font draws CJK characters"
    if edition == "zh":
        # Outside code, the Chinese edition is mostly Chinese (a Chinese character says about as much as a word).
        words = len(re.findall(r"[A-Za-z]+", prose))
        assert n_chinese > words, f"{edition}: {n_chinese} Chinese characters, {words} words in Latin letters"


@pytest.mark.parametrize("edition", EDITIONS)
def test_links_resolve(pdfs, edition: str) -> None:
    reader = _reader(pdfs[edition])
    names = set(reader.named_destinations)
    internal = external = 0
    for number, page in enumerate(reader.pages, 1):
        for annot in page.get("/Annots") or []:
            annot = annot.get_object()
            if annot.get("/Subtype") != "/Link":
                continue
            action = annot.get("/A")
            action = action.get_object() if action is not None else {}
            dest = annot.get("/Dest", action.get("/D"))
            if action.get("/S") == "/URI":
                uri = str(action["/URI"])
                assert re.match(r"(https?|mailto):", uri), f"{edition} page {number}: link to {uri!r}"
                external += 1
            elif dest is not None:
                if isinstance(dest, str):
                    assert dest in names or "/" + dest in names, f"{edition} page {number}: no destination {dest}"
                internal += 1
    # The contents link to every chapter and section; the chapters' citations link to the bibliography.
    assert internal >= sum(1 for _ in reader.outline), (internal, external)
    cites = [name for name in names if "bibliography--" in name]
    assert cites, f"{edition}: no link leads into the bibliography"
