"""Character tokenizer: one id per character seen in a training text (chapter 01_tokens).

The simplest text -> ids map, the one character-level language models use (e.g. karpathy/nanoGPT's
``shakespeare_char``); no paper to follow. Special tokens (``<pad>``, ``<bos>``...) take the first ids.
Implements the :class:`companion.tokens.base.Tokenizer` interface (``encode``, ``decode``, ``vocab_size``,
``token_to_id``, ``id_to_token``). Checked in ``tests/test_tokens.py``: round trips over mixed Chinese/Latin
text, the id layout, unknown characters, bad vocabularies.

Left out on purpose: a silent fallback for unseen characters (pass ``unk_token`` to ask for one).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from companion.tokens.base import as_id_list, check_text, check_token, check_token_list

__all__ = ["CharTokenizer"]


class CharTokenizer:
    """One id per character. Ids: the special tokens first, in the order given, then the sorted characters.

    An unseen character raises ``ValueError`` naming it (a silent fallback hides bugs in a toy model);
    pass ``unk_token`` to map unseen characters to that token instead.
    """

    def __init__(self, tokens: Sequence[str], *, unk_token: str | None = None) -> None:
        if isinstance(tokens, str) or not isinstance(tokens, Iterable):
            raise TypeError(f"tokens must be a list of str, got {type(tokens).__name__}")
        self.itos: list[str] = list(tokens)
        for k, token in enumerate(self.itos):
            check_token(f"tokens[{k}]", token)
        self.stoi: dict[str, int] = {s: i for i, s in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError(f"tokens={self.itos!r} contains duplicates; expected distinct tokens")
        if unk_token is not None and unk_token not in self.stoi:
            raise ValueError(f"unk_token={unk_token!r} is not in tokens; expected one of the specials")
        self.unk_token = unk_token
        self.specials = [s for s in self.itos if len(s) != 1]
        if unk_token is not None and unk_token not in self.specials:
            self.specials.append(unk_token)
        alternatives = sorted(self.specials, key=len, reverse=True)
        self._special_re = re.compile("|".join(map(re.escape, alternatives))) if alternatives else None

    @classmethod
    def from_text(
        cls, text: str, specials: Iterable[str] = (), *, unk_token: str | None = None
    ) -> CharTokenizer:
        """Build the vocabulary from the characters of ``text`` (``unk_token`` is added to the specials)."""
        check_text("text", text)
        specials = check_token_list("specials", specials)
        if unk_token is not None and unk_token not in specials:
            specials.append(unk_token)
        chars = sorted(set(text) - set(specials))
        return cls(specials + chars, unk_token=unk_token)

    @property
    def vocab_size(self) -> int:
        """The number of ids (specials included)."""
        return len(self.itos)

    def token_to_id(self, token: str) -> int:
        """The id of one character or special token."""
        check_text("token", token)
        if token not in self.stoi:
            raise ValueError(f"token={token!r} is not in the vocabulary")
        return self.stoi[token]

    def id_to_token(self, i: int) -> str:
        """The character or special token of id ``i``."""
        return self._token_of(i)

    def _token_of(self, i: Any) -> str:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"id={i!r} must be an int, got {type(i).__name__}")
        if not 0 <= i < len(self.itos):
            raise ValueError(f"id={i} is out of range; expected 0 <= id < {len(self.itos)}")
        return self.itos[i]

    def _encode_plain(self, text: str, out: list[int]) -> None:
        for ch in text:
            i = self.stoi.get(ch)
            if i is None:
                if self.unk_token is None:
                    raise ValueError(f"character {ch!r} (U+{ord(ch):04X}) is not in the vocabulary; "
                                     "expected one of the training characters, or give unk_token")
                i = self.stoi[self.unk_token]
            out.append(i)

    def encode(self, text: str) -> list[int]:
        """Special tokens written literally in ``text`` become their own id; every other character one id."""
        check_text("text", text)
        out: list[int] = []
        start = 0
        for m in self._special_re.finditer(text) if self._special_re else ():
            self._encode_plain(text[start:m.start()], out)
            out.append(self.stoi[m.group()])
            start = m.end()
        self._encode_plain(text[start:], out)
        return out

    def decode(self, ids: Iterable[int]) -> str:
        """Ids (a list, or a 1-D tensor of any integer dtype) -> text."""
        return "".join(self._token_of(i) for i in as_id_list(ids))
