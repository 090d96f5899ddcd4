"""Chapter 12 (the family at work) checks: patchify, ViT-B/16's parameter count, BERT's 80/10/10 masking,
mean pooling over real tokens, and which member of the family fits a tagging task.

References, imported inside the case builders: :func:`companion.models.patchify`, :func:`companion.models.pool`
and :class:`companion.models.ViT` (counted on the meta device). The masking check judges the reader's
function by the statistics BERT's recipe fixes (15 % chosen; of those 80 % ``[MASK]``, 10 % random, 10 %
unchanged; labels only where chosen; special tokens never chosen), the rule that
:func:`companion.models.mask_tokens` implements; tests/test_exercises_ch12.py checks that ``mask_tokens``
itself passes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from companion.exercises._runner import Case, Check, choice_check, seeded, value_check

CHAPTER = "12_family"


# ------------------------------------------------------------------------------------------ patchify (write)

_PATCH_HINT = (
    "reshape (B, C, H, W) to (B, C, H/p, p, W/p, p), permute to (B, H/p, W/p, C, p, p) (patch row, patch "
    "column, then each patch's channel, row, column), and reshape to (B, N, C·p·p)."
)


def _patch_cases() -> list[Case]:
    from companion.models import patchify

    g = seeded(12)
    cases = []
    for label, (b, c, h, w), p in [
        ("one grey 4×4 image, 2×2 patches", (1, 1, 4, 4), 2),
        ("RGB 8×8, 4×4 patches", (2, 3, 8, 8), 4),
        ("not square: 6×4 with 2×2 patches", (2, 2, 6, 4), 2),
        ("patch = whole image", (3, 3, 5, 5), 5),
    ]:
        x = torch.randn(b, c, h, w, generator=g)
        n, grid = (h // p) * (w // p), x.reshape(b, c, h // p, p, w // p, p)  # (B, C, rows, p, cols, p)
        mistakes = [
            (x.reshape(b, n, c * p * p), "you reshaped without permuting: consecutive numbers in memory are one "
             "row of pixels, so each 'patch' is a strip of rows, not a p×p square. " + _PATCH_HINT),
            (grid.permute(0, 2, 4, 3, 5, 1).reshape(b, n, c * p * p), "each patch is flattened channel last "
             "(row, column, channel); the order that matches a Conv2d weight (D, C, p, p) is channel first."),
            (grid.permute(0, 4, 2, 1, 3, 5).reshape(b, n, c * p * p), "the patches come column by column: "
             "number them row by row (left to right, then top to bottom), patch row before patch column."),
        ]
        if c == 1:
            mistakes.pop(1)  # one channel: channel first and channel last are the same
        if h == w == p:
            mistakes = []  # one patch: every order of the patches is the same
        cases.append(Case(label, (x, p), patchify(x, p), mistakes=mistakes))
    return cases


PATCHIFY = Check(
    name="patchify",
    signature="fn(images, patch_size) -> Tensor; images (B, C, H, W) -> (B, N, C·p·p), N = (H/p)·(W/p)",
    description="cut images into p×p patches, numbered row by row, each flattened channel first",
    hint=_PATCH_HINT,
    make_cases=_patch_cases,
    atol=0.0,
    rtol=0.0,
)


# ------------------------------------------------------------------------------------------ ViT-B/16 (predict)


def _vit_b16() -> int:
    from companion.models import ModelConfig, ViT, num_parameters

    with torch.device("meta"):  # shapes only
        return num_parameters(ViT(ModelConfig.vit(), num_labels=1000))


_D, _LAYER = 768, 4 * (768 * 768 + 768) + (2 * 768 * 3072 + 3072 + 768) + 4 * 768  # one encoder layer
_RIGHT = (16 * 16 * 3 * _D + _D) + _D + 197 * _D + 12 * _LAYER + 2 * _D + (_D * 1000 + 1000)

VIT_PARAMETERS = value_check(
    "vit_b16_parameters",
    _vit_b16,
    description="predict the parameters of ViT-B/16 with a 1000-class head (224×224 RGB, 16×16 patches)",
    hint="add up: the patch projection (16·16·3 inputs -> 768, with bias), the [CLS] vector, 197 learned "
    "positions, 12 encoder layers like BERT-base's (4·768² + 2·768·3072 plus biases and two LayerNorms each), "
    "the final LayerNorm and the 768 -> 1000 head.",
    signature="a number of parameters, e.g. 12_345_678",
    mistakes={
        _RIGHT - (_D * 1000 + 1000): "you left out the classification head: 768 · 1000 weights + 1000 biases.",
        _RIGHT - 197 * _D - _D: "you left out the [CLS] vector and the 197 learned positions (196 patches + [CLS]).",
        _RIGHT - 16 * 16 * 2 * _D: "a patch holds 16 · 16 · 3 numbers (three colour channels), not 16 · 16.",
        12 * _LAYER: "that is only the 12 encoder layers: add the patch projection, [CLS], positions, the final "
        "LayerNorm and the head.",
        109_482_240: "that is BERT-base (with its pooler): its 30,522 × 768 token table is replaced in ViT by a "
        "768 × 768 patch projection.",
        124_439_808: "that is GPT-2 small, whose 50,257-token table is most of the difference.",
    },
    rtol=1e-3,  # 86.6 M, the paper's rounding, passes too, and the verdict gives the exact count
    exact_count=True,
)


# ------------------------------------------------------------------------------------------ 80/10/10 (fix)

_MASK_ID, _VOCAB, _SPECIALS = 1, 500, (0, 2)  # [MASK] = 1; [PAD] = 0 and [CLS] = 2 must never be chosen


def _ids() -> Tensor:
    ids = torch.randint(3, _VOCAB, (64, 256), generator=seeded(7))
    ids[:, 0] = 2  # [CLS]
    ids[::4, 200:] = 0  # padding in every fourth row
    return ids


def _stats(ids: Tensor, out: Any) -> dict[str, float] | str:
    """The fractions BERT's recipe fixes, or what is wrong with the form of ``out``."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return f"returned {type(out).__name__}; expected a pair (inputs, labels)"
    inputs, labels = out
    for name, t in (("inputs", inputs), ("labels", labels)):
        if not isinstance(t, Tensor) or t.shape != ids.shape or t.dtype != ids.dtype:
            got = f"{tuple(t.shape)} {t.dtype}" if isinstance(t, Tensor) else type(t).__name__
            return f"{name} is {got}; expected a tensor like ids, {tuple(ids.shape)} {ids.dtype}"
    special = torch.zeros_like(ids, dtype=torch.bool)
    for s in _SPECIALS:
        special |= ids == s
    chosen = labels != -100
    n = max(int(chosen.sum()), 1)
    return {
        "chosen": float(chosen[~special].float().mean()),
        "special chosen": float((chosen & special).sum()),
        "labels": float((labels[chosen] != ids[chosen]).sum()),
        "unchosen changed": float((inputs[~chosen] != ids[~chosen]).sum()),
        "masked": float((inputs[chosen] == _MASK_ID).sum()) / n,
        "kept": float((inputs[chosen] == ids[chosen]).sum()) / n,
        "random": float(((inputs[chosen] != _MASK_ID) & (inputs[chosen] != ids[chosen])).sum()) / n,
    }


def _mask_judge(ids: Tensor) -> Callable[[Any], str | None]:
    def judge(out: Any) -> str | None:
        s = _stats(ids, out)
        if isinstance(s, str):
            return s
        if s["special chosen"]:
            return f"{int(s['special chosen'])} special tokens ([CLS] or [PAD]) were chosen for prediction"
        if s["labels"]:
            return "some labels at chosen positions differ from the original ids"
        if s["unchosen changed"]:
            return f"{int(s['unchosen changed'])} tokens whose label is -100 were changed in the inputs"
        if abs(s["chosen"] - 0.15) > 0.01:
            return f"{s['chosen']:.1%} of the ordinary tokens have a label, expected 15 %"
        for part, want in (("masked", 0.8), ("random", 0.1), ("kept", 0.1)):
            if abs(s[part] - want) > 0.02:
                return f"of the chosen tokens {s[part]:.1%} are {part}, expected {want:.0%}"
        return None

    return judge


def _looks(ids: Tensor, **conditions: Callable[[float], bool]) -> Callable[[Any], bool]:
    def matches(out: Any) -> bool:
        s = _stats(ids, out)
        return not isinstance(s, str) and all(test(s[name]) for name, test in conditions.items())

    return matches


def _mask_cases() -> list[Case]:
    ids = _ids()
    mistakes = [
        (_looks(ids, chosen=lambda v: v > 0.5),
         "every token got a label: only the 15 % chosen tokens are predicted; all other labels are -100 "
         "(ignored by the loss)."),
        (_looks(ids, **{"special chosen": lambda v: v > 0}),
         "[CLS] and [PAD] are never chosen: leave out every id in special_ids before choosing."),
        (_looks(ids, chosen=lambda v: abs(v - 0.12) < 0.01),
         "12 % of the tokens have labels: 15 % are chosen, and the labels include the 10 % + 10 % that were "
         "replaced by a random token or kept, not only the 80 % masked."),
        (_looks(ids, masked=lambda v: v > 0.95),
         "every chosen token became [MASK]: BERT replaces 80 % with [MASK], 10 % with a random token and keeps "
         "10 %, so that the model also learns a representation of tokens it sees unmasked (fine-tuning has no "
         "[MASK])."),
        (_looks(ids, kept=lambda v: v < 0.02),
         "none of the chosen tokens stays unchanged: draw a second number per token to split the chosen ones "
         "80 / 10 / 10."),
    ]
    return [Case("64 sequences of 256 tokens, [CLS] first, padding in every fourth", (ids, _MASK_ID, _VOCAB),
                 _mask_judge(ids), kwargs={"generator": seeded(3), "special_ids": _SPECIALS}, mistakes=mistakes)]


MASK_TOKENS = Check(
    name="mask_tokens_80_10_10",
    signature="fn(ids, mask_id, vocab_size, generator=None, special_ids=()) -> (inputs, labels); ids (B, S) "
    "LongTensor; labels hold the original id where chosen, -100 elsewhere",
    description="BERT's masked-LM corruption: choose 15 %; of those 80 % [MASK], 10 % random, 10 % unchanged",
    hint="choose each ordinary token with probability 0.15 (never an id in special_ids); draw a second uniform "
    "number per token: below 0.8 -> mask_id, 0.8 to 0.9 -> a random id in [0, vocab_size), else unchanged; "
    "labels = ids where chosen, -100 elsewhere.",
    make_cases=_mask_cases,
)


# ------------------------------------------------------------------------------------------ mean pooling (write)


def _pool_cases() -> list[Case]:
    from companion.models import pool

    g = seeded(5)
    cases = []
    for label, (b, s, d), lengths in [
        ("no padding", (2, 4, 3), [4, 4]),
        ("padded rows", (3, 5, 4), [5, 2, 3]),
        ("one real token", (2, 6, 2), [1, 6]),
    ]:
        h = torch.randn(b, s, d, generator=g)
        real = torch.arange(s)[None, :] < torch.tensor(lengths)[:, None]  # (B, S): True = a real token
        keep = real.unsqueeze(-1).float()
        mistakes = [
            (h[:, 0], "that is [CLS] pooling (position 0); mean pooling averages the vectors of all real tokens."),
            ((h * keep).sum(1), "you summed the real tokens' vectors without dividing by how many there are."),
        ]
        if min(lengths) < s:
            mistakes = [
                (h.mean(1), "the padding positions are in your mean: average over the real tokens only "
                 "(multiply by the mask, sum, divide by the number of real tokens)."),
                ((h * keep).sum(1) / s, "you divided by the padded length S: divide each row by its own number "
                 "of real tokens, padding_mask.sum(1)."),
            ] + mistakes
        cases.append(Case(label, (h, real), pool(h, "mean", real), mistakes=mistakes))
    return cases


MEAN_POOL = Check(
    name="mean_pool",
    signature="fn(h, padding_mask) -> Tensor; h (B, S, D), padding_mask (B, S) bool, True = a real token -> (B, D)",
    description="mean pooling: one vector per sequence, the average over its real (unpadded) tokens",
    hint="keep = padding_mask.unsqueeze(-1).float(); (h * keep).sum(1) / keep.sum(1).",
    make_cases=_pool_cases,
)


# ------------------------------------------------------------------------------------------ the family (choose)

FAMILY_FOR_TAGGING = choice_check(
    "family_for_tagging",
    "b",
    ("a", "b", "c", "d"),
    description="choose: which member of the family to fine-tune for tagging every token of a sentence",
    hint="each token's tag depends on the words on both sides of it, and you want all tags at once: one "
    "vector per token that has seen the whole sentence.",
    mistakes={
        "a": "a decoder-only model's token i sees only tokens 0..i: the tag of 'softmax' in 'softmax(x)' depends "
        "on the '(' after it, which a causal model has not read yet.",
        "c": "an encoder–decoder can write the tags out as text, one by one, but it must learn to keep them aligned "
        "with the input and pays a decoding step per tag; the encoder alone already has one vector per token.",
        "d": "a ViT is an encoder whose tokens are image patches; this input is text.",
    },
)

CHECKS = [PATCHIFY, VIT_PARAMETERS, MASK_TOKENS, MEAN_POOL, FAMILY_FOR_TAGGING]
