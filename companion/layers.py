"""The position-wise layers around attention: feed-forward networks, normalisation, residual blocks.

- ``FeedForward``: ``down_proj(act(up_proj(x)))`` with ReLU (Vaswani et al. 2017, §3.3) or GELU
  (Hendrycks & Gimpel 2016; BERT, GPT-2). ``"gelu_tanh"`` is GPT-2's tanh approximation.
- ``SwiGLU``: ``down_proj(silu(gate_proj(x)) * up_proj(x))`` (Shazeer 2020; PaLM, Llama).
- ``LayerNorm`` (Ba et al. 2016) and ``RMSNorm`` (Zhang & Sennrich 2019; Llama). Written out op by op by
  default; ``fused=True`` computes the same formula with PyTorch's one-kernel ``F.layer_norm`` / ``F.rms_norm``
  (the fast path ``ModelConfig.fused_norm`` and ``companion-train`` use; tested equal).
- ``ResidualBlock``: ``x + sublayer(norm(x))`` (pre-norm, GPT-2 and later) or ``norm(x + sublayer(x))``
  (post-norm, the original Transformer); Xiong et al. 2020 compare the two.

Checked against: ``torch.nn.LayerNorm``, Hugging Face ``LlamaRMSNorm`` and ``LlamaMLP`` (same formula),
``torch.nn.functional.gelu``. Norm statistics are always computed in float32.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from companion._checks import (
    check_bool,
    check_choice,
    check_dropout,
    check_positive_float,
    check_positive_int,
    check_tensor,
)

__all__ = [
    "ACTIVATIONS",
    "FFN_ACTIVATIONS",
    "NORMS",
    "PLACEMENTS",
    "FeedForward",
    "LayerNorm",
    "RMSNorm",
    "ResidualBlock",
    "SwiGLU",
    "make_ffn",
    "make_norm",
]

FFN_ACTIVATIONS = ("relu", "gelu", "gelu_tanh")  # FeedForward's nonlinearities
ACTIVATIONS = (*FFN_ACTIVATIONS, "swiglu")  # everything make_ffn (and ModelConfig.activation) accepts
NORMS = ("layernorm", "rmsnorm")
PLACEMENTS = ("post", "pre")  # where ResidualBlock puts the norm
DEFAULT_EPS = {"layernorm": 1e-5, "rmsnorm": 1e-6}  # torch.nn.LayerNorm's and Llama's defaults


def _check_input(x: Tensor, d_model: int) -> None:
    check_tensor("x", x)
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype} (convert with .float())")
    if x.shape[-1] != d_model:
        raise ValueError(f"x.shape[-1]={x.shape[-1]} does not match d_model={d_model} (x: {tuple(x.shape)})")


class FeedForward(nn.Module):
    """Two linear maps with a nonlinearity between: D -> d_ff -> D, applied to each position alone.

    Dropout (if any) acts on the hidden activations; the residual block drops the output.
    """

    def __init__(
        self, d_model: int, d_ff: int, activation: str = "relu", *, bias: bool = True, dropout: float = 0.0
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("d_ff", d_ff)
        check_choice("activation", activation, FFN_ACTIVATIONS)
        check_bool("bias", bias)
        check_dropout("dropout", dropout)
        self.d_model, self.activation = d_model, activation
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def act(self, h: Tensor) -> Tensor:
        if self.activation == "relu":
            return F.relu(h)
        return F.gelu(h, approximate="tanh" if self.activation == "gelu_tanh" else "none")

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: x (..., D) -> hidden (..., d_ff) -> returns (..., D)"""
        _check_input(x, self.d_model)
        h = self.act(self.up_proj(x))  # (..., d_ff)
        if self.training and self.dropout.p > 0:
            h = self.dropout(h)
        return self.down_proj(h)


class SwiGLU(nn.Module):
    """Gated feed-forward: ``down_proj(silu(gate_proj(x)) * up_proj(x))``, as in Llama's MLP.

    Three matrices instead of two; Llama picks d_ff ≈ 8/3 · D so the parameter count stays that of a
    4·D two-matrix FFN.
    """

    def __init__(self, d_model: int, d_ff: int, *, bias: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("d_ff", d_ff)
        check_bool("bias", bias)
        check_dropout("dropout", dropout)
        self.d_model = d_model
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: x (..., D) -> gate, up (..., d_ff) -> returns (..., D)"""
        _check_input(x, self.d_model)
        return self.down_proj(self.dropout(F.silu(self.gate_proj(x)) * self.up_proj(x)))


class LayerNorm(nn.Module):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dim; equals ``torch.nn.LayerNorm``.

    The variance is the biased one (divide by D, not D - 1), as in the paper and in PyTorch.
    ``fused=True``: the same formula by ``F.layer_norm``, one kernel forward and one backward instead of about
    ten small ones each way (a small GPT trains about 8% faster on a CPU).
    """

    def __init__(self, d_model: int, eps: float = 1e-5, *, bias: bool = True, fused: bool = False) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_float("eps", eps)
        check_bool("bias", bias)
        check_bool("fused", fused)
        self.d_model, self.eps, self.fused = d_model, eps, fused
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: x (..., D) -> returns (..., D), in x's dtype"""
        _check_input(x, self.d_model)
        # Statistics in float32: in fp16 a sum of squares over D values overflows or loses its low bits.
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        if self.fused:
            bias = None if self.bias is None else self.bias.to(xf.dtype)
            return F.layer_norm(xf, (self.d_model,), self.weight.to(xf.dtype), bias, self.eps).to(x.dtype)
        mean = xf.mean(-1, keepdim=True)
        var = (xf - mean).pow(2).mean(-1, keepdim=True)  # biased: divide by D
        y = (xf - mean) * torch.rsqrt(var + self.eps) * self.weight.to(xf.dtype)
        if self.bias is not None:
            y = y + self.bias.to(xf.dtype)
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}, bias={self.bias is not None}" + (", fused=True" if self.fused else "")


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) * weight``: LayerNorm without centring and without bias (Llama).

    Follows Hugging Face's ``LlamaRMSNorm`` exactly: normalise in float32, cast back to x's dtype,
    then multiply by the weight. ``fused=True``: the normalisation by ``F.rms_norm`` (one kernel).
    """

    def __init__(self, d_model: int, eps: float = 1e-6, *, fused: bool = False) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_float("eps", eps)
        check_bool("fused", fused)
        self.d_model, self.eps, self.fused = d_model, eps, fused
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: x (..., D) -> returns (..., D)"""
        _check_input(x, self.d_model)
        # float32 statistics, as in LayerNorm: the mean of squares is what overflows in fp16.
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        if self.fused:
            y = F.rms_norm(xf, (self.d_model,), None, self.eps)
        else:
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}" + (", fused=True" if self.fused else "")


def make_norm(kind: str, d_model: int, eps: float | None = None, *, fused: bool = False) -> nn.Module:
    """``LayerNorm`` for "layernorm", ``RMSNorm`` for "rmsnorm"; ``eps=None`` takes that norm's default.
    ``fused``: compute it with PyTorch's one-kernel version (same numbers, faster)."""
    check_choice("kind", kind, NORMS)
    eps = DEFAULT_EPS[kind] if eps is None else eps
    return LayerNorm(d_model, eps, fused=fused) if kind == "layernorm" else RMSNorm(d_model, eps, fused=fused)


def make_ffn(
    activation: str, d_model: int, d_ff: int, *, bias: bool = True, dropout: float = 0.0
) -> nn.Module:
    """``SwiGLU`` for "swiglu", else ``FeedForward`` with that activation ("relu", "gelu", "gelu_tanh")."""
    check_choice("activation", activation, ACTIVATIONS)
    if activation == "swiglu":
        return SwiGLU(d_model, d_ff, bias=bias, dropout=dropout)
    return FeedForward(d_model, d_ff, activation, bias=bias, dropout=dropout)


class ResidualBlock(nn.Module):
    """A residual connection with its norm, around any sublayer (attention or FFN).

    placement="pre"  (GPT-2, Llama):          x + dropout(sublayer(norm(x)))
    placement="post" (Vaswani et al. 2017):   norm(x + dropout(sublayer(x)))

    Pre-norm keeps an identity path from input to output, so deep stacks tolerate a short warm-up (or none at
    small scale; large pre-norm models still warm up);
    post-norm normalises the sum, so its gradients shrink or grow with depth.
    """

    def __init__(
        self,
        d_model: int,
        *,
        norm: str = "layernorm",
        placement: str = "pre",
        dropout: float = 0.0,
        eps: float | None = None,
        fused_norm: bool = False,
    ) -> None:
        super().__init__()
        check_choice("placement", placement, PLACEMENTS)
        check_dropout("dropout", dropout)
        self.placement = placement
        self.norm = make_norm(norm, d_model, eps, fused=fused_norm)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        """Shapes: x (B, T, D) (any (..., D)); ``sublayer`` maps (..., D) -> (..., D); returns (..., D)"""
        if not callable(sublayer):
            raise TypeError(f"sublayer must be callable (module or function), got {type(sublayer).__name__}")
        if self.placement == "pre":
            out = sublayer(self.norm(x))
            _check_same_shape(x, out)
            return x + self._drop(out)
        out = sublayer(x)
        _check_same_shape(x, out)
        return self.norm(x + self._drop(out))

    def _drop(self, out: Tensor) -> Tensor:
        # dropout is the identity at p = 0 or in eval mode: skip the call (it runs twice per layer per token)
        return self.dropout(out) if self.training and self.dropout.p > 0 else out

    def extra_repr(self) -> str:
        return f"placement={self.placement!r}"


def _check_same_shape(x: Tensor, out: Tensor) -> None:
    if not isinstance(out, Tensor) or out.shape != x.shape:
        got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        raise ValueError(f"sublayer returned {got} for an input of shape {tuple(x.shape)}; expected the same shape "
                         "(a residual connection adds the two)")
