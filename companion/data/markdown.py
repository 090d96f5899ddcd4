"""Markdown prose as labelled data: its paragraphs, and the tag of every piece that its markup implies.

Chapter 12 fine-tunes an encoder on the course's own text, so the labels must come from somewhere honest:

- ``paragraphs(markdown)``: the prose paragraphs of a page (fenced code left out, MyST directive bodies such
  as admonitions and dropdowns kept, headings, tables and display maths dropped), one line each; the
  *chapter* a paragraph comes from is then a label nobody had to invent.
- ``tag_segments(paragraph)``: the paragraph without its markup, cut into pieces tagged ``"English"``,
  ``"Chinese"``, ``"maths"`` or ``"code"``. The tags are what the author marked: ``$...$`` is maths,
  backticks are code, CJK characters (the book's Chinese terms) are Chinese, the rest is English. A tagger
  trained on the pieces sees the text *without* the ``$`` and backticks, so it must recognise maths and
  code by what they look like: the "named-entity recognition" of the source notes, at course scale.

Citations and cross-references (``{cite}`key```) are removed, links keep their text, ``**``/``*`` emphasis
marks are removed. Checked in tests/test_data_markdown.py on hand-written examples.
"""

from __future__ import annotations

import re

from companion._checks import check_positive_int, check_string

__all__ = ["TAGS", "paragraphs", "plain_text", "tag_segments"]

TAGS = ("English", "Chinese", "maths", "code")  # tag i of a TokenClassifier is TAGS[i]

_FENCE = re.compile(r"^(```+|~~~+)(.*)$")
_ROLE = re.compile(r"\{[a-z:-]+\}`[^`]*`")  # {cite}`key`, {ref}`label`: not prose
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")  # [text](target) -> text
_MARKUP = re.compile(r"(\$\$.+?\$\$|\$[^$\n]+?\$|``.+?``|`[^`\n]+?`)")  # display/inline maths, code
_CJK = re.compile(r"([\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]+)")  # ideographs, CJK
# punctuation and full-width forms such as （ ） ， 。


def paragraphs(markdown: str, min_chars: int = 100) -> list[str]:
    """The prose paragraphs of ``markdown`` with at least ``min_chars`` characters, each on one line.

    Fenced code is left out; the bodies of MyST directives (````` ```{admonition} `````, ``:::{exercise}``) are
    kept without their option lines. Headings, table rows, display maths blocks and lines of HTML are dropped;
    list markers are removed (each list item is its own paragraph).
    """
    check_string("markdown", markdown, allow_empty=True)
    check_positive_int("min_chars", min_chars)
    blocks: list[list[str]] = [[]]
    fence: str | None = None  # the backticks that opened a plain code block we are inside of
    in_maths = False
    for line in markdown.splitlines():
        stripped = line.strip()
        if fence is not None:  # inside fenced code: skip up to the closing fence
            if stripped.startswith(fence) and stripped.strip("`~") == "":
                fence = None
            continue
        match = _FENCE.match(stripped)
        if match:
            if not match.group(2).startswith("{"):  # plain code (``` or ```python): skip it
                fence = match.group(1)
            blocks.append([])  # a directive's opening or closing fence ends a paragraph
            continue
        if stripped == "$$":
            in_maths = not in_maths
            blocks.append([])
            continue
        if in_maths or stripped.startswith(("#", "|", "<", ":::", "$$")) or re.match(r"^:[a-z-]+:", stripped):
            blocks.append([])
            continue
        if not stripped:
            blocks.append([])
            continue
        item = re.match(r"^(?:[-*+]|\d+\.)\s+(.*)$", stripped)
        if item:  # a list item starts a paragraph of its own
            blocks.append([item.group(1)])
            continue
        blocks[-1].append(stripped)
    texts = (" ".join(block) for block in blocks if block)
    return [text for text in texts if len(text) >= min_chars]


def tag_segments(paragraph: str) -> list[tuple[str, str]]:
    """``paragraph`` without its markup, as ``(text, tag)`` pieces in order; ``tag`` is one of :data:`TAGS`.

    ``$x$`` / ``$$x$$`` give ``("x", "maths")``, ```x``` gives ``("x", "code")``, runs of CJK characters and
    full-width punctuation give ``"Chinese"``, everything else ``"English"``. Empty pieces are dropped.

    Example: ``"The **query（查询）** is $q = xW_Q$, see `q_proj`."`` gives
    ``[("The query", "English"), ("（查询）", "Chinese"), (" is ", "English"), ("q = xW_Q", "maths"),
    (", see ", "English"), ("q_proj", "code"), (".", "English")]``.
    """
    check_string("paragraph", paragraph, allow_empty=True)
    text = _LINK.sub(r"\1", _ROLE.sub("", paragraph))
    pieces: list[tuple[str, str]] = []
    for part in _MARKUP.split(text):
        if not part:
            continue
        if part.startswith("$"):
            pieces.append((part.strip("$").strip(), "maths"))
        elif part.startswith("`"):
            pieces.append((part.strip("`").strip(), "code"))
        else:
            prose = part.replace("**", "").replace("*", "")
            pieces += [(run, "Chinese" if _CJK.fullmatch(run) else "English") for run in _CJK.split(prose)]
    return [(piece, tag) for piece, tag in pieces if piece]


def plain_text(paragraph: str) -> str:
    """``paragraph`` without its markup: the pieces of :func:`tag_segments`, joined."""
    return "".join(piece for piece, _ in tag_segments(paragraph))
