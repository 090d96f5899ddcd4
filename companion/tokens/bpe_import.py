"""A byte-level BPE from outside: merges and a vocabulary given as bytes, or GPT-2's ``vocab.json``/``merges.txt``.

A byte-level BPE tokenizer is an ordered list of merges, each a pair of byte strings ``(b" t", b"he")``, plus
the ids of its tokens. tiktoken keeps the ids as ``{bytes: int}`` (its ``mergeable_ranks``); Hugging Face
``tokenizers`` and GPT-2's release keep both as text, each byte written as one printable character of
GPT-2's ``bytes_to_unicode`` table (the space is ``Ġ``, the newline ``Ċ``). ``tables_from_merges`` checks
such input and turns it into the id tables of ``BPETokenizer``; ``read_gpt2_files`` reads GPT-2's two files
into bytes first. ``BPETokenizer.from_merges`` and ``BPETokenizer.from_gpt2_files`` are the entry points.

Checked against tiktoken's ``gpt2`` encoding and ``tokenizers``' byte-level BPE built from GPT-2's own files
(tests/test_tokens_gpt2.py): the same ids on a mixed corpus.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from companion.tokens.base import check_token_list

__all__ = ["bytes_to_unicode", "read_gpt2_files", "tables_from_merges"]


@cache
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from each byte to a printable character: printable Latin-1 bytes stand for themselves,
    the other 68 (controls, space, ...) become U+0100, U+0101, ... in byte order (space -> "Ġ")."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in set(printable)]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(others)}}


def _check_piece(name: str, piece: Any) -> bytes:
    if not isinstance(piece, bytes) or not piece:
        raise TypeError(f"{name}={piece!r} must be non-empty bytes, e.g. b' t'")
    return piece


def _check_merges(merges: Any) -> list[tuple[bytes, bytes]]:
    if isinstance(merges, (str, bytes)) or not isinstance(merges, Iterable):
        raise TypeError(f"merges must be a list of pairs of bytes, e.g. [(b' ', b't')], got {type(merges).__name__}")
    out = []
    for k, pair in enumerate(merges):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"merges[{k}]={pair!r} must be a pair of bytes, e.g. (b' ', b't')")
        out.append((_check_piece(f"merges[{k}][0]", pair[0]), _check_piece(f"merges[{k}][1]", pair[1])))
    return out


def _check_vocab(vocab: Any) -> dict[bytes, int]:
    if not isinstance(vocab, Mapping):
        raise TypeError(f"vocab must be a dict {{bytes: int}} (tiktoken's mergeable_ranks), got {type(vocab).__name__}")
    owners: dict[int, bytes] = {}
    for piece, i in vocab.items():
        _check_piece("vocab key", piece)
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or i < 0:
            raise ValueError(f"vocab[{piece!r}]={i!r} is invalid; expected an int id >= 0")
        if i in owners:
            raise ValueError(f"vocab gives id={i} to both {owners[i]!r} and {piece!r}; expected distinct ids")
        owners[int(i)] = piece
    missing = [b for b in range(256) if bytes([b]) not in vocab]
    if missing:
        raise ValueError(f"vocab has no id for the byte {bytes([missing[0]])!r} ({len(missing)} of the 256 single "
                         "bytes are missing); a byte-level vocabulary holds every byte")
    return {piece: int(i) for piece, i in vocab.items()}


def tables_from_merges(merges: Iterable[tuple[bytes, bytes]], vocab: Mapping[bytes, int] | None = None,
                       special_tokens: Iterable[str] = ()
                       ) -> tuple[dict[tuple[int, int], int], dict[int, bytes], dict[str, int]]:
    """Check ``merges`` (and ``vocab``) and number every token: the tables of a ``BPETokenizer``.

    Args:
        merges: pairs of byte strings, highest priority first. Each piece is one byte or made by an earlier
            merge.
        vocab: {bytes: id} with every byte and every merge's result; None numbers as ``BPETokenizer.train``
            does (the bytes are 0..255, each new merge result the next id).
        special_tokens: non-empty strings; an entry of ``vocab`` that no merge makes (GPT-2's
            ``<|endoftext|>``) keeps its id, the others get the ids after the largest.

    Returns:
        ``merges`` {(id, id): new_id} in priority order, ``vocab`` {id: bytes} (specials excluded) and
        ``special_tokens`` {str: id}.

    Raises:
        TypeError: a merge that is not a pair of non-empty bytes, a vocab that is not a dict.
        ValueError: a merge that uses an unknown piece or repeats a pair, a vocab whose ids collide or that
            misses a byte or a merge's result, an entry of vocab that is none of byte, merge result and
            special token, an empty or repeated special token.
    """
    pairs = _check_merges(merges)
    specials = check_token_list("special_tokens", special_tokens)
    given = _check_vocab(vocab) if vocab is not None else None
    id_of = {bytes([b]): (given[bytes([b])] if given is not None else b) for b in range(256)}
    merge_ids: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], int] = {}
    for k, (a, b) in enumerate(pairs):
        for piece in (a, b):
            if piece not in id_of:
                raise ValueError(f"merges[{k}]=({a!r}, {b!r}) uses {piece!r}, which is neither one byte nor made "
                                 "by an earlier merge; expected merges in priority order, each from known pieces")
        pair = (id_of[a], id_of[b])
        if pair in merge_ids:
            raise ValueError(f"merges[{k}]=({a!r}, {b!r}) repeats merges[{where[pair]}]; expected each pair once")
        made = a + b
        if given is not None and made not in given:
            raise ValueError(f"merges[{k}]=({a!r}, {b!r}) makes {made!r}, which vocab has no id for")
        new_id = given[made] if given is not None else id_of.get(made, len(id_of))
        id_of.setdefault(made, new_id)
        merge_ids[pair], where[pair] = new_id, k

    special_ids: dict[str, int] = {}
    for piece, i in (given or {}).items():
        if piece in id_of:
            continue
        token = piece.decode("utf-8", errors="replace")
        if token not in specials or token.encode("utf-8") != piece:
            raise ValueError(f"vocab[{piece!r}]={i} is neither one byte nor made by a merge; if it is a special "
                             "token, list it in special_tokens")
        special_ids[token] = i
    for token in specials:
        if token.encode("utf-8") in id_of:
            raise ValueError(f"special token {token!r} is also an ordinary token (id={id_of[token.encode()]}); "
                             "expected special tokens that merges do not make")
    next_id = max([*id_of.values(), *special_ids.values()]) + 1
    for token in specials:
        if token not in special_ids:
            special_ids[token], next_id = next_id, next_id + 1
    return merge_ids, {i: piece for piece, i in id_of.items()}, special_ids


def _gpt2_text_to_bytes(path: Path, where: str, text: str, decoder: dict[str, int]) -> bytes:
    try:
        return bytes([decoder[c] for c in text])
    except KeyError as err:
        raise ValueError(f"{str(path)!r}, {where}: {text!r} has the character {err.args[0]!r}, which is not one "
                         "of GPT-2's 256 byte characters; expected a byte-level BPE file") from None


def read_gpt2_files(vocab_json: str | Path, merges_txt: str | Path
                    ) -> tuple[list[tuple[bytes, bytes]], dict[bytes, int], list[str]]:
    """Read GPT-2's ``vocab.json`` ({token: id}) and ``merges.txt`` (a ``#version`` line, then "a b" lines).

    Hugging Face's byte-level BPE folders (``vocab.json``, ``merges.txt``) use the same format.

    Returns:
        the merges as byte pairs, the vocabulary {bytes: id}, and its special tokens: the entries that are
        neither one byte nor made by a merge (GPT-2 has one, ``<|endoftext|>``).

    Raises:
        ValueError: naming the file (and line or entry) of anything that is not in this format.
    """
    vocab_json, merges_txt = Path(vocab_json), Path(merges_txt)
    try:
        entries = json.loads(vocab_json.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{str(vocab_json)!r} is not JSON text ({err}); expected GPT-2's vocab.json") from err
    if not isinstance(entries, dict):
        raise ValueError(f"{str(vocab_json)!r} holds a {type(entries).__name__}; expected a JSON object "
                         "{token: id} (GPT-2's vocab.json)")
    decoder = {c: b for b, c in bytes_to_unicode().items()}
    vocab = {_gpt2_text_to_bytes(vocab_json, f"entry {t!r}", t, decoder): i for t, i in entries.items()}
    merges = []
    for lineno, line in enumerate(merges_txt.read_text(encoding="utf-8").split("\n"), start=1):
        line = line.removesuffix("\r")
        if (lineno == 1 and line.startswith("#version")) or not line:
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"{str(merges_txt)!r}, line {lineno}: expected two pieces separated by one space "
                             f"(GPT-2's merges.txt), got {line!r}")
        merges.append(tuple(_gpt2_text_to_bytes(merges_txt, f"line {lineno}", p, decoder) for p in parts))
    made = {a + b for a, b in merges}
    specials = [p.decode("utf-8", errors="replace") for p in vocab if len(p) > 1 and p not in made]
    return merges, vocab, specials
