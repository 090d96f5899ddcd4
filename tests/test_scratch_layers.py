"""The NumPy twins in companion.scratch.layers equal the torch modules of companion.layers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from companion import layers as L
from companion.scratch import layers as S


def t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a))


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((3, 5, 16)) * 2 + 0.5


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_equals_torch(x: np.ndarray, approximate: str) -> None:
    assert_close(t(S.gelu(x, approximate)), F.gelu(t(x), approximate=approximate))


def test_layer_norm_equals_torch_module(x: np.ndarray) -> None:
    torch.manual_seed(0)
    norm = L.LayerNorm(16).double()
    with torch.no_grad():
        norm.weight.normal_(), norm.bias.normal_()
    ours = S.layer_norm(x, norm.weight.detach().numpy(), norm.bias.detach().numpy(), eps=norm.eps)
    assert_close(t(ours), norm(t(x)).detach())


def test_rms_norm_equals_torch_module(x: np.ndarray) -> None:
    torch.manual_seed(0)
    norm = L.RMSNorm(16).double()
    with torch.no_grad():
        norm.weight.normal_()
    assert_close(t(S.rms_norm(x, norm.weight.detach().numpy(), eps=norm.eps)), norm(t(x)).detach())


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("bias", [True, False])
def test_feed_forward_equals_torch_module(x: np.ndarray, activation: str, bias: bool) -> None:
    torch.manual_seed(0)
    ffn = L.FeedForward(16, 48, activation, bias=bias).double()
    W1, W2 = ffn.up_proj.weight.detach().numpy().T, ffn.down_proj.weight.detach().numpy().T  # x @ W layout
    b1 = ffn.up_proj.bias.detach().numpy() if bias else None
    b2 = ffn.down_proj.bias.detach().numpy() if bias else None
    assert_close(t(S.feed_forward(x, W1, b1, W2, b2, activation)), ffn(t(x)).detach())


def test_scratch_bad_activation(x: np.ndarray) -> None:
    with pytest.raises(ValueError, match="activation='tanh'"):
        S.feed_forward(x, np.eye(16), None, np.eye(16), None, "tanh")
    with pytest.raises(ValueError, match="approximate='fast'"):
        S.gelu(x, "fast")
