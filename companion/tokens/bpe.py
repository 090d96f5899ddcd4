"""Byte-level byte-pair encoding (BPE) tokenizer (chapter 01_tokens).

Sennrich et al. 2016, "Neural Machine Translation of Rare Words with Subword Units"; byte-level as in
GPT-2 (Radford et al. 2019). Written in the style of karpathy/minbpe, but trained with an incremental
algorithm instead of recounting every pair each step.

Checked against Hugging Face ``tokenizers`` (tests/test_tokens.py): the trainer produces the same merges,
in the same order, as ``tokenizers.trainers.BpeTrainer`` with a ``ByteLevel`` pre-tokenizer.

Left out on purpose: normalisation (NFC, lower-casing), BPE dropout, SentencePiece.
"""

from __future__ import annotations

import heapq
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from companion.tokens._common import _check_text

__all__ = ["GPT2_SPLIT_PATTERN", "GPT4_SPLIT_PATTERN", "BPETokenizer", "merge_pair"]

# Pre-split patterns: text is cut into chunks first and merges never cross a chunk boundary.
GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT4_SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s+"""
)
_NAMED_PATTERNS = {"gpt2": GPT2_SPLIT_PATTERN, "gpt4": GPT4_SPLIT_PATTERN}
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
    def train(self, text: str, vocab_size: int, pattern: str | None = None, *, verbose: bool = False) -> None:
        """Learn merges from ``text`` until the vocabulary holds ``vocab_size`` tokens (specials excluded).

        ``pattern``: None (no pre-split), "gpt2", "gpt4", or a regex (``regex`` module syntax).

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
        _check_text("text", text)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise TypeError(f"vocab_size must be an int, got {vocab_size!r} ({type(vocab_size).__name__})")
        if vocab_size < 256:
            raise ValueError(f"vocab_size={vocab_size} is too small; expected >= 256 (the byte alphabet)")
        self.__init__()  # start again from the 256 bytes, forgetting earlier training and specials
        self._set_pattern(pattern)
        chunk_counts = Counter(self._split.findall(text) if self._split else [text])
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
        self.pattern = _NAMED_PATTERNS.get(pattern, pattern) if pattern is not None else None
        self._split = None
        if self.pattern is not None:
            import regex  # needs \p{L} and possessive quantifiers, which `re` lacks

            self._split = regex.compile(self.pattern)

    # ------------------------------------------------------------------ special tokens
    def register_special_tokens(self, special_tokens: dict[str, int]) -> None:
        """Declare special tokens, e.g. ``{"<|endoftext|>": 4096}``; ids must not clash with the vocab."""
        for token, i in special_tokens.items():
            if not isinstance(token, str) or not token:
                raise TypeError(f"special token {token!r} must be a non-empty str")
            if i in self.vocab or (i in self.special_tokens.values() and self.special_tokens.get(token) != i):
                raise ValueError(f"special token {token!r} has id={i}, which is already taken")
        self.special_tokens.update(special_tokens)

    @property
    def vocab_size(self) -> int:
        """One more than the largest id (the size of an embedding table for these ids)."""
        return max([*self.vocab, *self.special_tokens.values()]) + 1

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
        _check_text("text", text)
        chunks = self._split.findall(text) if self._split else ([text] if text else [])
        return [i for chunk in chunks for i in self._encode_chunk(chunk)]

    def encode(self, text: str, allowed_special: Literal["none", "all"] | set[str] = "none") -> list[int]:
        """Text -> ids. ``allowed_special``: "none" (specials are plain text), "all", or a set of specials."""
        _check_text("text", text)
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
        """Ids -> text. Byte sequences that are not valid UTF-8 decode to U+FFFD (errors="replace")."""
        inverse_special = {i: s.encode("utf-8") for s, i in self.special_tokens.items()}
        parts = []
        for i in ids:
            if i in self.vocab:
                parts.append(self.vocab[i])
            elif i in inverse_special:
                parts.append(inverse_special[i])
            else:
                raise ValueError(f"id={i} is not in the vocabulary (size {self.vocab_size})")
        return b"".join(parts).decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ save / load
    def save(self, path: str | Path) -> None:
        """Write a text file: a header, the pattern, the specials, then one merge per line "a b new_id"."""
        lines = [_HEADER, f"pattern {json.dumps(self.pattern)}", f"specials {len(self.special_tokens)}"]
        lines += [f"{json.dumps(s)} {i}" for s, i in self.special_tokens.items()]
        lines.append(f"merges {len(self.merges)}")
        for (a, b), new_id in self.merges.items():
            shown = self.vocab[new_id].decode("utf-8", errors="replace")
            lines.append(f"{a} {b} {new_id}  # {json.dumps(shown, ensure_ascii=False)}")
        Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        """Read a file written by ``save``; the vocabulary is rebuilt from the merges."""
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        if not lines or lines[0] != _HEADER:
            raise ValueError(f"path={str(path)!r} is not a companion BPE file; expected header {_HEADER!r}")
        tok = cls()
        tok._set_pattern(json.loads(lines[1].removeprefix("pattern ")))
        n_special = int(lines[2].removeprefix("specials "))
        specials = {}
        for line in lines[3:3 + n_special]:
            token, i = line.rsplit(" ", 1)
            specials[json.loads(token)] = int(i)
        n_merges = int(lines[3 + n_special].removeprefix("merges "))
        for line in lines[4 + n_special:4 + n_special + n_merges]:
            a, b, new_id = (int(x) for x in line.split("#", 1)[0].split())
            tok.merges[(a, b)] = new_id
            tok.vocab[new_id] = tok.vocab[a] + tok.vocab[b]
        tok._ranks = {pair: r for r, pair in enumerate(tok.merges)}
        tok.register_special_tokens(specials)
        return tok
