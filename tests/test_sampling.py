"""companion.generation.sampling against ``transformers``' logits processors (top-k, top-p, min-p, repetition
penalty, no-repeat n-grams), hand-worked min-p, repetition, presence and frequency penalty examples, and
``generate`` with the two new settings."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from companion.generation import (
    BigramModel,
    apply_presence_frequency_penalty,
    apply_repetition_penalty,
    generate,
    min_p_filter,
    no_repeat_ngram_filter,
    top_k_filter,
    top_p_filter,
)

transformers = pytest.importorskip("transformers")
from transformers.generation.logits_process import (  # noqa: E402
    MinPLogitsWarper,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TopKLogitsWarper,
    TopPLogitsWarper,
)


def random_logits(seed: int, rows: int = 4, vocab: int = 50, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * scale


# --- the same tokens as transformers -------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [1, 3, 10])
def test_top_k_equals_transformers(seed: int, k: int) -> None:
    logits = random_logits(seed)
    expected = TopKLogitsWarper(top_k=k)(None, logits.clone())
    assert torch.equal(top_k_filter(logits, k), expected)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("p", [0.3, 0.8, 0.95])
def test_top_p_equals_transformers(seed: int, p: float) -> None:
    logits = random_logits(seed)
    expected = TopPLogitsWarper(top_p=p)(None, logits.clone())
    assert torch.equal(torch.isfinite(top_p_filter(logits, p)), torch.isfinite(expected))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("min_p", [0.0, 0.05, 0.2, 0.9, 1.0])
def test_min_p_equals_transformers(seed: int, min_p: float) -> None:
    logits = random_logits(seed)
    expected = MinPLogitsWarper(min_p=min_p)(None, logits.clone())
    assert torch.equal(min_p_filter(logits, min_p), expected)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("penalty", [0.5, 1.0, 1.3, 2.0])
def test_repetition_penalty_equals_transformers(seed: int, penalty: float) -> None:
    logits = random_logits(seed)
    previous = torch.randint(50, (4, 12), generator=torch.Generator().manual_seed(100 + seed))  # with repeats
    expected = RepetitionPenaltyLogitsProcessor(penalty=penalty)(previous, logits.clone())
    assert_close(apply_repetition_penalty(logits, previous, penalty), expected, rtol=0, atol=0)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_no_repeat_ngram_equals_transformers(seed: int, n: int) -> None:
    """Each row is a random run of 10 ids written twice, so that its last n - 1 tokens occurred before and some
    token is blocked; a small vocabulary adds chance repeats."""
    logits = random_logits(seed, vocab=6)
    half = torch.randint(6, (4, 10), generator=torch.Generator().manual_seed(200 + seed))
    previous = torch.cat([half, half], dim=1)  # (4, 20)
    expected = NoRepeatNGramLogitsProcessor(n)(previous, logits.clone())
    got = no_repeat_ngram_filter(logits, previous, n)
    assert torch.isinf(got).sum() > 0 and torch.equal(got, expected)


# --- hand-worked examples ------------------------------------------------------------------------


def test_min_p_bar_follows_the_top_probability() -> None:
    """Confident row: probabilities [0.90, 0.06, 0.04]; the bar is 0.1 · 0.90 = 0.09, so only the first stays.
    Flat row: [0.4, 0.35, 0.25]; the bar is 0.04, so all three stay."""
    confident = torch.tensor([0.90, 0.06, 0.04]).log()
    flat = torch.tensor([0.40, 0.35, 0.25]).log()
    kept = torch.isfinite(min_p_filter(torch.stack([confident, flat]), 0.1))
    assert kept.tolist() == [[True, False, False], [True, True, True]]
    assert torch.isfinite(min_p_filter(confident, 1.0)).sum() == 1  # min_p = 1: only the most likely token


def test_repetition_penalty_hand_example() -> None:
    """Logits [2, -1, 0.5, 3] after tokens [0, 1, 1]: token 0 (positive) 2 / 2 = 1; token 1 (negative, seen twice)
    -1 · 2 = -2 once, not twice; tokens 2 and 3 unseen, unchanged."""
    out = apply_repetition_penalty(torch.tensor([[2.0, -1.0, 0.5, 3.0]]), torch.tensor([[0, 1, 1]]), 2.0)
    assert out.tolist() == [[1.0, -2.0, 0.5, 3.0]]


@pytest.mark.parametrize(
    ("call", "word"),
    [
        (lambda: min_p_filter(torch.zeros(3), 1.5), "min_p=1.5"),
        (lambda: min_p_filter(torch.zeros(3), -0.1), "min_p=-0.1"),
        (lambda: apply_repetition_penalty(torch.zeros(1, 3), torch.tensor([[0]]), 0.0), "repetition_penalty=0.0"),
        (lambda: apply_repetition_penalty(torch.zeros(1, 3), torch.tensor([[3]]), 1.2), "token id 3"),
        (lambda: apply_repetition_penalty(torch.zeros(2, 3), torch.tensor([[0]]), 1.2), "rows"),
    ],
)
def test_bad_settings_are_rejected_by_name(call, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        call()


def test_presence_and_frequency_penalty_hand_example() -> None:
    """previous = [2, 2, 2, 0]: token 2 seen 3 times, token 0 once, tokens 1 and 3 never. With presence 0.5 and
    frequency 0.25: token 2 loses 0.5 + 3 · 0.25 = 1.25, token 0 loses 0.5 + 0.25 = 0.75, the others nothing,
    whatever the sign of the logit (the repetition penalty would have divided 2.0 but multiplied -1.0)."""
    logits = torch.tensor([[1.0, 0.0, 2.0, -1.0]])
    previous = torch.tensor([[2, 2, 2, 0]])
    got = apply_presence_frequency_penalty(logits, previous, presence=0.5, frequency=0.25)
    assert_close(got, torch.tensor([[0.25, 0.0, 0.75, -1.0]]))
    assert torch.equal(apply_presence_frequency_penalty(logits, previous), logits)  # zero penalties: no change


def test_no_repeat_ngram_hand_example() -> None:
    """previous = the cat sat on the (ids 0 1 2 3 0), n = 2: the prefix is "the", which was followed by "cat",
    so only "cat" (1) is blocked; with n = 3 the prefix "on the" never occurred before, nothing is blocked."""
    previous = torch.tensor([[0, 1, 2, 3, 0]])
    logits = torch.zeros(1, 5)
    assert torch.isinf(no_repeat_ngram_filter(logits, previous, 2))[0].tolist() == [False, True, False, False, False]
    assert torch.isfinite(no_repeat_ngram_filter(logits, previous, 3)).all()
    assert torch.equal(no_repeat_ngram_filter(logits, previous[:, :1], 2), logits)  # shorter than n: unchanged


@pytest.mark.parametrize(("call", "word"), [
    (lambda: no_repeat_ngram_filter(torch.zeros(1, 4), torch.tensor([[0, 1]]), 0), "no_repeat_ngram_size=0"),
    (lambda: apply_presence_frequency_penalty(torch.zeros(1, 4), torch.tensor([[0]]), presence="a"), "presence"),
    (lambda: apply_presence_frequency_penalty(torch.zeros(2, 4), torch.tensor([[0]]), 1.0), "rows"),
    (lambda: no_repeat_ngram_filter(torch.zeros(1, 4), torch.tensor([[0, 9]]), 2), "previous"),
])
def test_new_penalties_reject_bad_input(call, word: str) -> None:
    with pytest.raises((ValueError, TypeError), match=word):
        call()


# --- generate with the new settings --------------------------------------------------------------


def loop_model() -> BigramModel:
    """A bigram table that loops: 0 -> 1 -> 2 -> 1 -> 2 ... greedily; token 3 is the runner-up everywhere."""
    table = torch.full((4, 4), -4.0)
    table[0, 1] = table[1, 2] = table[2, 1] = 2.0
    table[:, 3] = 1.0
    return BigramModel(table, max_seq_len=16)


def test_repetition_penalty_breaks_a_greedy_loop() -> None:
    """Greedy: 1 2 1 2 ... With penalty 3, a seen token's logit 2 becomes 2/3 < 1, so once 1 and 2 have been
    seen, the unseen token 3 (logit 1) wins the fourth step."""
    start = torch.tensor([[0]])
    plain = generate(loop_model(), start, 6, greedy=True, use_cache=False)[0].tolist()
    penalised = generate(loop_model(), start, 6, greedy=True, repetition_penalty=3.0, use_cache=False)[0].tolist()
    assert plain == [0, 1, 2, 1, 2, 1, 2]
    assert penalised[:4] == [0, 1, 2, 3]


def test_generate_with_min_p_never_samples_below_the_bar() -> None:
    """From token 0 the table gives 1 (logit 2), 3 (logit 1) and two tokens at -4: with min_p = 0.3 the bar is
    0.3 · P(1); P(3) / P(1) = e^-1 = 0.37 stays, P(-4) / P(1) = e^-6 goes. 200 draws see only 1 and 3."""
    seen = {int(generate(loop_model(), torch.tensor([[0]]), 1, min_p=0.3, generator=seed, use_cache=False)[0, 1])
            for seed in range(200)}
    assert seen == {1, 3}


@pytest.mark.parametrize(("kwargs", "word"), [(dict(min_p=2.0), "min_p=2.0"),
                                              (dict(repetition_penalty=-1.0), "repetition_penalty=-1.0")])
def test_generate_rejects_bad_new_settings(kwargs: dict, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        generate(loop_model(), torch.tensor([[0]]), 2, **kwargs)
