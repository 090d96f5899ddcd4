"""Qwen3 dense models (Qwen Team 2025) in Hugging Face's format: ``Qwen3ForCausalLM``'s names and ``config.json``.

Llama's layout plus two things: ``q_norm`` and ``k_norm``, an RMSNorm of width D_h applied to every head's
query and key before RoPE (QK-norm, ``ModelConfig.qk_norm``), and a head width ``head_dim`` that need not be
hidden_size / num_attention_heads (Qwen3-0.6B: 128 against 1024 / 16 = 64; ``ModelConfig.d_head``).
Qwen3's optional sliding-window layers (``use_sliding_window``) are refused; all released dense Qwen3 models
attend over the full context.

Checked against ``transformers.Qwen3ForCausalLM`` from random weights (tests/test_hf_families.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from companion.models.config import ModelConfig
from companion.models.hf import llama
from companion.models.hf.common import (
    LLAMA_SHAPE,
    ROTARY_BUFFERS,
    Weights,
    check_depth,
    differences,
    modern_differences,
    need,
    outer_from_companion,
    outer_to_companion,
    plain_rope_theta,
    rename_layers,
)

__all__ = ["config_from_hf", "config_to_hf", "from_companion", "shape_differences", "to_companion"]

SOURCE = "Qwen3"
NAMES = {**llama.NAMES, "self_attn.q_norm": "self_attn.q_norm", "self_attn.k_norm": "self_attn.k_norm"}  # + QK-norm


def config_from_hf(cfg: Mapping[str, Any], source: str = "config.json") -> ModelConfig:
    """The ``ModelConfig`` of a Qwen3 ``config.json`` (dropout 0: a loaded model is for inference)."""
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{source}: hidden_act={cfg['hidden_act']!r} is not supported; expected 'silu' (SwiGLU)")
    if cfg.get("attention_bias"):
        raise ValueError(f"{source}: attention_bias=True is not supported (ModelConfig.bias covers the FFN too)")
    layer_types = cfg.get("layer_types") or []
    if cfg.get("use_sliding_window") or "sliding_attention" in layer_types:
        raise ValueError(f"{source}: Qwen3's sliding-window layers are not supported (use_sliding_window)")
    d, heads = need(cfg, "hidden_size", source), need(cfg, "num_attention_heads", source)
    head_dim = cfg.get("head_dim") or d // heads
    return ModelConfig.qwen3(
        vocab_size=need(cfg, "vocab_size", source), d_model=d, n_heads=heads,
        n_kv_heads=cfg.get("num_key_value_heads") or heads, d_head=None if head_dim == d // heads else head_dim,
        n_layers=need(cfg, "num_hidden_layers", source), d_ff=need(cfg, "intermediate_size", source),
        max_seq_len=need(cfg, "max_position_embeddings", source), rope_base=plain_rope_theta(cfg, source),
        norm_eps=cfg.get("rms_norm_eps", 1e-6), tie_embeddings=cfg.get("tie_word_embeddings", False), dropout=0.0,
    )  # fmt: skip


def config_to_hf(c: ModelConfig) -> dict[str, Any]:
    """The ``config.json`` of ``c`` as ``Qwen3ForCausalLM`` reads it."""
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": c.vocab_size,
        "hidden_size": c.d_model, "intermediate_size": c.d_ff, "num_hidden_layers": c.n_layers,
        "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads, "head_dim": c.head_dim,
        "max_position_embeddings": c.max_seq_len, "rms_norm_eps": c.norm_eps, "rope_theta": c.rope_base,
        "rope_parameters": {"rope_theta": c.rope_base, "rope_type": "default"}, "use_sliding_window": False,
        "sliding_window": None, "max_window_layers": c.n_layers, "layer_types": ["full_attention"] * c.n_layers,
        "tie_word_embeddings": c.tie_embeddings, "hidden_act": "silu", "attention_bias": False,
        "attention_dropout": c.dropout, "bos_token_id": None, "eos_token_id": None, "dtype": "float32",
    }  # fmt: skip


def shape_differences(c: ModelConfig) -> list[str]:
    """The fields in which ``c`` differs from a Qwen3-shaped model (empty: it can be saved as Qwen3)."""
    wanted = {**LLAMA_SHAPE, "sliding_window": (None,), "rope_pairing": ("half",), "qk_norm": (True,)}
    return differences(c, wanted) + modern_differences(c, allowed=("qk_norm", "d_head"))


def to_companion(sd: Mapping[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """A ``Qwen3ForCausalLM`` state dict under ``companion.models.GPT``'s names."""
    sd = Weights(sd, SOURCE)
    check_depth(sd, r"model\.layers\.(\d+)\.", config, SOURCE)
    ours = outer_to_companion(sd, config) | rename_layers(sd, NAMES, config.n_layers, to_ours=True)
    sd.refuse_unread(ROTARY_BUFFERS)
    return ours


def from_companion(sd: Mapping[str, Tensor], c: ModelConfig) -> dict[str, Tensor]:
    """Our weights under ``Qwen3ForCausalLM``'s names."""
    return outer_from_companion(sd, c) | rename_layers(sd, NAMES, c.n_layers, to_ours=False)
