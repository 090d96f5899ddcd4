"""Tests for companion.embeddings: lookup equals nn.Embedding, √D scaling, range errors, weight tying."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from companion.embeddings import TokenEmbedding, tie_weights

V, D = 11, 8


def test_lookup_matches_nn_embedding() -> None:
    torch.manual_seed(0)
    emb = TokenEmbedding(V, D)
    ref = nn.Embedding(V, D)
    ref.weight.data.copy_(emb.weight.data)
    ids = torch.tensor([[0, 3, 10], [4, 4, 1]])
    out = emb(ids)
    assert out.shape == (2, 3, D)
    assert_close(out, ref(ids))
    assert_close(emb(ids[0]), ref(ids[0]))  # (T,) -> (T, D)


def test_row_i_is_the_vector_of_token_i() -> None:
    emb = TokenEmbedding(V, D)
    assert torch.equal(emb(torch.arange(V)), emb.weight)


def test_scale_multiplies_by_sqrt_d_model() -> None:
    torch.manual_seed(0)
    scaled = TokenEmbedding(V, D, scale=True)
    ids = torch.tensor([[1, 2, 3]])
    assert_close(scaled(ids), F.embedding(ids, scaled.weight) * math.sqrt(D))


def test_scaled_init_gives_unit_scale_output() -> None:
    # With scale=True the table is drawn with std 1/sqrt(D), so the scaled vectors have std about 1.
    torch.manual_seed(0)
    emb = TokenEmbedding(2000, 64, scale=True)
    assert abs(emb(torch.arange(2000)).std().item() - 1.0) < 0.05
    assert abs(emb.weight.std().item() - 64**-0.5) < 0.05 * 64**-0.5


def test_padding_row_is_zero_and_gets_no_gradient() -> None:
    emb = TokenEmbedding(V, D, padding_idx=0)
    assert torch.equal(emb.weight[0], torch.zeros(D))
    emb(torch.tensor([[0, 1, 0]])).sum().backward()
    assert torch.equal(emb.weight.grad[0], torch.zeros(D))
    assert torch.equal(emb.weight.grad[1], torch.ones(D))


def test_tie_weights_shares_one_parameter() -> None:
    emb = TokenEmbedding(V, D)
    head = nn.Linear(D, V, bias=False)
    tie_weights(head, emb)
    assert head.weight is emb.weight
    model = nn.ModuleDict({"emb": emb, "head": head})
    assert sum(p.numel() for p in model.parameters()) == V * D  # counted once
    ids = torch.tensor([[1, 2]])
    head(emb(ids)).sum().backward()  # gradients from both uses land in the one table
    assert emb.weight.grad is head.weight.grad and emb.weight.grad.abs().sum() > 0
    with torch.no_grad():
        emb.weight[3, 0] = 42.0
    assert head.weight[3, 0] == 42.0


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: TokenEmbedding(V, D)(torch.tensor([[1, V]])), ValueError, f"token id {V} in ids is out of range"),
        (lambda: TokenEmbedding(V, D)(torch.tensor([[-1, 2]])), ValueError, "token id -1 in ids is out of range"),
        (lambda: TokenEmbedding(V, D)(torch.tensor([[1.0, 2.0]])), TypeError, "integer token ids"),
        (lambda: TokenEmbedding(V, D)(torch.zeros(1, 2, 3, dtype=torch.long)), ValueError, "ids must have"),
        (lambda: TokenEmbedding(V, D)([1, 2]), TypeError, "ids must be a torch.Tensor"),
        (lambda: TokenEmbedding(0, D), ValueError, "vocab_size=0"),
        (lambda: TokenEmbedding(V, D, padding_idx=V), ValueError, f"padding_idx={V}"),
        (
            lambda: tie_weights(nn.Linear(D, V + 1), TokenEmbedding(V, D)),
            ValueError,
            "lm_head.weight has shape",
        ),
        (lambda: tie_weights(nn.Linear(D, V), nn.Embedding(V, D)), TypeError, "TokenEmbedding"),
    ],
)
def test_bad_input_raises_clear_errors(call, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()
