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

The released ``config.json`` extends the context with YaRN (``rope_scaling``: ``type: "yarn"``, ``factor``,
``original_max_position_embeddings``, ``beta_fast``/``beta_slow`` 32/1, ``mscale``/``mscale_all_dim``): read into
``rope_scaling="yarn"`` and ``rope_mscale``/``rope_mscale_all_dim``, which put DeepSeek's temperature on MLA's
softmax scale (``companion.models.blocks.mla_softmax_scale``). Its FP8 weights are dequantised before this module
sees them (:mod:`companion.models.hf.quantized`).

Not kept: the ``num_nextn_predict_layers`` multi-token-prediction layers after the last one (``model.layers.61``
in the released checkpoint; transformers ignores them too): exactly that many are dropped, any other extra layer
is an error. ``num_key_value_heads`` plays no part in MLA; it is read as H.

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
    ROTARY_BUFFERS,
    Weights,
    count_layers,
    differences,
    expert_weights,
    modern_differences,
    need,
    outer_from_companion,
    outer_to_companion,
    rope_settings,
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
YARN_BETAS = {"beta_fast": 32, "beta_slow": 1}  # YaRN's ramp, as released; other values are refused


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
        max_seq_len=need(cfg, "max_position_embeddings", source), **_rope_from_hf(cfg, source),
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
        "rope_parameters": _rope_to_hf(c), "rope_interleave": c.rope_pairing == "adjacent",
        "kv_lora_rank": c.kv_rank, "q_lora_rank": c.q_rank,
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
    wanted = {**LLAMA_SHAPE, "sliding_window": (None,), "router": ("sigmoid",), "n_kv_heads": (c.n_heads,),
              "rope_scaling": (None, "yarn")}  # fmt: skip
    off = differences(c, wanted)
    off += [f"{k}=None" for k in ("kv_rank",) if c.kv_rank is None] + (["n_experts=0"] if c.n_experts == 0 else [])
    return off + modern_differences(c, allowed=("n_experts", "kv_rank"))


def to_companion(sd: Mapping[str, Tensor], config: ModelConfig, mtp_layers: int = 0) -> dict[str, Tensor]:
    """A ``DeepseekV3ForCausalLM`` state dict (on-disk or transformers 5 in-memory names) under ``GPT``'s names.

    ``mtp_layers``: the checkpoint's ``num_nextn_predict_layers``, the multi-token-prediction layers the released
    checkpoint stores after the ``config.n_layers`` layers (transformers saves none); exactly those are dropped.
    """
    sd = Weights(sd, SOURCE)
    found, n = count_layers(sd, r"model\.layers\.(\d+)\."), config.n_layers
    if found not in (n, n + mtp_layers):
        raise ValueError(f"{SOURCE} state dict has {found} layers; expected n_layers={n} (num_hidden_layers), or "
                         f"{n} + {mtp_layers} with the num_nextn_predict_layers={mtp_layers} multi-token-prediction "
                         "layers")
    sd = Weights({k: v for k, v in sd.items() if not _beyond(k, config)}, SOURCE)
    ours = outer_to_companion(sd, config)
    for i in range(config.n_layers):
        for mine, theirs in _layer_names(config, i).items():
            ours[f"layers.{i}.{mine}"] = sd[f"model.layers.{i}.{theirs}"]
        if i >= config.n_dense_layers:
            mlp = f"model.layers.{i}.mlp."
            for j in range(config.n_experts):
                for name, w in zip(FFN, expert_weights(sd, mlp + "experts.", j, FFN)):
                    ours[f"layers.{i}.ffn.experts.{j}.{name}.weight"] = w
    sd.refuse_unread(ROTARY_BUFFERS)
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


def _rope_from_hf(cfg: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``rope_base`` and, for the released YaRN, the ``rope_*`` fields of ``ModelConfig`` from ``rope_theta`` and
    ``rope_scaling`` (transformers < 5) or ``rope_parameters`` (>= 5)."""
    theta, scaling = rope_settings(cfg)
    out: dict[str, Any] = {"rope_base": theta}
    if not scaling:
        return out
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind != "yarn":
        raise ValueError(f"{source}: rope scaling {kind!r} is not supported for DeepSeek-V3; expected none or 'yarn'")
    for key, value in YARN_BETAS.items():
        if scaling.get(key, value) not in (value, None):
            raise ValueError(f"{source}: rope scaling {key}={scaling[key]!r} is not supported; expected {value}")
    if scaling.get("attention_factor") is not None or scaling.get("truncate", True) is not True:
        raise ValueError(f"{source}: rope scaling attention_factor={scaling.get('attention_factor')!r}, truncate="
                         f"{scaling.get('truncate')!r} are not supported; expected them unset")
    mscales = [scaling.get(k) or None for k in ("mscale", "mscale_all_dim")]  # transformers: 0 means unset too
    if (mscales[0] is None) != (mscales[1] is None):
        raise ValueError(f"{source}: rope scaling has mscale={mscales[0]!r} and mscale_all_dim={mscales[1]!r}; "
                         "expected both or neither")
    return out | {
        "rope_scaling": "yarn", "rope_factor": float(need(scaling, "factor", source, (int, float))),
        "rope_original_max_seq_len": need(scaling, "original_max_position_embeddings", source),
        "rope_mscale": mscales[0], "rope_mscale_all_dim": mscales[1],
    }  # fmt: skip


def _rope_to_hf(c: ModelConfig) -> dict[str, Any]:
    """The inverse of :func:`_rope_from_hf`, as transformers 5's ``rope_parameters``."""
    if c.rope_scaling is None:
        return {"rope_theta": c.rope_base, "rope_type": "default"}
    mscales = {} if c.rope_mscale is None else {"mscale": c.rope_mscale, "mscale_all_dim": c.rope_mscale_all_dim}
    return {"rope_theta": c.rope_base, "rope_type": "yarn", "factor": c.rope_factor,
            "original_max_position_embeddings": c.rope_original_max_seq_len, **YARN_BETAS, **mscales}  # fmt: skip


def _beyond(key: str, c: ModelConfig) -> bool:
    """A key of a layer past ``num_hidden_layers``: the released checkpoint's multi-token-prediction layer."""
    parts = key.split(".")
    return len(parts) > 2 and parts[:2] == ["model", "layers"] and parts[2].isdigit() and int(parts[2]) >= c.n_layers
