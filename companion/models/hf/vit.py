"""ViT (Dosovitskiy et al. 2021) in Hugging Face's format: the names of ``ViTForImageClassification``.

Three facts about the checkpoint matter:

- the patch projection is a ``Conv2d`` whose (D, C, p, p) weight, flattened to (D, C·p·p), is our
  ``patch_embed`` on patches flattened channel first (``companion.models.vit.patchify``);
- the [CLS] vector and the position table are stored with a leading batch axis: (1, 1, D) and (1, N + 1, D);
- the layer names changed in transformers 5 (``vit.layers.{i}.attention.q_proj``, ``mlp.fc1``) from the
  names of the published checkpoints (``vit.encoder.layer.{i}.attention.attention.query``,
  ``intermediate.dense``); both are read.

A checkpoint without q/k/v biases (``ViTConfig(qkv_bias=False)``) loads with zero biases there, which compute
the same function. Checked against ``transformers.ViTForImageClassification`` from random weights
(tests/test_vit.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

import torch
from torch import Tensor

from companion.models.config import ModelConfig
from companion.models.hf.common import Weights, check_depth, count_layers

__all__ = ["SOURCE", "config_from_state_dict", "num_labels_of", "to_companion"]

SOURCE = "ViT"
HEAD_WIDTH = 64  # D_h of the published ViTs (Ti 192 / 3, S 384 / 6, B 768 / 12, L 1024 / 16), when no config is given
WIDER_HEADS = {1280: 16}  # the exception: ViT-H/14 has 16 heads of width 80
QKV = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
LAYOUTS = {  # checkpoint layer prefix -> ours -> theirs inside one layer
    "vit.encoder.layer.": {  # the published checkpoints, transformers < 5
        "self_attn.q_proj": "attention.attention.query", "self_attn.k_proj": "attention.attention.key",
        "self_attn.v_proj": "attention.attention.value", "self_attn.o_proj": "attention.output.dense",
        "self_attn_block.norm": "layernorm_before", "ffn.up_proj": "intermediate.dense",
        "ffn.down_proj": "output.dense", "ffn_block.norm": "layernorm_after",
    },
    "vit.layers.": {  # transformers >= 5
        "self_attn.q_proj": "attention.q_proj", "self_attn.k_proj": "attention.k_proj",
        "self_attn.v_proj": "attention.v_proj", "self_attn.o_proj": "attention.o_proj",
        "self_attn_block.norm": "layernorm_before", "ffn.up_proj": "mlp.fc1", "ffn.down_proj": "mlp.fc2",
        "ffn_block.norm": "layernorm_after",
    },
}  # fmt: skip


def _layer_pattern(prefix: str) -> str:
    return re.escape(prefix) + r"(\d+)\."  # one group: the layer index


def _layout(sd: Mapping[str, Tensor]) -> str:
    for prefix in LAYOUTS:
        if any(k.startswith(prefix) for k in sd):
            return prefix
    raise ValueError(f"{SOURCE} state dict has no layer weights (vit.encoder.layer.* or vit.layers.*); "
                     "is it a ViTForImageClassification checkpoint?")


def num_labels_of(sd: Mapping[str, Tensor]) -> int:
    """The number of classes (rows of ``classifier.weight``)."""
    return Weights(sd, SOURCE)["classifier.weight"].shape[0]


def config_from_state_dict(sd: Mapping[str, Tensor]) -> ModelConfig:
    """A ``ModelConfig.vit`` with the sizes read from the tensors. The tensors cannot tell the head count: it
    assumes a head width of 64 (pass a config otherwise, and for ``layer_norm_eps`` other than 1e-12)."""
    w = Weights(sd, SOURCE)
    d, channels, p, _ = w["vit.embeddings.patch_embeddings.projection.weight"].shape
    n_patches = w["vit.embeddings.position_embeddings"].shape[1] - 1
    side = math.isqrt(n_patches)
    if side * side != n_patches:
        raise ValueError(f"{SOURCE} state dict has {n_patches} patch positions, not a square number; expected "
                         "the positions of a square image")
    if d % HEAD_WIDTH:
        raise ValueError(f"{SOURCE} state dict has width {d}, not a multiple of the head width {HEAD_WIDTH}; "
                         "pass config=ModelConfig.vit(..., n_heads=...) to say how many heads it has")
    prefix = _layout(sd)
    up = LAYOUTS[prefix]["ffn.up_proj"]
    return ModelConfig.vit(
        d_model=d, n_heads=WIDER_HEADS.get(d, d // HEAD_WIDTH), n_layers=count_layers(sd, _layer_pattern(prefix)),
        d_ff=w[f"{prefix}0.{up}.weight"].shape[0], image_size=side * p, patch_size=p, num_channels=channels,
    )  # fmt: skip


def to_companion(sd: Mapping[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """A ``ViTForImageClassification`` state dict under ``companion.models.ViT``'s names."""
    w = Weights(sd, SOURCE)
    prefix = _layout(sd)
    check_depth(sd, _layer_pattern(prefix), config, SOURCE)
    projection = w["vit.embeddings.patch_embeddings.projection.weight"]  # (D, C, p, p): a Conv2d
    ours: dict[str, Tensor] = {
        "patch_embed.weight": projection.reshape(projection.size(0), -1),  # (D, C·p·p): the same numbers, as a Linear
        "patch_embed.bias": w["vit.embeddings.patch_embeddings.projection.bias"],
        "cls_token": w["vit.embeddings.cls_token"],  # (1, 1, D)
        "position.weight": w["vit.embeddings.position_embeddings"][0],  # (N + 1, D)
        "norm.weight": w["vit.layernorm.weight"], "norm.bias": w["vit.layernorm.bias"],
        "head.weight": w["classifier.weight"], "head.bias": w["classifier.bias"],
    }  # fmt: skip
    names = LAYOUTS[prefix]
    qkv_bias = f"{prefix}0.{names['self_attn.q_proj']}.bias" in w  # False for ViTConfig(qkv_bias=False)
    for i in range(config.n_layers):
        for mine, theirs in names.items():
            for part in ("weight", "bias"):
                key = f"{prefix}{i}.{theirs}.{part}"
                if part == "bias" and mine in QKV and not qkv_bias:  # a zero bias adds nothing: the same model
                    ours[f"layers.{i}.{mine}.bias"] = torch.zeros(w[f"{prefix}{i}.{theirs}.weight"].shape[0])
                else:
                    ours[f"layers.{i}.{mine}.{part}"] = w[key]
    w.refuse_unread()
    return ours
