"""Load Hugging Face GPT-2 and Llama weights into ``companion.models.GPT``.

The loaders take a plain state dict (``hf_model.state_dict()`` or tensors read from a checkpoint file),
so ``transformers`` is not needed to use them; tests/test_hf_equivalence.py builds ``GPT2LMHeadModel`` and
``LlamaForCausalLM`` from small random configs and checks the logits agree.

Checkpoint names (``c_attn``, ``wte``, ``input_layernorm``, ...) live in this file only. Two facts about
the GPT-2 checkpoint matter:

- its linear layers are ``Conv1D`` modules that store the weight as (in, out), the transpose of
  ``nn.Linear``'s (out, in);
- ``c_attn`` is one (D, 3D) matrix producing q, k and v side by side; we split it in three.

Hugging Face Llama checkpoints already use the "half" RoPE pairing (their converter permutes Meta's
q/k rows), so ``ModelConfig.llama(rope_pairing="half")`` loads them unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import Tensor

from companion.models.config import ModelConfig
from companion.models.transformer import GPT

__all__ = ["load_gpt2_state_dict", "load_llama_state_dict"]


def _strip(sd: Mapping[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {(k[len(prefix) :] if k.startswith(prefix) else k): v for k, v in sd.items()}


def _n_layers(sd: Mapping[str, Tensor], pattern: str) -> int:
    found = {int(m.group(1)) for k in sd if (m := re.match(pattern, k))}
    if not found:
        raise ValueError(f"state dict has no layer weights matching {pattern!r}; is it the right model?")
    return max(found) + 1


class _Weights(dict):
    """A state dict whose missing keys raise ``ValueError`` naming the checkpoint and the key."""

    def __init__(self, sd: Mapping[str, Tensor], source: str) -> None:
        super().__init__(sd)
        self.source = source

    def __missing__(self, key: str) -> Tensor:
        raise ValueError(f"{self.source} state dict has no weight {key!r}; is it a {self.source} checkpoint?")


def _check_depth(sd: Mapping[str, Tensor], pattern: str, config: ModelConfig, source: str) -> None:
    found = _n_layers(sd, pattern)
    if found != config.n_layers:
        raise ValueError(f"{source} state dict has {found} layers but the config says n_layers={config.n_layers}")


def _load(model: GPT, ours: dict[str, Tensor], source: str) -> GPT:
    """Copy ``ours`` into ``model``; every parameter must be given, and nothing else."""
    params = dict(model.named_parameters(remove_duplicate=False))
    tied = {"lm_head.weight"} if model.config.tie_embeddings else set()
    missing = sorted(set(params) - set(ours) - tied)
    unexpected = sorted(set(ours) - set(params))
    if missing or unexpected:
        raise ValueError(f"{source} state dict does not fit the config: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for name, value in ours.items():
            if params[name].shape != value.shape:
                raise ValueError(
                    f"{source} weight for {name} has shape {tuple(value.shape)}, "
                    f"expected {tuple(params[name].shape)} from the config"
                )
            params[name].copy_(value)
    return model


def load_gpt2_state_dict(sd: Mapping[str, Tensor], config: ModelConfig | None = None) -> GPT:
    """A ``GPT`` holding the weights of a Hugging Face ``GPT2LMHeadModel`` / ``GPT2Model`` state dict.

    ``config=None`` reads the sizes from the tensors and assumes GPT-2's head width of 64
    (``ModelConfig.gpt2_small`` otherwise); pass a config for other head counts.
    """
    sd = _Weights(_strip(sd, "transformer."), "GPT-2")
    d_model = sd["wte.weight"].shape[1]
    if config is None:
        config = ModelConfig.gpt2_small(
            vocab_size=sd["wte.weight"].shape[0], d_model=d_model, n_heads=max(d_model // 64, 1),
            n_layers=_n_layers(sd, r"h\.(\d+)\."), d_ff=sd["h.0.mlp.c_fc.weight"].shape[1],
            max_seq_len=sd["wpe.weight"].shape[0], dropout=0.0,
        )  # fmt: skip
    _check_depth(sd, r"h\.(\d+)\.", config, "GPT-2")
    ours: dict[str, Tensor] = {
        "embed.token.weight": sd["wte.weight"],
        "embed.position.weight": sd["wpe.weight"],
        "norm.weight": sd["ln_f.weight"],
        "norm.bias": sd["ln_f.bias"],
    }
    if not config.tie_embeddings:  # GPT-2 ties its head to wte; an untied copy starts from the same matrix
        ours["lm_head.weight"] = sd["lm_head.weight"] if "lm_head.weight" in sd else sd["wte.weight"]
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
    return _load(GPT(config), ours, "GPT-2")


def load_llama_state_dict(sd: Mapping[str, Tensor], config: ModelConfig) -> GPT:
    """A ``GPT`` holding the weights of a Hugging Face ``LlamaForCausalLM`` state dict.

    ``config`` must describe the same model, e.g. ``ModelConfig.llama(d_model=..., n_heads=...,
    n_kv_heads=..., rope_base=..., norm_eps=rms_norm_eps, tie_embeddings=tie_word_embeddings)``.
    """
    sd = _Weights(sd, "Llama")
    if config.positions != "rope" or config.norm != "rmsnorm" or config.activation != "swiglu":
        raise ValueError(
            "load_llama_state_dict needs a Llama-style config (positions='rope', norm='rmsnorm', "
            f"activation='swiglu'), got positions={config.positions!r}, norm={config.norm!r}, "
            f"activation={config.activation!r}; start from ModelConfig.llama(...)"
        )
    _check_depth(sd, r"model\.layers\.(\d+)\.", config, "Llama")
    ours: dict[str, Tensor] = {
        "embed.token.weight": sd["model.embed_tokens.weight"],
        "norm.weight": sd["model.norm.weight"],
    }
    if not config.tie_embeddings:
        ours["lm_head.weight"] = sd["lm_head.weight"]
    renames = {
        "self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
        "self_attn.v_proj": "self_attn.v_proj", "self_attn.o_proj": "self_attn.o_proj",
        "mlp.gate_proj": "ffn.gate_proj", "mlp.up_proj": "ffn.up_proj", "mlp.down_proj": "ffn.down_proj",
        "input_layernorm": "self_attn_block.norm", "post_attention_layernorm": "ffn_block.norm",
    }  # fmt: skip
    for i in range(config.n_layers):
        for theirs, mine in renames.items():
            for kind in ("weight", "bias"):
                key = f"model.layers.{i}.{theirs}.{kind}"
                if key in sd:
                    ours[f"layers.{i}.{mine}.{kind}"] = sd[key]
    return _load(GPT(config), ours, "Llama")
