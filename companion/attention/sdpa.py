"""Scaled dot-product attention and its softmax (chapter 03_attention).

Implements ``Attention(Q, K, V) = softmax(Q Kᵀ / √D_h + mask) V`` from Vaswani et al., *Attention Is All
You Need* (2017, §3.2.1), written out step by step, with a softmax that is computed in float32 for half
precision and returns zeros (not NaN) for a fully masked row. For fp16/bf16 inputs the scores
``Q Kᵀ`` themselves are computed in float32 too: in fp16 a dot product of 64 values of size 300 is
already past the largest fp16 number (65,504), and the row would turn into NaN.

``is_causal=True`` applies the causal mask without the caller building it: query ``i`` of the ``T`` queries
sits at position ``i + S - T`` (the queries are the *last* T of the S positions, as with a KV cache) and
sees the keys up to it, exactly :func:`companion.masks.causal_mask(T, S) <companion.masks.causal_mask>`.
Mind that PyTorch's own ``is_causal`` aligns the mask to the top-left corner instead, which is the same only
when T == S; :class:`~companion.attention.MultiHeadAttention` handles the difference on its fused path.

Checked against (``tests/test_attention.py``): ``torch.nn.functional.scaled_dot_product_attention``.
Masks follow :mod:`companion.masks`: boolean ``True`` = may attend, or additive 0 / ``-inf``.
Left out on purpose: attention biases such as ALiBi are plain additive masks here (pass them as ``mask``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from companion._checks import (
    check_bool,
    check_dropout,
    check_mask,
    check_positive_float,
    check_same_dtype_device,
    check_tensor,
)
from companion.masks import causal_mask

__all__ = ["scaled_dot_product_attention", "softmax"]

_HALF = (torch.float16, torch.bfloat16)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Numerically stable softmax along ``dim``, computed in float32 for fp16/bf16 inputs.

    ``softmax(x)_i = exp(x_i - m) / Σ_j exp(x_j - m)`` with ``m = max_j x_j``: subtracting the maximum
    changes nothing mathematically but keeps ``exp`` from overflowing. ``torch.softmax`` performs exactly
    these steps in one fused pass, so we call it (the steps are written out one by one in
    :func:`companion.scratch.attention.softmax`). Half-precision inputs are computed in float32, whose
    wider mantissa keeps the small weights and the row sums accurate, and cast back.

    A row that is entirely ``-inf`` (every key masked) returns **zeros**, not NaN (which is what
    ``torch.softmax`` gives: 0 / 0): there is nothing to attend to, so that query's output is the zero
    vector, and no NaN leaks into the gradients either.

    Raises:
        TypeError: ``x`` is not a floating-point tensor. ValueError: ``x`` is empty, or ``dim`` is not one
        of its dimensions.
    """
    check_tensor("x", x)
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype} (convert with .float())")
    if x.numel() == 0:
        raise ValueError(f"x is empty (shape {tuple(x.shape)}); expected at least one element")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim must be an int, got {dim!r}")
    if not -x.dim() <= dim < max(x.dim(), 1):
        raise ValueError(f"dim={dim} is out of range for x with {x.dim()} dims (shape {tuple(x.shape)})")
    out_dtype = x.dtype
    dead = x.amax(dim=dim, keepdim=True) == float("-inf")  # rows with nothing to attend to
    # No `if dead.any()`: reading it back would cost a device sync on every call (every decoding step).
    x = x.masked_fill(dead, 0.0)  # any finite row will do; it is zeroed below (and gets zero gradient)
    out = torch.softmax(x, dim=dim, dtype=torch.float32 if out_dtype in _HALF else None)
    return out.masked_fill(dead, 0.0).to(out_dtype)


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t)
        if t.dim() < 2:
            raise ValueError(f"{name} must have at least 2 dims (..., length, D_h), got {tuple(t.shape)}")
        if t.numel() == 0:
            raise ValueError(f"{name} is empty (shape {tuple(t.shape)}); expected at least one position")
        if not t.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    check_same_dtype_device(q=q, k=k, v=v)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q has head width {q.shape[-1]} but k has {k.shape[-1]}; expected the same D_h")
    if k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}; expected equal (..., S)")
    if q.shape[:-2] != k.shape[:-2]:  # equal batch dims (the usual case) need no broadcasting check
        try:
            torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        except RuntimeError as err:
            raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} have incompatible batch dims") from err


def _check_mask(mask: Tensor, scores_shape: tuple[int, ...], device: torch.device) -> None:
    check_mask("mask", mask, scores_shape, device)


def _check_causal(is_causal: bool, t: int, s: int) -> None:
    """``is_causal`` is a bool, and causal attention has at least as many keys as queries."""
    check_bool("is_causal", is_causal)
    if is_causal and t > s:
        raise ValueError(
            f"is_causal=True with T={t} queries but only S={s} keys; expected T <= S (the queries are the last T "
            "of the S positions)"
        )


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    return_weights: bool = False,
    *,
    dropout: float = 0.0,
    scale: float | None = None,
    is_causal: bool = False,
    sinks: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """``softmax(q kᵀ · scale + mask) v``, written out step by step (scale defaults to ``1/√D_h``).

    ``mask`` is boolean (``True`` = may attend) or additive (0 / finite bias / ``-inf``); a query whose
    keys are all masked gets the zero vector (see :func:`softmax`). ``is_causal=True`` also hides every
    later key, as ``causal_mask(T, S)`` would (the queries are the last T of the S positions); it combines
    with ``mask``. ``dropout`` drops attention weights (pass 0 at evaluation time, as with the PyTorch
    function). The returned weights are those before dropout. fp16/bf16 inputs: scores, softmax and the
    weighted sum run in float32 and the output is cast back.

    ``sinks`` (gpt-oss's learned attention sinks): one extra logit per row, appended to the scores as a
    column that takes part in the softmax and is then dropped, so it absorbs probability but adds no value
    (the weights then sum to less than 1); shape (H,) for one per head when q is (B, H, T, D_h).

    Shapes:
        q: (..., T, D_h); k: (..., S, D_h); v: (..., S, D_v); mask broadcastable to (..., T, S).
        returns out (..., T, D_v), and weights (..., T, S) if ``return_weights``.

    Raises:
        ValueError: ``scale`` not a finite number > 0, ``dropout`` outside [0, 1), a mask holding NaN or
        +inf, shapes that do not fit, ``is_causal`` with more queries than keys.
        TypeError: ``is_causal`` not a bool.
    """
    _check_qkv(q, k, v)
    _check_causal(is_causal, q.shape[-2], k.shape[-2])
    check_dropout("dropout", dropout)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    else:
        check_positive_float("scale", scale)
    dtype = q.dtype
    if dtype in _HALF:  # float32 scores: a half-precision Q Kᵀ overflows long before the softmax sees it
        q, k, v = q.float(), k.float(), v.float()
    scores = (q * scale) @ k.transpose(-2, -1)  # (..., T, S)
    if mask is not None:
        _check_mask(mask, tuple(scores.shape), q.device)
        if mask.dtype == torch.bool:
            scores.masked_fill_(~mask, float("-inf"))  # in place: the (..., T, S) tensor is the big one
        else:
            scores.add_(mask)
    if is_causal and q.shape[-2] > 1:  # one query (the last position) may see every key: nothing to hide
        causal = causal_mask(scores.shape[-2], scores.shape[-1], device=scores.device)  # (T, S), True = may see
        scores.masked_fill_(~causal, float("-inf"))  # later keys hidden
    if sinks is not None:
        check_tensor("sinks", sinks, ndim=1)
        if scores.dim() < 3 or sinks.shape[0] != scores.shape[-3]:
            raise ValueError(f"sinks has shape {tuple(sinks.shape)}; expected one logit per head, (H,) with "
                             f"scores of shape {tuple(scores.shape)} = (..., H, T, S)")
        column = sinks.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)  # (..., H, T, 1)
        weights = softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]  # (..., T, S): sum <= 1
    elif mask is None:  # no row can be fully masked (causal leaves every query its own key): the plain softmax
        weights = torch.softmax(scores, dim=-1)  # (..., T, S), rows sum to 1; scores are float32 already
    else:
        weights = softmax(scores, dim=-1)  # (..., T, S), rows sum to 1 (or 0 if fully masked)
    dropped = F.dropout(weights, p=dropout) if dropout > 0.0 else weights
    out = (dropped @ v).to(dtype)  # (..., T, D_v)
    return (out, weights.to(dtype)) if return_weights else out
