"""Tests of companion.positions.t5: T5's bucketed relative position bias.

The reference is Hugging Face's ``T5Attention._relative_position_bucket`` (a static method: nothing is
downloaded); the hand-worked example below derives a few buckets from the formula.
"""

from __future__ import annotations

import math

import pytest
import torch

from companion.positions.t5 import relative_position_bucket, relative_positions, t5_bias

t5 = pytest.importorskip("transformers.models.t5.modeling_t5")


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (16, 64), (8, 20), (64, 256)])
def test_equals_hugging_face(bidirectional: bool, num_buckets: int, max_distance: int) -> None:
    rel = torch.arange(-600, 601)  # every distance, far beyond max_distance on both sides
    ours = relative_position_bucket(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    ref = t5.T5Attention._relative_position_bucket(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )
    torch.testing.assert_close(ours, ref.to(torch.long), rtol=0, atol=0)


def test_hand_worked_example() -> None:
    """T5's defaults, bidirectional: 16 buckets per direction, max_exact = 8.

    distance key - query = -n with n < 8 (key before the query): bucket n itself, so -3 -> 3;
    distance +3 (key after the query): 16 + 3 = 19;
    distance -8: 8 + floor(log(8/8) / log(128/8) * 8) = 8 + 0 = 8;
    distance -32: 8 + floor(log(4) / log(16) * 8) = 8 + 4 = 12;
    distance -127: 8 + floor(log(127/8) / log(16) * 8) = 8 + floor(7.977) = 15;
    distance -128 and -1000: capped at the last bucket, 15.
    """
    rel = torch.tensor([0, -3, 3, -8, -32, -127, -128, -1000])
    assert relative_position_bucket(rel).tolist() == [0, 3, 19, 8, 12, 15, 15, 15]
    assert 8 + math.floor(math.log(127 / 8) / math.log(16) * 8) == 15


def test_causal_buckets_ignore_future_keys() -> None:
    rel = torch.arange(-10, 11)
    b = relative_position_bucket(rel, bidirectional=False)
    assert (b[rel >= 0] == 0).all()  # future keys (and the token itself) all in bucket 0
    assert b[rel < 0].tolist() == list(range(10, 0, -1))  # past distances 10..1 exact (max_exact = 16)


def test_buckets_are_monotone_in_distance_and_in_range() -> None:
    n = torch.arange(0, 2000)
    b = relative_position_bucket(-n, bidirectional=False, num_buckets=32, max_distance=128)
    assert (b.diff() >= 0).all() and b.min() == 0 and b.max() == 31


def test_bias_shape_and_lookup() -> None:
    table = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    bias = t5_bias(table, 5, 7)
    assert bias.shape == (4, 5, 7)
    rel = relative_positions(5, 7)
    buckets = relative_position_bucket(rel)
    for h in range(4):
        torch.testing.assert_close(bias[h], table[buckets, h])
    # the bias depends only on key - query: constant along diagonals (a Toeplitz matrix per head)
    for off in range(-4, 7):
        diag = torch.diagonal(bias, offset=off, dim1=-2, dim2=-1)
        assert torch.equal(diag, diag[..., :1].expand_as(diag))


def test_offset_matches_the_last_rows() -> None:
    table = torch.randn(32, 2, generator=torch.Generator().manual_seed(1))
    full = t5_bias(table, 9, 9, bidirectional=False)
    last = t5_bias(table, 1, 9, bidirectional=False, offset=8)  # one decoding step with 8 cached keys
    torch.testing.assert_close(last, full[:, -1:])


def test_bad_input() -> None:
    with pytest.raises(TypeError, match="relative_position"):
        relative_position_bucket(torch.tensor([1.5]))
    with pytest.raises(ValueError, match="num_buckets=31"):
        relative_position_bucket(torch.tensor([1]), num_buckets=31)
    with pytest.raises(ValueError, match="max_distance=4"):
        relative_position_bucket(torch.tensor([1]), num_buckets=32, max_distance=4)
    with pytest.raises(ValueError, match="table"):
        t5_bias(torch.randn(32), 3, 3)
    with pytest.raises(ValueError, match="offset=-1"):
        relative_positions(3, 3, offset=-1)
