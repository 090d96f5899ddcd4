"""Chapter 4 (multi-head attention) checks: split/merge heads, parameter count, GQA's KV cache, head count.

References: :func:`companion.attention.split_heads`, :func:`companion.attention.merge_heads`,
:class:`companion.attention.MultiHeadAttention` (counted with :func:`companion.models.num_parameters`) and
:func:`companion.scaling.kv_cache_bytes`.
"""

from __future__ import annotations

import torch

from companion.attention import merge_heads, split_heads
from companion.exercises._runner import Case, Check, choice_check, seeded, value_check

CHAPTER = "04_multi_head"

_SPLIT_HINT = (
    "view as (B, T, H, D_h), then transpose(1, 2) to (B, H, T, D_h); a plain .view(B, H, T, D_h) keeps the "
    "memory order and hands each head a mix of tokens."
)
_MERGE_HINT = (
    "transpose(1, 2) back to (B, T, H, D_h), then .reshape(B, T, H * D_h) (a transposed tensor is not "
    "contiguous, so .view needs .contiguous() first)."
)


def _split_cases() -> list[Case]:
    g = seeded(2)
    cases = []
    for label, (b, t, d), h in [
        ("B=2, T=5, D=12, H=3", (2, 5, 12), 3),
        ("T equals H", (2, 4, 8), 4),
        ("single token", (1, 1, 8), 2),
        ("one head", (3, 4, 6), 1),
    ]:
        x = torch.randn(b, t, d, generator=g)
        wrong = x.view(b, h, t, d // h)  # (B, H, T, D_h) in shape only: tokens mixed across heads
        strided = x.view(b, t, d // h, h).permute(0, 3, 1, 2)  # (B, H, T, D_h): head h gets columns h, h+H, ...
        untransposed = x.view(b, t, h, d // h)  # (B, T, H, D_h): the split without the transpose
        known = [
            (wrong, "you reshaped without transposing: " + _SPLIT_HINT),
            (
                strided,
                "you viewed as (B, T, D_h, H): head h then gets the strided columns h, h+H, h+2H, ...; "
                "view as (B, T, H, D_h) so that each head gets a contiguous block.",
            ),
            (
                untransposed,
                "you stopped at (B, T, H, D_h): transpose(1, 2) to put the head axis before the time axis.",
            ),
        ]
        cases.append(Case(label, (x, h), split_heads(x, h), mistakes=known))
    return cases


def _merge_cases() -> list[Case]:
    g = seeded(3)
    cases = []
    for label, (b, h, t, dh) in [
        ("B=2, H=3, T=5, D_h=4", (2, 3, 5, 4)),
        ("T equals H", (2, 4, 4, 2)),
        ("single token", (1, 2, 1, 4)),
        ("one head", (3, 1, 4, 6)),
    ]:
        x = torch.randn(b, h, t, dh, generator=g)
        merged = merge_heads(x)  # (B, T, D)
        assert torch.equal(split_heads(merged, h), x)
        wrong = x.reshape(b, t, h * dh)  # (B, T, D) in shape only: heads and tokens mixed
        interleaved = x.permute(0, 2, 3, 1).reshape(b, t, h * dh)  # (B, T, D): the heads' columns interleaved
        known = [
            (wrong, "you reshaped without transposing: " + _MERGE_HINT),
            (
                interleaved,
                "you put the head axis last ((B, T, D_h, H)), which interleaves the heads' columns; "
                "transpose(1, 2) to (B, T, H, D_h) so that head h's D_h columns stay together.",
            ),
            (
                x.transpose(1, 2),
                "you transposed back to (B, T, H, D_h) but did not concatenate: .reshape(B, T, H * D_h).",
            ),
        ]
        cases.append(Case(label, (x,), merged, mistakes=known))
    return cases


SPLIT_HEADS = Check(
    name="split_heads",
    signature="fn(x, n_heads) -> Tensor; x (B, T, D) -> (B, H, T, D_h) with D_h = D // H",
    description="cut the model width into H heads of width D_h (head h gets columns h·D_h ... (h+1)·D_h - 1)",
    hint=_SPLIT_HINT,
    make_cases=_split_cases,
    atol=0.0,
    rtol=0.0,
)

MERGE_HEADS = Check(
    name="merge_heads",
    signature="fn(x) -> Tensor; x (B, H, T, D_h) -> (B, T, H·D_h), the inverse of split_heads",
    description="concatenate the heads back into one (B, T, D) tensor",
    hint=_MERGE_HINT,
    make_cases=_merge_cases,
    atol=0.0,
    rtol=0.0,
)


# ---------------------------------------------------------------- write: the parameter count of an MHA layer


def _count_judge(right: int) -> object:
    def judge(out: object) -> str | None:
        if isinstance(out, bool) or not isinstance(out, (int, float)) and not hasattr(out, "item"):
            return f"returned {type(out).__name__}, expected an int"
        got = out.item() if hasattr(out, "item") else out
        if got == right:
            return None
        return f"returned {got:,.0f}, which is too {'high' if got > right else 'low'}"

    return judge


def _is(value: int) -> object:
    return lambda out: (out.item() if hasattr(out, "item") else out) == value


def _parameter_cases() -> list[Case]:
    from companion.attention import MultiHeadAttention
    from companion.models import num_parameters

    cases = []
    for label, d, h, h_kv, bias in [
        ("D=512, H=8, biases", 512, 8, None, True),
        ("D=512, H=8, no biases", 512, 8, None, False),
        ("GQA: D=512, H=8, H_kv=2, no biases", 512, 8, 2, False),
        ("GQA: D=768, H=12, H_kv=4, biases", 768, 12, 4, True),
        ("MQA: D=256, H=4, H_kv=1, biases", 256, 4, 1, True),
    ]:
        right = num_parameters(MultiHeadAttention(d, h, n_kv_heads=h_kv, bias=bias))
        kv_width = (h if h_kv is None else h_kv) * (d // h)  # H_kv·D_h
        b = int(bias)
        mistakes = [
            (
                _is(right - d * d - b * d),
                "you left out the output projection W_O (D×D, plus D biases): it is a quarter of a full MHA layer.",
            ),
            (
                _is(4 * d * d + 4 * b * d) if h_kv not in (None, h) else (lambda out: False),
                "with n_kv_heads < n_heads, k_proj and v_proj map D to H_kv·D_h only: D×(H_kv·D_h) weights each, "
                "not D×D.",
            ),
            (
                _is(4 * d * d * h + 4 * b * d * h),
                "the head count multiplies nothing: the H heads share one D×(H·D_h) matrix per projection.",
            ),
        ]
        if bias:
            mistakes.append(
                (
                    _is(right - 2 * d - 2 * kv_width),
                    "you forgot the biases: with bias=True every "
                    "projection has one per output (q and o: D each; k and v: H_kv·D_h each).",
                )
            )
        cases.append(
            Case(label, (d, h), _count_judge(right), kwargs={"n_kv_heads": h_kv, "bias": bias}, mistakes=mistakes)
        )
    return cases


MHA_PARAMETERS = Check(
    name="mha_parameters",
    signature="fn(d_model, n_heads, n_kv_heads=None, bias=True) -> int; n_kv_heads=None means n_heads",
    description="the parameters of a multi-head attention layer (W_Q, W_K, W_V, W_O, optional biases; GQA)",
    hint="W_Q and W_O are D×D; W_K and W_V are D×(H_kv·D_h) with D_h = D / H; add one bias per output if bias.",
    make_cases=_parameter_cases,
)

# ---------------------------------------------------------------- predict: GQA's KV cache


def _kv_gib() -> float:
    from companion.scaling import kv_cache_bytes

    return kv_cache_bytes(80, 8, 128, 4096, 1, 2) / 2**30  # Llama 2 70B: 80 layers, 8 K/V heads of width 128


GQA_KV_CACHE = value_check(
    "gqa_kv_cache_gib",
    _kv_gib,
    description="KV cache of Llama 2 70B (80 layers, 64 query heads, 8 K/V heads of width 128) for one "
    "sequence of 4,096 tokens in fp16, in GiB",
    hint="2 (K and V) · layers · H_kv · D_h · tokens · bytes per number, divided by 2^30.",
    signature="a number of GiB",
    mistakes={
        0.625: "you forgot the factor 2: the cache holds both K and V.",
        10.0: "you used the 64 query heads; with GQA only the H_kv = 8 key/value heads are cached.",
        2.5: "fp16 is 2 bytes per number, not 4.",
        1.342177280: "that is GB (10^9 bytes); a GiB is 2^30 bytes.",
    },
    rtol=0.02,
)

# ---------------------------------------------------------------- choose: more heads at a fixed width
HEADS_CHOICE = choice_check(
    "heads_trade_off",
    "b",
    ("a", "b", "c", "d"),
    description="D = 512 fixed, 8 heads -> 64 heads: what changes?",
    hint="count W_Q, W_K, W_V, W_O for both, and think about the width D_h = D / H of one head's scores.",
    mistakes={
        "a": "W_Q, W_K, W_V and W_O stay D×D whatever H is: the parameter count does not change.",
        "c": "the KV cache stores H·D_h = D numbers per token and layer for K (and for V): unchanged.",
        "d": "each head now works in a D_h = 8-dimensional subspace, narrower than before, not wider.",
    },
)

CHECKS = [SPLIT_HEADS, MERGE_HEADS, MHA_PARAMETERS, GQA_KV_CACHE, HEADS_CHOICE]
