"""GRPO: reinforcement learning from a verifiable reward, with a group of samples as the baseline (Shao et al. 2024).

PPO (Schulman et al. 2017) needs a value model, as large as the policy, to tell a good answer from a lucky one.
Group Relative Policy Optimization, introduced with DeepSeekMath, drops it: for each prompt q the policy that
sampled (π_old) writes a *group* of G answers o_1 .. o_G, a reward function scores them (here an exact-match
check: 1 if the answer is right, 0 otherwise), and each answer's advantage is its reward measured against its
own group::

    Â_i = (r_i − mean(r_1 .. r_G)) / std(r_1 .. r_G)          the same Â_i for every token of o_i

The policy then maximises PPO's clipped objective with a KL penalty to a frozen reference π_ref (the paper's
eq. 3), averaged over the tokens of each answer and then over the answers::

    J = 1/G Σ_i 1/|o_i| Σ_t [ min(ρ_i,t Â_i, clip(ρ_i,t, 1 − ε, 1 + ε) Â_i) − β D_i,t ]
    ρ_i,t = π_θ(o_i,t | q, o_i,<t) / π_old(o_i,t | q, o_i,<t)
    D_i,t = π_ref/π_θ − log(π_ref/π_θ) − 1          (both at o_i,t: the "k3" estimator of KL(π_θ ‖ π_ref))

D is an unbiased, never negative estimate of the KL from the sampled tokens alone (Schulman 2020, "Approximating
KL divergence"); it is 0 where π_θ = π_ref. ``grpo_loss`` returns −J.

- ``group_advantages(rewards, group_size)``: Â from rewards laid out group after group. A group whose rewards
  are all equal (all right or all wrong) gets advantage 0: it teaches nothing. The std is the sample standard
  deviation plus 1e-4, as trl's ``GRPOTrainer`` computes it.
- ``grpo_loss(logps, old_logps, ref_logps, advantages, mask, clip_eps, beta)``: −J from per-token log-probs
  (``token_logprobs``), the completion tokens marked by ``mask``.

Checked in tests/test_finetune.py against the formula written out with Python floats token by token, its
gradient at π_θ = π_old (−Â ∇log π / |o| per token, plus the KL term), the clipping, and bad input.
"""

from __future__ import annotations

import torch
from torch import Tensor

from companion._checks import check_finite, check_number, check_positive_float, check_positive_int, check_tensor

__all__ = ["group_advantages", "grpo_loss"]


def group_advantages(rewards: Tensor, group_size: int, eps: float = 1e-4) -> Tensor:
    """(r − group mean) / (group sample std + eps) for rewards laid out group after group.

    Shapes: rewards (N · G,) -> (N · G,). Raises ``ValueError`` if the length is not a multiple of
    ``group_size`` or ``group_size`` < 2 (a group of one has no spread).
    """
    check_tensor("rewards", rewards, ndim=1)
    check_positive_int("group_size", group_size)
    if group_size < 2:
        raise ValueError(f"group_size={group_size}; expected at least 2 answers per prompt to compare")
    if rewards.numel() % group_size:
        raise ValueError(f"rewards has {rewards.numel()} values, not a multiple of group_size={group_size}")
    check_finite("rewards", rewards)
    check_positive_float("eps", eps)
    groups = rewards.float().view(-1, group_size)  # (N, G)
    mean, std = groups.mean(1, keepdim=True), groups.std(1, keepdim=True)  # (N, 1): sample std (ddof = 1)
    return ((groups - mean) / (std + eps)).view(-1)  # (N · G,)


def grpo_loss(
    logps: Tensor,
    old_logps: Tensor,
    ref_logps: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    beta: float = 0.04,
) -> Tensor:
    """−J of GRPO (DeepSeekMath, eq. 3) for B sampled answers; the defaults are the paper's ε and β.

    ``logps`` are log π_θ of each sampled token (with gradient); ``old_logps`` those of the policy that
    sampled (no gradient; equal to ``logps.detach()`` for the first update on fresh samples, where ρ = 1);
    ``ref_logps`` those of the frozen reference. ``mask`` is 1 at the answer's tokens, 0 at the prompt and
    padding; each answer's tokens are averaged, then the answers. ``beta=0`` drops the KL term.

    Raises ``TypeError``/``ValueError`` naming the argument for shapes that differ, an answer with no token in
    ``mask``, NaN, and ``clip_eps`` or ``beta`` out of range.
    Shapes: logps, old_logps, ref_logps, mask (B, T); advantages (B,) -> scalar.
    """
    for name, x in (("logps", logps), ("old_logps", old_logps), ("ref_logps", ref_logps), ("mask", mask)):
        check_tensor(name, x, ndim=2)
        if x.shape != logps.shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)} but logps has {tuple(logps.shape)}; expected one "
                             "(B, T) shape: one value per token of each sampled answer")
    check_tensor("advantages", advantages, ndim=1)
    if advantages.numel() != logps.size(0):
        raise ValueError(f"advantages has {advantages.numel()} values for {logps.size(0)} answers; expected one "
                         "per answer (B,)")
    for name, x in (("logps", logps), ("old_logps", old_logps), ("ref_logps", ref_logps),
                    ("advantages", advantages)):  # fmt: skip
        check_finite(name, x)
    check_positive_float("clip_eps", clip_eps)
    if clip_eps >= 1:
        raise ValueError(f"clip_eps={clip_eps}; expected 0 < clip_eps < 1 (the ratio is clipped to 1 ± clip_eps)")
    check_number("beta", beta)  # TypeError for a non-number, ValueError for inf/NaN
    if beta < 0:
        raise ValueError(f"beta={beta!r}; expected a finite number >= 0 (0: no KL penalty)")
    mask = mask.float()  # (B, T)
    lengths = mask.sum(1)  # (B,) |o_i|
    if (lengths == 0).any():
        raise ValueError(f"mask marks no token in answer(s) {(lengths == 0).nonzero().flatten().tolist()}; "
                         "expected each answer to have at least one token")
    ratio = torch.exp(logps - old_logps)  # (B, T) ρ = π_θ / π_old
    adv = advantages.float().unsqueeze(1)  # (B, 1): one advantage for every token of an answer
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)  # (B, T)
    log_ref_ratio = ref_logps - logps  # (B, T) log(π_ref / π_θ)
    kl = torch.exp(log_ref_ratio) - log_ref_ratio - 1  # (B, T) k3: >= 0, 0 where π_θ = π_ref
    per_token = surrogate - beta * kl  # (B, T)
    per_answer = (per_token * mask).sum(1) / lengths  # (B,) 1/|o_i| Σ_t
    return -per_answer.mean()
