"""GPT-2 (Radford et al. 2019) in Hugging Face's format: ``GPT2LMHeadModel``'s names and ``config.json``.

Two facts about the GPT-2 checkpoint matter:

- its linear layers are ``Conv1D`` modules that store the weight as (in, out), the transpose of
  ``nn.Linear``'s (out, in);
- ``c_attn`` is one (D, 3D) matrix producing q, k and v side by side; we split it in three.

Checked against ``transformers.GPT2LMHeadModel`` from random weights (tests/test_hf_equivalence.py,
tests/test_pretrained.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from companion.models.config import ModelConfig
from companion.models.hf.common import (
    Weights,
    check_depth,
    count_layers,
    modern_differences,
    need,
    strip_prefix,
    tied_head,
)

__all__ = [
    "config_from_hf", "config_from_state_dict", "config_to_hf", "from_companion", "shape_differences", "to_companion",
]  # fmt: skip

SOURCE = "GPT-2"
LAYER = r"h\.(\d+)\."  # layer index in the (prefix-stripped) checkpoint names
# Hugging Face activation names <-> ModelConfig.activation ("gelu_new" is GPT-2's tanh approximation)
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
ACTIVATION_NAMES = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
BUFFERS = r"h\.\d+\.attn\.(bias|masked_bias)"  # the causal-mask buffers older checkpoints saved: nothing to load


def config_from_hf(cfg: Mapping[str, Any], source: str = "config.json") -> ModelConfig:
    """The ``ModelConfig`` of a GPT-2 ``config.json`` (dropout 0: a loaded model is for inference)."""
    act = need(cfg, "activation_function", source, str)
    if act not in ACTIVATIONS:
        raise ValueError(
            f"{source}: activation_function={act!r} is not supported; expected one of {sorted(ACTIVATIONS)}"
        )
    if not cfg.get("scale_attn_weights", True) or cfg.get("scale_attn_by_inverse_layer_idx", False):
        raise ValueError(f"{source}: only GPT-2's standard 1/sqrt(D_h) attention scaling is supported")
    d = need(cfg, "n_embd", source)
    return ModelConfig.gpt2_small(
        vocab_size=need(cfg, "vocab_size", source), d_model=d, n_heads=need(cfg, "n_head", source),
        n_layers=need(cfg, "n_layer", source), d_ff=cfg.get("n_inner") or 4 * d,
        max_seq_len=need(cfg, "n_positions", source), norm_eps=cfg.get("layer_norm_epsilon", 1e-5),
        activation=ACTIVATIONS[act], tie_embeddings=cfg.get("tie_word_embeddings", True), dropout=0.0,
    )  # fmt: skip


def config_to_hf(c: ModelConfig) -> dict[str, Any]:
    """The ``config.json`` of ``c`` as ``GPT2LMHeadModel`` reads it."""
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": c.vocab_size,
        "n_positions": c.max_seq_len, "n_embd": c.d_model, "n_layer": c.n_layers, "n_head": c.n_heads,
        "n_inner": c.d_ff, "activation_function": ACTIVATION_NAMES[c.activation],
        "layer_norm_epsilon": c.norm_eps, "resid_pdrop": c.dropout, "embd_pdrop": c.dropout,
        "attn_pdrop": c.dropout, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False, "tie_word_embeddings": c.tie_embeddings,
        "bos_token_id": None, "eos_token_id": None, "dtype": "float32",
    }  # fmt: skip


def shape_differences(c: ModelConfig) -> list[str]:
    """The fields in which ``c`` differs from a GPT-2-shaped model (empty: it can be saved as GPT-2)."""
    wanted = {"norm_placement": ("pre",), "final_norm": (True,), "embed_norm": (False,), "embed_scale": (False,),
              "sliding_window": (None,), "positions": ("learned",), "norm": ("layernorm",), "bias": (True,),
              "n_kv_heads": (c.n_heads,), "activation": tuple(ACTIVATION_NAMES), "type_vocab_size": (0,)}  # fmt: skip
    return [f"{k}={getattr(c, k)!r}" for k, v in wanted.items() if getattr(c, k) not in v] + modern_differences(c)


def config_from_state_dict(sd: Mapping[str, Tensor]) -> ModelConfig:
    """Sizes read from the tensors, assuming GPT-2's head width of 64."""
    sd = Weights(strip_prefix(sd, "transformer."), SOURCE)
    d_model = sd["wte.weight"].shape[1]
    return ModelConfig.gpt2_small(
        vocab_size=sd["wte.weight"].shape[0], d_model=d_model, n_heads=max(d_model // 64, 1),
        n_layers=count_layers(sd, LAYER), d_ff=sd["h.0.mlp.c_fc.weight"].shape[1],
        max_seq_len=sd["wpe.weight"].shape[0], dropout=0.0,
    )  # fmt: skip


def to_companion(sd: Mapping[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """A ``GPT2LMHeadModel`` / ``GPT2Model`` state dict under ``companion.models.GPT``'s names."""
    sd = Weights(strip_prefix(sd, "transformer."), SOURCE)
    check_depth(sd, LAYER, config, SOURCE)
    ours: dict[str, Tensor] = {
        "embed.token.weight": sd["wte.weight"],
        "embed.position.weight": sd["wpe.weight"],
        "norm.weight": sd["ln_f.weight"],
        "norm.bias": sd["ln_f.bias"],
    }
    if not config.tie_embeddings:  # GPT-2 ties its head to wte; an untied copy starts from the same matrix
        ours["lm_head.weight"] = sd["lm_head.weight"] if "lm_head.weight" in sd else sd["wte.weight"]
    else:
        tied_head(sd, "lm_head.weight", "wte.weight")
    for i in range(config.n_layers):
        h, o = f"h.{i}.", f"layers.{i}."
        # Conv1D stores (in, out); nn.Linear wants (out, in): transpose every matrix.
        q, k, v = sd[h + "attn.c_attn.weight"].t().chunk(3, dim=0)  # 3 x (D, D)
        qb, kb, vb = sd[h + "attn.c_attn.bias"].chunk(3)  # 3 x (D,)
        ours |= {
            o + "self_attn_block.norm.weight": sd[h + "ln_1.weight"],
            o + "self_attn_block.norm.bias": sd[h + "ln_1.bias"],
            o + "self_attn.q_proj.weight": q, o + "self_attn.q_proj.bias": qb,
            o + "self_attn.k_proj.weight": k, o + "self_attn.k_proj.bias": kb,
            o + "self_attn.v_proj.weight": v, o + "self_attn.v_proj.bias": vb,
            o + "self_attn.o_proj.weight": sd[h + "attn.c_proj.weight"].t(),
            o + "self_attn.o_proj.bias": sd[h + "attn.c_proj.bias"],
            o + "ffn_block.norm.weight": sd[h + "ln_2.weight"],
            o + "ffn_block.norm.bias": sd[h + "ln_2.bias"],
            o + "ffn.up_proj.weight": sd[h + "mlp.c_fc.weight"].t(),
            o + "ffn.up_proj.bias": sd[h + "mlp.c_fc.bias"],
            o + "ffn.down_proj.weight": sd[h + "mlp.c_proj.weight"].t(),
            o + "ffn.down_proj.bias": sd[h + "mlp.c_proj.bias"],
        }  # fmt: skip
    sd.refuse_unread(BUFFERS)
    return ours


def from_companion(sd: Mapping[str, Tensor], c: ModelConfig) -> dict[str, Tensor]:
    """Our weights under ``GPT2LMHeadModel``'s names; Conv1D matrices are stored (in, out): transpose."""
    out = {"transformer.wte.weight": sd["embed.token.weight"], "transformer.wpe.weight": sd["embed.position.weight"],
           "transformer.ln_f.weight": sd["norm.weight"], "transformer.ln_f.bias": sd["norm.bias"]}  # fmt: skip
    if not c.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    for i in range(c.n_layers):
        o, h = f"layers.{i}.", f"transformer.h.{i}."
        qkv = torch.cat([sd[o + f"self_attn.{p}_proj.weight"] for p in "qkv"], dim=0)  # (3D, D): q, k, v stacked
        out |= {
            h + "ln_1.weight": sd[o + "self_attn_block.norm.weight"],
            h + "ln_1.bias": sd[o + "self_attn_block.norm.bias"],
            h + "attn.c_attn.weight": qkv.t(),  # (D, 3D)
            h + "attn.c_attn.bias": torch.cat([sd[o + f"self_attn.{p}_proj.bias"] for p in "qkv"]),
            h + "attn.c_proj.weight": sd[o + "self_attn.o_proj.weight"].t(),
            h + "attn.c_proj.bias": sd[o + "self_attn.o_proj.bias"],
            h + "ln_2.weight": sd[o + "ffn_block.norm.weight"], h + "ln_2.bias": sd[o + "ffn_block.norm.bias"],
            h + "mlp.c_fc.weight": sd[o + "ffn.up_proj.weight"].t(), h + "mlp.c_fc.bias": sd[o + "ffn.up_proj.bias"],
            h + "mlp.c_proj.weight": sd[o + "ffn.down_proj.weight"].t(),
            h + "mlp.c_proj.bias": sd[o + "ffn.down_proj.bias"],
        }  # fmt: skip
    return out
