"""Chapter 11 (train your own GPT) checks: the loss of an untrained model, input/target windows, the
learning-rate schedule, bits per byte, and what to do about a validation loss that rises.

References, imported inside the case builders: :func:`companion.training.lr_at` with
:class:`~companion.training.TrainConfig` (the schedule). The windows are cut as
:class:`companion.data.TokenData` cuts them (``seq_len + 1`` ids) and split into inputs and targets as
:func:`companion.training.lm_loss` splits them (``[:, :-1]`` and ``[:, 1:]``). Bits per byte is a one-line
formula with no function of its own in the package; the check computes it from its definition, and
tests/test_exercises_ch11.py checks that formula against a model's summed loss on a text of known bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from companion.exercises._runner import Case, Check, choice_check, compare, near, value_check

CHAPTER = "11_train_your_gpt"



def _near_judge(expected: float, what: str, rtol: float = 1e-6) -> Callable[[Any], str | None]:
    """A judge for a function that returns one number: right within ``rtol``, else too high / too low."""

    def judge(out: Any) -> str | None:
        if isinstance(out, Tensor) and out.numel() == 1:
            out = out.item()
        if isinstance(out, bool) or not isinstance(out, (int, float, np.floating, np.integer)):
            return f"returned {type(out).__name__}, expected a number ({what})"
        got = float(out)
        if math.isnan(got):
            return "returned nan"
        if math.isclose(got, expected, rel_tol=rtol, abs_tol=1e-12):
            return None
        return f"{got:.4g} is {'too high' if got > expected else 'too low'}"

    return judge


# ------------------------------------------------------------------------------------------ loss at step 0 (predict)

VOCAB = 50_257  # GPT-2's vocabulary


INITIAL_LOSS = value_check(
    "initial_loss",
    lambda: math.log(VOCAB),
    description="predict the loss (nats per token) of an untrained GPT-2-sized model (V = 50,257) at step 0",
    hint="a freshly initialised model's logits are all close to 0, so its softmax is close to uniform over the "
    "V tokens; the cross-entropy of a uniform guess is -ln(1/V).",
    signature="a number of nats per token",
    mistakes={
        math.log2(VOCAB): "that is in bits (log base 2): the loss of torch's cross-entropy uses the natural log.",
        math.log10(VOCAB): "that is log base 10: cross-entropy losses use the natural log, ln V.",
        float(VOCAB): "that is the perplexity, e^loss: the loss itself is its logarithm.",
        1.0 / VOCAB: "that is the probability of each token; the loss is minus its natural log.",
        0.0: "zero loss means certainty about every next token; an untrained model knows nothing yet.",
    },
    rtol=0.02,
)


# ------------------------------------------------------------------------------------------ inputs and targets (fix)


def _windows(ids: Tensor, starts: list[int], seq_len: int) -> Tensor:
    """Windows of ``seq_len + 1`` ids, as ``companion.data.TokenData`` serves them: (B, T + 1)."""
    return torch.stack([ids[s : s + seq_len + 1] for s in starts])  # (B, T + 1)


def _pair_judge(x: Tensor, y: Tensor) -> Callable[[Any], str | None]:
    def judge(out: Any) -> str | None:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            return f"returned {type(out).__name__}; expected a pair (inputs, targets)"
        for name, got, want in (("inputs", out[0], x), ("targets", out[1], y)):
            problem = compare(got, want, 0.0, 0.0)
            if problem is not None:
                return f"{name} {problem[1]}"
        return None

    return judge


def _same_pair(a: Tensor, b: Tensor) -> Callable[[Any], bool]:
    def matches(out: Any) -> bool:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            return False
        return all(
            isinstance(got, Tensor) and got.shape == want.shape and torch.equal(got, want)
            for got, want in zip(out, (a, b))
        )

    return matches


def _batch_cases() -> list[Case]:
    cases = []
    for label, ids, starts, seq_len in [
        ("ids 0..19, two windows of 4", torch.arange(20), [0, 7], 4),
        ("ids 100..139, three windows of 8", torch.arange(100, 140), [3, 0, 31], 8),
        ("repeated ids, one window of 5", torch.tensor([5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6, 7]), [2], 5),
    ]:
        w = _windows(ids, starts, seq_len)  # (B, T + 1): the package's windows
        x, y = w[:, :-1], w[:, 1:]  # (B, T) inputs; (B, T) targets, one position later
        mistakes = [
            (
                _same_pair(x, x),
                "the targets are the inputs themselves: the model must predict the *next* token, "
                "so the targets are the same window shifted one position to the right.",
            ),
            (
                _same_pair(y, x),
                "inputs and targets are swapped: the model reads ids[s : s+T] and predicts ids[s+1 : s+T+1].",
            ),
            (
                _same_pair(w[:, :-2], w[:, 1:-1]),
                "your windows are one token short: a window of T inputs needs T + 1 ids, ids[s : s+T+1].",
            ),
        ]
        cases.append(Case(label, (ids.clone(), list(starts), seq_len), _pair_judge(x, y), mistakes=mistakes))
    return cases


LM_BATCH = Check(
    name="lm_batch",
    signature="fn(ids, starts, seq_len) -> (inputs, targets): ids a 1-D LongTensor, starts a list of window "
    "starts; both outputs (len(starts), seq_len)",
    description="cut windows from a token array into inputs and next-token targets",
    hint="for each start s the inputs are ids[s : s+seq_len] and the targets ids[s+1 : s+seq_len+1] "
    "(the next token at every position); torch.stack the rows.",
    make_cases=_batch_cases,
)


# ------------------------------------------------------------------------------------------ the schedule (write)


def _schedule_mistakes(step: int, peak: float, warmup: int, total: int, ratio: float) -> list[tuple[Any, str]]:
    floor = peak * ratio
    progress = (step - warmup) / max(1, total - 1 - warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    out: list[tuple[Any, str]] = []
    if step < warmup:
        out.append(
            (
                near(peak * step / warmup),
                "the warm-up starts at step 0 with peak · 1/warmup_steps, not 0: "
                "a learning rate of 0 wastes the first step. Use (step + 1) / warmup_steps.",
            )
        )
        out.append(
            (
                near(peak),
                "there is no warm-up in your schedule: for step < warmup_steps the rate rises "
                "linearly, peak · (step + 1) / warmup_steps.",
            )
        )
    else:
        out.append(
            (
                near(peak * cosine),
                "the cosine decays to 0 here: it should end at the floor "
                "lr · min_lr_ratio, floor + (lr - floor) · (1 + cos(π · progress)) / 2.",
            )
        )
        out.append(
            (
                near(floor + (peak - floor) * (1 - progress)),
                "that is a straight line: the decay follows half a cosine wave, (1 + cos(π · progress)) / 2.",
            )
        )
        whole = step / max(1, total - 1)
        out.append(
            (
                near(floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * whole))),
                "the cosine's "
                "progress is counted from the end of the warm-up: (step - warmup_steps) / "
                "(steps - 1 - warmup_steps).",
            )
        )
    return out


def _schedule_cases() -> list[Case]:
    from companion.training import TrainConfig, lr_at

    cases = []
    for peak, warmup, total, ratio in [(3e-3, 40, 400, 0.1), (1e-3, 100, 1000, 0.1), (6e-4, 0, 50, 0.0)]:
        config = TrainConfig(steps=total, lr=peak, warmup_steps=warmup, min_lr_ratio=ratio)
        for step in sorted({0, warmup // 2, max(0, warmup - 1), warmup, (warmup + total) // 2, total - 1}):
            expected = lr_at(step, config)
            label = f"step {step} of {total} (warm-up {warmup}, peak {peak:g}, floor ratio {ratio:g})"
            mistakes = _schedule_mistakes(step, peak, warmup, total, ratio)
            cases.append(Case(label, (step, config), _near_judge(expected, "a learning rate"), mistakes=mistakes))
    return cases


WARMUP_COSINE = Check(
    name="warmup_cosine_lr",
    signature="fn(step, config) -> float: the learning rate of 0-based optimiser step `step`; config is a "
    "companion.training.TrainConfig (fields steps, lr, warmup_steps, min_lr_ratio)",
    description="linear warm-up, then cosine decay to lr · min_lr_ratio",
    hint="step < warmup_steps: lr · (step + 1) / warmup_steps. After: progress = (step - warmup_steps) / "
    "(steps - 1 - warmup_steps), floor = lr · min_lr_ratio, rate = floor + (lr - floor) · (1 + cos(π · progress)) / 2.",
    make_cases=_schedule_cases,
)


# ------------------------------------------------------------------------------------------ bits per byte (write)


def bits_per_byte_reference(loss: float, n_tokens: int, n_bytes: int) -> float:
    """Bits per byte of a mean loss of ``loss`` nats per token over ``n_tokens`` tokens that spell ``n_bytes``
    bytes of UTF-8: all the nats, divided by the bytes, converted to bits (÷ ln 2)."""
    return loss * n_tokens / n_bytes / math.log(2)


def _bpb_cases() -> list[Case]:
    cases = []
    for label, loss, n_tokens, n_bytes in [
        ("characters of ASCII text: one byte per token", 1.2, 5000, 5000),
        ("BPE tokens of English: 4 bytes per token", 3.3, 1000, 4000),
        ("characters of Chinese text: 3 bytes per token", 4.0, 300, 900),
        ("the chapter's BPE: about 1.9 bytes per token", 4.2, 17_000, 32_300),
    ]:
        expected = bits_per_byte_reference(loss, n_tokens, n_bytes)
        mistakes = [
            (near(loss * n_tokens / n_bytes), "that is nats per byte: divide by ln 2 to turn nats into bits."),
            (
                near(loss / math.log(2)),
                "that is bits per *token*: multiply by tokens / bytes to spread each "
                "token's bits over the bytes it spells.",
            ),
            (
                near(loss * n_bytes / n_tokens / math.log(2)),
                "tokens and bytes are the wrong way round: bits per byte = loss · n_tokens / n_bytes / ln 2.",
            ),
            (
                near(loss * n_tokens / n_bytes * math.log(2)),
                "multiply by 1 / ln 2 (= log2(e) ≈ 1.44), not by ln 2: one nat is 1.44 bits.",
            ),
            (near(loss * n_tokens / n_bytes / math.log(10)), "use ln 2, not ln 10: bits are base-2 units."),
        ]
        if n_tokens == n_bytes:
            mistakes = mistakes[:1] + mistakes[3:]  # tokens = bytes: per token and per byte coincide
        cases.append(Case(label, (loss, n_tokens, n_bytes), _near_judge(expected, "bits per byte"), mistakes=mistakes))
    return cases


BITS_PER_BYTE = Check(
    name="bits_per_byte",
    signature="fn(loss, n_tokens, n_bytes) -> float: a mean loss in nats per token over n_tokens tokens that "
    "spell n_bytes bytes",
    description="bits per byte: a loss that compares models with different tokenizers",
    hint="the text costs loss · n_tokens nats in all; per byte that is loss · n_tokens / n_bytes nats; one nat is "
    "1 / ln 2 bits, so divide by math.log(2).",
    make_cases=_bpb_cases,
)


# ------------------------------------------------------------------------------------------ a rising val loss (choose)

OVERFITTING = choice_check(
    "rising_val_loss",
    "c",
    ("a", "b", "c", "d"),
    description="choose: what to change when the training loss falls but the validation loss rises",
    hint="the model is learning its training text by heart (overfitting): it needs more text to learn "
    "from, or less capacity to memorise it, or to stop where the validation loss was lowest.",
    mistakes={
        "a": "a higher learning rate only memorises the training text faster; the gap between the two losses "
        "is the problem, not the speed.",
        "b": "warm-up protects the first steps from large, badly aimed updates; this run trained fine and then "
        "began to memorise.",
        "d": "a bigger model has even more room to memorise the same few thousand tokens; the validation loss "
        "would rise sooner.",
    },
)

CHECKS = [INITIAL_LOSS, LM_BATCH, WARMUP_COSINE, BITS_PER_BYTE, OVERFITTING]
