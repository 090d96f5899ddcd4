"""What every Hugging Face family shares: a strict state dict, layer counting, and a strict copy into a model.

Checkpoint formats differ in their names; the rules for taking them in are the same: every weight of the
model must be given, nothing else may be, and shapes must agree. Errors name the checkpoint (``source``) and
the key, so a wrong or truncated file is found at once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from companion.models.config import ModelConfig

__all__ = ["Weights", "check_depth", "count_layers", "load_into", "strip_prefix"]


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
    """A state dict whose missing keys raise ``ValueError`` naming the checkpoint and the key."""

    def __init__(self, sd: Mapping[str, Tensor], source: str) -> None:
        super().__init__(sd)
        self.source = source

    def __missing__(self, key: str) -> Tensor:
        raise ValueError(f"{self.source} state dict has no weight {key!r}; is it a {self.source} checkpoint?")


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
    params = dict(model.named_parameters(remove_duplicate=False))
    tied = {"lm_head.weight"} if getattr(model.config, "tie_embeddings", False) else set()
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
