"""Chapter 1 (tokens) checks: one BPE merge step, BPE training, the vocabulary size after k merges, the byte
ids of byte-level BPE, and the pair Hugging Face's WordPiece ratio merges first.

References: :func:`companion.tokens.merge_pair` (the merge step of :class:`companion.tokens.BPETokenizer`),
``BPETokenizer.train`` and its ``merge_history`` and ``vocab_size``, and ``BPETokenizer.encode`` with no merges
(the 256 byte ids). The WordPiece choice is checked against its scores, and against the likelihood gain
that picks another pair, in tests/test_exercises_ch01.py.
"""

from __future__ import annotations

from typing import Any

from companion.exercises._runner import Case, Check, choice_check, value_check

CHAPTER = "01_tokens"


def _list_judge(expected: list[int]) -> Any:
    def judge(out: Any) -> str | None:
        if not isinstance(out, (list, tuple)):
            return f"returned a {type(out).__name__} object, expected a list of ints"
        if list(out) != expected:
            return f"returned {list(out)}, expected {expected}"
        return None

    return judge


_DROP_LAST = (
    "the last id was dropped: loop while i < len(ids) and test i + 1 < len(ids) before reading "
    "ids[i + 1], so that a final id that is not part of a pair is still copied."
)
_FIRST = "only the first occurrence was merged: keep scanning after a merge, every occurrence is replaced."


def _merge_drop_last(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """A classic mistake: the loop stops at len(ids) - 1 and loses an unmerged last id."""
    out, i = [], 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _merge_first(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """A classic mistake: merge the first occurrence only."""
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return list(ids[:i]) + [new_id] + list(ids[i + 2 :])
    return list(ids)


def _bpe_cases() -> list[Case]:
    from companion.tokens import merge_pair

    a, b, x = ord("a"), ord("b"), 256
    overlap = 'occurrences must not overlap: after merging the pair at i, go on at i + 2 ("aaa" -> [X, a]).'
    cases = []
    for label, ids, pair, new_id, hint in [
        ('"abab" with (a, b)', [a, b, a, b], (a, b), x, None),
        ('"aaa" with (a, a)', [a, a, a], (a, a), x, overlap),
        ('"aaaa" with (a, a)', [a, a, a, a], (a, a), x, overlap),
        ("pair absent", [1, 2, 3, 4], (3, 1), 300, "leave the ids unchanged when the pair does not occur."),
        ("pair at the end", [5, 6, 7, 6, 7], (6, 7), 257, "check the last position too (i + 1 < len(ids))."),
        ("reversed pair is not the pair", [b, a, a, b], (a, b), x, "(a, b) is ordered; (b, a) differs."),
        ("single id", [a], (a, a), x, "a list of one id has no pair; don't read past its end."),
        ("empty list", [], (a, b), x, "the empty list merges to the empty list."),
    ]:
        expected = merge_pair(list(ids), pair[0], pair[1], new_id)
        known: list[tuple[Any, str]] = []
        if pair[0] == pair[1]:  # every overlapping occurrence replaced, e.g. "aaa" -> [X, X]
            greedy = [new_id] * (len(ids) - 1) if len(ids) > 1 else ids
            known.append((greedy, overlap))
        for wrong, why in [
            (_merge_drop_last(ids, pair, new_id), _DROP_LAST),
            (_merge_first(ids, pair, new_id), _FIRST),
        ]:
            if wrong != expected:
                known.append((wrong, why))
        cases.append(Case(label, (ids, pair, new_id), _list_judge(expected), hint, mistakes=known))
    return cases


BPE_MERGE = Check(
    name="bpe_merge",
    signature="fn(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int] (a new list)",
    description="one BPE merge: replace each non-overlapping occurrence of pair, left to right, by new_id",
    hint="walk left to right with an index i: if (ids[i], ids[i + 1]) == pair, append new_id and skip 2, "
    "else append ids[i] and skip 1.",
    make_cases=_bpe_cases,
)

# ------------------------------------------------------------------------------------- training BPE


def _history(out: Any) -> list | None:
    """The reader's merge history as [((a, b), new_id, count)], or None if it has another form."""
    try:
        return [((int(p[0]), int(p[1])), int(n), int(c)) for p, n, c in out]
    except (TypeError, ValueError, IndexError):
        return None


def _history_judge(expected: list) -> Any:
    def judge(out: Any) -> str | None:
        got = _history(out)
        if got is None:
            return "did not return a list of ((a, b), new_id, count) triples"
        if len(got) != len(expected):
            return f"returned {len(got)} merges, expected {len(expected)}"
        for k, (g, e) in enumerate(zip(got, expected)):
            if g != e:
                return f"merge {k + 1} is {g}, expected {e}"
        return None

    return judge


def _train_wrong(
    words: list[str],
    n_merges: int,
    *,
    joined: bool = False,
    recount: bool = True,
    tie: str = "smallest",
    first_id: int = 256,
) -> list:
    """Classic wrong trainers, to recognise their output (the right one is BPETokenizer.train)."""
    from companion.tokens import merge_pair

    seqs = [list(w.encode("utf-8")) for w in words]
    if joined:  # all words glued into one sequence: pairs cross word boundaries
        seqs = [[b for s in seqs for b in s]]
    first_counts: dict = {}
    history = []
    for k in range(n_merges):
        counts: dict = {}
        for s in seqs:
            for p in zip(s, s[1:]):
                counts[p] = counts.get(p, 0) + 1
        if not counts:
            break
        if not recount:
            if k == 0:
                first_counts = dict(counts)
                ranked = sorted(first_counts, key=lambda p: (-first_counts[p], p))
            if k >= len(ranked):
                break
            pair = ranked[k]
            count = first_counts[pair]
        else:
            pair = min(counts, key=lambda p: (-counts[p], p)) if tie == "smallest" else max(counts, key=counts.get)
            count = counts[pair]
        new_id = first_id + k
        seqs = [merge_pair(s, pair[0], pair[1], new_id) for s in seqs]
        history.append((pair, new_id, count))
    return history


def _train_cases() -> list[Case]:
    from companion.tokens import BPETokenizer

    cases = []
    for label, words, n in [
        (
            "Sennrich et al.'s low/lower/newest/widest, 8 merges",
            ["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3,
            8,
        ),
        ("a tie: ba x3, ab x3, 2 merges", ["ba"] * 3 + ["ab"] * 3, 2),
        ("words that touch: ab x4, ba x2, 2 merges", ["ab"] * 4 + ["ba"] * 2, 2),
        ("one word: aaabdaaabac, 3 merges", ["aaabdaaabac"], 3),
    ]:
        tok = BPETokenizer()
        tok.train(" ".join(words), 256 + n, pattern=r"\S+")  # one chunk per word: no merge across a space
        expected = [((int(a), int(b)), int(i), int(c)) for (a, b), i, c in tok.merge_history]
        known = []
        for wrong, why in [
            (
                _train_wrong(words, n, joined=True),
                "pairs were counted across word boundaries: count within "
                "each word only (the words are separate sequences).",
            ),
            (
                _train_wrong(words, n, recount=False),
                "the pairs were counted once, before any merge: recount "
                "after every merge, because each merge changes the pairs.",
            ),
            (
                _train_wrong(words, n, tie="first"),
                "a tie was broken by the first pair found (minbpe's rule); this exercise asks for the "
                "smallest pair among the most frequent, min(counts, key=lambda p: (-counts[p], p)).",
            ),
            (_train_wrong(words, n, first_id=255), "new ids start at 256, right after the 256 byte ids."),
            (_train_wrong(words, n, first_id=0), "new ids start at 256: ids 0-255 are already the bytes."),
        ]:
            if wrong != expected:
                known.append((wrong, why))
        cases.append(Case(label, (words, n), _history_judge(expected), mistakes=known))
    return cases


BPE_TRAIN = Check(
    name="bpe_train",
    signature="fn(words: list[str], n_merges: int) -> list of ((a, b), new_id, count), as merge_history",
    description="train byte-level BPE on a word list: count pairs within words, merge the most frequent, repeat",
    hint="start from each word's UTF-8 bytes; at each step count every adjacent pair inside every word, take "
    "min(counts, key=lambda p: (-counts[p], p)), give it the next id (256, 257, ...), merge it everywhere.",
    make_cases=_train_cases,
)

# ------------------------------------------------------------------------------------- vocabulary size

VOCAB_MERGES, VOCAB_SPECIALS = 120, 2


def _vocab_after_merges() -> int:
    from companion.data import char_corpus
    from companion.tokens import BPETokenizer

    tok = BPETokenizer()
    tok.train(char_corpus(), 256 + VOCAB_MERGES, pattern="gpt2")
    tok.register_special_tokens({"<|endoftext|>": tok.vocab_size, "<|pad|>": tok.vocab_size + 1})
    return tok.vocab_size


VOCAB_AFTER_MERGES = value_check(
    "vocab_after_merges",
    _vocab_after_merges,
    description=f"vocab_size of a byte-level BPE after {VOCAB_MERGES} merges and {VOCAB_SPECIALS} special tokens",
    hint="count what is in the table: the base symbols, one entry per merge, one per special token.",
    signature="an int",
    mistakes={
        VOCAB_MERGES + VOCAB_SPECIALS: "the 256 byte tokens are in the vocabulary too: every string starts as bytes.",
        256 + VOCAB_MERGES: "the special tokens get ids of their own, after the merges.",
        VOCAB_MERGES: "the vocabulary holds the 256 bytes, the merges and the special tokens.",
        256 + 2 * VOCAB_MERGES + VOCAB_SPECIALS: "a merge adds one new token (the merged pair), not two.",
    },
    rtol=0.0,
)

# ------------------------------------------------------------------------------------- byte ids


def _ids_judge(expected: list[int]) -> Any:
    def judge(out: Any) -> str | None:
        if isinstance(out, (bytes, bytearray)):
            return "returned a bytes object, expected a list of ints"
        if not isinstance(out, (list, tuple)):
            return f"returned a {type(out).__name__} object, expected a list of ints"
        if any(not isinstance(x, int) for x in out):
            return "returned a list whose items are not all ints"
        if list(out) != expected:
            return f"returned {list(out)}, expected {expected}"
        return None

    return judge


def _byte_cases() -> list[Case]:
    from companion.tokens import BPETokenizer

    base = BPETokenizer()
    base.train("", 256, pattern=None)  # no merges: the base vocabulary of byte-level BPE, ids 0-255
    cases = []
    for label, text in [
        ("ASCII NLP", "NLP"),
        ("Chinese 我爱NLP", "我爱NLP"),
        ("emoji 🤗", "🤗"),
        ("é (2 bytes)", "é"),
        ("empty string", ""),
    ]:
        expected = base.encode(text)
        known = [
            (
                lambda out, t=text: isinstance(out, (bytes, bytearray)) and len(t) > 0,
                "that is a bytes object: wrap it in list(...) to get the ids.",
            ),
            (
                lambda out, t=text: (
                    isinstance(out, list) and out == [ord(c) for c in t] and any(ord(c) > 127 for c in t)
                ),
                "those are Unicode code points (ord), not UTF-8 bytes: 我 is U+6211 but the 3 bytes E6 88 91.",
            ),
            (
                lambda out, t=text: isinstance(out, list) and out == list(t.encode("utf-16-le")) and t != "",
                "that is UTF-16; byte-level BPE starts from the UTF-8 bytes of the text.",
            ),
            (
                lambda out, t=text: (
                    isinstance(out, list) and len(out) == len(t) and any(isinstance(x, list) for x in out)
                ),
                "one list per character: flatten them into one list of byte ids.",
            ),
        ]
        cases.append(Case(label, (text,), _ids_judge(expected), mistakes=known))
    return cases


BYTE_IDS = Check(
    name="byte_ids",
    signature="fn(text: str) -> list[int], the ids of byte-level BPE before any merge",
    description="the starting ids of a byte-level tokenizer: the UTF-8 bytes of the text, one id (0-255) each",
    hint="list(text.encode('utf-8')): ASCII gives 1 byte per character, most Chinese characters 3, an emoji 4.",
    make_cases=_byte_cases,
)

# ------------------------------------------------------------------------------------- WordPiece's score

WORDPIECE_WORDS = {"arc": 5, "pat": 9, "tar": 6, "cat": 3}  # the exercise's word counts
WORDPIECE_CHOICES = {"a": ("a", "t"), "b": ("p", "a"), "c": ("r", "c"), "d": ("a", "r")}

WORDPIECE_FIRST_MERGE = choice_check(
    "wordpiece_first_merge",
    "c",
    tuple(WORDPIECE_CHOICES),
    description="which pair Hugging Face's WordPiece ratio ranks first in arc x5, pat x9, tar x6, cat x3",
    hint="score every adjacent pair by count(ab) / (count(a) · count(b)), counting single letters over all words.",
    mistakes={
        "a": "'a t' is the most frequent pair (12): that is BPE's rule, not the ratio "
        "count(ab) / (count(a) · count(b)).",
        "b": "'p a' has count(ab) / count(a) = 1 (every p is followed by a): you divided by count(a) only; "
        "the ratio divides by count(b) too, and a occurs 23 times.",
        "d": "'a r' is what the likelihood gain picks (Schuster and Nakajima's rule, 14.35 against 5.07 for 'r c'), "
        "not the ratio asked here: count(ab) / (count(a) · count(b)) also divides by count(a) = 23.",
    },
)

CHECKS = [BPE_MERGE, BPE_TRAIN, VOCAB_AFTER_MERGES, BYTE_IDS, WORDPIECE_FIRST_MERGE]
