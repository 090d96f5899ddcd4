"""DeepSeek-V3 (DeepSeek-AI 2024) in Hugging Face's format: ``DeepseekV3ForCausalLM``'s names and ``config.json``.

What maps to what:

- attention is MLA (``companion.attention.MultiHeadLatentAttention``): ``q_a_proj``, ``q_a_layernorm``,
  ``q_b_proj`` (or ``q_proj`` without ``q_lora_rank``), ``kv_a_proj_with_mqa``, ``kv_a_layernorm``,
  ``kv_b_proj``, ``o_proj``; ``rope_interleave`` (true in the released model) rotates adjacent pairs, our
  ``rope_pairing="adjacent"``;
- the first ``first_k_dense_replace`` layers have a dense SwiGLU ``mlp`` of width ``intermediate_size``, the
  others a mixture of experts: ``mlp.gate`` (the router, with the balancing bias ``e_score_correction_bias``),
  ``mlp.experts.{j}.gate_proj/up_proj/down_proj`` of width ``moe_intermediate_size`` (transformers 5 fuses
  them in memory as ``gate_up_proj``/``down_proj``; both forms are read) and ``mlp.shared_experts``;
- routing: sigmoid scores, the bias added for the choice only, ``n_group`` groups of which ``topk_group``
  may be used, the chosen scores renormalised (``norm_topk_prob``) and multiplied by ``routed_scaling_factor``.

Not kept: the multi-token-prediction layer (``model.layers.61`` in the released checkpoint; transformers
ignores it too) and YaRN context extension (refused: plain RoPE only). ``num_key_value_heads`` plays no part
in MLA; it is read as H.

Checked against ``transformers.DeepseekV3ForCausalLM`` from random weights (tests/test_hf_families.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from companion.models.config import ModelConfig
from companion.models.hf import llama
from companion.models.hf.common import (
    LLAMA_SHAPE,
    Weights,
    check_depth,
    differences,
    expert_weights,
    modern_differences,
    need,
    outer_from_companion,
    outer_to_companion,
    plain_rope_theta,
)

__all__ = ["config_from_hf", "config_to_hf", "from_companion", "shape_differences", "to_companion"]

SOURCE = "DeepSeek-V3"
ATTENTION = {  # ours -> theirs, inside layers.{i} / model.layers.{i}; the q names depend on q_lora_rank
    "self_attn.kv_down_proj": "self_attn.kv_a_proj_with_mqa", "self_attn.kv_norm": "self_attn.kv_a_layernorm",
    "self_attn.kv_up_proj": "self_attn.kv_b_proj", "self_attn.o_proj": "self_attn.o_proj",
    **{mine: theirs for mine, theirs in llama.NAMES.items() if mine.endswith("block.norm")},  # Llama's two norms
}  # fmt: skip
LOW_RANK_Q = {"self_attn.q_down_proj": "self_attn.q_a_proj", "self_attn.q_norm": "self_attn.q_a_layernorm",
              "self_attn.q_up_proj": "self_attn.q_b_proj"}  # fmt: skip
FULL_Q = {"self_attn.q_proj": "self_attn.q_proj"}
FFN = ("gate_proj", "up_proj", "down_proj")  # the same names on both sides


def config_from_hf(cfg: Mapping[str, Any], source: str = "config.json") -> ModelConfig:
    """The ``ModelConfig`` of a DeepSeek-V3 ``config.json`` (dropout 0: a loaded model is for inference)."""
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{source}: hidden_act={cfg['hidden_act']!r} is not supported; expected 'silu' (SwiGLU)")
    if cfg.get("attention_bias"):
        raise ValueError(f"{source}: attention_bias=True is not supported (ModelConfig.bias covers the FFN too)")
    if cfg.get("scoring_func", "sigmoid") != "sigmoid":
        raise ValueError(f"{source}: scoring_func={cfg['scoring_func']!r} is not supported; expected 'sigmoid'")
    heads = need(cfg, "num_attention_heads", source)
    return ModelConfig.deepseek_v3(
        vocab_size=need(cfg, "vocab_size", source), d_model=need(cfg, "hidden_size", source), n_heads=heads,
        n_kv_heads=heads, n_layers=need(cfg, "num_hidden_layers", source), d_ff=need(cfg, "intermediate_size", source),
        max_seq_len=need(cfg, "max_position_embeddings", source), rope_base=plain_rope_theta(cfg, source),
        rope_pairing="adjacent" if cfg.get("rope_interleave", True) else "half",
        norm_eps=cfg.get("rms_norm_eps", 1e-6), tie_embeddings=cfg.get("tie_word_embeddings", False),
        kv_rank=need(cfg, "kv_lora_rank", source), q_rank=cfg.get("q_lora_rank"),
        rope_head_dim=need(cfg, "qk_rope_head_dim", source), nope_head_dim=need(cfg, "qk_nope_head_dim", source),
        v_head_dim=need(cfg, "v_head_dim", source), n_experts=need(cfg, "n_routed_experts", source),
        n_experts_per_token=need(cfg, "num_experts_per_tok", source),
        n_shared_experts=cfg.get("n_shared_experts") or 0, d_expert=need(cfg, "moe_intermediate_size", source),
        n_dense_layers=cfg.get("first_k_dense_replace") or 0, router_normalize=bool(cfg.get("norm_topk_prob", True)),
        router_scale=float(cfg.get("routed_scaling_factor", 1.0)), router_groups=cfg.get("n_group") or 1,
        router_group_limit=cfg.get("topk_group") or 1, dropout=0.0,
    )  # fmt: skip


def config_to_hf(c: ModelConfig) -> dict[str, Any]:
    """The ``config.json`` of ``c`` as ``DeepseekV3ForCausalLM`` reads it."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": c.vocab_size,
        "hidden_size": c.d_model, "intermediate_size": c.d_ff, "moe_intermediate_size": c.d_expert,
        "num_hidden_layers": c.n_layers, "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_heads,
        "max_position_embeddings": c.max_seq_len, "rms_norm_eps": c.norm_eps, "rope_theta": c.rope_base,
        "rope_parameters": {"rope_theta": c.rope_base, "rope_type": "default"},
        "rope_interleave": c.rope_pairing == "adjacent", "kv_lora_rank": c.kv_rank, "q_lora_rank": c.q_rank,
        "qk_rope_head_dim": c.rope_head_dim, "qk_nope_head_dim": c.nope_head_dim, "v_head_dim": c.v_head_dim,
        "n_routed_experts": c.n_experts, "num_experts_per_tok": c.n_experts_per_token,
        "n_shared_experts": c.n_shared_experts, "first_k_dense_replace": c.n_dense_layers,
        "norm_topk_prob": c.router_normalize, "routed_scaling_factor": c.router_scale, "n_group": c.router_groups,
        "topk_group": c.router_group_limit, "num_nextn_predict_layers": 0, "tie_word_embeddings": c.tie_embeddings,
        "hidden_act": "silu", "attention_bias": False, "attention_dropout": c.dropout, "bos_token_id": None,
        "eos_token_id": None, "dtype": "float32",
    }  # fmt: skip


def shape_differences(c: ModelConfig) -> list[str]:
    """The fields in which ``c`` differs from a DeepSeek-V3-shaped model (empty: it can be saved as one)."""
    wanted = {**LLAMA_SHAPE, "sliding_window": (None,), "router": ("sigmoid",), "n_kv_heads": (c.n_heads,)}
    off = differences(c, wanted)
    off += [f"{k}=None" for k in ("kv_rank",) if c.kv_rank is None] + (["n_experts=0"] if c.n_experts == 0 else [])
    return off + modern_differences(c, allowed=("n_experts", "kv_rank"))


def to_companion(sd: Mapping[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """A ``DeepseekV3ForCausalLM`` state dict (on-disk or transformers 5 in-memory names) under ``GPT``'s names."""
    sd = Weights(sd, SOURCE)
    check_depth({k: v for k, v in sd.items() if not _beyond(k, config)}, r"model\.layers\.(\d+)\.", config, SOURCE)
    ours = outer_to_companion(sd, config)
    for i in range(config.n_layers):
        for mine, theirs in _layer_names(config, i).items():
            ours[f"layers.{i}.{mine}"] = sd[f"model.layers.{i}.{theirs}"]
        if i >= config.n_dense_layers:
            mlp = f"model.layers.{i}.mlp."
            for j in range(config.n_experts):
                for name, w in zip(FFN, expert_weights(sd, mlp + "experts.", j, FFN)):
                    ours[f"layers.{i}.ffn.experts.{j}.{name}.weight"] = w
    return ours


def from_companion(sd: Mapping[str, Tensor], c: ModelConfig) -> dict[str, Tensor]:
    """Our weights under the names of a DeepSeek-V3 checkpoint on disk (``mlp.experts.{j}.gate_proj`` ...)."""
    out = outer_from_companion(sd, c)
    for i in range(c.n_layers):
        for mine, theirs in _layer_names(c, i).items():
            out[f"model.layers.{i}.{theirs}"] = sd[f"layers.{i}.{mine}"]
        if i >= c.n_dense_layers:
            for j in range(c.n_experts):
                for name in FFN:
                    theirs, mine = f"model.layers.{i}.mlp.experts.{j}.{name}", f"layers.{i}.ffn.experts.{j}.{name}"
                    out[theirs + ".weight"] = sd[mine + ".weight"]
    return out


def _layer_names(c: ModelConfig, i: int) -> dict[str, str]:
    """Ours -> theirs for layer ``i``'s attention, norms, router, shared experts or dense FFN (full names with
    ``.weight``; routed experts apart)."""
    names = {**ATTENTION, **(FULL_Q if c.q_rank is None else LOW_RANK_Q)}
    out = {f"{mine}.weight": f"{theirs}.weight" for mine, theirs in names.items()}
    if i < c.n_dense_layers:
        return out | {f"ffn.{p}.weight": f"mlp.{p}.weight" for p in FFN}
    out |= {"ffn.router.weight": "mlp.gate.weight", "ffn.score_bias": "mlp.gate.e_score_correction_bias"}
    if c.n_shared_experts:
        out |= {f"ffn.shared_experts.{p}.weight": f"mlp.shared_experts.{p}.weight" for p in FFN}
    return out


def _beyond(key: str, c: ModelConfig) -> bool:
    """A key of a layer past ``num_hidden_layers``: the released checkpoint's multi-token-prediction layer."""
    parts = key.split(".")
    return len(parts) > 2 and parts[:2] == ["model", "layers"] and parts[2].isdigit() and int(parts[2]) >= c.n_layers
