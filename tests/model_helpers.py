"""Helpers shared by the tests that compare companion's models with Hugging Face's (not a test module)."""

from __future__ import annotations

import torch
from torch import nn


def randomize(model: nn.Module, seed: int = 0) -> nn.Module:
    """Random weights that make a mismatch visible: norm gains around 1, everything else N(0, 0.1²); eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() == 1:  # norm gains around 1
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return model.eval()
