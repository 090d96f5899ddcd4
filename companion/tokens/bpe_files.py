"""The companion BPE file: what ``BPETokenizer.save`` writes and ``BPETokenizer.load`` reads (chapter 01_tokens).

A text file, one merge per line, so that a reader can open it and see the merges in order::

    companion-bpe v1
    pattern "<the pre-split regex as JSON, or null>"
    specials 1
    "<|endoftext|>" 4096
    merges 3840
    32 116 256  # " t"
    ...

Each merge line is "a b new_id" (ids; the comment shows the new token's text). Ids 0..255 are the bytes and
each merge's ``new_id`` is the next free id, unless its bytes already have one (then that id), so the
vocabulary is rebuilt from the merges alone. ``write_bpe_file`` writes atomically (:mod:`companion._files`);
``read_bpe_file`` verifies the file as it reads and names the line of any defect (tests/test_tokens.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

from companion._files import atomic_write_text
from companion.tokens.pretokenize import Splitter

__all__ = ["read_bpe_file", "write_bpe_file"]

_HEADER = "companion-bpe v1"


def write_bpe_file(path: str | Path, pattern: str | None, special_tokens: dict[str, int],
                   merges: dict[tuple[int, int], int], vocab: dict[int, bytes]) -> None:
    """Write the tables of a ``BPETokenizer`` whose bytes are ids 0..255 (atomically)."""
    lines = [_HEADER, f"pattern {json.dumps(pattern)}", f"specials {len(special_tokens)}"]
    lines += [f"{json.dumps(s)} {i}" for s, i in special_tokens.items()]
    lines.append(f"merges {len(merges)}")
    for (a, b), new_id in merges.items():
        shown = vocab[new_id].decode("utf-8", errors="replace")
        lines.append(f"{a} {b} {new_id}  # {json.dumps(shown, ensure_ascii=False)}")
    atomic_write_text(path, "\n".join(lines) + "\n")


def read_bpe_file(path: str | Path) -> tuple[str | None, list[tuple[int, Any, int]], dict[tuple[int, int], int],
                                              dict[int, bytes]]:
    """Read a file written by ``write_bpe_file``.

    Returns:
        the pattern, the special tokens as (line number, token, id) for the caller to register (it names
        the line of a bad one), the merges {(a, b): new_id} in file order and the vocabulary {id: bytes}.

    Raises:
        ValueError: naming the file and the line: a wrong header, bad JSON, a count that does not match the
            lines that follow (a truncated file), a merge naming an id no earlier line defined, trailing
            garbage. ``FileNotFoundError`` if there is no file.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"path={str(path)!r} is a folder; expected a file written by BPETokenizer.save")
    raw = path.read_bytes()  # FileNotFoundError names the path
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ValueError(f"{str(path)!r}, line {line}: not UTF-8 text; expected a file written by "
                         "BPETokenizer.save") from err
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline

    def fail(lineno: int, why: str) -> NoReturn:
        raise ValueError(f"{str(path)!r}, line {lineno}: {why}")

    def line(lineno: int, what: str) -> str:
        if lineno > len(lines):
            fail(lineno, f"the file ends here, but {what} was expected (truncated?)")
        return lines[lineno - 1]

    def parse_json(lineno: int, src: str, what: str) -> Any:
        try:
            return json.loads(src)
        except json.JSONDecodeError as err:
            fail(lineno, f"expected {what}; bad JSON {src!r} ({err.msg})")

    def count(lineno: int, keyword: str) -> int:
        words = line(lineno, f'"{keyword} N"').split(" ")
        if len(words) != 2 or words[0] != keyword or not words[1].isdigit():
            fail(lineno, f'expected "{keyword} N" (N a count), got {lines[lineno - 1]!r}')
        return int(words[1])

    if not lines or lines[0] != _HEADER:
        fail(1, f"not a companion BPE file; expected the header {_HEADER!r}")
    pattern_line = line(2, '"pattern <json>"')
    if not pattern_line.startswith("pattern "):
        fail(2, f'expected "pattern <json>", got {pattern_line!r}')
    pattern = parse_json(2, pattern_line.removeprefix("pattern "), '"pattern <json>"')
    try:
        Splitter(pattern)
    except (TypeError, ValueError) as err:
        fail(2, str(err))

    n_special = count(3, "specials")
    specials: list[tuple[int, Any, int]] = []
    for lineno in range(4, 4 + n_special):
        parts = line(lineno, f"special token {lineno - 3} of {n_special}").rsplit(" ", 1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            fail(lineno, f'expected special token {lineno - 3} of {n_special} as "<json str> id", '
                         f"got {lines[lineno - 1]!r}")
        what = f'special token {lineno - 3} of {n_special} as "<json str> id"'
        specials.append((lineno, parse_json(lineno, parts[0], what), int(parts[1])))

    merges_at = 4 + n_special
    n_merges = count(merges_at, "merges")
    vocab = {i: bytes([i]) for i in range(256)}
    id_of_bytes = {v: k for k, v in vocab.items()}
    merges: dict[tuple[int, int], int] = {}
    for lineno in range(merges_at + 1, merges_at + 1 + n_merges):
        src = line(lineno, f"merge {lineno - merges_at} of {n_merges}").split("#", 1)[0].split()
        if len(src) != 3 or not all(x.isdigit() for x in src):
            fail(lineno, f'expected merge {lineno - merges_at} of {n_merges} as "a b new_id", '
                         f"got {lines[lineno - 1]!r}")
        a, b, new_id = (int(x) for x in src)
        for x in (a, b):
            if x not in vocab:
                fail(lineno, f"the merge names id={x}, which no earlier line defines")
        if (a, b) in merges:
            fail(lineno, f"the pair ({a}, {b}) is merged twice")
        merged = vocab[a] + vocab[b]
        expected = id_of_bytes.get(merged, len(vocab))
        if new_id != expected:
            fail(lineno, f"the merge ({a}, {b}) gives id={new_id}; expected id={expected}")
        merges[(a, b)] = new_id
        vocab[new_id] = merged
        id_of_bytes[merged] = new_id
    last = merges_at + n_merges
    if len(lines) > last:
        fail(last + 1, f"unexpected line after the last of {n_merges} merges: {lines[last]!r}")
    return pattern, specials, merges, vocab
