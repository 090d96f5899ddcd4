"""companion.data.markdown: paragraphs of a page and the tags its markup implies, on hand-written examples."""

from __future__ import annotations

import pytest

from companion.data import TAGS, paragraphs, plain_text, tag_segments

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
