"""The interface every tokenizer of :mod:`companion.tokens` offers, and the checks they share.

``Tokenizer`` is a ``typing.Protocol``: any object with these five members fits, whether or not it
inherits from anything (``isinstance(tok, Tokenizer)`` checks that the members exist)::

    encode(text: str) -> list[int]             text -> ids
    decode(ids) -> str                          ids -> text; ids may be a list, a tuple, a 1-D tensor or
                                                array of any integer dtype, so tok.decode(generate(...)[0])
                                                works directly
    vocab_size: int                             one more than the largest id (rows of an embedding table)
    token_to_id(token: str) -> int              one token's id (ValueError naming it if unknown)
    id_to_token(i: int) -> str                  one id's token (ValueError naming it if out of range)

``CharTokenizer``, ``BPETokenizer`` and ``WordPieceTokenizer`` implement it (tests/test_tokens.py checks
each). The shared argument checks live here too: ``check_text``, ``check_token``, ``check_token_list`` and
``as_id_list``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

__all__ = ["Tokenizer", "as_id_list", "check_text", "check_token", "check_token_list"]


@runtime_checkable
class Tokenizer(Protocol):
    """What the course's code needs from a tokenizer (see the module docstring for each member)."""

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int] | torch.Tensor | np.ndarray) -> str: ...

    def token_to_id(self, token: str) -> int: ...

    def id_to_token(self, i: int) -> str: ...


def check_text(name: str, text: Any) -> None:
    """Raise ``TypeError`` unless ``text`` is a ``str``."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")


def check_token(name: str, token: Any) -> None:
    """A token is a non-empty ``str``: the empty string would match everywhere and encode to nothing."""
    if not isinstance(token, str):
        raise TypeError(f"{name}={token!r} must be a str, got {type(token).__name__}")
    if not token:
        raise ValueError(f"{name}='' is the empty string; expected a non-empty token")


def check_token_list(name: str, tokens: Any) -> list[str]:
    """``tokens`` (a list, tuple... of distinct non-empty ``str``) as a list; a lone ``str`` is refused."""
    if isinstance(tokens, (str, bytes)):
        raise TypeError(f"{name} must be a list of str, got the {type(tokens).__name__} {tokens!r}")
    if isinstance(tokens, Mapping) or not isinstance(tokens, Iterable):
        raise TypeError(f"{name} must be a list of str, got {type(tokens).__name__}")
    out = list(tokens)
    for k, token in enumerate(out):
        check_token(f"{name}[{k}]", token)
        if token in out[:k]:
            raise ValueError(f"{name}[{k}]={token!r} repeats {name}[{out.index(token)}]; expected distinct tokens")
    return out


def as_id_list(ids: Any, name: str = "ids") -> list[int]:
    """``ids`` as a list of Python ints; accepts a list/tuple of ints, or a 1-D tensor/array of integers.

    Any integer dtype is accepted (int8 ... int64, uint8); floats, bools and 2-D batches are rejected with
    a message naming ``name`` (a batch from ``generate`` is (B, T): decode one row, ``ids[0]``).
    Range is not checked here: each tokenizer knows its own vocabulary.
    """
    if isinstance(ids, (torch.Tensor, np.ndarray)):
        kind = "tensor" if isinstance(ids, torch.Tensor) else "array"
        is_int = (not ids.dtype.is_floating_point and not ids.dtype.is_complex and ids.dtype != torch.bool
                  if isinstance(ids, torch.Tensor) else np.issubdtype(ids.dtype, np.integer))
        if not is_int:
            raise TypeError(f"{name} must hold integers, got a {kind} of dtype {ids.dtype}")
        if ids.ndim != 1:
            hint = "; decode one sequence, e.g. ids[0]" if ids.ndim == 2 else ""
            raise ValueError(f"{name} must be 1-D, got a {kind} of shape {tuple(ids.shape)}{hint}")
        return [int(i) for i in ids.tolist()]
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise TypeError(f"{name} must be a sequence of ints or a 1-D integer tensor, got {type(ids).__name__}")
    out = []
    for i in ids:
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"{name} must hold ints, got {i!r} ({type(i).__name__})")
        out.append(int(i))
    return out
