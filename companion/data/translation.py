"""The toy zh→en translation task of chapters 2, 8 and 9 (nothing downloaded; generated from a seed).

Chinese→English sentence pairs generated from a small grammar whose word order really differs between the
two languages (time and place before the verb in Chinese, after the object in English; 的-possessives;
measure words 本/只/个…; 了 for the past; yes/no questions with 吗 → do/does/did). It contains the source
notes' running example 我爱NLP → I love NLP (kept in the test set, so the model translates it without having
seen it). Source tokens are Chinese words (the generator knows the segmentation), target tokens are English
words. ``Vocab`` maps tokens to ids with ``<pad>``=0, ``<bos>``=1, ``<eos>``=2, ``<unk>``=3.

Checked in ``tests/test_data.py``: disjoint splits, determinism, the word-order and marker rules, the
grammar being a function from Chinese to English, padding and framing of batches, bad arguments.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch
from torch import Tensor

from companion._checks import check_positive_int
from companion.tokens.base import as_id_list

__all__ = [
    "PAD", "BOS", "EOS", "UNK", "SPECIALS", "Pair", "MAX_SENTENCES", "Vocab", "TranslationData", "toy_translation",
    "translation_lexicon", "detokenize", "encode_batch",
]

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)  # ids 0, 1, 2, 3 in every vocabulary

# ---------------------------------------------------------------------------------------------------------
# The grammar. Each entry pairs the Chinese words with their English rendering.
# Subjects: (zh, en, possessive en, third person singular?)
_SUBJECTS = [("我", "I", "my", False), ("你", "you", "your", False), ("他", "he", "his", True),
             ("她", "she", "her", True), ("我们", "we", "our", False), ("他们", "they", "their", False),
             ("小明", "Xiaoming", "Xiaoming 's", True), ("老师", "the teacher", "the teacher 's", True)]
# Verbs: zh, base, third person singular, past, object kinds it takes
_VERBS = [("爱", "love", "loves", "loved", "animal food thing topic"),
          ("喜欢", "like", "likes", "liked", "animal food thing topic"),
          ("吃", "eat", "eats", "ate", "food"), ("看", "read", "reads", "read", "thing"),
          ("写", "write", "writes", "wrote", "thing"), ("买", "buy", "buys", "bought", "animal food thing"),
          ("学习", "study", "studies", "studied", "topic")]
_STATIVE = {"爱", "喜欢"}
# Countable nouns: zh, singular, plural, measure word, kind
_NOUNS = [("猫", "cat", "cats", "只", "animal"), ("狗", "dog", "dogs", "只", "animal"),
          ("苹果", "apple", "apples", "个", "food"), ("香蕉", "banana", "bananas", "根", "food"),
          ("书", "book", "books", "本", "thing"), ("信", "letter", "letters", "封", "thing")]
_TOPICS = [("NLP", "NLP"), ("数学", "math"), ("音乐", "music"), ("中文", "Chinese")]  # uncountable
_NUMBERS = [("一", None), ("两", "two"), ("三", "three")]  # None: "a"/"an"
_DEMONSTRATIVES = [("这", "this"), ("那", "that")]
_PLACES = [("家", "at home"), ("学校", "at school"), ("公园", "in the park"), ("图书馆", "in the library")]
_TIMES = {"present": [("今天", "today"), ("每天", "every day")], "past": [("今天", "today"), ("昨天", "yesterday")]}

Pair = tuple[list[str], list[str]]
MAX_SENTENCES = 20_000  # the grammar has ~80,000 distinct sentences; sampling 20,000 of them stays quick


def _noun_phrase(rng: random.Random, kinds: list[str]) -> tuple[list[str], list[str]]:
    """A random object: bare plural, number + measure word, demonstrative, possessive, or a topic."""
    if kinds == ["topic"] or ("topic" in kinds and rng.random() < 0.25):
        zh, en = rng.choice(_TOPICS)
        return [zh], [en]
    zh, sing, plural, measure, _ = rng.choice([n for n in _NOUNS if n[4] in kinds])
    form = rng.choice(["bare", "number", "this", "possessive"])
    if form == "bare":  # 猫 → cats (a generic plural)
        return [zh], [plural]
    if form == "number":  # 两 只 猫 → two cats ; 一 个 苹果 → an apple
        num_zh, num_en = rng.choice(_NUMBERS)
        article = num_en or ("an" if sing[0] in "aeiou" else "a")
        return [num_zh, measure, zh], [article, plural if num_en else sing]
    if form == "this":  # 这 本 书 → this book
        dem_zh, dem_en = rng.choice(_DEMONSTRATIVES)
        return [dem_zh, measure, zh], [dem_en, sing]
    owner_zh, _, owner_en, _ = rng.choice(_SUBJECTS)  # 老师 的 书 → the teacher 's book
    return [owner_zh, "的", zh], owner_en.split() + [sing]


def _sentence(rng: random.Random) -> Pair:
    """One derivation of the grammar, rendered in both languages."""
    subj_zh, subj_en, _, third = rng.choice(_SUBJECTS)
    verb_zh, base, third_form, past, kinds = rng.choice(_VERBS)
    stative = verb_zh in _STATIVE  # 爱/喜欢: a state, so no 了, no time and no place ("I love NLP")
    tense = "present" if stative else rng.choice(["present", "past"])
    question = rng.random() < 0.3
    time = rng.choice(_TIMES[tense]) if not stative and rng.random() < 0.5 else None
    place = rng.choice(_PLACES) if not stative and rng.random() < 0.4 else None
    obj_zh, obj_en = _noun_phrase(rng, kinds.split())
    # Chinese: subject [time] [在 place] verb [了] object [吗]
    zh = [subj_zh] + ([time[0]] if time else []) + (["在", place[0]] if place else [])
    zh += [verb_zh] + (["了"] if tense == "past" else []) + obj_zh + (["吗"] if question else [])
    # English: [do/does/did] subject verb object [place] [time] [?]
    if question:
        aux = "did" if tense == "past" else ("does" if third else "do")
        en = [aux] + subj_en.split() + [base]
    else:
        en = subj_en.split() + [past if tense == "past" else (third_form if third else base)]
    en += obj_en + (place[1].split() if place else []) + (time[1].split() if time else [])
    return zh, en + (["?"] if question else [])


def translation_lexicon() -> tuple[list[str], list[str]]:
    """Every Chinese and every English word the grammar can produce, sorted (the vocabularies' content)."""
    zh = {s[0] for s in _SUBJECTS} | {v[0] for v in _VERBS} | {n[0] for n in _NOUNS} | {n[3] for n in _NOUNS}
    zh |= {t[0] for t in _TOPICS} | {n[0] for n in _NUMBERS} | {d[0] for d in _DEMONSTRATIVES}
    zh |= {p[0] for p in _PLACES} | {t[0] for ts in _TIMES.values() for t in ts} | {"在", "了", "吗", "的"}
    en = {w for s in _SUBJECTS for w in (s[1] + " " + s[2]).split()} | {"do", "does", "did", "?", "a", "an"}
    en |= {w for v in _VERBS for w in v[1:4]} | {w for n in _NOUNS for w in n[1:3]} | {t[1] for t in _TOPICS}
    en |= {n[1] for n in _NUMBERS if n[1]} | {d[1] for d in _DEMONSTRATIVES}
    en |= {w for p in _PLACES for w in p[1].split()} | {w for ts in _TIMES.values() for t in ts for w in t[1].split()}
    return sorted(zh), sorted(en)


@dataclass(frozen=True)
class Vocab:
    """A fixed token ↔ id table; ``<pad>``=0, ``<bos>``=1, ``<eos>``=2, ``<unk>``=3, then the words."""

    tokens: tuple[str, ...]  # id -> token
    stoi: dict[str, int] = field(init=False, repr=False, compare=False)  # token -> id

    def __post_init__(self) -> None:
        if isinstance(self.tokens, str) or not isinstance(self.tokens, (tuple, list)):
            raise TypeError(f"tokens must be a tuple of str, got {type(self.tokens).__name__}")
        object.__setattr__(self, "tokens", tuple(self.tokens))
        if tuple(self.tokens[:4]) != SPECIALS:
            raise ValueError(f"tokens must start with {SPECIALS}, got {tuple(self.tokens[:4])}")
        for k, token in enumerate(self.tokens):
            if not isinstance(token, str) or not token:
                raise ValueError(f"tokens[{k}]={token!r} is invalid; expected a non-empty str")
        stoi = {t: i for i, t in enumerate(self.tokens)}
        if len(stoi) != len(self.tokens):
            dupes = sorted({t for t in self.tokens if self.tokens.count(t) > 1})
            raise ValueError(f"tokens lists {dupes!r} more than once; expected distinct tokens")
        object.__setattr__(self, "stoi", stoi)

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, tokens: list[str], *, bos: bool = False, eos: bool = False) -> list[int]:
        """Token strings → ids (unknown words → ``<unk>``), optionally framed by ``<bos>`` … ``<eos>``."""
        if isinstance(tokens, str):
            raise TypeError(f"tokens must be a list of str (words), got the str {tokens!r}; split it first")
        ids = [self.stoi.get(t, self.unk_id) for t in tokens]
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def decode(self, ids: list[int] | Tensor) -> list[str]:
        """Ids (a list, or a 1-D tensor of any integer dtype) → tokens; stops at the first ``<eos>`` and
        drops ``<pad>`` and ``<bos>``."""
        out = []
        for i in as_id_list(ids):
            if not 0 <= i < len(self.tokens):
                raise ValueError(f"id={i} is out of range; expected 0 <= id < {len(self.tokens)} (len(vocab))")
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.bos_id):
                out.append(self.tokens[i])
        return out


@dataclass
class TranslationData:
    """The toy task: vocabularies and three disjoint lists of (zh_tokens, en_tokens) pairs."""

    src_vocab: Vocab  # Chinese words
    tgt_vocab: Vocab  # English words
    train: list[Pair]
    val: list[Pair]
    test: list[Pair]


def toy_translation(
    seed: int = 0, n_train: int = 6000, n_val: int = 300, n_test: int = 500, *, shared_vocab: bool = True
) -> TranslationData:
    """Generate the toy zh→en task; the same ``seed`` gives the same splits on every machine.

    Sentences are distinct, and the three splits are disjoint (no test sentence is seen in training).
    The notes' example ``我 爱 NLP`` → ``I love NLP`` is always in the test set.
    With ``shared_vocab`` (default) ``src_vocab`` and ``tgt_vocab`` are one table holding both languages'
    words, as ``companion.models.Transformer`` shares one embedding matrix between encoder, decoder and
    output (Vaswani et al. 2017 shared one BPE vocabulary); otherwise each language has its own table.
    """
    for name, n in (("n_train", n_train), ("n_val", n_val), ("n_test", n_test)):
        check_positive_int(name, n)
    check_positive_int("seed", seed, allow_zero=True)
    total = n_train + n_val + n_test
    if total > MAX_SENTENCES:
        raise ValueError(f"n_train + n_val + n_test = {total} distinct sentences; expected at most {MAX_SENTENCES}")
    example = (["我", "爱", "NLP"], ["I", "love", "NLP"])
    rng = random.Random(seed)
    pairs: dict[tuple[str, ...], list[str]] = {tuple(example[0]): example[1]}
    while len(pairs) < total:
        zh, en = _sentence(rng)
        assert pairs.setdefault(tuple(zh), en) == en, f"the grammar is ambiguous for {zh}"
    items = [(list(zh), en) for zh, en in pairs.items() if list(zh) != example[0]]
    rng.shuffle(items)
    test = [example] + items[: n_test - 1]
    val = items[n_test - 1 : n_test - 1 + n_val]
    train = items[n_test - 1 + n_val :]
    seen = {tuple(zh) for zh, _ in train}
    assert not seen & {tuple(zh) for zh, _ in val + test}, "splits overlap"
    zh_words, en_words = translation_lexicon()
    if shared_vocab:
        vocab = Vocab(SPECIALS + tuple(sorted(set(zh_words) | set(en_words))))
        return TranslationData(vocab, vocab, train, val, test)
    return TranslationData(Vocab(SPECIALS + tuple(zh_words)), Vocab(SPECIALS + tuple(en_words)), train, val, test)


def detokenize(tokens: list[str]) -> str:
    """English tokens → a readable sentence: ``["does", "he", "love", "NLP", "?"]`` → ``Does he love NLP?``."""
    text = " ".join(tokens).replace(" 's", "'s").replace(" ?", "?")
    return text[:1].upper() + text[1:]


def encode_batch(pairs: list[Pair], src_vocab: Vocab, tgt_vocab: Vocab) -> tuple[Tensor, Tensor]:
    """Pad a list of pairs into ``src`` (B, S) = words ``<eos>`` and ``tgt`` (B, T) = ``<bos>`` words ``<eos>``.

    Padding uses id 0 (``<pad>``) on the right. Teacher forcing feeds ``tgt[:, :-1]`` to the decoder and
    scores its predictions against ``tgt[:, 1:]``.
    """
    if not pairs:
        raise ValueError("pairs is empty; expected at least one (zh_tokens, en_tokens) pair")
    src = [src_vocab.encode(zh, eos=True) for zh, _ in pairs]
    tgt = [tgt_vocab.encode(en, bos=True, eos=True) for _, en in pairs]

    def pad(rows: list[list[int]]) -> Tensor:
        out = torch.full((len(rows), max(map(len, rows))), Vocab.pad_id, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row)
        return out

    return pad(src), pad(tgt)


