"""Byte-level byte-pair encoding (BPE) tokenizer (chapter 01_tokens).

Sennrich et al. 2016, "Neural Machine Translation of Rare Words with Subword Units"; byte-level as in
GPT-2 (Radford et al. 2019). Written in the style of karpathy/minbpe, but trained with an incremental
algorithm instead of recounting every pair each step.

Pre-split: before counting pairs, ``train`` cuts the text into chunks with a regular expression and never
merges across a chunk boundary. The default is GPT-4's split (``pattern="gpt4"``, as minbpe's
``RegexTokenizer``); ``"gpt2"`` is GPT-2's (names are case-insensitive), any other string is a regex in the
``regex`` module's syntax, and ``None`` means no pre-split (the whole text is one chunk, which is slow on
big texts). Text the pattern does not match is never dropped: each gap between two matches becomes a chunk
of its own (``pattern=r"\\w+"`` keeps the spaces, as chunks " "), the same as ``tokenizers``'
``Split(pattern, behavior="isolated")``, so ``decode(encode(text)) == text`` for every pattern.

Implements :class:`companion.tokens.base.Tokenizer`. Checked against Hugging Face ``tokenizers``
(tests/test_tokens.py): the trainer produces the same merges, in the same order, as
``tokenizers.trainers.BpeTrainer`` with a ``ByteLevel`` pre-tokenizer (GPT-2, GPT-4, no and partial splits).
``save`` writes atomically (:mod:`companion._files`); ``load`` verifies the file and names the line of
any defect.

Left out on purpose: normalisation (NFC, lower-casing), BPE dropout, SentencePiece.
"""

from __future__ import annotations

import heapq
import json
import numbers
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, NoReturn

from companion._files import atomic_write_text
from companion.tokens.base import as_id_list, check_text, check_token

__all__ = ["GPT2_SPLIT_PATTERN", "GPT4_SPLIT_PATTERN", "BPETokenizer", "merge_pair"]

# Pre-split patterns: text is cut into chunks first and merges never cross a chunk boundary.
GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT4_SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s+"""
)
_NAMED_PATTERNS = {"gpt2": GPT2_SPLIT_PATTERN, "gpt4": GPT4_SPLIT_PATTERN}  # looked up lower-cased
_HEADER = "companion-bpe v1"


def _byte_level_order() -> list[int]:
    """GPT-2's ``bytes_to_unicode`` sorted by code point: printable bytes first, then the others.

    Hugging Face ``tokenizers`` numbers the 256 byte symbols in this order, and breaks ties between
    equally frequent pairs by these numbers, so we rank base bytes the same way.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    return printable + [b for b in range(256) if b not in set(printable)]


_BYTE_RANK = [0] * 256
for _rank, _byte in enumerate(_byte_level_order()):
    _BYTE_RANK[_byte] = _rank


def merge_pair(ids: list[int], a: int, b: int, new_id: int) -> list[int]:
    """Replace every non-overlapping (a, b), left to right, by ``new_id``: [a, a, a] -> [new, a]."""
    out: list[int] = []
    i, n = 0, len(ids)
    while i < n:
        if ids[i] == a and i + 1 < n and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _merge_and_count(ids: list[int], a: int, b: int, new_id: int, weight: int,
                     pair_counts: dict[tuple[int, int], int]) -> tuple[list[int], list[tuple[int, int]]]:
    """``merge_pair`` for training: also update the counts of the neighbouring pairs at each merge site.

    At a site ... p [a b] n ... the pairs (p, a) and (b, n) lose ``weight`` (the chunk's count) and
    (p, new) and (new, n) gain it; p is read from the output, so back-to-back sites chain correctly.
    The count of (a, b) itself is left for the caller to drop. Returns the new ids and the pairs formed.
    """
    out: list[int] = []
    formed: list[tuple[int, int]] = []
    i, n = 0, len(ids)
    while True:
        try:
            j = ids.index(a, i)  # jump to the next candidate at C speed
        except ValueError:
            break
        if j + 1 < n and ids[j + 1] == b:
            out.extend(ids[i:j])
            if out:
                prev = out[-1]
                pair_counts[(prev, a)] -= weight
                pair_counts[(prev, new_id)] += weight
                formed.append((prev, new_id))
            if j + 2 < n:
                nxt = ids[j + 2]
                pair_counts[(b, nxt)] -= weight
                pair_counts[(new_id, nxt)] += weight
                formed.append((new_id, nxt))
            out.append(new_id)
            i = j + 2
        else:
            out.extend(ids[i:j + 1])
            i = j + 1
    out.extend(ids[i:])
    return out, formed


class BPETokenizer:
    """Byte-level BPE: ids 0..255 are the bytes; each merge adds one token made of two earlier ones.

    Attributes: ``merges`` {(id, id): new_id} in training order, ``vocab`` {id: bytes},
    ``merge_history`` [((id, id), new_id, count)], ``special_tokens`` {str: id}, ``pattern`` (str or None).
    """

    def __init__(self) -> None:
        self.merges: dict[tuple[int, int], int] = {}
        self.vocab: dict[int, bytes] = {i: bytes([i]) for i in range(256)}
        self.merge_history: list[tuple[tuple[int, int], int, int]] = []
        self.special_tokens: dict[str, int] = {}
        self.pattern: str | None = None
        self._split = None
        self._ranks: dict[tuple[int, int], int] = {}
        self._cache: dict[str, list[int]] = {}

    # ------------------------------------------------------------------ training
    def train(self, text: str, vocab_size: int, pattern: str | None = "gpt4", *, verbose: bool = False) -> None:
        """Learn merges from ``text`` until the vocabulary holds ``vocab_size`` tokens (specials excluded).

        ``pattern``: "gpt4" (default, GPT-4's split), "gpt2" (names are case-insensitive), a regex
        (``regex`` module syntax; unmatched gaps become chunks of their own), or None (no pre-split).

        Algorithm (same result as recounting every pair each step, much less work):
        1. pre-split ``text`` into chunks and keep each distinct chunk once, with its count;
        2. count every adjacent pair once, weighted by chunk counts, and index pair -> chunks containing it;
        3. pop the best pair from a heap; entries whose count went stale are pushed back with the true
           count (lazy deletion); rewrite only the chunks the index names, updating the pair counts.
        Tie-break (deterministic, the same as Hugging Face ``tokenizers``' BpeTrainer): highest count, then
        the smallest pair, comparing byte tokens in GPT-2's byte-to-unicode order (printable bytes first)
        and merged tokens by id. A merge whose bytes already exist reuses that id, as ``tokenizers`` does.
        Training stops early if no pair is left (every chunk is a single token).
        """
        check_text("text", text)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise TypeError(f"vocab_size must be an int, got {vocab_size!r} ({type(vocab_size).__name__})")
        if vocab_size < 256:
            raise ValueError(f"vocab_size={vocab_size} is too small; expected >= 256 (the byte alphabet)")
        self.__init__()  # start again from the 256 bytes, forgetting earlier training and specials
        self._set_pattern(pattern)
        chunk_counts = Counter(self._pre_split(text))
        words = [list(chunk.encode("utf-8")) for chunk in chunk_counts]
        freqs = list(chunk_counts.values())

        pair_counts: dict[tuple[int, int], int] = defaultdict(int)
        where: dict[tuple[int, int], set[int]] = defaultdict(set)
        for i, (w, f) in enumerate(zip(words, freqs)):
            for pair in zip(w, w[1:]):
                pair_counts[pair] += f
                where[pair].add(i)
        rank = _BYTE_RANK + [0] * (vocab_size - 256)  # tie-break order of each id
        heap = [(-c, rank[a], rank[b], a, b) for (a, b), c in pair_counts.items()]
        heapq.heapify(heap)
        id_of_bytes = {v: k for k, v in self.vocab.items()}

        while len(self.vocab) < vocab_size and heap:
            neg_count, _, _, a, b = heapq.heappop(heap)
            count = pair_counts[(a, b)]
            if count != -neg_count:  # stale entry: push back with the current count (if any is left)
                if count > 0:
                    heapq.heappush(heap, (-count, rank[a], rank[b], a, b))
                continue
            if count < 1:  # a pair formed and then merged away in the same step; nothing is left
                break
            merged = self.vocab[a] + self.vocab[b]
            new_id = id_of_bytes.get(merged, len(self.vocab))
            self.vocab[new_id] = merged
            id_of_bytes[merged] = new_id
            rank[new_id] = new_id
            self.merges[(a, b)] = new_id
            self.merge_history.append(((a, b), new_id, count))
            if verbose:
                print(f"merge {len(self.merges)}: {(a, b)} -> {new_id} {merged!r} had {count} occurrences")

            new_pairs = set()
            for i in where.pop((a, b), ()):  # lazy index: a listed chunk may no longer hold the pair
                words[i], formed = _merge_and_count(words[i], a, b, new_id, freqs[i], pair_counts)
                for pair in formed:
                    where[pair].add(i)
                new_pairs.update(formed)
            del pair_counts[(a, b)]  # every occurrence is gone
            for x, y in new_pairs:
                heapq.heappush(heap, (-pair_counts[(x, y)], rank[x], rank[y], x, y))
        self._ranks = {pair: r for r, pair in enumerate(self.merges)}

    def _set_pattern(self, pattern: str | None) -> None:
        if pattern is not None and not isinstance(pattern, str):
            raise TypeError(f"pattern must be None, 'gpt2', 'gpt4' or a regex str, got {pattern!r}")
        if pattern == "":
            raise ValueError("pattern='' matches nothing; expected 'gpt2', 'gpt4', a regex, or None for no split")
        resolved = _NAMED_PATTERNS.get(pattern.lower(), pattern) if pattern is not None else None
        split = None
        if resolved is not None:
            import regex  # needs \p{L} and possessive quantifiers, which `re` lacks

            try:
                split = regex.compile(resolved)
            except (regex.error, ValueError, TypeError) as err:
                raise ValueError(f"pattern={pattern!r} is not a valid regular expression ({err}); expected "
                                 "'gpt2', 'gpt4', a regex in the `regex` module's syntax, or None") from err
        self.pattern, self._split = resolved, split

    def _pre_split(self, text: str) -> list[str]:
        """Cut ``text`` into chunks: each match of the pattern, and each gap between matches, in order.

        ``"".join(chunks) == text`` always holds: a pattern that skips characters (``\\w+`` skips spaces)
        does not lose them, they become chunks of their own (as ``tokenizers``' ``Split(..., "isolated")``).
        """
        if self._split is None:
            return [text] if text else []
        chunks, pos = [], 0
        for m in self._split.finditer(text):
            start, end = m.span()
            if start > pos:
                chunks.append(text[pos:start])  # a gap the pattern did not cover
            if end > start:
                chunks.append(text[start:end])
            pos = max(pos, end)
        if pos < len(text):
            chunks.append(text[pos:])
        return chunks

    # ------------------------------------------------------------------ special tokens
    def register_special_tokens(self, special_tokens: dict[str, int]) -> None:
        """Declare special tokens, e.g. ``{"<|endoftext|>": 4096}``.

        Tokens are non-empty strings; ids are ints >= 0, distinct from each other and from the vocabulary's
        ids (usually ``vocab_size``, ``vocab_size + 1``...). Registering a token again with a new id moves it.
        Nothing is registered if any entry is invalid.
        """
        if not isinstance(special_tokens, dict):
            raise TypeError(f"special_tokens must be a dict {{str: int}}, got {type(special_tokens).__name__}")
        merged = dict(self.special_tokens)
        for token, i in special_tokens.items():
            check_token("special token", token)
            if isinstance(i, bool) or not isinstance(i, numbers.Integral):
                raise TypeError(f"special token {token!r} has id={i!r} ({type(i).__name__}); expected an int")
            if i < 0:
                raise ValueError(f"special token {token!r} has id={i}; expected an id >= 0")
            if i in self.vocab:
                raise ValueError(f"special token {token!r} has id={i}, which is already taken by the vocabulary "
                                 f"token {self.vocab[i]!r}; expected an id >= {len(self.vocab)}")
            merged[token] = int(i)
        owners: dict[int, str] = {}
        for token, i in merged.items():
            if i in owners:
                raise ValueError(f"special tokens {owners[i]!r} and {token!r} both have id={i}, which is already "
                                 "taken; expected distinct ids")
            owners[i] = token
        self.special_tokens = merged

    @property
    def vocab_size(self) -> int:
        """One more than the largest id (the size of an embedding table for these ids)."""
        return max([*self.vocab, *self.special_tokens.values()]) + 1

    def token_to_id(self, token: str) -> int:
        """The id of a special token, or of the vocabulary token whose bytes are ``token.encode()``."""
        check_text("token", token)
        if token in self.special_tokens:
            return self.special_tokens[token]
        wanted = token.encode("utf-8")
        for i, piece in self.vocab.items():
            if piece == wanted:
                return i
        raise ValueError(f"token={token!r} is not in the vocabulary")

    def id_to_token(self, i: int) -> str:
        """The text of id ``i``; a token that is part of a UTF-8 character shows U+FFFD (``vocab[i]`` has
        its exact bytes)."""
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"id={i!r} must be an int, got {type(i).__name__}")
        for token, j in self.special_tokens.items():
            if j == i:
                return token
        if i not in self.vocab:
            raise ValueError(f"id={i} is not in the vocabulary (size {self.vocab_size})")
        return self.vocab[i].decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ encode / decode
    def _encode_chunk(self, chunk: str) -> list[int]:
        ids = self._cache.get(chunk)
        if ids is not None:
            return ids
        ids = list(chunk.encode("utf-8"))
        while len(ids) >= 2:  # apply the earliest-learned merge present, as in training order
            pair = min(zip(ids, ids[1:]), key=lambda p: self._ranks.get(p, float("inf")))
            if pair not in self._ranks:
                break
            ids = merge_pair(ids, pair[0], pair[1], self.merges[pair])
        if len(self._cache) < 100_000:
            self._cache[chunk] = ids
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode ignoring special tokens (their text is encoded like any other text)."""
        check_text("text", text)
        return [i for chunk in self._pre_split(text) for i in self._encode_chunk(chunk)]

    def encode(self, text: str, allowed_special: Literal["none", "all"] | set[str] = "none") -> list[int]:
        """Text -> ids. ``allowed_special``: "none" (specials are plain text), "all", or a set of specials."""
        check_text("text", text)
        if allowed_special == "none":
            allowed: set[str] = set()
        elif allowed_special == "all":
            allowed = set(self.special_tokens)
        elif isinstance(allowed_special, (set, frozenset)):
            unknown = allowed_special - set(self.special_tokens)
            if unknown:
                raise ValueError(f"allowed_special contains unregistered tokens {sorted(unknown)!r}")
            allowed = set(allowed_special)
        else:
            raise ValueError(f"allowed_special={allowed_special!r} : expected 'none', 'all' or a set")
        if not allowed:
            return self.encode_ordinary(text)
        longest_first = sorted(allowed, key=len, reverse=True)
        special_re = re.compile("(" + "|".join(map(re.escape, longest_first)) + ")")
        out: list[int] = []
        for k, part in enumerate(special_re.split(text)):  # odd positions are the captured specials
            out.extend([self.special_tokens[part]] if k % 2 else self.encode_ordinary(part))
        return out

    def decode(self, ids: Iterable[int]) -> str:
        """Ids (a list, or a 1-D tensor of any integer dtype) -> text.

        Byte sequences that are not valid UTF-8 decode to U+FFFD (errors="replace").
        """
        inverse_special = {i: s.encode("utf-8") for s, i in self.special_tokens.items()}
        parts = []
        for i in as_id_list(ids):
            if i in self.vocab:
                parts.append(self.vocab[i])
            elif i in inverse_special:
                parts.append(inverse_special[i])
            else:
                raise ValueError(f"id={i} is not in the vocabulary (size {self.vocab_size})")
        return b"".join(parts).decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ save / load
    def save(self, path: str | Path) -> None:
        """Write a text file: a header, the pattern, the specials, then one merge per line "a b new_id".

        Atomic (:func:`companion._files.atomic_write`): if writing fails, an existing file at ``path`` keeps
        its old content.
        """
        lines = [_HEADER, f"pattern {json.dumps(self.pattern)}", f"specials {len(self.special_tokens)}"]
        lines += [f"{json.dumps(s)} {i}" for s, i in self.special_tokens.items()]
        lines.append(f"merges {len(self.merges)}")
        for (a, b), new_id in self.merges.items():
            shown = self.vocab[new_id].decode("utf-8", errors="replace")
            lines.append(f"{a} {b} {new_id}  # {json.dumps(shown, ensure_ascii=False)}")
        atomic_write_text(path, "\n".join(lines) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        """Read a file written by ``save``; the vocabulary is rebuilt from the merges.

        The file is verified as it is read; any defect raises a ``ValueError`` naming the file and the line:
        a wrong header, bad JSON, a count that does not match the lines that follow (a truncated file), a
        merge naming an id no earlier line defined, a special token whose id is taken, trailing garbage.
        """
        return _read_bpe_file(cls(), Path(path))


def _read_bpe_file(tok: BPETokenizer, path: Path) -> BPETokenizer:
    """The body of ``BPETokenizer.load``: parse ``path`` line by line into ``tok``."""
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
        tok._set_pattern(pattern)
    except (TypeError, ValueError) as err:
        fail(2, str(err))

    n_special = count(3, "specials")
    specials: list[tuple[int, str, int]] = []
    for lineno in range(4, 4 + n_special):
        parts = line(lineno, f"special token {lineno - 3} of {n_special}").rsplit(" ", 1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            fail(lineno, f'expected special token {lineno - 3} of {n_special} as "<json str> id", '
                         f"got {lines[lineno - 1]!r}")
        what = f'special token {lineno - 3} of {n_special} as "<json str> id"'
        specials.append((lineno, parse_json(lineno, parts[0], what), int(parts[1])))

    merges_at = 4 + n_special
    n_merges = count(merges_at, "merges")
    id_of_bytes = {v: k for k, v in tok.vocab.items()}
    for lineno in range(merges_at + 1, merges_at + 1 + n_merges):
        src = line(lineno, f"merge {lineno - merges_at} of {n_merges}").split("#", 1)[0].split()
        if len(src) != 3 or not all(x.isdigit() for x in src):
            fail(lineno, f'expected merge {lineno - merges_at} of {n_merges} as "a b new_id", '
                         f"got {lines[lineno - 1]!r}")
        a, b, new_id = (int(x) for x in src)
        for x in (a, b):
            if x not in tok.vocab:
                fail(lineno, f"the merge names id={x}, which no earlier line defines")
        if (a, b) in tok.merges:
            fail(lineno, f"the pair ({a}, {b}) is merged twice")
        merged = tok.vocab[a] + tok.vocab[b]
        expected = id_of_bytes.get(merged, len(tok.vocab))
        if new_id != expected:
            fail(lineno, f"the merge ({a}, {b}) gives id={new_id}; expected id={expected}")
        tok.merges[(a, b)] = new_id
        tok.vocab[new_id] = merged
        id_of_bytes[merged] = new_id
    last = merges_at + n_merges
    if len(lines) > last:
        fail(last + 1, f"unexpected line after the last of {n_merges} merges: {lines[last]!r}")
    tok._ranks = {pair: r for r, pair in enumerate(tok.merges)}
    for lineno, token, i in specials:
        try:
            tok.register_special_tokens({token: i})
        except (TypeError, ValueError) as err:
            fail(lineno, str(err))
    return tok
