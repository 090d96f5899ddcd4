"""The NumPy twins in companion.scratch.attention / .masks give the same numbers as the torch versions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from companion import attention as torch_attn
from companion.masks import causal_mask as torch_causal_mask
from companion.scratch import attention as np_attn
from companion.scratch.masks import causal_mask as np_causal_mask


def to_np(x: torch.Tensor) -> np.ndarray:
    return x.detach().double().numpy()


def test_softmax_twin() -> None:
    x = torch.randn(3, 6, dtype=torch.float64) * 5
    x[1] = float("-inf")  # a fully masked row: zeros in both
    assert_close(torch.from_numpy(np_attn.softmax(to_np(x))), torch_attn.softmax(x))
    assert np.allclose(np_attn.softmax(to_np(x))[[0, 2]].sum(-1), 1.0)


@pytest.mark.parametrize("t", [1, 4])
def test_causal_mask_twin(t: int) -> None:
    expected = torch_causal_mask(t, additive=True, dtype=torch.float64)
    assert torch.equal(torch.from_numpy(np_causal_mask(t)), expected)


@pytest.mark.parametrize("mask_kind", ["none", "additive", "bool"])
def test_sdpa_twin(mask_kind: str) -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, dtype=torch.float64) for _ in range(3))
    mask = {
        "additive": torch_causal_mask(5, additive=True, dtype=torch.float64),
        "bool": torch_causal_mask(5),
    }
    mask = mask.get(mask_kind)
    out, w = torch_attn.scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    np_out, np_w = np_attn.scaled_dot_product_attention(
        to_np(q), to_np(k), to_np(v), None if mask is None else mask.numpy(), return_weights=True
    )
    assert_close(torch.from_numpy(np_out), out)
    assert_close(torch.from_numpy(np_w), w)


@pytest.mark.parametrize("batched", [True, False])
def test_multi_head_attention_twin(batched: bool) -> None:
    torch.manual_seed(0)
    d, h, t = 12, 3, 5
    mha = torch_attn.MultiHeadAttention(d, h, bias=False).double()
    x = torch.randn(2, t, d, dtype=torch.float64)
    expected = mha(x, mask=torch_causal_mask(t))
    # scratch weights act on row vectors (x @ W), nn.Linear stores (out, in): transpose.
    weights = [to_np(p.weight.T) for p in (mha.q_proj, mha.k_proj, mha.v_proj, mha.o_proj)]
    x_np = to_np(x) if batched else to_np(x[0])
    out = np_attn.multi_head_attention(x_np, *weights, n_heads=h, mask=np_causal_mask(t))
    assert_close(torch.from_numpy(out), expected if batched else expected[0])


def test_multi_head_attention_twin_rejects_indivisible_width() -> None:
    w = np.zeros((10, 10))
    with pytest.raises(ValueError, match="d_model=10 is not divisible by n_heads=4"):
        np_attn.multi_head_attention(np.zeros((3, 10)), w, w, w, w, n_heads=4)
