"""companion.data.markdown: paragraphs of a page and the tags its markup implies, on hand-written examples."""

from __future__ import annotations

import re

import pytest

from companion.data import TAGS, book_snapshot, paragraphs, plain_text, tag_segments

PAGE = """# A heading that is not prose

The first paragraph runs over
two lines and is long enough to keep as a paragraph of its own.

```python
def not_prose(): return "code blocks are left out, however long they are, every single line of them"
```

- a list item is a paragraph of its own, and this one is long enough to be kept as one too.
- short item

| a table row | is not prose either, even when it is very long and has many cells in it |

$$
x = \\frac{a}{b} \\quad \\text{display maths is dropped, however long the formula happens to be}
$$

```{admonition} An errata box
:class: warning
The body of a directive is prose: it is kept, without the option line above it, because it is long.
```
"""


def test_paragraphs_by_hand() -> None:
    assert paragraphs(PAGE, min_chars=40) == [
        "The first paragraph runs over two lines and is long enough to keep as a paragraph of its own.",
        "a list item is a paragraph of its own, and this one is long enough to be kept as one too.",
        "The body of a directive is prose: it is kept, without the option line above it, because it is long.",
    ]
    assert paragraphs(PAGE, min_chars=95) == [
        "The body of a directive is prose: it is kept, without the option line above it, because it is long."
    ]
    assert paragraphs("") == []


def test_tag_segments_by_hand() -> None:
    text = "The **query（查询）** is $q = xW_Q$, see `q_proj` and {cite}`vaswani2017attention` or [the docs](x.html)."
    assert tag_segments(text) == [
        ("The query", "English"), ("（查询）", "Chinese"), (" is ", "English"), ("q = xW_Q", "maths"),
        (", see ", "English"), ("q_proj", "code"), (" and  or the docs.", "English"),
    ]  # fmt: skip
    assert tag_segments("$$a^2$$ then ``x`y``") == [("a^2", "maths"), (" then ", "English"), ("x`y", "code")]
    assert plain_text(text) == "The query（查询） is q = xW_Q, see q_proj and  or the docs."
    assert {tag for _, tag in tag_segments(text)} <= set(TAGS)
    assert tag_segments("") == []


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="markdown must be a str"):
        paragraphs(None)
    with pytest.raises(ValueError, match="min_chars=0 is invalid"):
        paragraphs("text", min_chars=0)
    with pytest.raises(TypeError, match="paragraph must be a str"):
        tag_segments(3)


# --- issue 28, item 1: the fence that closes a directive opens nothing --------------------------------------

NESTED = """```{admonition} A box
:class: note
The box's prose is long enough to be kept as a paragraph, and it sits inside a directive fence.
```

After the box, this paragraph is prose again and must be kept, not skipped up to the next fence.

::::{exercise} Colons nest with more colons
:::{hint}
A hint inside an exercise is prose too, kept without its fences, at any depth of nesting.
:::
::::

````{solution} A solution that shows code
```python
def code_inside_a_directive(): return "left out, however long the line of code happens to be"
```
The sentence after the inner code block, still inside the solution, is prose and must be kept.
````

```{code-cell} python
print("the body of a code-cell directive is code, however long the line happens to be")
```
"""


def test_nested_directives_and_code_by_hand() -> None:
    assert paragraphs(NESTED, min_chars=60) == [
        "The box's prose is long enough to be kept as a paragraph, and it sits inside a directive fence.",
        "After the box, this paragraph is prose again and must be kept, not skipped up to the next fence.",
        "A hint inside an exercise is prose too, kept without its fences, at any depth of nesting.",
        "The sentence after the inner code block, still inside the solution, is prose and must be kept.",
    ]


def _myst_prose_and_code(text: str, prose: list[str], code: list[str]) -> None:
    """What MyST's own parser (markdown-it with the colon-fence and dollar-maths plugins, the book's) calls a
    paragraph and what it calls code; a prose directive's body is parsed again, as MyST does."""
    from markdown_it import MarkdownIt
    from mdit_py_plugins.colon_fence import colon_fence_plugin
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    from companion.data.markdown import _NOT_PROSE

    tokens = MarkdownIt("commonmark").enable("table").use(colon_fence_plugin).use(dollarmath_plugin).parse(text)
    for before, token in zip([None, *tokens], tokens):
        if token.type in ("fence", "colon_fence", "code_block"):
            info = token.info.strip()
            name = info[1:].split("}", 1)[0] if info.startswith("{") else None
            if name is not None and name not in _NOT_PROSE:
                body = [line for line in token.content.splitlines() if not re.match(r"^\s*:[a-z-]+:", line)]
                _myst_prose_and_code("\n".join(body), prose, code)
            else:
                code += [line.strip() for line in token.content.splitlines()]
        elif token.type == "inline" and before.type not in ("th_open", "td_open"):  # table cells are no prose
            prose.append(" ".join(line.strip() for line in token.content.splitlines()))


@pytest.mark.parametrize("chapter", range(12))
def test_book_paragraphs_are_the_myst_parser_s(chapter: int) -> None:
    """On the book's own chapters (the snapshot chapter 12 trains on): exactly the paragraphs MyST parses as
    prose, and no line of code among them. The bare fence closing a directive used to open a code block:
    295 of 947 paragraphs were lost (chapter 5: 56 of 104) and code came out as prose."""
    pytest.importorskip("mdit_py_plugins")
    page = book_snapshot().prose(chapter, chapter)
    prose: list[str] = []
    code: list[str] = []
    _myst_prose_and_code(page, prose, code)
    ours = paragraphs(page)
    assert ours == [p for p in prose if len(p) >= 100]
    code_lines = {line for line in code if len(line) >= 20}
    assert not [p for p in ours if any(line in p for line in code_lines)]


def test_dollar_amounts_are_not_maths() -> None:
    """Inline maths opens with a ``$`` not followed by a space and closes with one not preceded by a space nor
    followed by a digit (pandoc's rule, MyST's dollarmath): "$5 and $10" holds no maths."""
    assert tag_segments("It costs $5 and $10 more.") == [("It costs $5 and $10 more.", "English")]
    assert tag_segments("A $ sign alone, then $x$.") == [("A $ sign alone, then ", "English"), ("x", "maths"),
                                                          (".", "English")]  # fmt: skip
