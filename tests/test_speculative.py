"""Speculative decoding (companion.generation.speculative): the acceptance rule keeps the target's distribution,
greedy speculative decoding returns the target's greedy tokens, and a perfect draft is always accepted."""

from __future__ import annotations

import pytest
import torch

from companion.generation import BigramModel, generate, speculative_accept, speculative_generate
from companion.models import GPT, ModelConfig

V = 6


def distributions(seed: int, rows: int, vocab: int = V) -> torch.Tensor:
    return torch.softmax(torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 1.5, dim=-1)


def total_variation(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * float((a - b).abs().sum())


@pytest.mark.parametrize("seed", range(3))
def test_one_round_emits_the_targets_distribution_not_the_drafts(seed: int) -> None:
    """k = 1: the first emitted token is the accepted draft token or the residual draw. Over 200,000 rounds its
    frequencies match p to sampling noise (TV ~ 0.005), while p and q themselves differ far more."""
    p1, p2, q1 = distributions(seed, 1), distributions(seed + 10, 1), distributions(seed + 20, 1)
    n = 200_000
    g = torch.Generator().manual_seed(seed)
    draft = torch.multinomial(q1.expand(n, V), 1, replacement=True, generator=g)  # (N, 1): x ~ q
    p = torch.stack([p1, p2], dim=1).expand(n, 2, V)  # (N, 2, V)
    n_acc, next_id = speculative_accept(p, q1[:, None].expand(n, 1, V), draft, g)
    first = torch.where(n_acc == 1, draft[:, 0], next_id)  # the first emitted token
    freq = torch.bincount(first, minlength=V) / n
    assert total_variation(freq, p1[0]) < 0.01 < 0.1 < total_variation(p1[0], q1[0])
    # the acceptance rate is the overlap of the two distributions, sum_x min(p(x), q(x))
    assert abs(float(n_acc.float().mean()) - float(torch.minimum(p1, q1).sum())) < 0.01


def test_two_drafted_tokens_keep_the_joint_distribution_of_a_bigram_target() -> None:
    """k = 2 on bigram tables: the first two emitted tokens (x, y) follow P_target(x) · P_target(y | x)."""
    p_table, q_table = distributions(1, V), distributions(2, V)  # row a: next-token distribution after a
    n, start = 200_000, 0
    g = torch.Generator().manual_seed(0)
    x1 = torch.multinomial(q_table[start].expand(n, V), 1, replacement=True, generator=g)[:, 0]
    x2 = torch.multinomial(q_table[x1], 1, generator=g)[:, 0]
    p = torch.stack([p_table[start].expand(n, V), p_table[x1], p_table[x2]], dim=1)  # (N, 3, V)
    q = torch.stack([q_table[start].expand(n, V), q_table[x1]], dim=1)  # (N, 2, V)
    n_acc, next_id = speculative_accept(p, q, torch.stack([x1, x2], dim=1), g)
    first = torch.where(n_acc >= 1, x1, next_id)
    second = torch.where(n_acc == 2, x2, next_id)
    keep = n_acc >= 1  # rounds that emitted at least two tokens; otherwise the second comes next round
    joint = torch.zeros(V, V).index_put_((first[keep], second[keep]), torch.ones(int(keep.sum())), accumulate=True)
    # rounds that rejected x1 emit one token only; the second token would come from a new round started at it,
    # which is again drawn from P_target(. | first): mix in the exact conditional for them
    for a in range(V):
        joint[a] += (first[~keep] == a).sum() * p_table[a]
    expected = p_table[start][:, None] * p_table  # (V, V): P(x) P(y | x)
    assert total_variation(joint.flatten() / n, expected.flatten()) < 0.015


def tiny_gpt(seed: int, d_model: int) -> GPT:
    torch.manual_seed(seed)
    model = GPT(ModelConfig(vocab_size=20, d_model=d_model, n_heads=2, n_layers=1, d_ff=32, max_seq_len=40)).eval()
    with torch.no_grad():
        for w in model.parameters():
            if w.dim() > 1:
                w.normal_(0.0, 0.5)  # spread logits: freshly initialised models repeat one token
    return model


@pytest.mark.parametrize("n_draft", [1, 3, 5])
@pytest.mark.parametrize("eos_id", [None, 7])
def test_greedy_speculative_decoding_returns_the_targets_greedy_tokens(n_draft: int, eos_id: int | None) -> None:
    target, draft = tiny_gpt(0, 16), tiny_gpt(1, 8)
    prompt = torch.tensor([[3, 4, 5]])
    expected = generate(target, prompt, 20, greedy=True, eos_id=eos_id)
    if eos_id is not None and (expected[0] == eos_id).any():  # generate pads finished rows; cut at the eos
        expected = expected[:, : int((expected[0] == eos_id).nonzero()[0]) + 1]
    out, accepted = speculative_generate(target, draft, prompt, 20, n_draft=n_draft, greedy=True, eos_id=eos_id)
    assert torch.equal(out, expected)
    assert len(accepted) <= 20 and all(0 <= a <= n_draft for a in accepted)
    # every round adds its accepted tokens plus one of the target's own
    assert out.size(1) - 3 <= sum(a + 1 for a in accepted)


def test_a_draft_equal_to_the_target_is_always_accepted() -> None:
    model = tiny_gpt(0, 16)
    out, accepted = speculative_generate(model, model, torch.tensor([[1]]), 16, n_draft=3, greedy=True)
    assert accepted == [3, 3, 3, 3]  # 4 rounds of 3 accepted + 1 = 16 tokens, 4 target passes
    assert torch.equal(out, generate(model, torch.tensor([[1]]), 16, greedy=True))
    _, sampled = speculative_generate(model, model, torch.tensor([[1]]), 16, n_draft=3, generator=0)
    assert sampled == [3, 3, 3, 3]  # p = q: min(1, p/q) = 1 for every proposal


def test_sampled_speculative_decoding_is_reproducible_and_ends_at_eos() -> None:
    table = torch.zeros(V, V)
    table[:, 1] = 1.0  # token 1 is likely everywhere
    target, draft = BigramModel(table, max_seq_len=30), BigramModel(torch.zeros(V, V), max_seq_len=30)
    runs = [speculative_generate(target, draft, torch.tensor([[0]]), 20, n_draft=4, eos_id=1, generator=s)
            for s in (5, 5)]
    assert torch.equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
    out = runs[0][0][0].tolist()
    assert out[-1] == 1 and 1 not in out[:-1]  # stops right after the first eos


@pytest.mark.parametrize(
    ("kwargs", "error", "word"),
    [
        (dict(n_draft=0), ValueError, "n_draft=0"),
        (dict(temperature=0.0), ValueError, "temperature=0.0"),
        (dict(ids=torch.zeros(2, 3, dtype=torch.long)), ValueError, "one prompt"),
        (dict(draft=BigramModel(torch.zeros(7, 7))), ValueError, "V=7"),
    ],
)
def test_bad_arguments_are_rejected(kwargs: dict, error: type, word: str) -> None:
    args = dict(target=BigramModel(torch.zeros(V, V)), draft=BigramModel(torch.zeros(V, V)),
                ids=torch.zeros(1, 2, dtype=torch.long), max_new_tokens=4) | kwargs
    with pytest.raises(error, match=word):
        speculative_generate(**args)


def test_the_rule_rejects_shapes_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        speculative_accept(torch.rand(1, 3, V), torch.rand(1, 1, V), torch.zeros(1, 1, dtype=torch.long))
