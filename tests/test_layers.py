"""Tests for companion.layers: equality with torch.nn.LayerNorm and HF Llama layers, identities, errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from companion import layers as L


def randomize(module: nn.Module, seed: int = 0) -> nn.Module:
    """Give norms non-trivial weights so that a test cannot pass with weight = 1, bias = 0."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return module


# --------------------------------------------------------------------------------------------------------
# Norms
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_layernorm_equals_torch(bias: bool, eps: float, fused: bool) -> None:
    torch.manual_seed(0)
    ours, ref = randomize(L.LayerNorm(24, eps, bias=bias, fused=fused)), nn.LayerNorm(24, eps, bias=bias)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(3, 7, 24) * 5 + 2
    assert_close(ours(x), ref(x))


def test_layernorm_output_is_standardised_and_variance_is_biased() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 6) * 3 + 1
    y = L.LayerNorm(6, eps=1e-12)(x)
    assert_close(y.mean(-1), torch.zeros(4), atol=1e-5, rtol=0)
    assert_close(y.pow(2).mean(-1), torch.ones(4), atol=1e-4, rtol=0)  # divide by D: biased variance
    assert not torch.allclose(y.var(-1, unbiased=True), torch.ones(4), atol=1e-2)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rmsnorm_equals_hugging_face_llama(dtype: torch.dtype, fused: bool) -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    ours = randomize(L.RMSNorm(32, eps=1e-6, fused=fused)).to(dtype)
    ref = LlamaRMSNorm(32, eps=1e-6).to(dtype)
    ref.load_state_dict(ours.state_dict())
    x = (torch.randn(2, 5, 32) * 4).to(dtype)
    out = ours(x)
    assert out.dtype == dtype
    assert_close(out, ref(x))


@pytest.mark.parametrize("fused", [False, True])
def test_rmsnorm_definition(fused: bool) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    norm = randomize(L.RMSNorm(8, eps=1e-6, fused=fused))
    assert_close(norm(x), x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * norm.weight)
    assert_close(norm(5 * x), norm(x), atol=1e-5, rtol=1e-5)  # invariant to rescaling the input


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_norms_in_half_precision_use_float32_statistics(kind: str, dtype: torch.dtype, fused: bool) -> None:
    torch.manual_seed(0)
    norm = randomize(L.make_norm(kind, 64, fused=fused))
    x = torch.randn(4, 64) * 300  # squares reach ~1e5: beyond fp16's max (65504) if computed in fp16
    out = norm.to(dtype)(x.to(dtype))
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert_close(out.float(), norm.float()(x.to(dtype).float()), atol=5e-2, rtol=2e-2)


@pytest.mark.parametrize("fused", [False, True])
def test_layernorm_bfloat16_matches_torch(fused: bool) -> None:
    torch.manual_seed(0)
    ours = randomize(L.LayerNorm(16, fused=fused)).to(torch.bfloat16)
    ref = nn.LayerNorm(16).to(torch.bfloat16)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(5, 16).to(torch.bfloat16)
    assert_close(ours(x), ref(x))


def test_make_norm_kinds_and_default_eps() -> None:
    assert isinstance(L.make_norm("layernorm", 8), L.LayerNorm) and L.make_norm("layernorm", 8).eps == 1e-5
    assert isinstance(L.make_norm("rmsnorm", 8), L.RMSNorm) and L.make_norm("rmsnorm", 8).eps == 1e-6
    assert L.make_norm("rmsnorm", 8, eps=1e-3).eps == 1e-3
    assert not L.make_norm("layernorm", 8).fused and L.make_norm("rmsnorm", 8, fused=True).fused


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_fused_norms_equal_the_explicit_formula_with_gradients(kind: str) -> None:
    """The fast path computes the same function: outputs, and gradients for the input and every parameter."""
    torch.manual_seed(0)
    explicit = randomize(L.make_norm(kind, 32))
    fused = L.make_norm(kind, 32, fused=True)
    fused.load_state_dict(explicit.state_dict())
    x = (torch.randn(4, 9, 32) * 3 + 1).requires_grad_()
    xf = x.detach().clone().requires_grad_()
    g = torch.randn(4, 9, 32)
    (explicit(x) * g).sum().backward()
    (fused(xf) * g).sum().backward()
    assert_close(fused(xf), explicit(x))
    assert_close(xf.grad, x.grad)
    for (name, p), q in zip(explicit.named_parameters(), fused.parameters()):
        assert_close(q.grad, p.grad, msg=name)
    assert "fused=True" in repr(fused) and "fused" not in repr(explicit)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_a_gpt_with_fused_norms_gives_the_same_logits_and_gradients(norm: str) -> None:
    from companion.models import GPT, ModelConfig

    config = ModelConfig(vocab_size=50, d_model=32, n_heads=4, n_layers=2, max_seq_len=16, norm=norm)
    torch.manual_seed(0)
    explicit = GPT(config)
    fused = GPT(dataclasses.replace(config, fused_norm=True))
    fused.load_state_dict(explicit.state_dict())
    assert sum(isinstance(m, (L.LayerNorm, L.RMSNorm)) and m.fused for m in fused.modules()) == 5  # 2 per layer + final
    ids = torch.randint(0, 50, (3, 16))
    for model in (explicit, fused):
        model(ids).logsumexp(-1).sum().backward()
    assert_close(fused(ids), explicit(ids))
    for (name, p), q in zip(explicit.named_parameters(), fused.parameters()):
        assert_close(q.grad, p.grad, msg=name)


# --------------------------------------------------------------------------------------------------------
# Feed-forward
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation,fn", [
    ("relu", F.relu), ("gelu", F.gelu), ("gelu_tanh", lambda h: F.gelu(h, approximate="tanh")),
])  # fmt: skip
def test_feedforward_is_down_act_up(activation: str, fn) -> None:
    torch.manual_seed(0)
    ffn = L.FeedForward(16, 64, activation)
    x = torch.randn(2, 5, 16)
    expected = fn(x @ ffn.up_proj.weight.T + ffn.up_proj.bias) @ ffn.down_proj.weight.T + ffn.down_proj.bias
    assert_close(ffn(x), expected)


def test_feedforward_acts_on_each_position_alone() -> None:
    torch.manual_seed(0)
    ffn = L.FeedForward(8, 32, "gelu")
    x = torch.randn(1, 6, 8)
    y = x.clone()
    y[:, 3] += 1.0  # change one position
    changed = (ffn(x) - ffn(y)).abs().sum(-1)[0]
    assert changed[3] > 0 and torch.all(changed[[0, 1, 2, 4, 5]] == 0)


def test_swiglu_equals_hugging_face_llama_mlp() -> None:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    torch.manual_seed(0)
    ours = L.SwiGLU(16, 40)
    ref = LlamaMLP(LlamaConfig(hidden_size=16, num_attention_heads=4, intermediate_size=40, mlp_bias=False))
    ref.load_state_dict(ours.state_dict())  # same names: gate_proj, up_proj, down_proj
    x = torch.randn(2, 3, 16)
    assert_close(ours(x), ref(x))
    assert ours.gate_proj.bias is None


def test_make_ffn_choices() -> None:
    assert isinstance(L.make_ffn("swiglu", 8, 16), L.SwiGLU)
    ffn = L.make_ffn("gelu", 8, 16, bias=False)
    assert isinstance(ffn, L.FeedForward) and ffn.activation == "gelu" and ffn.up_proj.bias is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("activation", ["relu", "gelu", "swiglu"])
def test_ffn_half_precision(activation: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    ffn = L.make_ffn(activation, 16, 32)
    x = torch.randn(2, 4, 16)
    out = ffn.to(dtype)(x.to(dtype))
    assert out.dtype == dtype
    assert_close(out.float(), ffn.float()(x.to(dtype).float()), atol=3e-2, rtol=3e-2)


# --------------------------------------------------------------------------------------------------------
# Residual block
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_residual_block_pre_and_post(norm: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    sub = L.FeedForward(8, 16)
    pre = L.ResidualBlock(8, norm=norm, placement="pre")
    post = L.ResidualBlock(8, norm=norm, placement="post")
    assert_close(pre(x, sub), x + sub(pre.norm(x)))
    assert_close(post(x, sub), post.norm(x + sub(x)))
    zero = lambda h: torch.zeros_like(h)  # noqa: E731
    assert_close(pre(x, zero), x)  # pre-norm: an identity path when the sublayer is silent
    assert_close(post(x, zero), post.norm(x))  # post-norm: the sum is always normalised


def test_residual_block_dropout_only_in_training() -> None:
    torch.manual_seed(0)
    block = L.ResidualBlock(8, dropout=0.5)
    x = torch.randn(4, 8)
    block.eval()
    assert_close(block(x, lambda h: h), x + block.norm(x))
    block.train()
    assert not torch.allclose(block(x, lambda h: h), x + block.norm(x))


def test_bad_arguments_raise_clear_errors() -> None:
    with pytest.raises(ValueError, match="activation='tanh'"):
        L.FeedForward(8, 16, "tanh")
    with pytest.raises(ValueError, match="activation='swish'"):
        L.make_ffn("swish", 8, 16)
    with pytest.raises(ValueError, match="kind='batchnorm'"):
        L.make_norm("batchnorm", 8)
    with pytest.raises(ValueError, match="placement='middle'"):
        L.ResidualBlock(8, placement="middle")
    with pytest.raises(ValueError, match="dropout=1.5"):
        L.FeedForward(8, 16, dropout=1.5)
    with pytest.raises(ValueError, match="eps=0"):
        L.RMSNorm(8, eps=0)
    with pytest.raises(ValueError, match="d_ff=0"):
        L.SwiGLU(8, 0)
    with pytest.raises(ValueError, match="d_model=8"):
        L.LayerNorm(8)(torch.randn(2, 6))
    with pytest.raises(TypeError, match="sublayer"):
        L.ResidualBlock(8)(torch.randn(2, 8), "ffn")
