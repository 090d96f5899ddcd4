"""Tests of companion.data: the toy translation task, the character corpus and the Markov source."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from companion.data import (
    SPECIALS,
    MarkovSource,
    Vocab,
    char_corpus,
    detokenize,
    encode_batch,
    markov_source,
    toy_translation,
    translation_lexicon,
)


@pytest.fixture(scope="module")
def data():
    return toy_translation(seed=0, n_train=2000, n_val=200, n_test=300)


# --- vocabulary --------------------------------------------------------------------------------------------


def test_vocab_specials_and_round_trip():
    vocab = Vocab(SPECIALS + ("I", "love", "NLP"))
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2, 3)
    assert [vocab.tokens[i] for i in range(4)] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    ids = vocab.encode(["I", "love", "NLP"], bos=True, eos=True)
    assert ids == [1, 4, 5, 6, 2]
    assert vocab.decode(ids + [0, 0]) == ["I", "love", "NLP"]
    assert vocab.decode(torch.tensor([1, 4, 2, 5])) == ["I"], "decoding stops at <eos>"
    assert vocab.encode(["cat"]) == [vocab.unk_id]


def test_vocab_rejects_missing_specials():
    with pytest.raises(ValueError, match="must start with"):
        Vocab(("I", "love"))


# --- the toy translation task ---------------------------------------------------------------------------


def test_splits_have_requested_sizes_and_are_disjoint(data):
    assert (len(data.train), len(data.val), len(data.test)) == (2000, 200, 300)
    sources = [tuple(zh) for zh, _ in data.train + data.val + data.test]
    assert len(set(sources)) == len(sources), "every sentence occurs once, so test sentences are unseen"


def test_running_example_is_in_the_test_set(data):
    assert (["我", "爱", "NLP"], ["I", "love", "NLP"]) in data.test
    assert ["我", "爱", "NLP"] not in [zh for zh, _ in data.train]


def test_generation_is_deterministic_and_depends_on_seed(data):
    again = toy_translation(seed=0, n_train=2000, n_val=200, n_test=300)
    other = toy_translation(seed=1, n_train=2000, n_val=200, n_test=300)
    assert again.train == data.train and again.test == data.test
    assert other.train != data.train


def test_every_word_is_in_the_vocabulary(data):
    vocab = data.src_vocab
    assert data.src_vocab is data.tgt_vocab, "shared by default, like Transformer's one embedding table"
    for zh, en in data.train + data.val + data.test:
        assert vocab.unk_id not in vocab.encode(zh) + vocab.encode(en)


def test_separate_vocabularies():
    d = toy_translation(seed=0, n_train=50, n_val=5, n_test=5, shared_vocab=False)
    zh_words, en_words = translation_lexicon()
    assert len(d.src_vocab) == 4 + len(zh_words) and len(d.tgt_vocab) == 4 + len(en_words)
    assert "爱" in d.src_vocab.stoi and "爱" not in d.tgt_vocab.stoi


def test_word_order_differs_between_the_languages(data):
    """Time and place come before the verb in Chinese and after the object in English."""
    verbs = {"爱", "喜欢", "吃", "看", "写", "买", "学习"}
    checked = 0
    for zh, en in data.train:
        if "昨天" in zh:
            checked += 1
            verb_pos = next(i for i, w in enumerate(zh) if w in verbs)
            assert zh.index("昨天") < verb_pos
            assert en[-1] == "yesterday" or en[-2:] == ["yesterday", "?"]
        if "在" in zh:
            verb_pos = next(i for i, w in enumerate(zh) if w in verbs)
            assert zh.index("在") < verb_pos
    assert checked > 20


@pytest.mark.parametrize(
    ("marker", "check"),
    [
        ("吗", lambda en: en[0] in ("do", "does", "did") and en[-1] == "?"),  # questions: do-support
        ("了", lambda en: any(w in en for w in ("ate", "read", "wrote", "bought", "studied", "did"))),  # past
        ("的", lambda en: any(w in en for w in ("my", "your", "his", "her", "our", "their", "'s"))),  # possessive
    ],
)
def test_grammatical_markers_are_translated(data, marker, check):
    pairs = [(zh, en) for zh, en in data.train if marker in zh]
    assert len(pairs) > 50
    assert all(check(en) for _, en in pairs)


def test_grammar_is_a_function_from_chinese_to_english():
    """The same Chinese sentence always gets the same English one (else 100% exact match is impossible)."""
    d = toy_translation(seed=3, n_train=3000, n_val=10, n_test=10)
    seen = {}
    for zh, en in d.train + d.val + d.test:
        assert seen.setdefault(tuple(zh), en) == en


def test_too_many_sentences_is_an_error():
    with pytest.raises(ValueError, match="distinct sentences"):
        toy_translation(n_train=10_000_000)


@pytest.mark.parametrize("name", ["n_train", "n_val", "n_test"])
def test_bad_sizes_raise(name):
    with pytest.raises(ValueError, match=name):
        toy_translation(**{name: 0})


def test_encode_batch_pads_and_frames(data):
    pairs = [
        (["我", "爱", "NLP"], ["I", "love", "NLP"]),
        (["你", "吃", "苹果", "吗"], ["do", "you", "eat", "apples", "?"]),
    ]
    src, tgt = encode_batch(pairs, data.src_vocab, data.tgt_vocab)
    assert src.shape == (2, 5) and tgt.shape == (2, 7)
    assert src[0, 3].item() == data.src_vocab.eos_id and src[0, 4].item() == 0
    assert (tgt[:, 0] == data.tgt_vocab.bos_id).all()
    assert tgt[0].tolist()[-3:] == [data.tgt_vocab.eos_id, 0, 0]
    assert data.tgt_vocab.decode(tgt[1]) == ["do", "you", "eat", "apples", "?"]
    with pytest.raises(ValueError, match="pairs is empty"):
        encode_batch([], data.src_vocab, data.tgt_vocab)


def test_detokenize():
    assert detokenize(["does", "the", "teacher", "'s", "cat", "eat", "apples", "?"]) == (
        "Does the teacher's cat eat apples?"
    )
    assert detokenize(["I", "love", "NLP"]) == "I love NLP"


# --- character corpus -------------------------------------------------------------------------------------


def test_char_corpus_is_small_ascii_text():
    text = char_corpus()
    assert 3000 < len(text) < 20000
    assert text.isascii() and "attention" in text
    assert len(set(text)) < 80, "a small character vocabulary"


# --- Markov source ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("v", "k"), [(4, 1), (8, 2), (5, 3)])
def test_stationary_distribution_is_stationary(v, k):
    src = markov_source(v, k, seed=1)
    pi, p = src.stationary, src.transition
    assert torch.isclose(pi.sum(), torch.tensor(1.0, dtype=torch.float64))
    # one step of the chain maps pi to itself: mass flows from context c to next context (c*v + x) % v^k
    nxt = (torch.arange(v**k)[:, None] * v + torch.arange(v)) % v**k
    moved = torch.zeros_like(pi).index_add_(0, nxt.reshape(-1), (pi[:, None] * p).reshape(-1))
    torch.testing.assert_close(moved, pi, atol=1e-10, rtol=0)


def test_entropy_rate_of_order_one_matches_numpy_eigenvector():
    src = markov_source(6, 1, seed=2)
    p = src.transition.numpy()
    w, vecs = np.linalg.eig(p.T)
    pi = np.real(vecs[:, np.argmin(np.abs(w - 1))])
    pi /= pi.sum()
    expected = -(pi[:, None] * p * np.log(p)).sum()
    assert math.isclose(src.entropy_rate, expected, rel_tol=1e-9)


def test_empirical_log_loss_converges_to_entropy_rate():
    src = markov_source(8, 2, seed=0)
    x = src.sample_batch(64, 400, torch.Generator().manual_seed(0))
    nll = -src.log_prob(x)  # (B, T - k)
    stderr = nll.mean(1).std() / math.sqrt(nll.shape[0])  # rows are independent
    assert abs(nll.mean().item() - src.entropy_rate) < 4 * stderr.item()


@pytest.mark.parametrize(("concentration", "low", "high"), [(1000.0, 0.99, 1.0), (0.05, 0.0, 0.5)])
def test_concentration_controls_entropy(concentration, low, high):
    src = markov_source(16, 1, seed=0, concentration=concentration)
    ratio = src.entropy_rate / math.log(16)  # a uniform chain has entropy log V
    assert low < ratio <= high


def test_sampling_is_reproducible_and_in_range():
    src = markov_source(16, 2, seed=0)
    a = src.sample(500, torch.Generator().manual_seed(7))
    b = src.sample(500, torch.Generator().manual_seed(7))
    assert a.shape == (500,) and torch.equal(a, b)
    assert a.min() >= 0 and a.max() < 16
    batch = src.sample_batch(3, 10, torch.Generator().manual_seed(7))
    assert batch.shape == (3, 10) and batch.dtype == torch.long
    assert torch.isfinite(src.log_prob(batch)).all(), "every sampled transition has non-zero probability"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"vocab_size": 0, "order": 1}, "vocab_size"),
        ({"vocab_size": 4, "order": 0}, "order"),
        ({"vocab_size": 64, "order": 4}, "too many"),
        ({"vocab_size": 4, "order": 1, "concentration": 0.0}, "concentration"),
    ],
)
def test_markov_source_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MarkovSource(**kwargs)


# --- argument checks (issue 13, item 7) and the split into modules (item 5) -------------------------------


@pytest.mark.parametrize(
    ("tokens", "error", "match"),
    [
        (torch.tensor([[0, 1, 16]]), ValueError, r"(?=.*\btokens\b).*token id 16\b.*out of range.*vocab_size=16"),
        (torch.tensor([[0, -1, 2]]), ValueError, r"(?=.*\btokens\b).*token id -1\b.*out of range"),
        (torch.tensor([[0.0, 1.0, 2.0]]), TypeError, r"tokens must hold integer token ids"),
        (torch.tensor([0, 1, 2]), ValueError, r"tokens must have 2 dimensions"),
        (torch.tensor([[0, 1]]), ValueError, r"tokens has shape \(1, 2\); expected T > order=2"),
    ],
)
def test_log_prob_rejects_symbols_outside_the_alphabet(tokens, error, match):
    """An id of 16 in a 16-symbol chain would index the next context's row and return a wrong number."""
    with pytest.raises(error, match=match):
        markov_source(16, 2, seed=0).log_prob(tokens)


def test_log_prob_accepts_every_integer_id_dtype():
    src = markov_source(16, 2, seed=0)
    x = src.sample_batch(2, 12, torch.Generator().manual_seed(0))
    for dtype in (torch.int16, torch.int32):
        torch.testing.assert_close(src.log_prob(x.to(dtype)), src.log_prob(x))


def test_sample_batch_takes_batch_size():
    src = markov_source(8, 1, seed=0)
    new = src.sample_batch(batch_size=3, length=5, generator=torch.Generator().manual_seed(1))
    again = src.sample_batch(3, 5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(new, again) and new.shape == (3, 5)
    with pytest.raises(ValueError, match="batch_size=0"):
        src.sample_batch(0, 5)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"vocab_size": 4, "order": 1, "concentration": float("inf")}, ValueError, "concentration=inf"),
        ({"vocab_size": 4, "order": 1, "concentration": float("nan")}, ValueError, "concentration=nan"),
        ({"vocab_size": 4, "order": 1, "seed": -1}, ValueError, "seed=-1"),
        ({"vocab_size": 4, "order": 1, "seed": 1.5}, TypeError, "seed must be an int"),
    ],
)
def test_markov_source_rejects_non_finite_concentration_and_bad_seeds(kwargs, error, match):
    with pytest.raises(error, match=match):
        MarkovSource(**kwargs)


def test_vocab_rejects_duplicates_empty_tokens_and_out_of_range_ids():
    with pytest.raises(ValueError, match=r"tokens lists \['cat'\] more than once"):
        Vocab(SPECIALS + ("cat", "cat"))
    with pytest.raises(ValueError, match=r"tokens\[4\]='' is invalid; expected a non-empty str"):
        Vocab(SPECIALS + ("",))
    vocab = Vocab(SPECIALS + ("I", "love"))
    with pytest.raises(ValueError, match=r"id=6 is out of range; expected 0 <= id < 6"):
        vocab.decode([1, 4, 6])
    with pytest.raises(ValueError, match=r"id=-1 is out of range"):
        vocab.decode(torch.tensor([-1]))
    with pytest.raises(TypeError, match="tokens must be a list of str"):
        vocab.encode("I love")
    assert vocab.decode(torch.tensor([1, 4, 5, 2], dtype=torch.int32)) == ["I", "love"]
    with pytest.raises(ValueError, match="seed=-2"):
        toy_translation(seed=-2)


def test_every_name_of_the_old_module_is_importable_from_the_package():
    """``companion.data`` became a package (translation / corpus / markov); the old import paths still work."""
    import companion.data as data
    from companion.data import corpus, markov, translation

    for name in data.__all__:
        assert hasattr(data, name), name
    assert data.toy_translation is translation.toy_translation
    assert data.char_corpus is corpus.char_corpus
    assert data.MarkovSource is markov.MarkovSource
    for module in (corpus, markov, translation):
        assert set(module.__all__) <= set(dir(module)), module.__name__
