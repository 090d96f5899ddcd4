"""Direct Preference Optimization: the DPO loss and the implicit reward (Rafailov et al. 2023).

RLHF (Ouyang et al. 2022) maximises a reward while staying close to a reference model π_ref:

    max_π  E_{x, y~π} [ r(x, y) ] − β · KL( π(·|x) ‖ π_ref(·|x) )

Its optimum has a closed form, π*(y|x) = π_ref(y|x) · exp(r(x, y) / β) / Z(x), so the reward can be read
off any policy as r(x, y) = β log(π(y|x) / π_ref(y|x)) + β log Z(x). Under the Bradley–Terry model a
human prefers y_w to y_l with probability σ(r(x, y_w) − r(x, y_l)); the intractable log Z(x) cancels in the
difference. Maximising the likelihood of the observed preferences then trains the policy directly, with no
reward model and no sampling (the paper's eq. 7):

    L_DPO = −E [ log σ( β · ( log π(y_w|x)/π_ref(y_w|x) − log π(y_l|x)/π_ref(y_l|x) ) ) ]

- ``implicit_rewards(policy_logps, ref_logps, beta)`` = β (log π − log π_ref): the reward the policy implies.
- ``dpo_loss(...)``: the mean of L_DPO over a batch of pairs, from the four sequence log-probabilities
  (``companion.finetune.sequence_logprobs``). ``β`` is the strength of the KL leash: large β keeps π near
  π_ref; as β → 0 the leash is gone.

Checked in tests/test_finetune.py: equal to the formula written out with ``torch.sigmoid`` and to the per-pair
loss −log σ(r_w − r_l) of the implicit rewards, log 2 when policy = reference, its gradient the paper's
(eq. 8: σ(r_l − r_w) weighting), and bad input (shapes, NaN, β). trl's ``DPOTrainer`` computes the same
expression inside its training step (``loss_type="sigmoid"``); trl is not a test dependency (see the README).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from companion._checks import check_finite, check_positive_float, check_tensor

__all__ = ["dpo_loss", "implicit_rewards"]


def _check_logps(**logps: Tensor) -> None:
    shape = None
    for name, x in logps.items():
        check_tensor(name, x, ndim=1)
        if not x.is_floating_point():
            raise TypeError(f"{name} must hold float log-probabilities, got dtype {x.dtype}")
        check_finite(name, x)
        if shape is None:
            first, shape = name, x.shape
        elif x.shape != shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)} but {first} has {tuple(shape)}; expected one (B,) "
                             "shape: one log-probability per preference pair")


def implicit_rewards(policy_logps: Tensor, ref_logps: Tensor, beta: float) -> Tensor:
    """β · (log π(y|x) − log π_ref(y|x)): the reward the policy implies for each response.

    Shapes: policy_logps (B,), ref_logps (B,) -> (B,).
    """
    _check_logps(policy_logps=policy_logps, ref_logps=ref_logps)
    check_positive_float("beta", beta)
    return beta * (policy_logps - ref_logps)


def dpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float,
) -> Tensor:
    """Mean DPO loss −log σ(β [(log π_w − log π_ref,w) − (log π_l − log π_ref,l)]) over B preference pairs.

    Each argument holds one summed log-probability per pair (the chosen response y_w or the rejected y_l, under
    the trained policy or the frozen reference). The reference's numbers carry no gradient in practice: compute
    them once under ``torch.no_grad()``.

    Raises ``TypeError``/``ValueError`` naming the argument for non-tensors, shapes other than one common (B,),
    NaN or infinite values, and ``beta`` that is not a finite number > 0.
    Shapes: four (B,) tensors -> scalar.
    """
    _check_logps(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                 ref_chosen_logps=ref_chosen_logps, ref_rejected_logps=ref_rejected_logps)  # fmt: skip
    check_positive_float("beta", beta)
    chosen = policy_chosen_logps - ref_chosen_logps  # (B,) log-ratio of the preferred response
    rejected = policy_rejected_logps - ref_rejected_logps  # (B,) log-ratio of the dispreferred one
    return -F.logsigmoid(beta * (chosen - rejected)).mean()  # logsigmoid: no overflow for large margins
