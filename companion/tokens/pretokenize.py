"""Cutting text into pieces before byte-pair encoding: special tokens, the pre-split pattern, and streams.

BPE never merges across a piece boundary. Two things make boundaries, in this order:

1. **Special tokens** (``<|endoftext|>``) are found first and become one piece each, never split by merges.
   Matching is leftmost-longest: scanning left to right, the earliest occurrence wins, and where several
   specials start there the longest one does (with ``<|endoftext|>`` and ``<|endoftext|><|endoftext|>``
   both registered, the text ``<|endoftext|><|endoftext|>`` is the second, one piece), as in Hugging Face
   ``tokenizers``' added tokens.
2. **The pre-split pattern** cuts the text between specials into chunks: GPT-4's (``"gpt4"``, the default of
   ``BPETokenizer.train``, as minbpe's ``RegexTokenizer``), GPT-2's (``"gpt2"``; names are case-insensitive),
   any other regex in the ``regex`` module's syntax, or ``None`` (no pre-split: all the text is one chunk).
   Text the pattern does not match is never dropped: each gap between two matches is a chunk of its own
   (``pattern=r"\\w+"`` keeps the spaces, as chunks " "), as ``tokenizers``' ``Split(pattern, "isolated")``.

``pieces(text, ...)`` returns the pieces of a whole text. ``stream_pieces(texts, ...)`` returns the same
pieces for the concatenation of ``texts`` (the lines of a file) while holding only a short tail in memory:
after each line it gives out the pieces that no later text can change and keeps the rest. What may change:

* a special token or a part of one that reaches the end (``<|endof`` may become ``<|endoftext|>``, and
  ``<|endoftext|>`` may become ``<|endoftext|><|endoftext|>``);
* the chunks of the whitespace run at the end (GPT-2 gives ``"\\n "`` then ``" b"`` for ``"\\n  b"``, but
  ``"\\n  "`` alone is one chunk) and the chunks that end in the last ``_STREAM_MARGIN`` (8) characters (GPT-2's
  ``'ll``: ``"x'l"`` is ``x ' l`` but ``"x'll"`` is ``x 'll``).

That is exact for the GPT-2 and GPT-4 patterns and for patterns that, like them, decide where a chunk ends
within a few characters past it, except across whitespace (tests/test_tokens_stream.py checks
``stream_pieces`` against ``pieces`` on random texts cut at random places). With ``pattern=None`` the whole
text is one chunk, so a stream is held whole until it ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import regex  # \p{L} and possessive quantifiers, which `re` lacks

from companion.tokens.base import check_text

__all__ = ["GPT2_SPLIT_PATTERN", "GPT4_SPLIT_PATTERN", "Splitter", "pieces", "stream_pieces"]

# Pre-split patterns: text is cut into chunks first and merges never cross a chunk boundary.
GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT4_SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s+"""
)
_NAMED_PATTERNS = {"gpt2": GPT2_SPLIT_PATTERN, "gpt4": GPT4_SPLIT_PATTERN}  # looked up lower-cased
_STREAM_MARGIN = 8  # characters held back at the end of a stream; GPT-2's longest contraction ('ll) needs 3


class Splitter:
    """The two cuts before BPE: ``specials`` (leftmost-longest) then the pre-split ``pattern``.

    Args:
        pattern: "gpt2", "gpt4", a regex (``regex`` module syntax), or None for no pre-split.
        specials: the special tokens to cut out (non-empty strings); empty for none.

    Raises:
        TypeError / ValueError: a pattern that is not None or a str, empty, or not a valid regex.
    """

    def __init__(self, pattern: str | None, specials: Iterable[str] = ()) -> None:
        if pattern is not None and not isinstance(pattern, str):
            raise TypeError(f"pattern must be None, 'gpt2', 'gpt4' or a regex str, got {pattern!r}")
        if pattern == "":
            raise ValueError("pattern='' matches nothing; expected 'gpt2', 'gpt4', a regex, or None for no split")
        self.pattern = _NAMED_PATTERNS.get(pattern.lower(), pattern) if pattern is not None else None
        self.split = None
        if self.pattern is not None:
            try:
                self.split = regex.compile(self.pattern)
            except (regex.error, ValueError, TypeError) as err:
                raise ValueError(f"pattern={pattern!r} is not a valid regular expression ({err}); expected "
                                 "'gpt2', 'gpt4', a regex in the `regex` module's syntax, or None") from err
        self.specials = sorted(set(specials), key=len, reverse=True)  # longest first: the longest one wins
        self.special_re = (regex.compile("|".join(map(regex.escape, self.specials))) if self.specials else None)
        # Every proper prefix of a special: a stream ending in one of them may still complete it.
        self._prefixes = {s[:k] for s in self.specials for k in range(1, len(s))}
        self._first_chars = {s[0] for s in self.specials}
        self._longest = max(map(len, self.specials), default=0)

    def chunks(self, text: str) -> list[str]:
        """Cut ordinary ``text`` (no specials) with the pattern: each match, and each gap between matches.

        ``"".join(chunks) == text`` always holds: a pattern that skips characters (``\\w+`` skips spaces)
        does not lose them, they become chunks of their own (as ``tokenizers``' ``Split(..., "isolated")``).
        """
        if self.split is None:
            return [text] if text else []
        if not self.split.groups:  # fast path: the matches as strings, if they cover the whole text
            found = self.split.findall(text)
            if sum(map(len, found)) == len(text):  # disjoint and in order, so they tile it: no gaps
                return [c for c in found if c]
        out, pos = [], 0
        for m in self.split.finditer(text):
            start, end = m.span()
            if start > pos:
                out.append(text[pos:start])  # a gap the pattern did not cover
            if end > start:
                out.append(text[start:end])
            pos = max(pos, end)
        if pos < len(text):
            out.append(text[pos:])
        return out

    def cut(self, text: str, final: bool) -> tuple[list[tuple[str, bool]], str]:
        """Pieces ``(text, is_special)`` of ``text``, and the tail held back (``""`` when ``final``).

        Not ``final`` (more text may follow): keep back what later text could change (module docstring).
        """
        matches = list(self.special_re.finditer(text)) if self.special_re is not None else []
        hold = len(text) if final else self._special_hold(text, matches)
        out: list[tuple[str, bool]] = []
        start = 0
        for m in matches:
            if m.end() > hold:
                break
            out.extend((c, False) for c in self.chunks(text[start:m.start()]))
            out.append((m.group(), True))
            start = m.end()
        tail = self.chunks(text[start:hold])  # ordinary text that, unless final, later text may continue
        keep = len(tail) if final else _settled_chunks(tail)
        out.extend((c, False) for c in tail[:keep])
        return out, "".join(tail[keep:]) + text[hold:]

    def _special_hold(self, text: str, matches: list[Any]) -> int:
        """The first position from which ``text``'s end is a proper prefix of a special (it may complete).

        A found special grows only if its own start qualifies; positions inside it cannot start one.
        """
        first = max(0, len(text) - self._longest + 1)
        near = []  # the spans of the found specials that reach past `first`
        for m in reversed(matches):
            if m.end() <= first:
                break
            near.append(m.span())
        for p in range(first, len(text)):
            if text[p] in self._first_chars and text[p:] in self._prefixes and not any(s < p < e for s, e in near):
                return p
        return len(text)


def _settled_chunks(chunks: list[str]) -> int:
    """How many leading ``chunks`` no later text can change: those that end before the whitespace run at the
    end and at least ``_STREAM_MARGIN`` (8) characters before the end."""
    end = sum(map(len, chunks))
    cut = end
    for chunk in reversed(chunks):  # move the cut before the whitespace run at the end
        kept = chunk.rstrip()  # str.isspace covers regex's \s (and \x1c-\x1f besides): never too little
        cut -= len(chunk) - len(kept)
        if kept:
            break
    cut = min(cut, end - _STREAM_MARGIN)
    n, pos = 0, 0
    for chunk in chunks:
        pos += len(chunk)
        if pos > cut:
            break
        n += 1
    return n


def pieces(text: str, splitter: Splitter) -> list[tuple[str, bool]]:
    """The pieces ``(text, is_special)`` of a whole text, in order; ``"".join`` of their texts is ``text``."""
    check_text("text", text)
    return splitter.cut(text, final=True)[0]


def stream_pieces(texts: Iterable[str], splitter: Splitter) -> Iterator[tuple[str, bool]]:
    """The pieces of ``"".join(texts)``, the same as ``pieces``, holding only a short tail between texts.

    Raises:
        TypeError: ``texts`` is a single str (iterate over its lines instead) or not iterable; an item that is
            not a str (when it is reached).
    """
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be an iterable of str (e.g. an open file), got {type(texts).__name__}; "
                        "wrap a single text in a list")
    return _stream(texts, splitter)


def _stream(texts: Iterable[str], splitter: Splitter) -> Iterator[tuple[str, bool]]:
    held = ""
    for k, text in enumerate(texts):
        check_text(f"texts[{k}]", text)
        settled, held = splitter.cut(held + text, final=False)
        yield from settled
    yield from splitter.cut(held, final=True)[0]
