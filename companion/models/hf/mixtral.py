"""Mixtral (Jiang et al. 2024) in Hugging Face's format: ``MixtralForCausalLM``'s names and ``config.json``.

Mixtral is Mistral with every FFN replaced by a mixture of experts: a router ``gate`` (E, D) and E SwiGLU
experts whose matrices the checkpoints call ``w1`` (gate), ``w3`` (up) and ``w2`` (down), under
``block_sparse_moe``. transformers 5 fuses them in memory (``mlp.experts.gate_up_proj``, ``down_proj``) and
writes the per-expert form back to disk; both are read here, the per-expert form is written. Routing: softmax
over the E logits, the top k, renormalised to sum to 1 (``ModelConfig.router="softmax"``). The router's
training-time jitter (``router_jitter_noise``) does not change a loaded model's logits and is not kept. A
``config.json`` without ``rope_theta`` means θ = 10⁶, as ``transformers.MixtralConfig`` has it.

Checked against ``transformers.MixtralForCausalLM`` from random weights, with and without a sliding window
(tests/test_hf_families.py).
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
    expert_weights,
    modern_differences,
    need,
    outer_from_companion,
    outer_to_companion,
    plain_rope_theta,
    rename_layers,
)

__all__ = ["config_from_hf", "config_to_hf", "from_companion", "shape_differences", "to_companion"]

SOURCE = "Mixtral"
ATTENTION = {mine: theirs for mine, theirs in llama.NAMES.items() if not mine.startswith("ffn.")}  # Llama's, no FFN
EXPERT = ("w1", "w3", "w2")  # the checkpoint's names of (gate_proj, up_proj, down_proj)


def config_from_hf(cfg: Mapping[str, Any], source: str = "config.json") -> ModelConfig:
    """The ``ModelConfig`` of a Mixtral ``config.json`` (dropout 0: a loaded model is for inference)."""
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{source}: hidden_act={cfg['hidden_act']!r} is not supported; expected 'silu' (SwiGLU)")
    d, heads = need(cfg, "hidden_size", source), need(cfg, "num_attention_heads", source)
    width = need(cfg, "intermediate_size", source)
    head_dim = cfg.get("head_dim")
    return ModelConfig.mixtral_8x7b(
        vocab_size=need(cfg, "vocab_size", source), d_model=d, n_heads=heads,
        n_kv_heads=cfg.get("num_key_value_heads") or heads, n_layers=need(cfg, "num_hidden_layers", source),
        d_ff=width, d_expert=width, max_seq_len=need(cfg, "max_position_embeddings", source),
        rope_base=plain_rope_theta(cfg, source, default=1e6), norm_eps=cfg.get("rms_norm_eps", 1e-5),
        tie_embeddings=cfg.get("tie_word_embeddings", False), sliding_window=cfg.get("sliding_window"),
        n_experts=need(cfg, "num_local_experts", source), n_experts_per_token=need(cfg, "num_experts_per_tok", source),
        d_head=None if head_dim in (None, d // heads) else head_dim, dropout=0.0,
    )  # fmt: skip


def config_to_hf(c: ModelConfig) -> dict[str, Any]:
    """The ``config.json`` of ``c`` as ``MixtralForCausalLM`` reads it."""
    return {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": c.vocab_size,
        "hidden_size": c.d_model, "intermediate_size": c.d_expert, "num_hidden_layers": c.n_layers,
        "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads, "head_dim": c.head_dim,
        "max_position_embeddings": c.max_seq_len, "rms_norm_eps": c.norm_eps, "rope_theta": c.rope_base,
        "rope_parameters": {"rope_theta": c.rope_base, "rope_type": "default"},
        "sliding_window": c.sliding_window, "num_local_experts": c.n_experts,
        "num_experts_per_tok": c.n_experts_per_token, "router_jitter_noise": 0.0, "output_router_logits": False,
        "tie_word_embeddings": c.tie_embeddings, "hidden_act": "silu", "attention_dropout": c.dropout,
        "bos_token_id": None, "eos_token_id": None, "dtype": "float32",
    }  # fmt: skip


def shape_differences(c: ModelConfig) -> list[str]:
    """The fields in which ``c`` differs from a Mixtral-shaped model (empty: it can be saved as Mixtral)."""
    wanted = {**LLAMA_SHAPE, "rope_pairing": ("half",), "n_shared_experts": (0,), "n_dense_layers": (0,),
              "router": ("softmax",), "router_normalize": (True,), "router_scale": (1.0,), "router_groups": (1,),
              "router_bias": (False,), "d_expert": (c.d_ff,)}  # fmt: skip
    off = differences(c, wanted)
    if c.n_experts == 0:
        off.append("n_experts=0")
    return off + modern_differences(c, allowed=("n_experts", "d_head"))


def to_companion(sd: Mapping[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """A ``MixtralForCausalLM`` state dict (on-disk or transformers 5 in-memory names) under ``GPT``'s names."""
    sd = Weights(sd, SOURCE)
    check_depth(sd, r"model\.layers\.(\d+)\.", config, SOURCE)
    ours = outer_to_companion(sd, config) | rename_layers(sd, ATTENTION, config.n_layers, to_ours=True)
    for i in range(config.n_layers):
        moe = f"model.layers.{i}.block_sparse_moe."
        moe = moe if moe + "gate.weight" in sd else f"model.layers.{i}.mlp."  # on disk / transformers 5 in memory
        ours[f"layers.{i}.ffn.router.weight"] = sd[moe + "gate.weight"]
        for j in range(config.n_experts):
            for name, w in zip(("gate_proj", "up_proj", "down_proj"), expert_weights(sd, moe + "experts.", j, EXPERT)):
                ours[f"layers.{i}.ffn.experts.{j}.{name}.weight"] = w
    sd.refuse_unread(ROTARY_BUFFERS)
    return ours


def from_companion(sd: Mapping[str, Tensor], c: ModelConfig) -> dict[str, Tensor]:
    """Our weights under the names of a Mixtral checkpoint on disk (``block_sparse_moe.experts.{j}.w1`` ...)."""
    out = outer_from_companion(sd, c) | rename_layers(sd, ATTENTION, c.n_layers, to_ours=False)
    for i in range(c.n_layers):
        moe = f"model.layers.{i}.block_sparse_moe."
        out[moe + "gate.weight"] = sd[f"layers.{i}.ffn.router.weight"]
        for j in range(c.n_experts):
            for name, theirs in zip(("gate_proj", "up_proj", "down_proj"), EXPERT):
                out[f"{moe}experts.{j}.{theirs}.weight"] = sd[f"layers.{i}.ffn.experts.{j}.{name}.weight"]
    return out

