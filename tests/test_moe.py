"""Mixture of experts (companion.moe): routing, dispatch, the balancing loss, the layer, against transformers.

References: ``transformers``' ``MixtralTopKRouter`` / ``MixtralSparseMoeBlock`` (softmax, top-k, renormalised),
``DeepseekV3TopkRouter`` / ``DeepseekV3MoE`` (sigmoid, balancing bias for the choice, groups, scaling factor,
shared experts) and ``load_balancing_loss_func``, all with copied weights; and identities: the explicit
per-token sum equals the batched per-expert dispatch, uniform routing gives a balancing loss of 1.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from companion.moe import (
    MoE,
    capacity_keep,
    expert_capacity,
    load_balancing_loss,
    moe_per_expert,
    moe_per_token,
    route,
    router_z_loss,
)

transformers = pytest.importorskip("transformers")
D, E = 16, 8


def mixtral_block(k: int = 2) -> tuple[torch.nn.Module, MoE]:
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    cfg = transformers.MixtralConfig(hidden_size=D, intermediate_size=24, num_local_experts=E, num_experts_per_tok=k)
    theirs = MixtralSparseMoeBlock(cfg).eval()
    ours = MoE(D, 24, E, k).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        theirs.gate.weight.copy_(torch.randn(E, D, generator=g))
        theirs.experts.gate_up_proj.copy_(0.3 * torch.randn(E, 48, D, generator=g))
        theirs.experts.down_proj.copy_(0.3 * torch.randn(E, D, 24, generator=g))
        ours.router.weight.copy_(theirs.gate.weight)
        for j, expert in enumerate(ours.experts):
            expert.gate_proj.weight.copy_(theirs.experts.gate_up_proj[j, :24])  # gate rows first
            expert.up_proj.weight.copy_(theirs.experts.gate_up_proj[j, 24:])
            expert.down_proj.weight.copy_(theirs.experts.down_proj[j])
    return theirs, ours


def deepseek_block(**changes: object) -> tuple[torch.nn.Module, MoE]:
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

    settings = dict(hidden_size=D, moe_intermediate_size=12, n_routed_experts=E, num_experts_per_tok=3, n_group=4,
                    topk_group=2, n_shared_experts=1, routed_scaling_factor=2.5, norm_topk_prob=True)  # fmt: skip
    settings.update(changes)
    theirs = DeepseekV3MoE(transformers.DeepseekV3Config(**settings)).eval()
    ours = MoE(D, 12, E, settings["num_experts_per_tok"], n_shared=settings["n_shared_experts"], scoring="sigmoid",
               normalize=settings["norm_topk_prob"], scale=settings["routed_scaling_factor"],
               n_groups=settings["n_group"], group_limit=settings["topk_group"]).eval()  # fmt: skip
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
        theirs.gate.e_score_correction_bias.copy_(0.3 * torch.randn(E, generator=g))
        ours.router.weight.copy_(theirs.gate.weight)
        ours.score_bias.copy_(theirs.gate.e_score_correction_bias)
        for j, expert in enumerate(ours.experts):
            expert.gate_proj.weight.copy_(theirs.experts.gate_up_proj[j, :12])
            expert.up_proj.weight.copy_(theirs.experts.gate_up_proj[j, 12:])
            expert.down_proj.weight.copy_(theirs.experts.down_proj[j])
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(ours.shared_experts, name).weight.copy_(getattr(theirs.shared_experts, name).weight)
    return theirs, ours


def x(n: int = 5, seed: int = 2) -> torch.Tensor:
    return torch.randn(2, n, D, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("k", [1, 2, 3])
@torch.no_grad()
def test_softmax_router_and_layer_equal_mixtral(k: int) -> None:
    theirs, ours = mixtral_block(k)
    h = x().view(-1, D)
    _, their_weights, their_experts = theirs.gate(h)
    weights, experts, scores = route(h @ ours.router.weight.t(), k)
    assert torch.equal(experts, their_experts)
    assert_close(weights, their_weights)
    assert_close(weights.sum(-1), torch.ones(10))  # renormalised over the k chosen experts
    assert_close(scores.sum(-1), torch.ones(10))  # softmax over all E
    assert_close(ours(x()), theirs(x()), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "changes",
    [{}, {"n_group": 1, "topk_group": 1}, {"norm_topk_prob": False, "routed_scaling_factor": 1.0},
     {"n_shared_experts": 2, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1}],
)  # fmt: skip
@torch.no_grad()
def test_sigmoid_router_with_groups_and_bias_equals_deepseek_v3(changes: dict[str, object]) -> None:
    theirs, ours = deepseek_block(**changes)
    h = x(7).view(-1, D)
    _, their_weights, their_experts = theirs.gate(h)
    weights, experts, _ = route(
        h @ ours.router.weight.t(), ours.k, scoring="sigmoid", normalize=ours.normalize, scale=ours.scale,
        bias=ours.score_bias, n_groups=ours.n_groups, group_limit=ours.group_limit,
    )  # fmt: skip
    order, their_order = experts.sort(-1), their_experts.sort(-1)  # DeepSeek's top-k is unsorted
    assert torch.equal(order.values, their_order.values)
    assert_close(weights.gather(1, order.indices), their_weights.gather(1, their_order.indices))
    assert_close(ours(x(7)), theirs(x(7)), atol=1e-5, rtol=1e-5)


def test_the_bias_steers_the_choice_not_the_weights() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    bias = torch.tensor([0.0, 0.0, 0.0, 10.0])  # expert 3 is pushed into the choice ...
    weights, experts, scores = route(logits, 2, scoring="sigmoid", normalize=False, bias=bias)
    assert sorted(experts[0].tolist()) == [0, 3]
    assert_close(weights[0].sort().values, scores[0, [3, 0]].sort().values)  # ... with its own score, not + 10


def test_groups_limit_the_choice() -> None:
    """Group-limited routing: the best expert sits alone in a weak group, so it is not chosen."""
    scores = torch.tensor([[0.9, 0.0, 0.5, 0.5, 0.6, 0.61]]).logit()  # groups {0,1}: 0.9, {2,3}: 1.0, {4,5}: 1.21
    _, experts, _ = route(scores, 2, scoring="sigmoid", n_groups=3, group_limit=1)
    assert sorted(experts[0].tolist()) == [4, 5]
    _, experts, _ = route(scores, 2, scoring="sigmoid", n_groups=1, group_limit=1)  # no groups: the two best
    assert sorted(experts[0].tolist()) == [0, 5]


@pytest.mark.parametrize("shared", [0, 1])
def test_explicit_and_batched_dispatch_are_equal(shared: int) -> None:
    torch.manual_seed(0)
    layer = MoE(D, 20, E, 3, n_shared=shared)
    h = x(9).view(-1, D)
    weights, experts, _ = route(layer.router(h), 3)
    assert_close(moe_per_expert(h, weights, experts, layer.experts), moe_per_token(h, weights, experts, layer.experts))
    h.requires_grad_(True)  # and the gradients agree too
    a = torch.autograd.grad(moe_per_expert(h, weights, experts, layer.experts).square().sum(), h)[0]
    b = torch.autograd.grad(moe_per_token(h, weights, experts, layer.experts).square().sum(), h)[0]
    assert_close(a, b)


def test_an_expert_nobody_chose_is_skipped() -> None:
    layer = MoE(D, 8, 4, 1)
    h = torch.randn(3, D)
    experts = torch.zeros(3, 1, dtype=torch.long)  # everyone to expert 0
    out = moe_per_expert(h, torch.ones(3, 1), experts, layer.experts)
    assert_close(out, layer.experts[0](h))


@pytest.mark.parametrize("k", [1, 2, 4])
def test_balancing_loss_is_one_when_uniform_and_e_over_k_when_collapsed(k: int) -> None:
    """Collapsed top-k: every token sends its k slots to experts 0..k-1 and puts all its probability on them,
    so f_e = 1/k and Σ P_e = 1 over those k experts: E · (1/k) · 1 = E/k."""
    n = 64
    uniform = torch.full((n, E), 1 / E)
    spread = torch.arange(n * k).view(n, k) % E  # every expert gets the same number of slots
    assert_close(load_balancing_loss(uniform, spread, E), torch.tensor(1.0))
    collapsed = torch.zeros(n, E)
    collapsed[:, :k] = 1.0 / k
    same_k = torch.arange(k).expand(n, k)  # (n, k): distinct experts 0..k-1 for every token
    assert_close(load_balancing_loss(collapsed, same_k, E), torch.tensor(E / k))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_balancing_loss_of_top_k_routing_never_exceeds_e_over_k(k: int) -> None:
    g = torch.Generator().manual_seed(k)
    for scale in (0.1, 1.0, 10.0, 100.0):  # from nearly uniform to nearly one-hot routers
        logits = scale * torch.randn(50, E, generator=g) + scale * torch.arange(E)  # skewed towards high ids
        _, experts, probs = route(logits, k, normalize=False)
        assert load_balancing_loss(probs, experts, E) <= E / k + 1e-6


def test_balancing_loss_can_fall_below_one() -> None:
    """1 is the uniform value, not a floor. Two experts, top-1: 2 of 10 tokens are sure of expert 0, 8 lean
    slightly to expert 1. f = (0.2, 0.8), P = (0.2 + 0.8·0.49, 0.8·0.51) = (0.592, 0.408):
    2 · (0.2·0.592 + 0.8·0.408) = 0.8896."""
    probs = torch.tensor([[1.0, 0.0]] * 2 + [[0.49, 0.51]] * 8)
    experts = probs.argmax(dim=-1, keepdim=True)  # top-1 routing, consistent with the probabilities
    assert_close(load_balancing_loss(probs, experts, 2), torch.tensor(0.8896))


def test_router_z_loss_is_st_moes_formula() -> None:
    """ST-MoE eq. 5: L_z = (1/B) Σ_i (log Σ_j exp x_j^(i))², written out with exp, sum and log."""
    logits = torch.randn(7, E, generator=torch.Generator().manual_seed(0)) * 3
    by_hand = sum(torch.log(torch.exp(row).sum()) ** 2 for row in logits) / logits.size(0)
    assert_close(router_z_loss(logits), by_hand)
    assert_close(router_z_loss(torch.zeros(3, E)), torch.tensor(float(E)).log() ** 2)
    layer = MoE(D, 8, E, 2)
    x_in = x()
    layer(x_in)
    assert_close(layer.z_loss, router_z_loss(layer.router(x_in.reshape(-1, D))))
    layer.z_loss.backward()
    assert layer.router.weight.grad.abs().sum() > 0


def test_expert_capacity_is_the_even_share_times_the_factor() -> None:
    assert expert_capacity(100, 2, 8, 1.0) == 25  # 200 slots over 8 experts
    assert expert_capacity(100, 2, 8, 1.25) == 32  # ceil(31.25)
    assert expert_capacity(10, 1, 4, 0.5) == 2  # ceil(1.25)


def test_capacity_keep_serves_first_choices_first_then_by_position() -> None:
    """Capacity 2, tokens routed to (0, 1), (1, 0), (0, 1). First choices: expert 0 gets tokens 0 and 2, expert 1
    token 1. Second choices, in token order: token 0's fills expert 1; token 1's finds expert 0 full, token 2's
    finds expert 1 full: both dropped. (Serving token by token instead would drop all of token 2.)"""
    experts = torch.tensor([[0, 1], [1, 0], [0, 1]])
    keep = capacity_keep(experts, 2, 2)
    assert keep.tolist() == [[True, True], [True, False], [True, False]]
    assert capacity_keep(experts, 2, 3).all()


def test_capacity_factor_drops_slots_and_their_outputs() -> None:
    torch.manual_seed(0)
    layer = MoE(D, 8, 4, 2, capacity_factor=0.5).eval()  # room for half the slots at most
    tokens = torch.randn(1, 40, D)
    out = layer(tokens)
    assert 0.5 <= layer.dropped < 1.0
    weights, experts, _ = route(layer.router(tokens[0]), 2)
    keep = capacity_keep(experts, 4, expert_capacity(40, 2, 4, 0.5))
    assert_close(out[0], moe_per_token(tokens[0], weights * keep, experts, layer.experts))
    unlimited = MoE(D, 8, 4, 2, capacity_factor=None)
    unlimited.load_state_dict(layer.state_dict())
    unlimited(tokens)
    assert unlimited.dropped == 0.0
    with pytest.raises(ValueError, match="capacity_factor=0"):
        MoE(D, 8, 4, 2, capacity_factor=0.0)


def test_balance_bias_on_a_softmax_router_steers_the_choice() -> None:
    torch.manual_seed(0)
    layer = MoE(D, 8, 4, 1, balance_bias=True)
    assert layer.score_bias is not None and "score_bias" in layer.state_dict()
    assert MoE(D, 8, 4, 1).score_bias is None and "score_bias" not in MoE(D, 8, 4, 1).state_dict()
    tokens = x()
    layer(tokens)
    before = layer.expert_load.clone()
    with torch.no_grad():
        layer.score_bias.copy_(torch.tensor([10.0, 0.0, 0.0, 0.0]))  # a large bias: expert 0 wins every choice
        layer(tokens)
    assert layer.expert_load.tolist() == [1.0, 0.0, 0.0, 0.0] and not torch.equal(before, layer.expert_load)
    layer.update_score_bias(0.5)  # the overloaded expert 0 goes down, the others up
    assert layer.score_bias.tolist() == pytest.approx([9.5, 0.5, 0.5, 0.5])


@pytest.mark.parametrize("k", [1, 2, 4])
def test_balancing_loss_is_mixtrals_over_k(k: int) -> None:
    """transformers counts the k slots of a token as k tokens (f sums to k): its loss is k times ours."""
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    logits = torch.randn(40, E, generator=torch.Generator().manual_seed(k))
    _, experts, probs = route(logits, k, normalize=False)
    theirs = load_balancing_loss_func((logits,), E, top_k=k)
    assert_close(load_balancing_loss(probs, experts, E) * k, theirs)


def test_layer_records_loss_and_load_and_the_loss_has_a_gradient() -> None:
    torch.manual_seed(0)
    layer = MoE(D, 8, E, 2)
    layer(x())
    assert layer.expert_load.shape == (E,) and torch.isclose(layer.expert_load.sum(), torch.tensor(1.0))
    layer.aux_loss.backward()
    assert layer.router.weight.grad is not None and layer.router.weight.grad.abs().sum() > 0


def test_update_score_bias_moves_against_the_load() -> None:
    layer = MoE(D, 8, 4, 1, scoring="sigmoid")
    layer.expert_load = torch.tensor([0.7, 0.1, 0.1, 0.1])
    layer.update_score_bias(0.01)
    assert layer.score_bias.tolist() == pytest.approx([-0.01, 0.01, 0.01, 0.01])
    with pytest.raises(ValueError, match="balance_bias=True"):
        MoE(D, 8, 4, 1).update_score_bias()


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [(dict(n_experts=4, k=5), "n_experts_per_token=5 is more than n_experts=4"),
     (dict(n_experts=6, k=2, n_groups=4), "not divisible by n_groups=4"),
     (dict(n_experts=8, k=2, n_groups=4, group_limit=5), "group_limit=5 is more than n_groups=4"),
     (dict(n_experts=8, k=6, n_groups=4, group_limit=2), "hold fewer than n_experts_per_token=6"),
     (dict(n_experts=4, k=1, n_groups=4), "at least 2 per group"),
     (dict(n_experts=4, k=1, scoring="relu"), "scoring='relu'")],
)  # fmt: skip
def test_bad_routing_is_named(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        MoE(D, 8, **kwargs)
