"""Chapter 13 (teaching a GPT to follow instructions) checks: the labels of an SFT batch, LoRA's parameter
count, merging the adapters, the DPO loss by hand, and what a very large β does.

References, imported inside the case builders: :func:`companion.finetune.sft_batch` (the labels),
:class:`companion.finetune.LoRALinear` (``merged().weight``, the merged weight) and
:func:`companion.finetune.dpo_loss`. The parameter count is a formula, r · (D_in + D_out) per adapted matrix;
tests/test_exercises_ch13.py checks it against ``apply_lora`` on a small model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from companion.exercises._runner import Case, Check, choice_check, seeded, value_check

CHAPTER = "13_finetuning"
IGNORE = -100  # companion.finetune.IGNORE_INDEX, written out: the reader's labels use it too


# ------------------------------------------------------------------------------------------ SFT labels (write)


def _labels_judge(expected: list[int]) -> Callable[[Any], str | None]:
    def judge(out: Any) -> str | None:
        if isinstance(out, Tensor):
            out = out.tolist()
        if not isinstance(out, (list, tuple)):
            return f"returned {type(out).__name__}; expected a list of {len(expected)} labels"
        out = list(out)
        if len(out) != len(expected):
            return f"returned {len(out)} labels, expected {len(expected)} (one per position: len(ids) - 1)"
        for t, (got, want) in enumerate(zip(out, expected)):
            if got != want:
                return f"label {t} is {got!r}, expected {want!r}"
        return None

    return judge


def _labels_cases() -> list[Case]:
    from companion.finetune import sft_batch

    examples = [  # (label, ids, mask): role markers 500.., content ids below
        ("one turn: <|user|> 3 tokens <|end|> <|assistant|> 2 tokens <|end|>",
         [501, 10, 11, 12, 503, 502, 20, 21, 503], [False] * 6 + [True] * 3),
        ("a system message first", [500, 7, 503, 501, 8, 9, 503, 502, 30, 503], [False] * 8 + [True] * 2),
        ("two turns: both replies are trained", [501, 1, 503, 502, 2, 3, 503, 501, 4, 503, 502, 5, 503],
         [False] * 4 + [True] * 3 + [False] * 4 + [True] * 2),
    ]  # fmt: skip
    cases = []
    for label, ids, mask in examples:
        _, labels = sft_batch([(ids, mask)], pad_id=0)
        expected = labels[0].tolist()
        n = len(ids) - 1
        mistakes = [
            ([ids[t] if mask[t] else IGNORE for t in range(n)],
             "no shift: position t must be scored on the *next* token, ids[t + 1], not on the token it reads."),
            ([ids[t + 1] if mask[t] else IGNORE for t in range(n)],
             "the mask is not shifted with the targets: score ids[t + 1] when mask[t + 1] is True (the mask belongs "
             "to the token being predicted)."),
            (list(ids[1:]), "every position is scored: the prompt and the role markers must get -100, only the "
             "assistant's tokens (mask True) keep their label."),
            ([ids[t + 1] if mask[t + 1] else 0 for t in range(n)],
             "use -100 for positions that carry no loss: 0 is a real token id, so it would be trained as a target."),
            ([ids[t] if mask[t] else IGNORE for t in range(len(ids))],
             "one label per *position*, and a batch row has len(ids) - 1 positions (the last token is nobody's "
             "input)."),
        ]  # fmt: skip
        cases.append(Case(label, (list(ids), list(mask)), _labels_judge(expected), mistakes=mistakes))
    return cases


SFT_LABELS = Check(
    name="sft_labels",
    signature="fn(ids, mask) -> list[int]: ids a list of token ids, mask a list of bools of the same length; "
    "returns len(ids) - 1 labels",
    description="the labels of an SFT batch row from a loss mask (next token where trained, -100 elsewhere)",
    hint="position t reads ids[t] and predicts ids[t + 1]; its label is ids[t + 1] if mask[t + 1], else -100.",
    make_cases=_labels_cases,
)


# ------------------------------------------------------------------------------------------ LoRA parameters (predict)

_D, _R, _LAYERS = 4096, 8, 32

LORA_PARAMS = value_check(
    "lora_params",
    _LAYERS * 2 * _R * (_D + _D),
    description="predict LoRA's trainable parameters: r = 8 on W_Q and W_V of Llama 2 7B's 32 layers",
    hint="each adapted matrix gets A (r × D_in) and B (D_out × r): r · (D_in + D_out) parameters; count the "
    "adapted matrices (2 per layer, 32 layers).",
    signature="a number of parameters",
    mistakes={
        _LAYERS * 2 * _R * _D: "that is half the answer: count both A (r · D_in) and B (D_out · r) of each "
        "adapted matrix, and both W_Q and W_V in each layer.",
        _LAYERS * 2 * _D * _D: "that is the number of weights being adapted (D_in · D_out each), which LoRA "
        "freezes; it trains only A and B.",
        2 * _R * (_D + _D): "that is one layer: there are 32.",
        _LAYERS * 4 * _R * (_D + _D): "that adapts all four attention projections; the exercise adapts W_Q and W_V.",
        _LAYERS * 2 * _R * _R: "A is r × D_in and B is D_out × r, not r × r.",
    },
    rtol=1e-6,
)


# ------------------------------------------------------------------------------------------ merging (fix)


def _merge_cases() -> list[Case]:
    from torch import nn

    from companion.finetune import LoRALinear

    cases = []
    for label, d_in, d_out, r, alpha, seed in [("square 8 × 8, r = 2, α = 4", 8, 8, 2, 4.0, 0),
                                               ("6 → 10, r = 3, α = 3", 6, 10, 3, 3.0, 1),
                                               ("16 → 4, r = 4, α = 16", 16, 4, 4, 16.0, 2)]:  # fmt: skip
        g = seeded(seed)
        base = nn.Linear(d_in, d_out)
        with torch.no_grad():
            base.weight.copy_(torch.randn(d_out, d_in, generator=g))
        layer = LoRALinear(base, r, alpha)
        with torch.no_grad():
            layer.lora_A.copy_(torch.randn(r, d_in, generator=g))
            layer.lora_B.copy_(torch.randn(d_out, r, generator=g))
        w, a, b = base.weight.detach().clone(), layer.lora_A.detach().clone(), layer.lora_B.detach().clone()
        expected = layer.merged().weight.detach()
        mistakes = [
            (w + b @ a, "the adapter's output is scaled by alpha / r: merge W + (alpha / r) · B A."),
            (w + (r / alpha) * (b @ a), "the scale is alpha / r, not r / alpha."),
            (w + alpha * (b @ a), "divide by r as well: the scale is alpha / r."),
            ((alpha / r) * (b @ a), "that is ΔW alone: the merged weight is the frozen W plus ΔW."),
        ]
        if d_in == d_out:
            mistakes.append((w + (alpha / r) * (b @ a).T, "ΔW is B A (D_out × D_in), not its transpose."))
        cases.append(Case(label, (w, a, b, alpha, r), expected, mistakes=mistakes))
    return cases


LORA_MERGE = Check(
    name="lora_merge",
    signature="fn(weight, lora_A, lora_B, alpha, r) -> Tensor: weight (D_out, D_in), lora_A (r, D_in), "
    "lora_B (D_out, r); returns the merged (D_out, D_in) weight",
    description="merge LoRA adapters into the frozen weight",
    hint="the adapted layer computes x Wᵀ + (alpha / r) · x Aᵀ Bᵀ, i.e. the weight W + (alpha / r) · B A.",
    make_cases=_merge_cases,
)


# ------------------------------------------------------------------------------------------ DPO loss (write)


def _dpo_cases() -> list[Case]:
    from companion.finetune import dpo_loss

    cases = []
    for label, n, beta, seed, spread in [("4 pairs, β = 0.1", 4, 0.1, 0, 20.0), ("8 pairs, β = 0.5", 8, 0.5, 1, 10.0),
                                         ("large margins, β = 1", 3, 1.0, 2, 400.0)]:  # fmt: skip
        g = seeded(seed)
        pc, pr, rc, rr = (-spread * torch.rand(n, generator=g) for _ in range(4))
        expected = dpo_loss(pc, pr, rc, rr, beta)
        margin = (pc - rc) - (pr - rr)
        mistakes = [
            (-F.logsigmoid(beta * (pc - pr)).mean(), "the reference is missing: each log-probability is "
             "compared with the reference's, (policy_chosen − ref_chosen) − (policy_rejected − ref_rejected)."),
            (-F.logsigmoid(-beta * margin).mean(), "the sign is flipped: the chosen log-ratio comes first, so a "
             "policy that prefers the chosen answer gets a lower loss."),
            (-beta * F.logsigmoid(margin).mean(), "β multiplies the margin inside the sigmoid, not the loss."),
            (-F.logsigmoid(beta * margin).sum(), "take the mean over the pairs, not the sum."),
            (F.logsigmoid(beta * margin).mean(), "the loss is minus log σ: a likelihood is maximised by "
             "minimising its negative."),
            (-F.logsigmoid(margin).mean(), "β is missing: the margin is multiplied by β."),
        ]
        cases.append(Case(label, (pc, pr, rc, rr, beta), expected, mistakes=mistakes))
    return cases


DPO_LOSS = Check(
    name="dpo_loss_by_hand",
    signature="fn(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta) -> Tensor: four (B,) tensors of "
    "summed log-probabilities; returns the mean loss (a scalar tensor)",
    description="the DPO loss from the four sequence log-probabilities",
    hint="margin = (policy_chosen − ref_chosen) − (policy_rejected − ref_rejected); loss = "
    "−logsigmoid(β · margin), averaged over the pairs.",
    make_cases=_dpo_cases,
)


# ------------------------------------------------------------------------------------------ a large β (choose)

DPO_BETA = choice_check(
    "dpo_beta",
    "b",
    ("a", "b", "c", "d"),
    description="choose: what a DPO loss near 0 with a huge implicit reward margin means at β = 50",
    hint="the implicit reward is β times the log-ratio: with β = 50, how large must the log-ratio margin be "
    "for σ(reward margin) to be nearly 1, and what is the gradient weight then?",
    mistakes={
        "a": "the reward margin is β × the log-ratio margin: with β = 50 a margin of 0.1 nat already looks large; "
        "the KL to the reference would show the policy has hardly moved.",
        "c": "the reference's log-probabilities are computed once and never change; the symptom comes from β alone.",
        "d": "a learning rate too low to change anything leaves the loss at log 2 ≈ 0.69, not near 0.",
    },
)


CHECKS = [SFT_LABELS, LORA_PARAMS, LORA_MERGE, DPO_LOSS, DPO_BETA]
