"""Chapter 1's exercise checks: a right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import math
from collections import Counter

from companion.exercises.ch01_tokens import WORDPIECE_CHOICES, WORDPIECE_WORDS
from companion.exercises.testing import assert_fails, assert_passes
from companion.tokens import merge_pair


def merge_ok(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def merge_overlapping(ids, pair, new_id):  # merges at every position where the pair starts
    out = []
    for i in range(len(ids)):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
        elif i > 0 and (ids[i - 1], ids[i]) == pair and out and out[-1] == new_id:
            continue
        else:
            out.append(ids[i])
    return out


def merge_drop_last(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def merge_first_only(ids, pair, new_id):
    ids = list(ids)
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return ids[:i] + [new_id] + ids[i + 2 :]
    return ids


def test_bpe_merge() -> None:
    assert_passes("bpe_merge", merge_ok)
    assert_fails("bpe_merge", merge_overlapping, "must not overlap")
    assert_fails("bpe_merge", merge_drop_last, "last id was dropped")
    assert_fails("bpe_merge", merge_first_only, "only the first occurrence")


def train(words, n_merges, *, joined=False, recount=True, tie="smallest", first_id=256):
    seqs = [list(w.encode("utf-8")) for w in words]
    if joined:
        seqs = [[b for s in seqs for b in s]]
    history, frozen = [], None
    for k in range(n_merges):
        counts = Counter(p for s in seqs for p in zip(s, s[1:]))
        if not recount:
            frozen = frozen or sorted(counts.items(), key=lambda pc: (-pc[1], pc[0]))
            pair, count = frozen[k]
        else:
            pair = min(counts, key=lambda p: (-counts[p], p)) if tie == "smallest" else max(counts, key=counts.get)
            count = counts[pair]
        seqs = [merge_pair(s, pair[0], pair[1], first_id + k) for s in seqs]
        history.append((pair, first_id + k, count))
    return history


def test_bpe_train() -> None:
    """Sennrich et al.'s example by hand: 'e s' (9), then 'es t' (9), then 'l o' (7), 'lo w' (7)."""
    assert_passes("bpe_train", train)
    assert_fails("bpe_train", lambda w, n: train(w, n, joined=True), "across word boundaries")
    assert_fails("bpe_train", lambda w, n: train(w, n, recount=False), "recount after every merge")
    assert_fails("bpe_train", lambda w, n: train(w, n, tie="first"), "smallest pair")
    assert_fails("bpe_train", lambda w, n: train(w, n, first_id=255), "start at 256")
    assert_fails("bpe_train", lambda w, n: train(w, n, first_id=0), "start at 256")
    first = train(["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3, 4)
    e, s, t, l, o, w = b"estlow"
    assert first == [((e, s), 256, 9), ((256, t), 257, 9), ((l, o), 258, 7), ((258, w), 259, 7)]


def test_vocab_after_merges() -> None:
    """256 byte tokens + 120 merges + 2 special tokens = 378."""
    assert_passes("vocab_after_merges", 378)
    assert_fails("vocab_after_merges", 122, "256 byte tokens")
    assert_fails("vocab_after_merges", 376, "special tokens")
    assert_fails("vocab_after_merges", 120, "the 256 bytes, the merges and the special tokens")
    assert_fails("vocab_after_merges", 498, "not two")


def test_byte_ids() -> None:
    assert_passes("byte_ids", lambda text: list(text.encode("utf-8")))
    assert_fails("byte_ids", lambda text: text.encode("utf-8"), "bytes object")
    assert_fails("byte_ids", lambda text: [ord(c) for c in text], "code points")
    assert_fails("byte_ids", lambda text: list(text.encode("utf-16-le")), "utf-16")
    assert_fails("byte_ids", lambda text: [list(c.encode()) for c in text], "flatten")


def _likelihood_gain(words: list[str], pair: tuple[str, str]) -> float:
    """Exact change of the unigram log-likelihood sum n_x log(n_x / N) when pair becomes one piece."""

    def log_likelihood(counts: Counter) -> float:
        n = sum(counts.values())
        return sum(c * math.log(c / n) for c in counts.values() if c)

    merged = Counter(p for w in words for p in merge_pair(list(w), *pair, "".join(pair)))
    return log_likelihood(merged) - log_likelihood(Counter(c for w in words for c in w))


def test_wordpiece_first_merge() -> None:
    """The choice is the argmax of Hugging Face's count(ab) / (count(a) count(b)); each wrong one is another rule,
    among them the likelihood gain of Schuster and Nakajima, which picks 'a r' (d)."""
    words = [w for w, n in WORDPIECE_WORDS.items() for _ in range(n)]
    pairs = Counter(p for w in words for p in zip(w, w[1:]))
    units = Counter(c for w in words for c in w)
    rules = {
        "c": lambda p: pairs[p] / (units[p[0]] * units[p[1]]),  # Hugging Face's ratio
        "a": lambda p: pairs[p],  # BPE
        "b": lambda p: pairs[p] / units[p[0]],
        "d": lambda p: _likelihood_gain(words, p),  # the likelihood gain
    }
    for letter, rule in rules.items():
        ranked = sorted(pairs, key=rule, reverse=True)
        assert rule(ranked[0]) > rule(ranked[1]), f"rule {letter} has a tie"
        assert ranked[0] == WORDPIECE_CHOICES[letter], (letter, ranked[0])
    assert round(_likelihood_gain(words, ("a", "r")), 2) == 14.35  # the numbers the hint quotes
    assert round(_likelihood_gain(words, ("r", "c")), 2) == 5.07
    assert_passes("wordpiece_first_merge", "c")
    assert_fails("wordpiece_first_merge", "a", "bpe's rule")
    assert_fails("wordpiece_first_merge", "b", "divided by count(a) only")
    assert_fails("wordpiece_first_merge", "d", "likelihood gain picks")


def test_wordpiece_rules_on_the_chapters_word_list() -> None:
    """Chapter 1's hug/pug/pun/bun/hugs list: the count and the likelihood gain merge 'u g' first, Hugging Face's
    ratio 'g s' (the chapter's claim that the ratio is not a shortcut to the likelihood)."""
    words = ["hug"] * 10 + ["pug"] * 5 + ["pun"] * 12 + ["bun"] * 4 + ["hugs"] * 5
    pairs = Counter(p for w in words for p in zip(w, w[1:]))
    units = Counter(c for w in words for c in w)
    assert max(pairs, key=pairs.get) == ("u", "g")
    assert max(pairs, key=lambda p: _likelihood_gain(words, p)) == ("u", "g")
    assert max(pairs, key=lambda p: pairs[p] / (units[p[0]] * units[p[1]])) == ("g", "s")
