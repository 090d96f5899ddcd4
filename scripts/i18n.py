"""The Chinese edition's gettext workflow (issue 14): templates, catalogs, checks and the zh build.

    python scripts/i18n.py pot            # refresh _build/i18n/gettext/*.pot and merge them into locales/
    python scripts/i18n.py build zh_CN    # build the Chinese edition into _build/html/zh/
    python scripts/i18n.py check          # every message translated, markup kept, glossary terms used
    python scripts/i18n.py stats          # messages per page, translated / fuzzy / untranslated

The book is written once, in English, in the notebooks and pages under book/. Sphinx's gettext builder cuts
its prose into messages (a paragraph, a heading, a list item, a table cell, an admonition title); code cells
and outputs are not messages, so code, outputs and figures are shared by both editions and cannot drift.
Each page has one catalog, ``locales/zh_CN/LC_MESSAGES/<page>.po`` (``gettext_compact: false``).

``pot`` merges with GNU gettext's ``msgmerge --previous``: a message whose English changed becomes
``#, fuzzy`` with the old English kept as ``#| msgid``, and a deleted one becomes obsolete (``#~``). Fuzzy
translations are not used by the build, and ``check`` (run by ``make test``) fails until each is revised
and its flag removed, and until obsolete entries are deleted.

Both builds read ``_config.yml``; this script writes a copy with the extra settings next to it
(``.config.<name>.yml``, git-ignored: Jupyter Book resolves the paths in a configuration relative to the
file), and builds into its own folder under ``_build/i18n/`` (jupyter-book writes ``.doctrees`` and
``jupyter_execute`` beside its output, and the gettext and HTML builders need separate doctrees).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOCALES = ROOT / "locales"
I18N_BUILD = ROOT / "_build" / "i18n"
HTML = ROOT / "_build" / "html"
LANGUAGES = {"zh_CN": "zh"}  # catalog language → folder of its edition inside _build/html

# What the Chinese edition says where _config.yml has English that is not in a page.
ZH_CONFIG = {
    "title": "逐块读懂 Transformer",
    "logo_alt": "逐块读懂 Transformer — 首页",
    "search_bar_text": "搜索本书……",
}


def _bin(name: str) -> str:
    here = pathlib.Path(sys.executable).parent / name
    return str(here) if here.exists() else name


def write_config(name: str, extra: dict[str, Any], top: dict[str, Any] | None = None) -> pathlib.Path:
    """Write ``.config.<name>.yml``: _config.yml with ``extra`` merged into ``sphinx.config``."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    config["sphinx"]["config"].update(extra)
    config.update(top or {})
    path = ROOT / f".config.{name}.yml"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False), encoding="utf-8")
    os.replace(tmp, path)
    return path


def jupyter_book(config: pathlib.Path, out: pathlib.Path, *args: str) -> None:
    cmd = [_bin("jupyter-book"), "build", str(ROOT), "--config", str(config), "--path-output", str(out), *args]
    subprocess.run(cmd, check=True, cwd=ROOT)


# --------------------------------------------------------------------------------------------- templates
POT_DIR = I18N_BUILD / "gettext" / "_build" / "gettext"  # the .pot files, one per page


def build_pot() -> pathlib.Path:
    """Run the gettext builder; return the folder of the .pot files (one per page)."""
    config = write_config("gettext", {"gettext_compact": False, "gettext_location": False, "gettext_uuid": False})
    jupyter_book(config, I18N_BUILD / "gettext", "--builder", "custom", "--custom-builder", "gettext", "--all", "-q")
    return POT_DIR


def merge(pot_dir: pathlib.Path, language: str) -> None:
    """Merge every template into its catalog (msginit for a new page); report new, fuzzy and obsolete."""
    target = LOCALES / language / "LC_MESSAGES"
    pots = sorted(pot_dir.rglob("*.pot"))
    for pot in pots:
        rel = pot.relative_to(pot_dir).with_suffix(".po")
        po = target / rel
        po.parent.mkdir(parents=True, exist_ok=True)
        if not po.exists():
            subprocess.run(["msginit", "--no-translator", "--no-wrap", f"--locale={language}",
                            f"--input={pot}", f"--output-file={po}"], check=True, capture_output=True)
        before = po.read_bytes()
        subprocess.run(["msgmerge", "--quiet", "--previous", "--no-wrap", "--no-location", "--update",
                        "--backup=none", str(po), str(pot)], check=True)
        merged = read_catalog(po)
        if _content(merged) == _content_of_bytes(before):
            po.write_bytes(before)  # nothing changed but the dates and the header's layout: keep the file as it was
        else:
            write_catalog(merged, po)  # one layout for the catalogs, whichever tool wrote them last
    known = {p.relative_to(pot_dir).with_suffix(".po") for p in pots}
    for po in sorted(target.rglob("*.po")):
        if po.relative_to(target) not in known:
            print(f"{po.relative_to(ROOT)}: its page is gone from the book; delete the catalog")
    print_stats(language)


# ---------------------------------------------------------------------------------------------- catalogs
def read_catalog(path: pathlib.Path):
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        return read_po(f, abort_invalid=True)


def _content(catalog) -> list[tuple]:
    """What a catalog says, without its header: each message, its translation, flags and comments."""
    def entry(m) -> tuple:
        return (str(m.id), str(m.string), sorted(f for f in m.flags if f == "fuzzy"), list(m.user_comments))
    return [entry(m) for m in catalog if m.id] + [("obsolete", entry(m)) for m in catalog.obsolete.values()]


def _content_of_bytes(data: bytes) -> list[tuple]:
    import io

    from babel.messages.pofile import read_po

    return _content(read_po(io.BytesIO(data))) if data else []


def catalogs(language: str) -> dict[str, pathlib.Path]:
    """Page name (``book/03_attention``) → its catalog."""
    target = LOCALES / language / "LC_MESSAGES"
    return {str(p.relative_to(target).with_suffix("")): p for p in sorted(target.rglob("*.po"))}


def stats(path: pathlib.Path) -> dict[str, int]:
    catalog = read_catalog(path)
    counts = Counter()
    for message in catalog:
        if not message.id:
            continue
        counts["messages"] += 1
        counts["words"] += len(str(message.id).split())
        if message.fuzzy:
            counts["fuzzy"] += 1
        elif message.string:
            counts["translated"] += 1
        else:
            counts["untranslated"] += 1
    counts["obsolete"] = len(catalog.obsolete)
    return counts


def print_stats(language: str) -> None:
    total = Counter()
    print(f"{'page':34} {'messages':>8} {'words':>6} {'done':>6} {'fuzzy':>6} {'todo':>6} {'obsolete':>8}")
    for page, path in catalogs(language).items():
        s = stats(path)
        total.update(s)
        print(f"{page:34} {s['messages']:8} {s['words']:6} {s['translated']:6} {s['fuzzy']:6} "
              f"{s['untranslated']:6} {s['obsolete']:8}")
    print(f"{'total':34} {total['messages']:8} {total['words']:6} {total['translated']:6} {total['fuzzy']:6} "
          f"{total['untranslated']:6} {total['obsolete']:8}")


# ------------------------------------------------------------------------------------------------ checks
_MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+?\$", re.S)
_ROLE = re.compile(r"(?<!`)\{[a-zA-Z:-]+\}`[^`]*`")  # not `{cite}` written as inline code
_CODE = re.compile(r"(?<![}`])(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_LINK_TARGET = re.compile(r"\]\(([^)\s]+)\)")
_URL = re.compile(r"https?://[^\s)>\]]+")
_NUMBERED_TARGET = re.compile(r"<([^<>\s]+)>`")  # {ref}`text <target>`


_TEXT_IN_MATH = re.compile(r"\\text\s*\{(?:[^{}]|\{[^{}]*\})*\}")  # \text{…}, one level of braces inside


def math_key(formula: str) -> str:
    """A formula as the check compares it: the words inside its ``\\text{…}`` are prose and may be translated
    (``\\text{K and V}`` → ``\\text{K 和 V}``); every other character of the formula must stay as it is."""
    return _TEXT_IN_MATH.sub(r"\\text{…}", formula)


def markup(text: str) -> dict[str, Counter]:
    """The parts of a message that must survive translation unchanged.

    A display-math block (a message that starts with a newline, as Sphinx extracts ``$$ … $$``) is one formula
    that must stay exactly as it is: Sphinx's gettext step turns a translated display block into a literal
    ``\\[::\\]`` on the page, so its words move to the prose around it. In inline maths only the words of
    ``\\text{…}`` may change (:func:`math_key`)."""
    found: dict[str, Counter] = {}
    if text.startswith("\n"):
        found["math"] = Counter({text.strip(): 1})
        return found
    rest = text
    found["math"] = Counter(math_key(m.group(0)) for m in _MATH.finditer(rest))
    rest = _MATH.sub(" ", rest)
    roles = [m.group(0) for m in _ROLE.finditer(rest)]
    # A {ref}/{numref}/{doc} role may have its text translated; its target may not.
    found["roles"] = Counter(_role_key(r) for r in roles)
    rest = _ROLE.sub(" ", rest)
    found["code"] = Counter(m.group(0) for m in _CODE.finditer(rest))
    rest = _CODE.sub(" ", rest)
    found["links"] = Counter(_LINK_TARGET.findall(rest)) + Counter(_URL.findall(rest))
    found["bold"] = Counter({"**": rest.count("**")}) if rest.count("**") else Counter()
    singles = rest.replace("**", "").count("*")
    found["italic"] = Counter({"*": singles}) if singles else Counter()
    return found


def _role_key(role: str) -> str:
    name, _, body = role.partition("`")
    body = body[:-1]
    if name in ("{ref}", "{numref}", "{doc}", "{term}", "{eq}"):
        target = _NUMBERED_TARGET.search(body + "`")
        return f"{name}`{target.group(1) if target else body}`"
    return role


def markup_problems(english: str, chinese: str) -> list[str]:
    want, got = markup(english), markup(chinese)
    problems = []
    for kind in want.keys() | got.keys():
        missing = want.get(kind, Counter()) - got.get(kind, Counter())
        extra = got.get(kind, Counter()) - want.get(kind, Counter())
        if missing or extra:
            problems.append(f"{kind}: missing {sorted(missing.elements())} extra {sorted(extra.elements())}")
    return problems


def _markdown():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    return MarkdownIt("commonmark").use(dollarmath_plugin, allow_space=True, allow_digits=True)


def _emphasis(tokens) -> Counter:
    counts = Counter()
    for token in tokens:
        if token.type in ("strong_open", "em_open"):
            counts[token.type[:-5]] += 1
        counts.update(_emphasis(token.children or []))
    return counts


def render_problems(english: str, chinese: str) -> list[str]:
    """What MyST would render differently: a translation must parse as one paragraph (Sphinx drops any other
    translation: "1. 标题" is a list, write "1\\. 标题"), with as many bold and italic spans as the English
    (in CommonMark a closing ``**`` after "）" and before a Chinese character is not a closing marker)."""
    md = _markdown()
    problems = []
    blocks = [t.type for t in md.parse(chinese) if t.level == 0]
    if chinese != english and blocks != ["paragraph_open", "paragraph_close"]:
        problems.append(f"render: parses as {blocks[0].removesuffix('_open') if blocks else 'nothing'}, "
                        "not one paragraph (escape a leading '1.' as '1\\.', '#' as '\\#', '-' as '\\-')")
    want, got = _emphasis(md.parse(english)), _emphasis(md.parse(chinese))
    if want != got:
        problems.append(f"render: {dict(want)} bold/italic spans in the English, {dict(got)} in the translation "
                        "(a closing ** or * right after a full-width bracket and before a Chinese character "
                        "does not close: write **术语**（term）, the bracket outside the bold)")
    return problems


def glossary(path: pathlib.Path = ROOT / "book" / "appendix" / "glossary.md") -> dict[str, str]:
    """English term → its Chinese form, from the glossary's table."""
    terms = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0] not in ("English", "") and not set(cells[0]) <= {"-"}:
            terms[cells[0]] = cells[1]
    return terms


_ANNOTATION = re.compile(r"（([^（）]*[\u4e00-\u9fff][^（）]*)）")


def annotation_terms(english: str) -> list[str]:
    """The Chinese terms the English text gives beside its key terms: ``word（术语）`` → ``术语``.

    ``（术语，另一个）`` or ``（查询, Q）`` gives the Chinese part before the first comma."""
    terms = []
    for m in _ANNOTATION.finditer(_MATH.sub(" ", english)):
        first = re.split(r"[,，;；/]", m.group(1))[0].strip()
        if re.search(r"[\u4e00-\u9fff]", first):
            terms.append(first)
    return terms


def check(language: str, pages: Iterable[str] | None = None, untranslated: bool = True) -> list[str]:
    """Every problem of the catalogs, one line each, naming the page and the message."""
    problems = []
    all_pages = catalogs(language)
    for page in pages or all_pages:
        path = all_pages.get(page)
        if path is None:
            problems.append(f"{page}: no catalog {LOCALES / language / 'LC_MESSAGES' / page}.po")
            continue
        catalog = read_catalog(path)
        if catalog.obsolete:
            problems.append(f"{page}: {len(catalog.obsolete)} obsolete entries (#~); delete them")
        for message in catalog:
            if not message.id:
                continue
            english, chinese = str(message.id), str(message.string or "")
            where = f"{page}: {english[:80]!r}"
            if message.fuzzy:
                problems.append(f"{where}: fuzzy (the English changed; revise, then remove the flag)")
                continue
            if not chinese.strip():
                if untranslated:
                    problems.append(f"{where}: not translated")
                continue
            if chinese == english and not verbatim(english) and IDENTICAL not in message.user_comments:
                problems.append(f"{where}: the same as the English (translate it; if it reads the same in "
                                f"Chinese, e.g. a name, mark it with `@@ N =` in fill)")
            for problem in markup_problems(english, chinese) + render_problems(english, chinese):
                problems.append(f"{where}: {problem}")
            for term in annotation_terms(english):
                if term not in chinese:
                    problems.append(f"{where}: the term {term!r} given in the English is missing")
            if page != "book/appendix/glossary":
                for en, zh in glossary_terms():
                    if en.search(english) and not any(z in chinese for z in zh) and not en.search(chinese):
                        problems.append(f"{where}: glossary term {en.pattern[2:-2]!r} → use {zh[0]!r}")
    return problems


_GLOSSARY_CACHE: list[tuple[re.Pattern, list[str]]] = []


def glossary_terms() -> list[tuple[re.Pattern, list[str]]]:
    """(English pattern, accepted Chinese forms) for each multi-word or long glossary term.

    The English name without its parenthesis ("byte-pair encoding (BPE)" → "byte-pair encoding"); the Chinese
    forms are the glossary's, split at 、/；, each also without its parenthesis. A message that uses the English
    term must use one of them (or keep the English name, as for code names)."""
    if not _GLOSSARY_CACHE:
        for en, zh in glossary().items():
            base = re.sub(r"\s*\(.*?\)", "", en).strip()
            if len(base) < 8 and " " not in base:
                continue
            forms = [re.sub(r"[（(].*?[）)]", "", z).strip() for z in re.split(r"[、；;/]", zh)]
            forms = [f for f in forms if f]
            if forms:
                _GLOSSARY_CACHE.append((re.compile(r"\b" + re.escape(base) + r"\b", re.I), forms))
    return _GLOSSARY_CACHE


# ------------------------------------------------------------------------- translating in batches (todo/fill)
_WORDS = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]")
IDENTICAL = "identical"  # translator comment of a message that reads the same in Chinese (a name, a symbol)


def verbatim(english: str) -> bool:
    """A message with nothing to translate: a display-math block, or markup, numbers and symbols only.

    Any word of two or more letters (outside math, code, roles and URLs) makes a message translatable,
    capitalised or not ("Summary", "Llama 2"): a translator decides whether it stays the same, and says so
    with ``@@ N =`` in ``fill`` (the ``# identical`` comment)."""
    if english.startswith("\n") or english.strip().startswith("\\begin"):
        return True
    rest = _URL.sub(" ", _CODE.sub(" ", _ROLE.sub(" ", _MATH.sub(" ", english))))
    if "$" not in english and re.search(r"\\[A-Za-z]+", english):  # a display-math block without $$
        return not re.search(r"[A-Za-z]*[a-z][A-Za-z]*", re.sub(r"\\[A-Za-z]+|\b[A-Za-z]{1,2}\b", " ", rest))
    return not _WORDS.search(rest)


def todo(page: str, language: str = "zh_CN", limit: int = 0) -> str:
    """The untranslated and fuzzy messages of a page, numbered, for ``fill``; verbatim ones are copied."""
    path = catalogs(language)[page]
    catalog = read_catalog(path)
    out, copied = [], 0
    for n, message in enumerate(m for m in catalog if m.id):
        if message.string and not message.fuzzy and (
            message.string != message.id or verbatim(str(message.id)) or IDENTICAL in message.user_comments
        ):
            continue
        if verbatim(str(message.id)) and not message.fuzzy:
            message.string = message.id
            copied += 1
            continue
        previous = f"\n(was: {previous_english(message)})" if message.fuzzy and previous_english(message) else ""
        out.append(f"@@ {n}{previous}\n{message.id}")
    if copied:
        write_catalog(catalog, path)
    if limit:
        out = out[:limit]
    return "\n".join(out)


def fill(page: str, answers: str, language: str = "zh_CN") -> int:
    """Set translations from text of ``@@ N`` blocks (N from ``todo``); clears their fuzzy flags.

    ``@@ N =`` (no text) keeps the English as the translation, for a message that reads the same in Chinese
    (a name, a formula in words); it is marked ``# identical`` so that ``check`` accepts it."""
    path = catalogs(language)[page]
    catalog = read_catalog(path)
    messages = [m for m in catalog if m.id]
    blocks = re.split(r"^@@ (\d+)( =)?[^\n]*\n?", answers, flags=re.M)
    count = 0
    for number, same, text in zip(blocks[1::3], blocks[2::3], blocks[3::3]):
        message = messages[int(number)]
        text = text.rstrip("\n")
        if same:  # "@@ N =": reads the same in Chinese
            text = str(message.id)
            if IDENTICAL not in message.user_comments:
                message.user_comments.append(IDENTICAL)
        if str(message.id).startswith("\n") and not text.startswith("\n"):
            text = "\n" + text + "\n"
        message.string = text
        message.flags.discard("fuzzy")
        message.user_comments = [c for c in message.user_comments if not c.startswith("|")]  # the old English
        count += 1
    write_catalog(catalog, path)
    return count


def _po_lines(keyword: str, text: str) -> list[str]:
    """``msgid "…"`` in GNU gettext's no-wrap layout: one line, or ``""`` and one line per ``\\n``."""

    def quoted(piece: str) -> str:
        escaped = piece.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t").replace("\n", "\\n")
        return f'"{escaped}"'

    pieces = re.findall(r"[^\n]*\n|[^\n]+", text)
    if len(pieces) <= 1 and not text.endswith("\n"):
        return [f"{keyword} {quoted(text)}"]
    return [f'{keyword} ""', *(quoted(p) for p in pieces)]


def _entry(message, prefix: str = "") -> list[str]:
    # gettext's order: translator comments, flags, then the previous msgid ("#| msgid …", the old English,
    # which Babel reads as a comment "| msgid …").
    lines = [f"# {c}" for c in message.user_comments if not c.startswith("|")]
    if message.fuzzy:
        lines.append("#, fuzzy")
    lines += ["#" + c for c in message.user_comments if c.startswith("|")]
    lines += _po_lines("msgid", str(message.id)) + _po_lines("msgstr", str(message.string or ""))
    return [line if line.startswith("#") and not prefix else prefix + line for line in lines]


def write_catalog(catalog, path: pathlib.Path) -> None:
    """Write a catalog atomically in GNU gettext's layout (no wrapping, no locations), keeping the header.

    Babel's own writer re-wraps comments and turns msgmerge's ``#| msgid`` lines into plain comments, so
    the entries are written here and normalised by ``msgcat``."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    header = old.split("\n\n", 1)[0] if old.lstrip().startswith(("#", "msgid")) else ""
    if not header:
        header = "\n".join(_po_lines("msgid", "") + _po_lines("msgstr", "Content-Type: text/plain; charset=UTF-8\n"))
    blocks = [header]
    blocks += ["\n".join(_entry(m)) for m in catalog if m.id]
    blocks += ["\n".join(_entry(m, "#~ ")) for m in catalog.obsolete.values()]
    tmp = path.with_suffix(".po.tmp")
    tmp.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    subprocess.run(["msgcat", "--no-wrap", "--no-location", "-o", str(tmp), str(tmp)], check=True)
    os.replace(tmp, path)


def previous_english(message) -> str:
    """The old English of a fuzzy message (msgmerge's ``#| msgid`` lines), or ""."""
    lines = [c[1:].strip() for c in message.user_comments if c.startswith("|")]
    return " ".join(re.sub(r'^msgid\s*', "", line).strip('"') for line in lines)


# ------------------------------------------------------------------------------------------------- build
def build(language: str, extra_args: Iterable[str] = ()) -> pathlib.Path:
    """Build one translated edition and put its HTML in ``_build/html/<folder>/``."""
    folder = LANGUAGES[language]
    base = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    options = dict(base["sphinx"]["config"]["html_theme_options"])
    options["logo"] = {**options.get("logo", {}), "alt_text": ZH_CONFIG["logo_alt"]}
    options["search_bar_text"] = ZH_CONFIG["search_bar_text"]
    config = write_config(
        language,
        {
            "language": language,
            "locale_dirs": ["locales/"],
            "gettext_compact": False,
            "html_theme_options": options,
            # UI strings that no theme catalog has: myst-nb's hidden-cell prompts (book/_ext/editions.py
            # puts 代码/输出 for {type}) and sphinx-togglebutton's dropdown hints.
            "nb_code_prompt_show": "显示{type}",
            "nb_code_prompt_hide": "隐藏{type}",
            "togglebutton_hint": "点击显示",
            "togglebutton_hint_hide": "点击隐藏",
        },
        top={"title": ZH_CONFIG["title"]},
    )
    out = I18N_BUILD / language
    jupyter_book(config, out, "-n", "-W", "--keep-going", *extra_args)
    built = out / "_build" / "html"
    target = HTML / folder
    HTML.mkdir(parents=True, exist_ok=True)
    staging = HTML / f".{folder}.new"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(built, staging)
    old = HTML / f".{folder}.old"
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(staging, target)
    shutil.rmtree(old, ignore_errors=True)
    print(f"Built: {target.relative_to(ROOT)}/index.html")
    return target


def build_all(fresh: bool = False, templates: bool = False) -> int:
    """Build both editions at once (two processes): English into _build/html, Chinese into _build/html/zh.

    Each build's log goes to ``_build/logs/{en,zh_CN}.log``; tests/conftest.py reads them for warnings.
    ``fresh``: remove the earlier output and read every page again (``--all``), as the tests do.
    ``templates``: also build the .pot templates (a third process, ``POT_DIR``), which tests/test_i18n.py
    compares with the catalogs; the English build is done long before the Chinese one (jieba), so a core
    would idle meanwhile."""
    logs = ROOT / "_build" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    if fresh:
        shutil.rmtree(HTML, ignore_errors=True)
        for name in [*LANGUAGES, *(["gettext"] if templates else [])]:
            shutil.rmtree(I18N_BUILD / name, ignore_errors=True)
    more = ["--all"] if fresh else []
    commands = {"en": [_bin("jupyter-book"), "build", str(ROOT), "--path-output", str(ROOT),
                       "-n", "-W", "--keep-going", *more]}
    for language in LANGUAGES:
        commands[language] = [sys.executable, __file__, "build", language, *more]
    if templates:
        commands["gettext"] = [sys.executable, __file__, "templates"]
    running = {}
    for name, cmd in commands.items():
        log = (logs / f"{name}.log").open("w", encoding="utf-8")
        running[name] = (subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), log)
    failed = []
    for name, (proc, log) in running.items():
        proc.wait()
        log.close()
        if proc.returncode:
            failed.append(name)
            print((logs / f"{name}.log").read_text(encoding="utf-8")[-4000:])
    where = {"en": "_build/html/index.html", **{lang: f"_build/html/{d}/index.html" for lang, d in LANGUAGES.items()},
             "gettext": f"{POT_DIR.relative_to(ROOT)}/"}
    for name in commands:
        print(f"{name}: {'FAILED' if name in failed else 'built ' + where[name]} (log: _build/logs/{name}.log)")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("pot", help="refresh the templates and merge them into every catalog")
    b = sub.add_parser("build", help="build a translated edition into _build/html/<folder>/")
    b.add_argument("language", choices=sorted(LANGUAGES))
    b.add_argument("--all", action="store_true", help="read every page again")
    a = sub.add_parser("build-all", help="build both editions at once (logs in _build/logs/)")
    a.add_argument("--fresh", action="store_true", help="remove earlier output and read every page again")
    a.add_argument("--templates", action="store_true", help="also build the .pot templates (as `make test` does)")
    sub.add_parser("templates", help="build the .pot templates only (no merge)")
    c = sub.add_parser("check", help="report untranslated, fuzzy and obsolete messages and broken markup")
    c.add_argument("pages", nargs="*", help="pages to check, e.g. book/03_attention (default: all)")
    c.add_argument("--translated-only", action="store_true", help="check only the messages translated so far")
    sub.add_parser("stats", help="messages per page")
    t = sub.add_parser("todo", help="print a page's untranslated messages as numbered @@ blocks")
    t.add_argument("page")
    t.add_argument("--limit", type=int, default=0)
    f = sub.add_parser("fill", help="set translations from a file of @@ N blocks")
    f.add_argument("page")
    f.add_argument("file", type=pathlib.Path)
    args = parser.parse_args(argv)
    if args.command == "pot":
        pot_dir = build_pot()
        for language in LANGUAGES:
            merge(pot_dir, language)
    elif args.command == "build":
        build(args.language, ["--all"] if args.all else [])
    elif args.command == "build-all":
        return build_all(args.fresh, args.templates)
    elif args.command == "templates":
        print(f"Built: {build_pot().relative_to(ROOT)}/")
    elif args.command == "check":
        problems = [p for language in LANGUAGES for p in check(language, args.pages or None, not args.translated_only)]
        print("\n".join(problems) if problems else "All messages translated; markup and terms kept.")
        return 1 if problems else 0
    elif args.command == "todo":
        print(todo(args.page, limit=args.limit))
    elif args.command == "fill":
        print(f"{fill(args.page, args.file.read_text(encoding='utf-8'))} messages set")
    elif args.command == "stats":
        for language in LANGUAGES:
            print_stats(language)
    return 0


if __name__ == "__main__":
    sys.exit(main())
