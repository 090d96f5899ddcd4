"""Learning byte-pair merges from counted chunks: the trainer behind ``BPETokenizer.train`` (chapter 01_tokens).

Sennrich et al. 2016, "Neural Machine Translation of Rare Words with Subword Units", on bytes as GPT-2
(Radford et al. 2019). karpathy/minbpe recounts every pair after each merge; this trainer updates only the
counts around each merge site, which is what makes training on megabytes feasible:

1. keep each distinct chunk once, with its count (the caller pre-splits the text, specials removed);
2. count every adjacent pair once, weighted by chunk counts, and index pair -> chunks containing it;
3. pop the best pair from a heap; entries whose count went stale are pushed back with the true count (lazy
   deletion); rewrite only the chunks the index names, updating the pair counts.

Tie-break (deterministic, the same as Hugging Face ``tokenizers``' BpeTrainer): highest count, then the
smallest pair, comparing byte tokens in GPT-2's byte-to-unicode order (printable bytes first) and merged tokens
by id. A merge whose bytes already exist reuses that id, as ``tokenizers`` does. Checked against
``tokenizers.trainers.BpeTrainer`` (same merges in the same order) in tests/test_tokens.py.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Mapping

from companion.tokens.bpe_import import bytes_to_unicode

__all__ = ["learn_merges"]

# Each byte's place when byte tokens are compared: GPT-2's byte-to-unicode characters sorted by code point.
_BYTE_RANK = [0] * 256
for _rank, (_byte, _) in enumerate(sorted(bytes_to_unicode().items(), key=lambda item: item[1])):
    _BYTE_RANK[_byte] = _rank

Merges = dict[tuple[int, int], int]
History = list[tuple[tuple[int, int], int, int]]


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


def learn_merges(chunk_counts: Mapping[str, int], vocab_size: int, *,
                 verbose: bool = False) -> tuple[Merges, dict[int, bytes], History]:
    """Merges learned from ``chunk_counts`` ({chunk: count}) until the vocabulary holds ``vocab_size`` tokens.

    Ids 0..255 are the bytes. Stops early if no pair is left (every chunk is a single token).

    Returns:
        ``merges`` {(id, id): new_id} in training order, ``vocab`` {id: bytes}, and the history
        [((id, id), new_id, count)], count being the pair's count when it was merged.
    """
    vocab = {i: bytes([i]) for i in range(256)}
    merges: Merges = {}
    history: History = []
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
    id_of_bytes = {v: k for k, v in vocab.items()}

    while len(vocab) < vocab_size and heap:
        neg_count, _, _, a, b = heapq.heappop(heap)
        count = pair_counts[(a, b)]
        if count != -neg_count:  # stale entry: push back with the current count (if any is left)
            if count > 0:
                heapq.heappush(heap, (-count, rank[a], rank[b], a, b))
            continue
        if count < 1:  # a pair formed and then merged away in the same step; nothing is left
            break
        merged = vocab[a] + vocab[b]
        new_id = id_of_bytes.get(merged, len(vocab))
        vocab[new_id] = merged
        id_of_bytes[merged] = new_id
        rank[new_id] = new_id
        merges[(a, b)] = new_id
        history.append(((a, b), new_id, count))
        if verbose:
            print(f"merge {len(merges)}: {(a, b)} -> {new_id} {merged!r} had {count} occurrences")

        new_pairs = set()
        for i in where.pop((a, b), ()):  # lazy index: a listed chunk may no longer hold the pair
            words[i], formed = _merge_and_count(words[i], a, b, new_id, freqs[i], pair_counts)
            for pair in formed:
                where[pair].add(i)
            new_pairs.update(formed)
        del pair_counts[(a, b)]  # every occurrence is gone
        for x, y in new_pairs:
            heapq.heappush(heap, (-pair_counts[(x, y)], rank[x], rank[y], x, y))
    return merges, vocab, history
