"""Scaled dot-product attention and its softmax (chapter 03_attention).

Implements ``Attention(Q, K, V) = softmax(Q Kᵀ / √D_h + mask) V`` from Vaswani et al., *Attention Is All
You Need* (2017, §3.2.1), written out step by step, with a softmax that is computed in float32 for half
precision and returns zeros (not NaN) for a fully masked row.

Checked against (``tests/test_attention.py``): ``torch.nn.functional.scaled_dot_product_attention``.
Masks follow :mod:`companion.masks`: boolean ``True`` = may attend, or additive 0 / ``-inf``.
Left out on purpose: attention biases such as ALiBi are plain additive masks here (pass them as ``mask``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from companion._checks import check_same_dtype_device, check_tensor

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
    """
    check_tensor("x", x)
    out_dtype = x.dtype
    dead = x.amax(dim=dim, keepdim=True) == float("-inf")  # rows with nothing to attend to
    any_dead = bool(dead.any())
    if any_dead:
        x = x.masked_fill(dead, 0.0)  # any finite row will do; it is zeroed below (and gets zero gradient)
    out = torch.softmax(x, dim=dim, dtype=torch.float32 if out_dtype in _HALF else None)
    if any_dead:
        out = out.masked_fill(dead, 0.0)
    return out.to(out_dtype)


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
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError as err:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} have incompatible batch dims") from err


def _check_mask(mask: Tensor, scores_shape: tuple[int, ...], device: torch.device) -> None:
    check_tensor("mask", mask)
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise TypeError(f"mask must be bool (True = may attend) or additive float, got dtype {mask.dtype}")
    if mask.device != device:
        raise ValueError(f"mask is on {mask.device} but q is on {device}; expected one device")
    ok = mask.dim() <= len(scores_shape)
    if ok:
        try:
            ok = torch.broadcast_shapes(mask.shape, scores_shape) == torch.Size(scores_shape)
        except RuntimeError:
            ok = False
    if not ok:
        raise ValueError(
            f"mask has shape {tuple(mask.shape)}, which does not broadcast to the scores shape "
            f"(..., T, S) = {tuple(scores_shape)}"
        )


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    return_weights: bool = False,
    *,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """``softmax(q kᵀ · scale + mask) v``, written out step by step (scale defaults to ``1/√D_h``).

    ``mask`` is boolean (``True`` = may attend) or additive (0 / ``-inf``); a query whose keys are all
    masked gets the zero vector (see :func:`softmax`). ``dropout_p`` drops attention weights (pass 0 at
    evaluation time, as with the PyTorch function). The returned weights are those before dropout.

    Shapes:
        q: (..., T, D_h); k: (..., S, D_h); v: (..., S, D_v); mask broadcastable to (..., T, S).
        returns out (..., T, D_v), and weights (..., T, S) if ``return_weights``.
    """
    _check_qkv(q, k, v)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p={dropout_p} is invalid; expected 0 <= dropout_p < 1")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q * scale) @ k.transpose(-2, -1)  # (..., T, S)
    if mask is not None:
        _check_mask(mask, tuple(scores.shape), q.device)
        if mask.dtype == torch.bool:
            scores.masked_fill_(~mask, float("-inf"))  # in place: the (..., T, S) tensor is the big one
        else:
            scores.add_(mask)
    weights = softmax(scores, dim=-1)  # (..., T, S), rows sum to 1 (or 0 if fully masked)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    out = dropped @ v  # (..., T, D_v)
    return (out, weights) if return_weights else out
