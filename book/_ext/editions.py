"""Sphinx extension: the English and Chinese editions of the book (issue 14).

The Chinese edition (简体中文) is built from the same notebooks, with Sphinx's gettext catalogs in
``locales/zh_CN/LC_MESSAGES/<page>.po`` (``scripts/i18n.py`` writes the build configuration). Code,
outputs and figures are written once; only the prose is translated. This extension does three things:

1. **Exercise titles are translatable.** sphinx-exercise builds the subtitle of ``:::{exercise} Title`` as a
   node without a source line, which Sphinx's gettext builder skips. A transform that runs before Sphinx's
   ``Locale`` transform gives the subtitle its source, line and raw text, so the title becomes a message and
   its translation appears in the exercise and in the solution that refers to it.

2. **A language switch on every page.** The header of every page links to the same page in the other
   edition: the English book lives at the site root and the Chinese one under ``zh/`` with the same page
   paths (``book/03_attention.html`` ⇄ ``zh/book/03_attention.html``). The link is a plain relative link,
   so it works offline, from ``file://`` and under any site prefix.

3. **Chinese part captions, solution titles and cell prompts.** The table of contents' part captions are
   looked up in the root page's catalog (sphinx-external-toc adds them after Sphinx translates a page). A solution's title repeats the (translated) title of its
   exercise, and myst-nb's "显示{type}" prompt (set by ``scripts/i18n.py``) gets a Chinese kind word.

4. **The Chinese search index in linear time.** Sphinx 7's ``SearchChinese`` keeps every Latin word it has
   seen in a list and looks each word up in that list before stemming it: time quadratic in the words of
   the book, which is mostly code and outputs in Latin letters: the Chinese build took 204 CPU seconds, the
   English one 21. ``ChineseSearch`` keeps them in a set, as Sphinx 8 does (72 CPU seconds); the index is
   the same.
"""

from __future__ import annotations

import pathlib

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.search.zh import SearchChinese
from sphinx.transforms import SphinxTransform
from sphinx.transforms.post_transforms import SphinxPostTransform

#: The folder of the Chinese edition inside the English site.
ZH_PREFIX = "zh"


def is_chinese(language: str | None) -> bool:
    return bool(language) and language.lower().replace("-", "_").split("_")[0] == "zh"


class TranslatableExerciseSubtitles(SphinxTransform):
    """Give sphinx-exercise's subtitles what the gettext builder and the Locale transform need."""

    default_priority = 10  # before sphinx.transforms.i18n.Locale (20)

    def apply(self) -> None:
        from sphinx_exercise.nodes import exercise_subtitle

        for node in self.document.findall(exercise_subtitle):
            directive = node.parent.parent if node.parent is not None else None
            node.source = self.document["source"]
            node.line = getattr(directive, "line", None) or node.line or 1
            # The message is the rendered text: exercise titles are plain text (tests/test_i18n.py checks).
            node.rawsource = node.astext()
            node["translatable"] = True


class TranslatedExercisesInRegistry(SphinxTransform):
    """After the Locale transform: point sphinx-exercise's registry at the translated exercise nodes.

    A solution's title repeats its exercise's title ("解答 练习 3.1 (…)") from the node the registry
    holds, which is the one built before translation; without this the solution keeps the English."""

    default_priority = 25  # after sphinx.transforms.i18n.Locale (20)

    def apply(self) -> None:
        from sphinx_exercise.nodes import exercise_enumerable_node, exercise_node

        registry = getattr(self.env, "sphinx_exercise_registry", {})
        for node in self.document.findall(lambda n: isinstance(n, (exercise_node, exercise_enumerable_node))):
            entry = registry.get(node.get("label"))
            if entry is not None and entry.get("docname") == self.env.docname:
                entry["node"] = node.deepcopy()  # the doctree node itself gets its title resolved in place


class TranslateTocCaptions(SphinxTransform):
    """Translate the part captions of the table of contents ("Foundations" → 基础).

    sphinx-external-toc inserts the root page's toctrees from _toc.yml (priority 100), after Sphinx's Locale
    transform has run, so their captions would stay English; the gettext builder does extract them (from the
    root page's toctrees), and this transform looks them up in the root page's catalog."""

    default_priority = 110

    def apply(self) -> None:
        from sphinx import addnodes
        from sphinx.locale import init as init_locale
        from sphinx.util.i18n import docname_to_domain

        if not is_chinese(self.config.language) or not self.config.locale_dirs:
            return
        toctrees = [n for n in self.document.findall(addnodes.toctree) if n.get("caption")]
        if not toctrees:
            return
        dirs = [str(pathlib.Path(self.env.srcdir, d)) for d in self.config.locale_dirs]
        domain = docname_to_domain(self.env.docname, self.config.gettext_compact)
        catalog, has_catalog = init_locale(dirs, self.config.language, domain)
        if not has_catalog:
            return
        for node in toctrees:
            node["caption"] = catalog.gettext(node["caption"])


class KeepExerciseSubtitleMessages(SphinxPostTransform):
    """For the gettext builder: keep each exercise subtitle as a message.

    sphinx-exercise's post-transform (priority 20) folds the subtitle into an untranslatable title before the
    gettext builder collects messages, so a copy of it is kept here as a paragraph of the catalog's doctree
    (this builder writes only catalogs)."""

    default_priority = 19
    builders = ("gettext",)

    def run(self, **kwargs) -> None:
        from sphinx_exercise.nodes import exercise_subtitle

        for node in list(self.document.findall(exercise_subtitle)):
            text = node.astext()
            copy = nodes.paragraph(text, text)
            copy.source, copy.line = node.source, node.line
            copy.uid = ""  # the gettext catalog skips nodes without one (replicated nodes)
            node.parent.parent.append(copy)


def language_switch(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """Add ``language_switch`` (url, label, lang) to every page's template context."""
    up = "../" * pagename.count("/")
    if is_chinese(app.config.language):
        context["language_switch"] = {
            "url": f"{up}../{pagename}.html",
            "label": "English",
            "lang": "en",
            "title": "Read this page in English",
        }
    else:
        context["language_switch"] = {
            "url": f"{up}{ZH_PREFIX}/{pagename}.html",
            "label": "中文",
            "lang": "zh-CN",
            "title": "阅读本页的中文版",
        }


# scripts/i18n.py sets myst-nb's prompts to "显示{type}" / "隐藏{type}"; myst-nb fills in an English word.
_TYPE_WORDS = {"source": "代码", "outputs": "输出", "output": "输出"}


def translate_cell_prompts(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Replace the English kind word myst-nb puts into the hidden-cell prompt by its Chinese word."""
    if not is_chinese(app.config.language):
        return
    from myst_nb.sphinx_ import HideCodeCellNode

    for node in doctree.findall(HideCodeCellNode):
        for key in ("prompt_show", "prompt_hide"):
            text = node.get(key, "")
            for english, chinese in _TYPE_WORDS.items():
                if text.endswith(english):
                    text = text[: -len(english)] + chinese
            node[key] = text


class ChineseSearch(SearchChinese):
    """Sphinx's Chinese search language with the Latin words it has seen in a set (a list in Sphinx 7)."""

    def init(self, options: dict[str, str]) -> None:
        super().init(options)
        self.latin_terms: set[str] = set()  # shadows the class's list, shared by every instance in Sphinx 7

    def split(self, input: str) -> list[str]:  # noqa: A002 - the base class's name
        from sphinx.search import zh

        chinese = list(zh.jieba.cut_for_search(input)) if zh.JIEBA else []
        latin = [term.strip() for term in self.latin1_letters.findall(input)]
        self.latin_terms.update(latin)
        return chinese + latin


def setup(app: Sphinx) -> dict:
    app.add_search_language(ChineseSearch)
    app.add_transform(TranslatableExerciseSubtitles)
    app.add_post_transform(KeepExerciseSubtitleMessages)
    app.add_transform(TranslatedExercisesInRegistry)
    app.add_transform(TranslateTocCaptions)
    app.connect("doctree-resolved", translate_cell_prompts)
    app.connect("html-page-context", language_switch)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
