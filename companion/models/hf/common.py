"""What every Hugging Face family shares: a strict state dict, layer counting, and a strict copy into a model.

Checkpoint formats differ in their names; the rules for taking them in are the same: every weight of the
model must be given, nothing else may be, and shapes must agree. Errors name the checkpoint (``source``) and
the key, so a wrong or truncated file is found at once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from companion.models.config import ModelConfig

__all__ = [
    "LLAMA_SHAPE", "ROTARY_BUFFERS", "Weights", "check_depth", "count_layers", "differences", "expert_weights",
    "load_into", "modern_differences", "need", "outer_from_companion", "outer_to_companion", "plain_rope_theta",
    "rename_layers", "rope_settings", "strip_prefix", "tied_head",
]  # fmt: skip

ROTARY_BUFFERS = r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq"  # RoPE tables of older checkpoints

# Chapter 14's features at the values that turn them off; a family that lacks one refuses a config using it.
MODERN_OFF = {"qk_norm": False, "attention_sinks": 0, "n_experts": 0, "kv_rank": None,
              "sliding_window_pattern": None, "sink_logits": False}


def need(cfg: Mapping[str, Any], key: str, source: str, kind: type | tuple[type, ...] = int) -> Any:
    """``cfg[key]``, or a ``ValueError`` naming the file and the missing key (``TypeError`` if not a ``kind``)."""
    if key not in cfg:
        raise ValueError(f"{source} has no {key!r}; is it a Hugging Face {cfg.get('model_type', '?')} config?")
    value = cfg[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise TypeError(f"{source}: {key}={value!r} is a {type(value).__name__}; expected {names}")
    return value


def rope_settings(cfg: Mapping[str, Any], default: float = 10000.0) -> tuple[float, dict[str, Any]]:
    """RoPE's base θ and its context-extension settings (``{}`` for none, else with ``rope_type`` or ``type``)
    from a ``config.json``: ``rope_theta``/``rope_scaling`` (transformers < 5) or ``rope_parameters`` (>= 5);
    θ is ``default``, transformers' value for the family, when neither says."""
    rope = dict(cfg.get("rope_parameters") or {})
    scaling = dict(cfg.get("rope_scaling") or ({} if rope.get("rope_type", "default") == "default" else rope))
    return float(cfg.get("rope_theta", rope.get("rope_theta", default))), scaling


def plain_rope_theta(cfg: Mapping[str, Any], source: str, default: float = 10000.0) -> float:
    """RoPE's base θ (:func:`rope_settings`), refusing any context-extension scaling (these families are loaded
    with plain RoPE)."""
    theta, scaling = rope_settings(cfg, default)
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type"))
        raise ValueError(f"{source}: rope scaling {kind!r} is not supported for this family; expected none")
    return theta


# The fields every Llama-like family (Llama, Mixtral, Qwen3, DeepSeek-V3) has at one value: field -> allowed values.
LLAMA_SHAPE = {"norm_placement": ("pre",), "final_norm": (True,), "embed_norm": (False,), "embed_scale": (False,),
               "positions": ("rope",), "norm": ("rmsnorm",), "bias": (False,), "activation": ("swiglu",),
               "rope_scaling": (None,), "type_vocab_size": (0,)}  # fmt: skip


def differences(c: ModelConfig, wanted: Mapping[str, tuple[Any, ...]]) -> list[str]:
    """``field=value`` for each field of ``c`` whose value is not among the ``wanted`` ones."""
    return [f"{k}={getattr(c, k)!r}" for k, v in wanted.items() if getattr(c, k) not in v]


def rename_layers(
    sd: Mapping[str, Tensor], names: Mapping[str, str], n_layers: int, *, to_ours: bool
) -> dict[str, Tensor]:
    """Every layer's ``.weight`` tensors renamed between ours (``layers.{i}.<mine>``) and a Llama-like checkpoint's
    (``model.layers.{i}.<theirs>``), in the direction ``to_ours`` says; ``names`` maps mine -> theirs."""
    out = {}
    for i in range(n_layers):
        for mine, theirs in names.items():
            ours_key, their_key = f"layers.{i}.{mine}.weight", f"model.layers.{i}.{theirs}.weight"
            if to_ours:
                out[ours_key] = sd[their_key]
            else:
                out[their_key] = sd[ours_key]
    return out


def modern_differences(c: ModelConfig, allowed: tuple[str, ...] = ()) -> list[str]:
    """The chapter-14 features ``c`` uses (QK-norm, sinks, experts, MLA, an explicit head width) other than
    ``allowed``: what a family without them cannot save."""
    off = [f"{k}={getattr(c, k)!r}" for k, v in MODERN_OFF.items() if k not in allowed and getattr(c, k) != v]
    if "d_head" not in allowed and c.d_head not in (None, c.d_model // c.n_heads):
        off.append(f"d_head={c.d_head!r}")
    return off


def outer_to_companion(sd: Weights, config: ModelConfig) -> dict[str, Tensor]:
    """The weights outside the layers of a Llama-like checkpoint (token table, final norm, untied head), our names."""
    ours = {"embed.token.weight": sd["model.embed_tokens.weight"], "norm.weight": sd["model.norm.weight"]}
    if not config.tie_embeddings:
        ours["lm_head.weight"] = sd["lm_head.weight"]
    else:
        tied_head(sd, "lm_head.weight", "model.embed_tokens.weight")
    return ours


def tied_head(sd: Weights, head: str, table: str) -> None:
    """For a tied config: a copy of the token table saved as the head (``state_dict()`` lists both) is read and
    must equal the table; a different head is a ``ValueError`` (the config should be untied), never ignored."""
    if head in sd and not torch.equal(sd[head], sd[table]):
        raise ValueError(f"{sd.source} state dict has a {head} that differs from {table}, which the config ties it "
                         "to (tie_embeddings=True / tie_word_embeddings); expected an untied config for it")


def outer_from_companion(sd: Mapping[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """The inverse of :func:`outer_to_companion`: our outer weights under a Llama-like checkpoint's names."""
    out = {"model.embed_tokens.weight": sd["embed.token.weight"], "model.norm.weight": sd["norm.weight"]}
    if not config.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    return out


def expert_weights(sd: Mapping[str, Tensor], prefix: str, j: int, names: tuple[str, str, str]) -> list[Tensor]:
    """Expert ``j``'s (gate, up, down) matrices under ``prefix`` (e.g. ``model.layers.3.mlp.experts.``), as
    stored on disk (``{j}.<name>.weight``, one triple per expert) or as transformers 5 holds them in memory
    (``gate_up_proj`` (E, 2·I, D), gate rows first, and ``down_proj`` (E, D, I))."""
    if prefix + "gate_up_proj" in sd:
        gate, up = sd[prefix + "gate_up_proj"][j].chunk(2, dim=0)  # (I, D) each
        return [gate, up, sd[prefix + "down_proj"][j]]
    return [sd[f"{prefix}{j}.{name}.weight"] for name in names]



def strip_prefix(sd: Mapping[str, Tensor], prefix: str) -> dict[str, Tensor]:
    """``sd`` with ``prefix`` removed from the keys that start with it (``transformer.h.0`` -> ``h.0``)."""
    return {(k[len(prefix) :] if k.startswith(prefix) else k): v for k, v in sd.items()}


def count_layers(sd: Mapping[str, Tensor], pattern: str) -> int:
    """1 + the largest layer index that ``pattern`` (one group: the index) finds among the keys of ``sd``."""
    found = {int(m.group(1)) for k in sd if (m := re.match(pattern, k))}
    if not found:
        raise ValueError(f"state dict has no layer weights matching {pattern!r}; is it the right model?")
    return max(found) + 1


class Weights(dict):
    """A state dict whose missing keys raise ``ValueError`` naming the checkpoint and the key, and which remembers
    the keys read (``sd[key]``), so that :meth:`refuse_unread` finds the tensors a conversion left behind."""

    def __init__(self, sd: Mapping[str, Tensor], source: str) -> None:
        super().__init__(sd)
        self.source = source
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Tensor:
        value = super().__getitem__(key)  # __missing__ raises for an absent key
        self.read.add(key)
        return value

    def __missing__(self, key: str) -> Tensor:
        raise ValueError(f"{self.source} state dict has no weight {key!r}; is it a {self.source} checkpoint?")

    def refuse_unread(self, ignored: str | None = None) -> None:
        """``ValueError`` naming the tensors no weight was read from, except the names matching the regular
        expression ``ignored`` (tensors known to carry nothing a model needs, such as GPT-2's mask buffers).
        A tensor left over means a config that does not describe the checkpoint (more layers, a token-type
        table, an untied head) or quantisation scales; dropping it would give a different model silently."""
        unread = sorted(k for k in self if k not in self.read and not (ignored and re.fullmatch(ignored, k)))
        if unread:
            shown = ", ".join(unread[:5]) + (f" and {len(unread) - 5} more" if len(unread) > 5 else "")
            raise ValueError(f"{self.source} state dict has {len(unread)} tensor(s) that no weight of the model "
                             f"reads: {shown}; expected none (does the config describe this checkpoint?)")


def check_depth(sd: Mapping[str, Tensor], pattern: str, config: ModelConfig, source: str) -> None:
    """``ValueError`` unless ``sd`` holds exactly ``config.n_layers`` layers."""
    found = count_layers(sd, pattern)
    if found != config.n_layers:
        raise ValueError(f"{source} state dict has {found} layers but the config says n_layers={config.n_layers}")


def load_into(model: nn.Module, ours: Mapping[str, Tensor], source: str) -> nn.Module:
    """Copy ``ours`` (our parameter names) into ``model``; every parameter must be given, and nothing else.

    A tied output head (``config.tie_embeddings``) is the token table itself, so ``lm_head.weight`` may be
    left out. Returns ``model``.
    """
    params = dict(model.state_dict(keep_vars=True))  # parameters (tied ones under both names) and persistent buffers
    tied = {"lm_head.weight"} if getattr(model.config, "tie_embeddings", False) else set()
    missing = sorted(set(params) - set(ours) - tied)
    unexpected = sorted(set(ours) - set(params))
    if missing or unexpected:
        raise ValueError(f"{source} state dict does not fit the config: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for name, value in ours.items():
            if not value.is_floating_point() or value.element_size() == 1:  # integer or float8: quantised codes
                raise ValueError(f"{source} weight for {name} has dtype {value.dtype}; expected floating point "
                                 "(float32, bfloat16, float16): quantised weights need their scales (a folder's "
                                 "quantization_config), or dequantise them first")
            if params[name].shape != value.shape:
                raise ValueError(
                    f"{source} weight for {name} has shape {tuple(value.shape)}, "
                    f"expected {tuple(params[name].shape)} from the config"
                )
            params[name].copy_(value)
    return model
