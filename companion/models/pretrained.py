"""Hugging Face folders in and out: ``GPT.from_pretrained(folder)`` and ``GPT.save_pretrained(folder)``.

A Hugging Face model folder holds ``config.json`` (the architecture) and the weights, in
``model.safetensors`` or ``pytorch_model.bin`` (or shards of either plus an ``*.index.json``), often with a
``tokenizer.json``. This module reads the two families the course rebuilds, GPT-2 and Llama:

- ``from_pretrained(folder)``: builds the ``ModelConfig`` from ``config.json`` (no hand-made config),
  reads the weights and maps them with ``companion.models.hf_loaders`` (``load_gpt2_state_dict`` /
  ``load_llama_state_dict``). A ``tokenizer.json`` is read with the ``tokenizers`` library and attached
  as ``model.tokenizer`` (a ``tokenizers.Tokenizer``; ``None`` if the folder has none).
- ``save_pretrained(model, folder)``: the inverse mapping, for GPT-2-shaped configs (learned positions,
  pre-LayerNorm, GELU, biases, multi-head attention) and Llama-shaped ones (RoPE in the "half" pairing,
  RMSNorm, SwiGLU, no biases, GQA allowed). ``transformers.AutoModelForCausalLM.from_pretrained(folder)``
  loads the result and gives the same logits (tests/test_pretrained.py, atol 1e-4) and greedy tokens.

Checked in tests/test_pretrained.py against ``transformers`` models with random weights, both directions,
both families, tied and untied heads, safetensors (also sharded) and ``.bin``; nothing is downloaded.

Like hf_loaders.py, this file keeps the checkpoint names (``c_attn``, ``input_layernorm``...) and the
``config.json`` keys to itself. Nothing is downloaded: with internet access, fetch a folder first, e.g.
``huggingface_hub.snapshot_download("openai-community/gpt2")``, then pass its path.

Left out on purpose: other families (Mistral's sliding window, Qwen's attention biases, GPT-2's
``scale_attn_by_inverse_layer_idx``), RoPE scalings other than linear, quantised or fp16 saving.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from companion._files import atomic_write, atomic_write_text
from companion.models.config import ModelConfig
from companion.models.hf_loaders import load_gpt2_state_dict, load_llama_state_dict
from companion.models.transformer import GPT

__all__ = ["from_pretrained", "save_pretrained", "load_tokenizer", "hf_config", "model_config_from_hf"]

# Hugging Face activation names <-> ModelConfig.activation ("gelu_new" is GPT-2's tanh approximation)
_GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
_GPT2_ACTIVATION_NAMES = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}


def _need(cfg: dict[str, Any], key: str, source: str) -> Any:
    if key not in cfg:
        raise ValueError(f"{source} has no {key!r}; is it a Hugging Face {cfg.get('model_type', '?')} config?")
    return cfg[key]


def model_config_from_hf(cfg: dict[str, Any], source: str = "config.json") -> ModelConfig:
    """The ``ModelConfig`` of a Hugging Face ``config.json`` (as a dict) of a GPT-2 or Llama model.

    Dropout is 0 (a loaded model is for inference; ``config.replace(dropout=...)`` to fine-tune).
    Raises ``ValueError`` for another ``model_type`` or a feature this course's model lacks.
    """
    kind = cfg.get("model_type")
    if kind == "gpt2":
        act = _need(cfg, "activation_function", source)
        if act not in _GPT2_ACTIVATIONS:
            raise ValueError(f"{source}: activation_function={act!r} is not supported; "
                             f"expected one of {sorted(_GPT2_ACTIVATIONS)}")
        if not cfg.get("scale_attn_weights", True) or cfg.get("scale_attn_by_inverse_layer_idx", False):
            raise ValueError(f"{source}: only GPT-2's standard 1/sqrt(D_h) attention scaling is supported")
        d = _need(cfg, "n_embd", source)
        return ModelConfig.gpt2_small(
            vocab_size=_need(cfg, "vocab_size", source), d_model=d, n_heads=_need(cfg, "n_head", source),
            n_layers=_need(cfg, "n_layer", source), d_ff=cfg.get("n_inner") or 4 * d,
            max_seq_len=_need(cfg, "n_positions", source), norm_eps=cfg.get("layer_norm_epsilon", 1e-5),
            activation=_GPT2_ACTIVATIONS[act], tie_embeddings=cfg.get("tie_word_embeddings", True), dropout=0.0,
        )  # fmt: skip
    if kind == "llama":
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"{source}: hidden_act={cfg['hidden_act']!r} is not supported; expected 'silu' (SwiGLU)")
        if cfg.get("attention_bias") or cfg.get("mlp_bias"):
            raise ValueError(f"{source}: attention_bias/mlp_bias are not supported (ModelConfig.bias covers norms too)")
        d, heads = _need(cfg, "hidden_size", source), _need(cfg, "num_attention_heads", source)
        if cfg.get("head_dim") not in (None, d // heads):
            raise ValueError(f"{source}: head_dim={cfg['head_dim']} differs from hidden_size / num_attention_heads "
                             f"= {d // heads}; ModelConfig derives the head width from d_model")
        rope = dict(cfg.get("rope_parameters") or {})  # transformers >= 5 groups the RoPE settings here
        scaling = cfg.get("rope_scaling") or ({} if rope.get("rope_type", "default") == "default" else rope)
        theta = cfg.get("rope_theta", rope.get("rope_theta", 10000.0))
        extra: dict[str, Any] = {}
        if scaling:
            kind_ = scaling.get("rope_type", scaling.get("type"))
            if kind_ != "linear":
                raise ValueError(f"{source}: rope scaling {kind_!r} is not supported; expected none or 'linear'")
            extra = {"rope_scaling": "linear", "rope_factor": float(scaling["factor"])}
        return ModelConfig.llama(
            vocab_size=_need(cfg, "vocab_size", source), d_model=d, n_heads=heads,
            n_kv_heads=cfg.get("num_key_value_heads") or heads, n_layers=_need(cfg, "num_hidden_layers", source),
            d_ff=_need(cfg, "intermediate_size", source), max_seq_len=_need(cfg, "max_position_embeddings", source),
            rope_base=float(theta), norm_eps=cfg.get("rms_norm_eps", 1e-6),
            tie_embeddings=cfg.get("tie_word_embeddings", False), dropout=0.0, **extra,
        )  # fmt: skip
    raise ValueError(f"{source}: model_type={kind!r} is not supported; expected 'gpt2' or 'llama'")


# --- reading -----------------------------------------------------------------------------------------------


def _read_weights(folder: Path) -> dict[str, Tensor]:
    """Every tensor of the folder's weight files (safetensors preferred, then pytorch_model.bin; shards too)."""
    for name, index in (("model.safetensors", "model.safetensors.index.json"),
                        ("pytorch_model.bin", "pytorch_model.bin.index.json")):  # fmt: skip
        if (folder / index).is_file():
            files = sorted(set(json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"].values()))
        elif (folder / name).is_file():
            files = [name]
        else:
            continue
        sd: dict[str, Tensor] = {}
        for file in files:
            path = folder / file
            try:
                if file.endswith(".safetensors"):
                    from safetensors.torch import load_file

                    sd.update(load_file(path))
                else:  # weights_only refuses arbitrary pickled objects
                    sd.update(torch.load(path, map_location="cpu", weights_only=True))
            except ImportError:
                raise
            except Exception as err:
                raise ValueError(f"weights file {str(path)!r} is corrupt or unreadable ({err})") from None
        return sd
    raise FileNotFoundError(f"{str(folder)!r} holds no model.safetensors or pytorch_model.bin (nor their shards)")


def load_tokenizer(folder: str | Path) -> Any:
    """The folder's ``tokenizer.json`` as a ``tokenizers.Tokenizer``, or ``None`` if there is none."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer  # only needed when the folder has a tokenizer

    return Tokenizer.from_file(str(path))


def hf_config(folder: str | Path) -> dict[str, Any]:
    """The folder's ``config.json`` as a dict (``FileNotFoundError`` / ``ValueError`` naming the problem)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder {str(folder)!r} does not exist; nothing is downloaded -- fetch it "
                                "first, e.g. huggingface_hub.snapshot_download('openai-community/gpt2')")
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{str(folder)!r} has no config.json; expected a Hugging Face model folder")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{str(path)!r} is not valid JSON ({err})") from None


def from_pretrained(folder: str | Path) -> GPT:
    """A ``GPT`` (eval mode, float32) built from a local Hugging Face GPT-2 or Llama folder.

    Returns the model with ``model.tokenizer`` set to the folder's ``tokenizer.json`` as a
    ``tokenizers.Tokenizer`` (``None`` if absent): ``model.tokenizer.encode(text).ids`` gives the ids.

    Raises:
        FileNotFoundError: no folder, no ``config.json``, or no weights file.
        ValueError: an unsupported ``model_type`` or feature, or weights that do not fit the config.
    """
    folder = Path(folder)
    config = model_config_from_hf(hf_config(folder), str(folder / "config.json"))
    sd = _read_weights(folder)
    if config.positions == "learned":
        model = load_gpt2_state_dict(sd, config)
    else:
        model = load_llama_state_dict(sd, config)
    model.tokenizer = load_tokenizer(folder)
    return model.eval()


# --- writing -----------------------------------------------------------------------------------------------


def _family(config: ModelConfig) -> str:
    """'gpt2' or 'llama' if ``config`` has that shape; else ``ValueError`` naming the fields that differ."""
    common = {"norm_placement": "pre", "final_norm": True, "embed_norm": False, "embed_scale": False,
              "sliding_window": None}  # fmt: skip
    shapes = {
        "gpt2": {**common, "positions": "learned", "norm": "layernorm", "bias": True,
                 "n_kv_heads": (None, config.n_heads), "activation": tuple(_GPT2_ACTIVATION_NAMES)},
        "llama": {**common, "positions": "rope", "rope_pairing": "half", "norm": "rmsnorm", "bias": False,
                  "activation": "swiglu", "rope_scaling": (None, "linear")},
    }  # fmt: skip
    differences = {}
    for family, wanted in shapes.items():
        off = [f"{k}={getattr(config, k)!r}" for k, v in wanted.items()
               if getattr(config, k) not in (v if isinstance(v, tuple) else (v,))]  # fmt: skip
        if not off:
            return family
        differences[family] = ", ".join(off)
    raise ValueError("save_pretrained needs a GPT-2- or Llama-shaped config; this one differs from GPT-2 in "
                     f"{differences['gpt2']} and from Llama in {differences['llama']}")


def _gpt2_state_dict(model: GPT) -> dict[str, Tensor]:
    """Our weights under ``GPT2LMHeadModel``'s names; Conv1D matrices are stored (in, out): transpose."""
    sd, c = model.state_dict(), model.config
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


def _gpt2_config(c: ModelConfig) -> dict[str, Any]:
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": c.vocab_size,
        "n_positions": c.max_seq_len, "n_embd": c.d_model, "n_layer": c.n_layers, "n_head": c.n_heads,
        "n_inner": c.d_ff, "activation_function": _GPT2_ACTIVATION_NAMES[c.activation],
        "layer_norm_epsilon": c.norm_eps, "resid_pdrop": c.dropout, "embd_pdrop": c.dropout,
        "attn_pdrop": c.dropout, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False, "tie_word_embeddings": c.tie_embeddings,
        "bos_token_id": None, "eos_token_id": None, "dtype": "float32",
    }  # fmt: skip


_LLAMA_NAMES = {  # ours -> theirs, inside model.layers.{i}
    "self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
    "self_attn.v_proj": "self_attn.v_proj", "self_attn.o_proj": "self_attn.o_proj",
    "ffn.gate_proj": "mlp.gate_proj", "ffn.up_proj": "mlp.up_proj", "ffn.down_proj": "mlp.down_proj",
    "self_attn_block.norm": "input_layernorm", "ffn_block.norm": "post_attention_layernorm",
}  # fmt: skip


def _llama_state_dict(model: GPT) -> dict[str, Tensor]:
    sd, c = model.state_dict(), model.config
    out = {"model.embed_tokens.weight": sd["embed.token.weight"], "model.norm.weight": sd["norm.weight"]}
    if not c.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    for i in range(c.n_layers):
        for ours, theirs in _LLAMA_NAMES.items():
            out[f"model.layers.{i}.{theirs}.weight"] = sd[f"layers.{i}.{ours}.weight"]
    return out


def _llama_config(c: ModelConfig) -> dict[str, Any]:
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


def save_pretrained(model: GPT, folder: str | Path, *, safe_serialization: bool = True, tokenizer: Any = None) -> None:
    """Write ``model`` as a Hugging Face folder: ``config.json`` and ``model.safetensors``
    (``pytorch_model.bin`` with ``safe_serialization=False``), plus ``tokenizer.json`` when ``tokenizer``
    (a ``tokenizers.Tokenizer``) is given or the model came with one from ``from_pretrained``.

    The folder is created if needed; each file is written atomically. Raises ``TypeError`` for a model that
    is not a ``GPT`` and ``ValueError`` for a config that is neither GPT-2- nor Llama-shaped.
    """
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a companion.models.GPT, got {type(model).__name__}")
    family = _family(model.config)
    state = _gpt2_state_dict(model) if family == "gpt2" else _llama_state_dict(model)
    state = {k: v.detach().to("cpu", torch.float32).contiguous().clone() for k, v in state.items()}  # no shared memory
    config = _gpt2_config(model.config) if family == "gpt2" else _llama_config(model.config)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if safe_serialization:
        from safetensors.torch import save_file

        with atomic_write(folder / "model.safetensors") as tmp:
            save_file(state, str(tmp), metadata={"format": "pt"})
    else:
        with atomic_write(folder / "pytorch_model.bin") as tmp:
            torch.save(state, tmp)
    atomic_write_text(folder / "config.json", json.dumps(config, indent=2, sort_keys=True) + "\n")
    tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if tokenizer is not None:
        atomic_write_text(folder / "tokenizer.json", tokenizer.to_str())
