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
marks are removed. Fences nest: a stack holds the open ones (```` ``` ````, ``~~~`` and ``:::`` of any length,
with or without a ``{directive}``), and only a bare fence of the same character, at least as long, closes the
innermost. Checked in tests/test_data_markdown.py on hand-written examples and, on the book's own chapters,
against MyST's parser (markdown-it with its colon-fence and dollar-maths plugins).
"""

from __future__ import annotations

import re

from companion._checks import check_positive_int, check_string

__all__ = ["TAGS", "paragraphs", "plain_text", "tag_segments"]

TAGS = ("English", "Chinese", "maths", "code")  # tag i of a TokenClassifier is TAGS[i]

_FENCE = re.compile(r"^(`{3,}|~{3,}|:{3,})\s*(.*)$")  # a code fence or a MyST directive fence, its info string
_NOT_PROSE = ("code", "code-block", "code-cell", "sourcecode", "literalinclude", "math", "mermaid", "raw",
              "eval-rst", "list-table", "csv-table")  # directives whose body is code, maths or a table
_ROLE = re.compile(r"\{[a-z:-]+\}`[^`]*`")  # {cite}`key`, {ref}`label`: not prose
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")  # [text](target) -> text
# display maths, inline maths (pandoc's rule: no space inside the dollars, no digit after the closing one, so
# "$5 and $10" is no maths), inline code
_MARKUP = re.compile(r"(\$\$.+?\$\$|\$(?=[^\s$])[^$\n]*?(?<=\S)\$(?!\d)|``.+?``|`[^`\n]+?`)")
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
    open_fences: list[tuple[str, bool]] = []  # the fences we are inside of, innermost last: (fence, body is prose)
    in_maths = False
    for line in markdown.splitlines():
        stripped = line.strip()
        fence = _fence(stripped)
        if open_fences and not open_fences[-1][1]:  # inside code: only its closing fence counts
            if fence is not None and _closes(fence, open_fences[-1][0]):
                open_fences.pop()
            continue
        if fence is not None:
            marker, info = fence
            if not info and open_fences and _closes(fence, open_fences[-1][0]):
                open_fences.pop()  # the bare fence that closes the innermost directive
            else:  # a directive ({name}) whose body is prose, or code (```python, a bare ```, {code-cell})
                name = info[1:].split("}", 1)[0] if info.startswith("{") else None
                open_fences.append((marker, name is not None and name not in _NOT_PROSE))
            blocks.append([])  # a fence ends a paragraph
            continue
        if stripped == "$$":
            in_maths = not in_maths
            blocks.append([])
            continue
        if in_maths or stripped.startswith(("#", "|", "<", "$$")) or re.match(r"^:[a-z-]+:", stripped):
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


def _fence(stripped: str) -> tuple[str, str] | None:
    """``(marker, info)`` if the line is a fence (```` ``` ````, ``~~~``, ``:::`` of any length), else None."""
    match = _FENCE.match(stripped)
    if match is None or (match.group(1)[0] == "`" and "`" in match.group(2)):  # ``x`` inline code is no fence
        return None
    return match.group(1), match.group(2).strip()


def _closes(fence: tuple[str, str], opening: str) -> bool:
    """A bare fence of the opening's character, at least as long, closes it (CommonMark, MyST)."""
    marker, info = fence
    return not info and marker[0] == opening[0] and len(marker) >= len(opening)


def tag_segments(paragraph: str) -> list[tuple[str, str]]:
    """``paragraph`` without its markup, as ``(text, tag)`` pieces in order; ``tag`` is one of :data:`TAGS`.

    ``$x$`` / ``$$x$$`` give ``("x", "maths")`` (not "$5 and $10": no space may follow the opening dollar or
    precede the closing one, and no digit follow it), ```x``` gives ``("x", "code")``, runs of CJK characters and
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
