"""Weight layouts for decoding: a linear layer's weight stored (in, out), several layers side by side in one matrix.

``nn.Linear`` keeps its weight as (out, in) and computes ``x @ W.T``. Decoding one token multiplies a (1, in) row
by every weight matrix of the model once, so each step reads all the weights and runs at the speed of the memory
(Pope et al., *Efficiently Scaling Transformer Inference*, 2022). Two changes of *where the numbers sit*, not of
the numbers, let a CPU's BLAS read them faster:

* each weight stored (in, out) (strides (1, out)): ``x @ W.T`` is then a product with a row-major (in, out)
  matrix, the layout Hugging Face's GPT-2 keeps its weights in (``Conv1D``);
* q, k and v side by side in one (D, D + 2·H_kv·D_h) matrix: one matrix product instead of three, one stream
  through memory instead of three (``MultiHeadAttention(fused_qkv=True)``).

Each ``nn.Linear`` keeps its own ``weight`` and ``bias`` Parameters, with the same shapes, values and
``state_dict`` names: ``weight`` becomes a transposed view into the shared (in, out) matrix, the way
``torch.nn.RNN.flatten_parameters`` keeps an RNN's weights as views into one buffer. In-place changes (an
optimiser step, ``load_state_dict``, ``nn.init``) keep the layout; ``.to(dtype)`` converts each weight on its own,
so ``MultiHeadAttention`` packs q/k/v again afterwards, and :func:`packed_linear` falls back to one product per
layer whenever the layers are not (or no longer) packed, or a gradient is needed.

Checked in ``tests/test_packing.py``: the same outputs and gradients as the plain layout, the same tokens from
``generate`` (and as ``transformers``' GPT-2), in sync after optimiser steps, ``load_state_dict`` and ``.to``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["pack_linears", "packed_linear", "packed_weight", "store_for_decoding"]


def _check_linears(linears: tuple[nn.Linear, ...]) -> None:
    if not linears:
        raise ValueError("expected at least one nn.Linear, got none")
    for i, lin in enumerate(linears):
        if not isinstance(lin, nn.Linear):
            raise TypeError(f"linears[{i}] must be an nn.Linear, got {type(lin).__name__}")
    first = linears[0]
    for i, lin in enumerate(linears[1:], start=1):
        if lin.in_features != first.in_features:
            raise ValueError(f"linears[{i}] has in_features={lin.in_features} but linears[0] has "
                             f"{first.in_features}; expected one input width (layers applied to the same x)")
        if (lin.bias is None) != (first.bias is None):
            has = {True: "no bias", False: "a bias"}
            raise ValueError(f"linears[{i}] has {has[lin.bias is None]} but linears[0] has {has[first.bias is None]}; "
                             "expected all with a bias or none")
        if lin.weight.dtype != first.weight.dtype or lin.weight.device != first.weight.device:
            raise ValueError(f"linears[{i}] holds {lin.weight.dtype} on {lin.weight.device} but linears[0] "
                             f"{first.weight.dtype} on {first.weight.device}; expected one dtype and device")


def packed_weight(*linears: nn.Linear) -> tuple[Tensor, Tensor | None] | None:
    """The (in, sum of outs) matrix and the bias vector that :func:`pack_linears` stored ``linears`` in, or
    ``None`` if they are not (or no longer) stored that way. Both are views: no copy is made.

    Called once per layer and decoding step, so it reads each Parameter straight from ``_parameters`` (a dict)
    rather than through ``nn.Module.__getattr__``.

    Shapes: returns matrix (in, N) and bias (N,) or None, with N = sum of the layers' out_features.
    """
    first, first_bias = linears[0]._parameters.get("weight"), linears[0]._parameters.get("bias")
    if first is None:  # not an nn.Linear (a LoRA adapter in its place, say)
        return None
    n = sum(lin.out_features for lin in linears)
    size = first.element_size()
    at, bias_at = first.data_ptr(), None if first_bias is None else first_bias.data_ptr()  # where layer i should start
    for lin in linears:
        w, b = lin._parameters.get("weight"), lin._parameters.get("bias")
        if w is None or w.data_ptr() != at or w.stride() != (1, n) or (b is None) != (bias_at is None):
            return None
        if b is not None and (b.data_ptr() != bias_at or b.stride() != (1,)):
            return None
        at += lin.out_features * size
        bias_at = None if bias_at is None else bias_at + lin.out_features * size
    matrix = torch.as_strided(first.detach(), (first.shape[1], n), (n, 1))  # (in, N): column block i is layer i
    bias = None if first_bias is None else torch.as_strided(first_bias.detach(), (n,), (1,))  # (N,)
    return matrix, bias


@torch.no_grad()
def pack_linears(*linears: nn.Linear) -> None:
    """Store the weights of ``linears`` as the column blocks of one (in, sum of outs) matrix, their biases as the
    pieces of one vector. With one layer: its weight stored (in, out). Nothing happens if they already are.

    Every layer keeps its ``weight`` Parameter, (out, in) with the same values; it becomes a transposed view into
    the matrix. The layers must take the same input width, hold one dtype and device, and all have a bias or none.

    Raises:
        TypeError: something that is not an ``nn.Linear``.
        ValueError: no layers, different ``in_features``, a bias on some layers only, mixed dtypes or devices.
    """
    _check_linears(linears)
    if packed_weight(*linears) is not None:
        return
    first = linears[0]
    n = sum(lin.out_features for lin in linears)
    matrix = first.weight.new_empty(first.in_features, n)  # (in, N)
    bias = None if first.bias is None else first.bias.new_empty(n)  # (N,)
    start = 0
    for lin in linears:
        stop = start + lin.out_features
        matrix[:, start:stop] = lin.weight.t()  # (in, out_i)
        lin.weight.data = matrix[:, start:stop].t()  # (out_i, in) again, strides (1, N)
        if bias is not None:
            bias[start:stop] = lin.bias
            lin.bias.data = bias[start:stop]
        start = stop


def packed_linear(x: Tensor, *linears: nn.Linear) -> tuple[Tensor, ...]:
    """``tuple(lin(x) for lin in linears)``: by one matrix product when :func:`pack_linears` stored the layers
    together and no gradient is needed, else layer by layer (a product with the packed matrix would not carry
    gradients to each layer's own Parameters).

    Shapes: x (..., in) -> one (..., out_i) per layer (views into one (..., sum of outs) result when packed).
    """
    found = packed_weight(*linears)
    if found is None or (torch.is_grad_enabled() and any(p.requires_grad for lin in linears for p in lin.parameters())):
        return tuple(lin(x) for lin in linears)
    matrix, bias = found
    flat = x.reshape(-1, x.shape[-1])  # (N_rows, in)
    y = flat @ matrix if bias is None else torch.addmm(bias, flat, matrix)  # (N_rows, sum of outs)
    return y.view(*x.shape[:-1], y.shape[-1]).split([lin.out_features for lin in linears], dim=-1)


def store_for_decoding(model: nn.Module) -> None:
    """Store every ``nn.Linear`` weight of ``model`` still in the (out, in) layout as (in, out) (layers packed
    together, such as a fused q/k/v, stay as they are). A tied output head shares its weight with the token
    table, so the table is stored that way too: a lookup then reads a strided row, which costs nothing next to
    the head's product."""
    for module in model.modules():
        if isinstance(module, nn.Linear) and module.weight.is_contiguous() and min(module.weight.shape) > 1:
            pack_linears(module)
