"""Llama (Touvron et al. 2023) in Hugging Face's format: ``LlamaForCausalLM``'s names and ``config.json``.

Hugging Face Llama checkpoints already use the "half" RoPE pairing (their converter permutes Meta's q/k rows),
so ``ModelConfig.llama(rope_pairing="half")`` loads them unchanged. ``config.json`` keeps the RoPE settings
under ``rope_theta``/``rope_scaling`` (transformers < 5) or ``rope_parameters`` (>= 5); both are read and written.

Checked against ``transformers.LlamaForCausalLM`` from random weights (tests/test_hf_equivalence.py,
tests/test_pretrained.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from companion.models.config import ModelConfig
from companion.models.hf.common import (
    ROTARY_BUFFERS,
    Weights,
    check_depth,
    modern_differences,
    need,
    outer_from_companion,
    outer_to_companion,
    rope_settings,
)

__all__ = ["config_from_hf", "config_to_hf", "from_companion", "shape_differences", "to_companion"]

SOURCE = "Llama"
NAMES = {  # ours -> theirs, inside layers.{i} / model.layers.{i}
    "self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
    "self_attn.v_proj": "self_attn.v_proj", "self_attn.o_proj": "self_attn.o_proj",
    "ffn.gate_proj": "mlp.gate_proj", "ffn.up_proj": "mlp.up_proj", "ffn.down_proj": "mlp.down_proj",
    "self_attn_block.norm": "input_layernorm", "ffn_block.norm": "post_attention_layernorm",
}  # fmt: skip


def config_from_hf(cfg: Mapping[str, Any], source: str = "config.json") -> ModelConfig:
    """The ``ModelConfig`` of a Llama ``config.json`` (dropout 0: a loaded model is for inference)."""
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{source}: hidden_act={cfg['hidden_act']!r} is not supported; expected 'silu' (SwiGLU)")
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise ValueError(f"{source}: attention_bias/mlp_bias are not supported (ModelConfig.bias covers norms too)")
    d, heads = need(cfg, "hidden_size", source), need(cfg, "num_attention_heads", source)
    if cfg.get("head_dim") not in (None, d // heads):
        raise ValueError(f"{source}: head_dim={cfg['head_dim']} differs from hidden_size / num_attention_heads "
                         f"= {d // heads}; ModelConfig derives the head width from d_model")
    theta, scaling = rope_settings(cfg)
    extra: dict[str, Any] = {}
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind != "linear":
            raise ValueError(f"{source}: rope scaling {kind!r} is not supported; expected none or 'linear'")
        extra = {"rope_scaling": "linear", "rope_factor": float(scaling["factor"])}
    return ModelConfig.llama(
        vocab_size=need(cfg, "vocab_size", source), d_model=d, n_heads=heads,
        n_kv_heads=cfg.get("num_key_value_heads") or heads, n_layers=need(cfg, "num_hidden_layers", source),
        d_ff=need(cfg, "intermediate_size", source), max_seq_len=need(cfg, "max_position_embeddings", source),
        rope_base=theta, norm_eps=cfg.get("rms_norm_eps", 1e-6),
        tie_embeddings=cfg.get("tie_word_embeddings", False), dropout=0.0, **extra,
    )  # fmt: skip


def config_to_hf(c: ModelConfig) -> dict[str, Any]:
    """The ``config.json`` of ``c`` as ``LlamaForCausalLM`` reads it (transformers 4 and 5)."""
    rope: dict[str, Any] = {"rope_theta": c.rope_base, "rope_type": "default"}
    if c.rope_scaling == "linear":
        rope = {"rope_theta": c.rope_base, "rope_type": "linear", "factor": c.rope_factor}
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": c.vocab_size,
        "hidden_size": c.d_model, "intermediate_size": c.d_ff, "num_hidden_layers": c.n_layers,
        "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads, "head_dim": c.head_dim,
        "max_position_embeddings": c.max_seq_len, "rms_norm_eps": c.norm_eps,
        "rope_theta": c.rope_base,  # transformers < 5 reads these two keys ...
        "rope_scaling": None if c.rope_scaling is None else {"rope_type": "linear", "factor": c.rope_factor},
        "rope_parameters": rope,  # ... and transformers >= 5 this one
        "tie_word_embeddings": c.tie_embeddings, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "attention_dropout": c.dropout, "bos_token_id": None, "eos_token_id": None, "dtype": "float32",
    }  # fmt: skip


def shape_differences(c: ModelConfig) -> list[str]:
    """The fields in which ``c`` differs from a Llama-shaped model (empty: it can be saved as Llama)."""
    wanted = {"norm_placement": ("pre",), "final_norm": (True,), "embed_norm": (False,), "embed_scale": (False,),
              "sliding_window": (None,), "positions": ("rope",), "rope_pairing": ("half",), "norm": ("rmsnorm",),
              "bias": (False,), "activation": ("swiglu",), "rope_scaling": (None, "linear"),
              "type_vocab_size": (0,)}  # fmt: skip
    return [f"{k}={getattr(c, k)!r}" for k, v in wanted.items() if getattr(c, k) not in v] + modern_differences(c)


def to_companion(sd: Mapping[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """A ``LlamaForCausalLM`` state dict under ``companion.models.GPT``'s names.

    ``config`` must describe the same model, e.g. ``ModelConfig.llama(d_model=..., n_heads=...,
    n_kv_heads=..., rope_base=..., norm_eps=rms_norm_eps, tie_embeddings=tie_word_embeddings)``.
    """
    sd = Weights(sd, SOURCE)
    if config.positions != "rope" or config.norm != "rmsnorm" or config.activation != "swiglu":
        raise ValueError(
            "load_llama_state_dict needs a Llama-style config (positions='rope', norm='rmsnorm', "
            f"activation='swiglu'), got positions={config.positions!r}, norm={config.norm!r}, "
            f"activation={config.activation!r}; start from ModelConfig.llama(...)"
        )
    check_depth(sd, r"model\.layers\.(\d+)\.", config, SOURCE)
    ours = outer_to_companion(sd, config)
    for i in range(config.n_layers):
        for mine, theirs in NAMES.items():
            for kind in ("weight", "bias"):
                key = f"model.layers.{i}.{theirs}.{kind}"
                if key in sd:
                    ours[f"layers.{i}.{mine}.{kind}"] = sd[key]
    sd.refuse_unread(ROTARY_BUFFERS)
    return ours


def from_companion(sd: Mapping[str, Tensor], c: ModelConfig) -> dict[str, Tensor]:
    """Our weights under ``LlamaForCausalLM``'s names."""
    out = outer_from_companion(sd, c)
    for i in range(c.n_layers):
        for mine, theirs in NAMES.items():
            out[f"model.layers.{i}.{theirs}.weight"] = sd[f"layers.{i}.{mine}.weight"]
    return out
