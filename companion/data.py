"""The course's data: a toy zh→en translation task, a small English corpus, a source of known entropy.

Nothing is downloaded; everything is generated from a seed or shipped with the package.

- ``toy_translation``: Chinese→English sentence pairs generated from a small grammar whose word order really
  differs between the two languages (time and place before the verb in Chinese, after the object in
  English; 的-possessives; measure words 本/只/个…; 了 for the past; yes/no questions with 吗 → do/does/did).
  It contains the source notes' running example 我爱NLP → I love NLP (kept in the test set, so the model
  translates it without having seen it). Source tokens are Chinese words (the generator knows the
  segmentation), target tokens are English words.
- ``char_corpus``: a few KB of English prose about transformers, written for this course, for the
  character-level language model.
- ``markov_source``: a random order-k Markov chain whose entropy rate (nats/token) is computed exactly,
  the irreducible loss E of the scaling-law experiment (Kaplan et al. 2020; Hoffmann et al. 2022).
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field
from importlib import resources

import numpy as np
import torch
from torch import Tensor

from companion._checks import check_positive_int

__all__ = [
    "PAD", "BOS", "EOS", "UNK", "SPECIALS", "Vocab", "TranslationData", "toy_translation",
    "translation_lexicon", "detokenize", "encode_batch", "char_corpus", "MarkovSource", "markov_source",
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
        if tuple(self.tokens[:4]) != SPECIALS:
            raise ValueError(f"tokens must start with {SPECIALS}, got {tuple(self.tokens[:4])}")
        object.__setattr__(self, "stoi", {t: i for i, t in enumerate(self.tokens)})

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, tokens: list[str], *, bos: bool = False, eos: bool = False) -> list[int]:
        """Token strings → ids (unknown words → ``<unk>``), optionally framed by ``<bos>`` … ``<eos>``."""
        ids = [self.stoi.get(t, self.unk_id) for t in tokens]
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def decode(self, ids: list[int] | Tensor) -> list[str]:
        """Ids → tokens; stops at the first ``<eos>`` and drops ``<pad>`` and ``<bos>``."""
        out = []
        for i in (ids.tolist() if isinstance(ids, Tensor) else ids):
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


def char_corpus() -> str:
    """About 5 KB of plain English about transformers, written for this course (ASCII only)."""
    return resources.files("companion").joinpath("data_files/char_corpus.txt").read_text(encoding="utf-8")


class MarkovSource:
    """A stationary order-``k`` Markov chain over ``V`` symbols with a known entropy rate.

    The next-symbol distribution of each of the ``V**k`` contexts is drawn from a symmetric Dirichlet;
    a smaller ``concentration`` gives peakier rows and a lower entropy. The entropy rate is exact:

        H = Σ_c π(c) · H(P(· | c))   (nats/token),

    where π is the stationary distribution of the chain on contexts, found by power iteration. No model can
    reach a cross-entropy below H on this source: it is the ``E`` of a scaling law ``L(N) = E + A N^-α``.
    """

    def __init__(self, vocab_size: int, order: int, seed: int = 0, concentration: float = 0.5) -> None:
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("order", order)
        if vocab_size ** order > 1 << 16:
            raise ValueError(f"vocab_size**order = {vocab_size}**{order} contexts is too many; expected <= 65536")
        if not concentration > 0:
            raise ValueError(f"concentration={concentration} must be > 0")
        self.vocab_size, self.order = vocab_size, order
        rows = np.random.default_rng(seed).dirichlet(np.full(vocab_size, float(concentration)), size=vocab_size**order)
        rows = np.maximum(rows, 1e-300)  # a draw can underflow to 0 for tiny concentrations
        self.transition = torch.from_numpy(rows / rows.sum(-1, keepdims=True))  # (V^k, V) float64
        self.stationary = self._stationary()  # (V^k,)
        row_entropy = -(self.transition * self.transition.log()).sum(-1)  # (V^k,)
        self.entropy_rate = float((self.stationary * row_entropy).sum())  # nats/token

    def _next_context(self, ctx: Tensor, token: Tensor) -> Tensor:
        """Context id after emitting ``token``: drop the oldest symbol, append the new one."""
        return (ctx * self.vocab_size + token) % (self.vocab_size ** self.order)

    def _stationary(self, iters: int = 20_000, tol: float = 1e-13) -> Tensor:
        """π with π P = π on contexts: a direct linear solve for small chains, power iteration for big ones."""
        n_ctx = self.vocab_size**self.order
        successors = self._next_context(torch.arange(n_ctx)[:, None], torch.arange(self.vocab_size))  # (V^k, V)
        if n_ctx <= 1024:
            p = torch.zeros(n_ctx, n_ctx, dtype=torch.float64)  # (V^k, V^k) context-to-context transitions
            p.scatter_add_(1, successors, self.transition)
            a = (p.T - torch.eye(n_ctx, dtype=torch.float64)).clone()
            a[-1] = 1.0  # replace one (redundant) balance equation by sum(pi) = 1
            b = torch.zeros(n_ctx, dtype=torch.float64)
            b[-1] = 1.0
            return torch.linalg.solve(a, b)
        pi = torch.full((n_ctx,), 1.0 / n_ctx, dtype=torch.float64)
        for _ in range(iters):
            flow = (pi[:, None] * self.transition).reshape(-1)
            new = torch.zeros_like(pi).index_add_(0, successors.reshape(-1), flow)
            new = 0.5 * (new + pi)  # a lazy chain has the same π and cannot oscillate
            if (new - pi).abs().sum() < tol:
                return new
            pi = new
        return pi

    def sample_batch(self, batch: int, length: int, generator: torch.Generator | None = None) -> Tensor:
        """``batch`` independent sequences of ``length`` symbols, each started in the stationary state.

        Shapes: returns (B, T) int64.
        """
        check_positive_int("batch", batch)
        check_positive_int("length", length)
        ctx = torch.multinomial(self.stationary, batch, replacement=True, generator=generator)  # (B,)
        cdf = self.transition.cumsum(-1)  # (V^k, V): sample by inverting the cumulative distribution
        uniforms = torch.rand(length, batch, 1, dtype=torch.float64, generator=generator)  # (T, B, 1)
        out = torch.empty(batch, length, dtype=torch.long)
        for t in range(length):
            token = torch.searchsorted(cdf[ctx], uniforms[t]).squeeze(1)  # (B,)
            token = token.clamp_max(self.vocab_size - 1)  # guards a cdf that ends at 1 - 1e-16
            out[:, t] = token
            ctx = self._next_context(ctx, token)
        return out

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """One stream of ``n`` symbols (shape (n,)), started in the stationary state.

        A plain Python loop with ``bisect``: for one long stream it is much faster than tensor calls.
        """
        check_positive_int("n", n)
        ctx = int(torch.multinomial(self.stationary, 1, generator=generator))
        cdf = self.transition.cumsum(-1).tolist()
        uniforms = torch.rand(n, dtype=torch.float64, generator=generator).tolist()
        out, v, n_ctx = [], self.vocab_size, self.vocab_size**self.order
        for u in uniforms:
            token = min(bisect.bisect_right(cdf[ctx], u), v - 1)
            out.append(token)
            ctx = (ctx * v + token) % n_ctx
        return torch.tensor(out, dtype=torch.long)

    def log_prob(self, tokens: Tensor) -> Tensor:
        """Exact ``log P(x_t | previous k symbols)`` for t >= k of a (B, T) batch: shape (B, T - k)."""
        k, v = self.order, self.vocab_size
        ctx = torch.zeros(tokens.shape[0], dtype=torch.long)
        for j in range(k):
            ctx = ctx * v + tokens[:, j]
        out = []
        for t in range(k, tokens.shape[1]):
            out.append(self.transition[ctx, tokens[:, t]].log())
            ctx = self._next_context(ctx, tokens[:, t])
        return torch.stack(out, dim=1)


def markov_source(vocab_size: int = 16, order: int = 2, seed: int = 0, concentration: float = 0.5) -> MarkovSource:
    """A random order-``order`` Markov chain over ``vocab_size`` symbols; see :class:`MarkovSource`."""
    return MarkovSource(vocab_size, order, seed, concentration)

