"""Quantised checkpoints: FP8 with block scales dequantised on load, every other scheme refused by name.

A folder whose ``config.json`` has a ``quantization_config`` stores some weights as low-precision codes plus
scales; read as plain tensors, the codes would be cast and the scales left behind, a model that runs and is
wrong. DeepSeek-V3 (and the FP8 releases of Qwen3) use one scheme, read here:

    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128], ...}

Each quantised matrix ``W`` (O, I) is stored as ``<name>.weight`` in ``float8_e4m3fn`` and
``<name>.weight_scale_inv`` in float32, one number per 128×128 block: (⌈O/128⌉, ⌈I/128⌉). The name says
"inverse" because quantising divided each block by it; dequantising multiplies:

    W[r, c] = float(codes[r, c]) * scale_inv[r // 128, c // 128]

The last row and column of blocks are cut short when O or I is not a multiple of 128. Norms, the token table,
the router and the head stay in bfloat16 and pass through unchanged. ``activation_scheme: "dynamic"`` concerns
FP8 matrix multiplication at run time; here activations stay in float32, so nothing else changes.

Every other ``quant_method`` (bitsandbytes' int8 with its ``SCB`` statistics, GPTQ, AWQ, ...) is refused with
its name. Checked in tests/test_hf_families.py: a tiny DeepSeek-V3 written in exactly the released layout
loads with the logits of ``transformers``' ``DeepseekV3ForCausalLM`` given the dequantised weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

__all__ = ["SCALE_SUFFIX", "dequantize", "dequantize_fp8_blocks"]

SCALE_SUFFIX = "_scale_inv"  # "<name>.weight" -> "<name>.weight_scale_inv"


def dequantize_fp8_blocks(codes: Tensor, scale_inv: Tensor, block: tuple[int, int], name: str = "weight") -> Tensor:
    """float32 weights from FP8 ``codes`` (O, I) and their per-block ``scale_inv`` (⌈O/b_0⌉, ⌈I/b_1⌉).

    Shapes:
        codes (O, I), scale_inv (⌈O/b_0⌉, ⌈I/b_1⌉) -> returns (O, I)
    """
    if codes.dim() != 2:
        raise ValueError(f"{name} has shape {tuple(codes.shape)}; expected a matrix for block scales")
    (o, i), (b0, b1) = codes.shape, block
    expected = (-(-o // b0), -(-i // b1))  # ceiling division: a partial block at each far edge
    if tuple(scale_inv.shape) != expected:
        raise ValueError(f"{name}{SCALE_SUFFIX} has shape {tuple(scale_inv.shape)}; expected {expected}, one scale "
                         f"per {b0}x{b1} block of the {o}x{i} weight")
    scale = scale_inv.float().repeat_interleave(b0, dim=0)[:o].repeat_interleave(b1, dim=1)[:, :i]  # (O, I)
    return codes.float() * scale  # (O, I)


def _block_size(q: Mapping[str, Any], source: str) -> tuple[int, int]:
    block = q.get("weight_block_size")
    if not (isinstance(block, list) and len(block) == 2 and all(type(b) is int and b > 0 for b in block)):
        raise ValueError(f"{source}: quantization_config has weight_block_size={block!r}; expected two positive "
                         "ints such as [128, 128] (FP8 with one scale per tensor is not supported)")
    return block[0], block[1]


def dequantize(sd: Mapping[str, Tensor], cfg: Mapping[str, Any], source: str) -> dict[str, Tensor]:
    """``sd`` with every FP8 weight and its ``weight_scale_inv`` replaced by the float32 weight, when ``cfg``
    (a ``config.json``) says ``quant_method: "fp8"``; ``sd`` unchanged without a ``quantization_config``.

    Raises ``ValueError`` naming the file and the scheme for any other ``quant_method``, a format other than
    e4m3, per-tensor scales, or a scale whose weight is missing or not FP8.
    """
    q = cfg.get("quantization_config")
    if q is None:
        return dict(sd)
    method = q.get("quant_method") if isinstance(q, Mapping) else None
    if method != "fp8":
        raise ValueError(f"{source}: quantization_config has quant_method={method!r}, which is not supported; "
                         "expected 'fp8' (FP8 e4m3 with block scales, as DeepSeek-V3 is released) or no "
                         "quantization_config (load an unquantised bfloat16/float16/float32 copy of the model)")
    if q.get("fmt", "e4m3") != "e4m3":
        raise ValueError(f"{source}: quantization_config has fmt={q['fmt']!r}; expected 'e4m3'")
    block = _block_size(q, source)
    out: dict[str, Tensor] = {}
    for key, value in sd.items():
        if key.endswith(SCALE_SUFFIX):
            if key.removesuffix(SCALE_SUFFIX) not in sd:
                raise ValueError(f"{source}: the checkpoint has {key} but no {key.removesuffix(SCALE_SUFFIX)}")
            continue
        scale = sd.get(key + SCALE_SUFFIX)
        if scale is None:
            out[key] = value  # not quantised (norms, embeddings, router); an FP8 tensor without scale is refused later
        elif value.dtype != torch.float8_e4m3fn:
            raise ValueError(f"{source}: {key} has dtype {value.dtype} beside {key}{SCALE_SUFFIX}; expected "
                             "torch.float8_e4m3fn codes")
        else:
            out[key] = dequantize_fp8_blocks(value, scale, block, key)
    return out
