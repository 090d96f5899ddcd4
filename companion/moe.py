"""Mixture of experts (MoE): a router sends each token to k of E feed-forward networks (chapter 14).

The layer replaces the FFN of a Transformer block: E *experts* (each an FFN, SwiGLU in Mixtral and
DeepSeek) and a *router* (a linear map D -> E). For every token the router scores the experts, the k best
are run, and their outputs are mixed with the router's weights:

    y = Σ_{e in top-k(s)} w_e · FFN_e(x)      (+ Σ_shared FFN_shared(x) in DeepSeek)

so the layer holds E experts' parameters but each token pays for k of them: *total* and *active* parameters.

- ``route``: the scores and the top-k choice. "softmax" scores (Switch Transformer, Fedus et al. 2022;
  Mixtral, Jiang et al. 2024) or "sigmoid" scores (DeepSeek-V3, 2024); renormalising the k chosen weights
  to sum to 1; DeepSeek-V3's group-limited routing (experts in groups, a token may use only the best
  ``group_limit`` groups), its balancing bias (added to the scores for the *choice* only) and its
  ``routed_scaling_factor`` (``scale``).
- ``load_balancing_loss``: Switch's auxiliary loss E · Σ_e f_e · P_e (f_e: share of the routed slots that went
  to expert e, P_e: mean router probability of e); 1 when perfectly balanced, at most E/k with k distinct
  experts per token (E/k when every token goes to the same k experts with all its probability on them).
- ``router_z_loss``: ST-MoE's penalty on large router logits, the mean of (log Σ_e exp ℓ_e)² over tokens.
- ``capacity_keep``: token dropping (GShard, Switch): each expert takes at most ``capacity`` routed slots, filled
  in order of slot rank (every token's first choice before any second choice), then of token position.
- ``moe_per_token`` (explicit: the formula above, one token at a time) and ``moe_per_expert`` (batched:
  each expert gathers its tokens once, runs them as one batch and adds them back; no loop over tokens).
  Equal outputs (tests/test_moe.py); the layer uses the batched one.
- ``MoE``: the layer, with shared experts (DeepSeek) and, after each forward, ``aux_loss`` and
  ``expert_load`` (the share of routed slots each expert got) for training and for the chapter's histograms.
  ``update_score_bias`` is DeepSeek-V3's auxiliary-loss-free balancing step; ``capacity_factor`` turns on
  token dropping, and ``dropped`` records the share of routed slots dropped.

Checked against ``transformers``' ``MixtralSparseMoeBlock`` and ``DeepseekV3MoE`` (router, dispatch and shared
experts; tests/test_moe.py) and its ``load_balancing_loss_func`` (which counts the k slots of a token as k
tokens, so it is k times ours).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from companion._checks import (
    ID_DTYPES,
    check_bool,
    check_choice,
    check_input_dtype,
    check_positive_float,
    check_positive_int,
    check_tensor,
)
from companion.layers import make_ffn

__all__ = ["SCORINGS", "MoE", "capacity_keep", "check_routing", "expert_capacity", "load_balancing_loss",
           "moe_per_expert", "moe_per_token", "route", "router_z_loss"]

SCORINGS = ("softmax", "sigmoid")  # how the router turns logits into expert scores


def check_routing(n_experts: int, k: int, n_groups: int = 1, group_limit: int = 1) -> None:
    """``ValueError`` unless k of ``n_experts`` experts can be picked from ``group_limit`` of ``n_groups`` groups."""
    check_positive_int("n_experts", n_experts)
    check_positive_int("n_experts_per_token", k)
    check_positive_int("n_groups", n_groups)
    check_positive_int("group_limit", group_limit)
    if k > n_experts:
        raise ValueError(f"n_experts_per_token={k} is more than n_experts={n_experts}; expected k <= n_experts "
                         "(a token cannot visit more experts than there are)")
    if n_experts % n_groups != 0:
        raise ValueError(f"n_experts={n_experts} is not divisible by n_groups={n_groups}")
    if group_limit > n_groups:
        raise ValueError(f"group_limit={group_limit} is more than n_groups={n_groups}; expected at most n_groups")
    per_group = n_experts // n_groups
    if n_groups > 1 and per_group < 2:
        raise ValueError(f"n_groups={n_groups} leaves {per_group} expert per group; a group is scored by its two "
                         "best experts, so expected at least 2 per group")
    if group_limit * per_group < k:
        raise ValueError(f"group_limit={group_limit} groups of {per_group} experts hold fewer than "
                         f"n_experts_per_token={k}")


def route(
    logits: Tensor,
    k: int,
    *,
    scoring: str = "softmax",
    normalize: bool = True,
    scale: float = 1.0,
    bias: Tensor | None = None,
    n_groups: int = 1,
    group_limit: int = 1,
) -> tuple[Tensor, Tensor, Tensor]:
    """Choose k experts per token and their weights, from the router's logits.

    1. scores: ``softmax(logits)`` over the experts, or ``sigmoid(logits)`` for each expert on its own;
    2. the choice: the k best of ``scores + bias`` (DeepSeek-V3's balancing bias steers the choice only),
       among the experts of the ``group_limit`` best groups (a group's score: the sum of its two best);
    3. the weights: the chosen experts' *scores* (without the bias), renormalised to sum to 1 if
       ``normalize``, then multiplied by ``scale``.

    Computed in float32 (the router's softmax decides which expert runs; half precision can flip it).

    Shapes:
        logits: (N, E), bias (E,) -> weights (N, k) float32, experts (N, k) int64, scores (N, E) float32

    Raises:
        ValueError: k, groups or group limit that cannot work (:func:`check_routing`), an unknown scoring, a
            bias of another length than E, or (in CPU memory) one holding NaN or infinity.
    """
    check_tensor("logits", logits, ndim=2)
    n, e = logits.shape
    check_routing(e, k, n_groups, group_limit)
    check_choice("scoring", scoring, SCORINGS)
    check_bool("normalize", normalize)
    check_positive_float("scale", scale)
    if bias is not None:
        _check_bias(bias, e)
    logits = logits.float()
    scores = logits.softmax(dim=-1) if scoring == "softmax" else logits.sigmoid()  # (N, E)
    choice = scores if bias is None else scores + bias.float()  # (N, E): what the top-k looks at
    if n_groups > 1:
        grouped = choice.view(n, n_groups, e // n_groups)  # (N, G, E/G)
        group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)  # (N, G): each group's two best
        best_groups = group_scores.topk(group_limit, dim=-1).indices  # (N, group_limit)
        allowed = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best_groups, True)  # (N, G)
        allowed = allowed.repeat_interleave(e // n_groups, dim=1)  # (N, E)
        choice = choice.masked_fill(~allowed, float("-inf"))
    experts = choice.topk(k, dim=-1).indices  # (N, k)
    weights = scores.gather(1, experts)  # (N, k): the scores themselves, not score + bias
    if normalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights * scale, experts, scores


def _check_bias(bias: Tensor, n_experts: int) -> None:
    """A balancing bias: one finite float per expert. The NaN scan runs in CPU memory only (on an accelerator it
    would cost a device sync per layer and step; :meth:`MoE.update_score_bias` cannot make one)."""
    check_tensor("bias", bias, ndim=1)
    if bias.shape != (n_experts,) or not bias.is_floating_point():
        raise ValueError(f"bias has shape {tuple(bias.shape)} and dtype {bias.dtype}; expected one float per expert, "
                         f"shape ({n_experts},)")
    if bias.device.type == "cpu" and not torch.isfinite(bias).all():
        raise ValueError("bias holds NaN or infinite values; expected finite numbers (a NaN bias sends every token "
                         "to the same experts)")


def load_balancing_loss(probs: Tensor, experts: Tensor, n_experts: int) -> Tensor:
    """Switch Transformer's auxiliary loss (Fedus et al. 2022, eq. 4), for k experts per token.

    ``E · Σ_e f_e · P_e`` with f_e the share of the N·k routed slots that went to expert e (no gradient: a
    count) and P_e the mean router probability of e over the N tokens (differentiable). Both are 1/E when
    routing is uniform, which gives 1. A token's k experts are distinct, so an expert gets at most one slot
    per token, f_e <= 1/k, and the loss is at most E/k (reached when every token goes to the same k experts
    and puts all its probability on them). 1 is the uniform value, not a floor: counts and probabilities
    spread unevenly in opposite directions can give less (tests/test_moe.py shows one such batch).

    Shapes:
        probs: (N, E) router probabilities (rows sum to 1); experts: (N, k) chosen experts -> scalar

    Raises ``ValueError`` for ``n_experts`` other than E, ids outside [0, E), or a different number of rows.
    """
    check_tensor("probs", probs, ndim=2)
    check_tensor("experts", experts, ndim=2)
    check_positive_int("n_experts", n_experts)
    if probs.size(1) != n_experts:
        raise ValueError(f"n_experts={n_experts} but probs has {probs.size(1)} columns, one per expert; expected "
                         f"n_experts={probs.size(1)}")
    if experts.dtype not in ID_DTYPES or experts.size(0) != probs.size(0):
        raise ValueError(f"experts has shape {tuple(experts.shape)} and dtype {experts.dtype}; expected integer "
                         f"expert ids, one row per row of probs ({probs.size(0)})")
    low, high = int(experts.min()), int(experts.max())
    if low < 0 or high >= n_experts:
        raise ValueError(f"experts holds id {low if low < 0 else high}; expected 0 <= id < n_experts={n_experts}")
    return _balance(probs, experts, n_experts)


def router_z_loss(logits: Tensor) -> Tensor:
    """ST-MoE's router z-loss (Zoph et al. 2022, eq. 5): ``(1/N) Σ_t (log Σ_e exp ℓ_{t,e})²``.

    It pushes the router's log-partition function towards 0, so its logits stay small: large logits make the
    softmax (and its rounding in low precision) brittle. Computed in float32.

    Shapes: logits (N, E) -> scalar
    """
    check_tensor("logits", logits, ndim=2)
    return logits.float().logsumexp(dim=-1).square().mean()


def expert_capacity(n_tokens: int, k: int, n_experts: int, capacity_factor: float) -> int:
    """Slots per expert: ``ceil(capacity_factor · N·k / E)``, the even share of the N·k slots times the factor."""
    for name, value in (("n_tokens", n_tokens), ("k", k), ("n_experts", n_experts)):
        check_positive_int(name, value)
    check_positive_float("capacity_factor", capacity_factor)
    return math.ceil(capacity_factor * n_tokens * k / n_experts)


def capacity_keep(experts: Tensor, n_experts: int, capacity: int) -> Tensor:
    """Which routed slots an expert of ``capacity`` slots accepts (True) and which it drops (False).

    Slots are served by rank first (every token's first choice, then every second choice...), then by token
    position, as in GShard; a dropped slot contributes nothing and the token keeps only its residual path.

    Shapes: experts (N, k) -> keep (N, k) bool
    """
    check_tensor("experts", experts, ndim=2)
    check_positive_int("n_experts", n_experts)
    check_positive_int("capacity", capacity)
    if experts.dtype not in ID_DTYPES:
        raise ValueError(f"experts has dtype {experts.dtype}; expected integer expert ids")
    by_rank = experts.t().reshape(-1)  # (k·N,): all first choices, then all second choices...
    one_hot = torch.nn.functional.one_hot(by_rank, n_experts)  # (k·N, E)
    place = (one_hot.cumsum(dim=0) * one_hot).sum(dim=-1)  # (k·N,): 1 for an expert's first slot, 2 for its next...
    return (place <= capacity).view(experts.shape[1], -1).t()  # (N, k)


def _balance(probs: Tensor, experts: Tensor, n_experts: int) -> Tensor:
    """The loss itself, on checked arguments (the layer's own forward: no read-back of the ids to the host)."""
    counts = torch.bincount(experts.flatten(), minlength=n_experts)[:n_experts]  # (E,) routed slots per expert
    f = counts.to(probs.dtype) / experts.numel()  # (E,) sums to 1
    p = probs.mean(dim=0)  # (E,)
    return n_experts * (f * p).sum()


def moe_per_token(x: Tensor, weights: Tensor, experts: Tensor, ffns: nn.ModuleList) -> Tensor:
    """The definition, one token at a time: ``y_t = Σ_j weights[t, j] · ffns[experts[t, j]](x_t)``.

    Written to be read, not run at scale (a Python loop over N·k expert calls).

    Shapes: x (N, D), weights (N, k), experts (N, k) -> (N, D)
    """
    _check_dispatch(x, weights, experts, ffns)
    if int(experts.min()) < 0 or int(experts.max()) >= len(ffns):
        raise ValueError(f"experts holds ids {int(experts.min())}..{int(experts.max())}; expected 0 <= id < "
                         f"{len(ffns)}, one per FFN of ffns")
    rows = []
    for t in range(x.shape[0]):
        y = torch.zeros_like(x[t], dtype=torch.float32)  # (D,)
        for j in range(experts.shape[1]):
            expert = int(experts[t, j])
            y = y + weights[t, j] * ffns[expert](x[t : t + 1])[0]  # (D,): this expert's output, weighted
        rows.append(y.to(x.dtype))
    return torch.stack(rows)  # (N, D)


def moe_per_expert(x: Tensor, weights: Tensor, experts: Tensor, ffns: nn.ModuleList) -> Tensor:
    """The same sum, batched by expert: each expert gathers the tokens routed to it (one gather), runs them
    as one batch, weights them and adds them back into their rows (one ``index_add_``). The only loop is
    over the E experts; the token dimension is never looped over.

    Ids outside ``[0, E)`` are not looked for (this runs at every step: no read-back to the host).
    Shapes: x (N, D), weights (N, k), experts (N, k) -> (N, D)
    """
    _check_dispatch(x, weights, experts, ffns)
    out = torch.zeros_like(x)  # (N, D)
    for e, ffn in enumerate(ffns):
        token, slot = torch.where(experts == e)  # (n_e,) the tokens that chose e, and in which of their k slots
        if token.numel() == 0:
            continue
        y = ffn(x[token]) * weights[token, slot, None]  # (n_e, D): one batch for this expert
        out.index_add_(0, token, y.to(out.dtype))
    return out


def _check_dispatch(x: Tensor, weights: Tensor, experts: Tensor, ffns: nn.ModuleList) -> None:
    """Shapes and types only (host-side): x (N, D), weights and integer experts (N, k), a list of FFNs."""
    check_tensor("x", x, ndim=2)
    check_tensor("weights", weights, ndim=2)
    check_tensor("experts", experts, ndim=2)
    if weights.shape != experts.shape or experts.size(0) != x.size(0) or experts.dtype not in ID_DTYPES:
        raise ValueError(f"x {tuple(x.shape)}, weights {tuple(weights.shape)} and experts {tuple(experts.shape)} "
                         f"({experts.dtype}) do not fit; expected (N, D), (N, k) and integer (N, k)")
    if not isinstance(ffns, nn.ModuleList):
        raise TypeError(f"ffns must be an nn.ModuleList of expert FFNs, got {type(ffns).__name__}")


class MoE(nn.Module):
    """A mixture-of-experts FFN: router, E routed experts (k per token), optional shared experts.

    Args:
        d_model: model width D. d_expert: hidden width of each expert FFN.
        n_experts: routed experts E. k: experts per token.
        n_shared: shared experts (DeepSeek), run on every token as one FFN of width ``n_shared · d_expert``.
        balance_bias: give a softmax router the balancing bias too (a sigmoid router always has it).
        capacity_factor: None (no limit), or drop the slots beyond ``expert_capacity(N, k, E, factor)`` per
            expert and batch (:func:`capacity_keep`).
        activation: the experts' FFN kind ("swiglu" in Mixtral and DeepSeek; see ``make_ffn``). bias: in the experts.
        scoring, normalize, scale, n_groups, group_limit: the routing rule (see :func:`route`).
        dropout: inside the experts (training only).

    After each forward: ``aux_loss`` (the load-balancing loss of that batch, with gradient), ``z_loss``
    (:func:`router_z_loss` of its logits, with gradient), ``expert_load`` (E,) (the share of routed slots each
    expert was given, no gradient) and ``dropped`` (the share of slots dropped for capacity, 0.0 without a
    limit). With ``scoring="sigmoid"`` or ``balance_bias=True`` the layer has DeepSeek-V3's balancing bias, the
    buffer ``score_bias`` (E,), moved by :meth:`update_score_bias`.
    """

    def __init__(
        self,
        d_model: int,
        d_expert: int,
        n_experts: int,
        k: int = 2,
        *,
        n_shared: int = 0,
        activation: str = "swiglu",
        bias: bool = False,
        scoring: str = "softmax",
        normalize: bool = True,
        scale: float = 1.0,
        n_groups: int = 1,
        group_limit: int = 1,
        balance_bias: bool = False,
        capacity_factor: float | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("d_expert", d_expert)
        check_routing(n_experts, k, n_groups, group_limit)
        check_positive_int("n_shared", n_shared, allow_zero=True)
        check_choice("scoring", scoring, SCORINGS)
        check_bool("normalize", normalize)
        check_positive_float("scale", scale)
        check_bool("balance_bias", balance_bias)
        if capacity_factor is not None:
            check_positive_float("capacity_factor", capacity_factor)
        self.capacity_factor = capacity_factor
        self.d_model, self.n_experts, self.k = d_model, n_experts, k
        self.scoring, self.normalize, self.scale = scoring, normalize, scale
        self.n_groups, self.group_limit = n_groups, group_limit
        self.router = nn.Linear(d_model, n_experts, bias=False)  # one logit per expert
        self.experts = nn.ModuleList(
            make_ffn(activation, d_model, d_expert, bias=bias, dropout=dropout) for _ in range(n_experts)
        )
        self.shared_experts = (
            make_ffn(activation, d_model, n_shared * d_expert, bias=bias, dropout=dropout) if n_shared else None
        )
        self.score_bias: Tensor | None
        if scoring == "sigmoid" or balance_bias:  # DeepSeek-V3: steers the choice, not the weights
            self.register_buffer("score_bias", torch.zeros(n_experts))
        else:
            self.score_bias = None
        self.aux_loss: Tensor | None = None
        self.z_loss: Tensor | None = None
        self.expert_load: Tensor | None = None
        self.dropped = 0.0

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: x (B, T, D) (any (..., D)) -> (..., D)."""
        check_tensor("x", x)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x has last dimension {x.shape[-1]}, expected d_model={self.d_model}")
        check_input_dtype("x", x, self.router.weight)
        flat = x.reshape(-1, self.d_model)  # (N, D), N = B·T tokens
        # the router is called (not its weight read), so a LoRA adapter on it acts; route() runs in float32
        logits = self.router(flat).float()  # (N, E)
        weights, experts, scores = route(
            logits, self.k, scoring=self.scoring, normalize=self.normalize, scale=self.scale,
            bias=self.score_bias, n_groups=self.n_groups, group_limit=self.group_limit,
        )  # fmt: skip
        self.expert_load = torch.bincount(experts.flatten(), minlength=self.n_experts).float() / experts.numel()
        if self.capacity_factor is not None:  # token dropping: a dropped slot weighs 0
            capacity = expert_capacity(flat.size(0), self.k, self.n_experts, self.capacity_factor)
            keep = capacity_keep(experts, self.n_experts, capacity)  # (N, k)
            weights = weights * keep
            self.dropped = 1.0 - keep.float().mean().item()
        out = moe_per_expert(flat, weights, experts, self.experts)  # (N, D)
        probs = scores if self.scoring == "softmax" else scores / scores.sum(dim=-1, keepdim=True)  # (N, E)
        self.aux_loss = _balance(probs, experts, self.n_experts)
        self.z_loss = logits.logsumexp(dim=-1).square().mean()  # router_z_loss, on checked logits
        out = out.view_as(x)  # (..., D)
        if self.shared_experts is not None:
            out = out + self.shared_experts(x)
        return out

    @torch.no_grad()
    def update_score_bias(self, rate: float = 1e-3) -> None:
        """DeepSeek-V3's auxiliary-loss-free balancing (DeepSeek-AI 2024, §2.1.2): after a step, lower the bias
        of each overloaded expert by ``rate`` and raise that of each underloaded one (load from the last forward).
        """
        check_positive_float("rate", rate)
        if self.score_bias is None or self.expert_load is None:
            raise ValueError("update_score_bias needs a balancing bias (scoring='sigmoid' or balance_bias=True) "
                             "and a forward pass first")
        self.score_bias += rate * torch.sign(self.expert_load.mean() - self.expert_load).to(self.score_bias)

    def extra_repr(self) -> str:
        return f"experts={self.n_experts}, k={self.k}, scoring={self.scoring!r}"
