"""The Chinese edition's catalogs (issue 14): complete, in step with the English, markup and terms kept.

Each page of the book has ``locales/zh_CN/LC_MESSAGES/<page>.po``. These tests fail, naming the page and the
message, when a message is untranslated, fuzzy (its English changed) or obsolete, when a translation drops
or alters math, inline code, a role, a link target or bold/italic markers, when it does not use the
glossary's Chinese form of a term, and when the catalogs are not in step with the English text (someone
edited the book without ``make pot``). The zh build and the browser checks of its pages are in
tests/test_book_html.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
from collections import Counter

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("i18n", ROOT / "scripts" / "i18n.py")
i18n = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(i18n)

LANGUAGE = "zh_CN"


def _toc_pages() -> list[str]:
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [entry["file"] for entry in part.get("chapters", [])]
    return pages


PAGES = _toc_pages()
CATALOGS = i18n.catalogs(LANGUAGE)


def test_every_page_has_a_catalog_and_every_catalog_a_page() -> None:
    assert set(PAGES) <= set(CATALOGS), f"pages without a catalog (run `make pot`): {set(PAGES) - set(CATALOGS)}"
    extra = set(CATALOGS) - set(PAGES) - {"sphinx"}  # sphinx.po: the strings of book/_templates
    assert not extra, f"catalogs of pages that are no longer in the book: {extra}"


@pytest.mark.parametrize("page", sorted(CATALOGS))
def test_every_message_is_translated_with_its_markup_and_terms(page: str) -> None:
    problems = i18n.check(LANGUAGE, [page])
    shown = "\n".join(problems[:40]) + (f"\n… and {len(problems) - 40} more" if len(problems) > 40 else "")
    assert not problems, f"{len(problems)} problem(s) in {page}.po:\n{shown}"


def test_catalogs_are_valid_gettext(tmp_path: pathlib.Path) -> None:
    """msgfmt --check (the compiler the build relies on) accepts every catalog."""
    if shutil.which("msgfmt") is None:
        pytest.skip("GNU gettext's msgfmt is not installed")
    for page, path in CATALOGS.items():
        proc = subprocess.run(["msgfmt", "--check", "-o", str(tmp_path / "x.mo"), str(path)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{page}: {proc.stderr}"


# ------------------------------------------------------------------------------------------ the checker


@pytest.mark.parametrize(
    ("english", "chinese", "kind"),
    [
        ("divide by $\\sqrt{d_k}$ here", "在这里除以 $\\sqrt{d}$", "math"),
        ("call `softmax(x)` once", "调用一次 softmax(x)", "code"),
        ("as {cite}`vaswani2017attention` shows", "如 {cite}`vaswani2017` 所示", "roles"),
        ("see {ref}`the mask <sec-mask>`", "见 {ref}`掩码 <sec-other>`", "roles"),
        ("read [the notes](notes.md)", "读 [笔记](other.md)", "links"),
        ("**Self-attention（自注意力）** is", "自注意力是", "bold"),
        ("a *means* b", "a 意味着 b", "italic"),
    ],
)
def test_the_markup_check_can_fail(english: str, chinese: str, kind: str) -> None:
    problems = i18n.markup_problems(english, chinese)
    assert any(p.startswith(kind) for p in problems), problems


def test_the_markup_check_accepts_a_faithful_translation() -> None:
    english = ("**Self-attention（自注意力）** computes $QK^\\top$ with `q @ k.T` {cite}`notesA`; "
               "see {ref}`the causal mask <sec-causal>` and [the notes](notes.md), *not* the figure.")
    chinese = ("**自注意力（self-attention）** 用 `q @ k.T` 计算 $QK^\\top$ {cite}`notesA`；"
               "见 {ref}`因果掩码 <sec-causal>` 与 [笔记](notes.md)，*而不是* 那张图。")
    assert i18n.markup_problems(english, chinese) == []


@pytest.mark.parametrize(
    ("english", "chinese"),
    [
        ("$2\\,(\\text{K and V}) \\times L$ bytes", "$2\\,(\\text{K 和 V}) \\times L$ 字节"),
        ("$\\theta_i = \\text{base}^{-2i/d}$", "$\\theta_i = \\text{基数}^{-2i/d}$"),
    ],
)
def test_words_inside_text_in_math_may_be_translated(english: str, chinese: str) -> None:
    """Inline maths: the prose of ``\\text{…}`` is translated like the sentence around it."""
    assert i18n.markup_problems(english, chinese) == []


@pytest.mark.parametrize(
    ("english", "chinese"),
    [
        ("$2\\,(\\text{K and V}) \\times L$ bytes", "$2\\,(\\text{K 和 V}) \\times 2L$ 字节"),   # the formula changed
        ("$\\text{KV} = 2LT$", "$\\mathrm{KV} = 2LT$"),                                     # \text{} itself dropped
        ("\nM_{ij} = 0 \\quad\\text{(key $j$)}\n", "\nM_{ji} = 0 \\quad\\text{（键 $j$）}\n"),  # display math too
        ("\nM_{ij} = 0 \\quad\\text{(key $j$)}\n", "\nM_{ij} = 0 \\quad\\text{（键 $j$）}\n"),  # display: as is
        ("write `\\text{bytes}` in the caption", "在标题里写 `\\text{字节}`"),                # outside math: code
    ],
)
def test_everything_else_in_a_formula_must_stay(english: str, chinese: str) -> None:
    assert i18n.markup_problems(english, chinese) != []


def test_a_role_written_as_inline_code_is_code() -> None:
    found = i18n.markup("MyST's `:::` and `{cite}`, and a real one {cite}`notesA`")
    assert found["code"] == Counter({"`:::`": 1, "`{cite}`": 1})
    assert found["roles"] == Counter({"{cite}`notesA`": 1})


def test_the_terms_given_in_the_english_must_appear() -> None:
    assert i18n.annotation_terms("a **query（查询, Q）** and a softmax（归一化指数函数） and $x（1）$") == [
        "查询",
        "归一化指数函数",
    ]


def test_the_glossary_is_read_and_its_chinese_forms_are_required() -> None:
    terms = i18n.glossary()
    assert len(terms) > 100 and terms["cross-attention"] == "交叉注意力"
    patterns = {p.pattern: forms for p, forms in i18n.glossary_terms()}
    assert patterns[r"\bcross\-attention\b"] == ["交叉注意力"]
    # A message that uses the English term must use its Chinese form (or keep the English name).
    hits = [forms for p, forms in i18n.glossary_terms() if p.search("the decoder's cross-attention layer")]
    assert ["交叉注意力"] in hits


def test_exercise_titles_are_plain_text() -> None:
    """book/_ext/editions.py makes the rendered text of an exercise title its message: no markup allowed."""
    titles = []
    for path in sorted((ROOT / "book").rglob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "markdown":
                titles += re.findall(r"^:::\{exercise\}(.*)$", "".join(cell["source"]), flags=re.M)
    assert titles, "no exercise found"
    marked = [t for t in titles if re.search(r"[`$*{\[]", t)]
    assert not marked, f"exercise titles with markup (not translatable as is): {marked}"


def test_verbatim_messages_are_the_ones_with_nothing_to_translate() -> None:
    assert i18n.verbatim("\nQ = XW_Q\n")
    assert i18n.verbatim("`GPT-2`")
    assert i18n.verbatim("$d_k = 64$")
    assert not i18n.verbatim("the scores are divided by $\\sqrt{d_k}$")


_PO = """msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"
"Language: zh_CN\\n"

#, fuzzy
#| msgid "The old English sentence."
msgid "The new English sentence."
msgstr "旧的译文。"

msgid "Llama 2"
msgstr ""

msgid "A second changed sentence."
msgstr ""

msgid ""
"\\n"
"x = y\\n"
msgstr ""

#, fuzzy
#| msgid "Kept fuzzy."
msgid "Still fuzzy."
msgstr "仍是旧的。"
"""


@pytest.mark.skipif(shutil.which("msgcat") is None, reason="GNU gettext's msgcat is not installed")
def test_todo_and_fill_keep_gettext_layout_and_the_old_english(tmp_path: pathlib.Path, monkeypatch) -> None:
    po = tmp_path / LANGUAGE / "LC_MESSAGES" / "book" / "x.po"
    po.parent.mkdir(parents=True)
    po.write_text(_PO, encoding="utf-8")
    monkeypatch.setattr(i18n, "LOCALES", tmp_path)
    listed = i18n.todo("book/x", LANGUAGE)
    assert "@@ 0\n(was: The old English sentence.)" in listed and "@@ 1\nLlama 2" in listed
    assert "@@ 3" not in listed  # the display-math block is copied as it is
    assert i18n.fill("book/x", "@@ 0\n新的英文句子。\n@@ 1 =\n@@ 2\n第二句。\n", LANGUAGE) == 3
    text = po.read_text(encoding="utf-8")
    assert '#| msgid "Kept fuzzy."' in text and '#| msgid "The old English sentence."' not in text
    problems = i18n.check(LANGUAGE, ["book/x"])
    assert problems == ["book/x: 'Still fuzzy.': fuzzy (the English changed; revise, then remove the flag)"]
    catalog = i18n.read_catalog(po)
    assert [str(m.string) for m in catalog if m.id][:4] == ["新的英文句子。", "Llama 2", "第二句。", "\nx = y\n"]
    assert subprocess.run(["msgfmt", "--check", "-o", os.devnull, str(po)]).returncode == 0


# ------------------------------------------------------------------------ in step with the English text


@pytest.mark.book
def test_catalogs_are_in_step_with_the_book() -> None:
    """Every message of the English text is in its page's catalog, and no other: else run `make pot`.

    ``make test`` builds the templates beside the two editions (``build-all --fresh --templates``) and sets
    ``BOOK_PREBUILT=1``; otherwise this test builds them."""
    if os.environ.get("BOOK_PREBUILT") == "1":
        pot_dir = i18n.POT_DIR
        if not any(pot_dir.rglob("*.pot")):
            pytest.fail(f"no templates in {pot_dir}: build with `scripts/i18n.py build-all --fresh --templates`",
                        pytrace=False)
    else:
        pot_dir = i18n.build_pot()
    from babel.messages.pofile import read_po

    problems = []
    for pot in sorted(pot_dir.rglob("*.pot")):
        page = str(pot.relative_to(pot_dir).with_suffix(""))
        with pot.open("rb") as f:
            wanted = {str(m.id) for m in read_po(f) if m.id}
        if page not in CATALOGS:
            problems.append(f"{page}: no catalog")
            continue
        have = {str(m.id) for m in i18n.read_catalog(CATALOGS[page]) if m.id}
        problems += [f"{page}: new English not in the catalog: {m[:80]!r}" for m in sorted(wanted - have)]
        problems += [f"{page}: catalog message no longer in the book: {m[:80]!r}" for m in sorted(have - wanted)]
    assert not problems, "run `make pot` and translate:\n" + "\n".join(problems[:40])
