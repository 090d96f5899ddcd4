"""Tests for companion.masks: the True = may-attend convention, causal/padding/window masks, combining."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from companion.masks import (
    causal_mask,
    combine_masks,
    document_mask,
    padding_mask,
    prefix_lm_mask,
    sliding_window_mask,
    to_additive,
)


def test_causal_mask_small_example() -> None:
    expected = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])
    assert torch.equal(causal_mask(3), expected)


@pytest.mark.parametrize(("t", "s"), [(1, 1), (4, 4), (3, 7), (1, 5)])
def test_causal_mask_is_lower_triangle_shifted_by_cache(t: int, s: int) -> None:
    # The t queries are the last t of s positions: the last query sees every key.
    mask = causal_mask(t, s)
    assert mask.shape == (t, s) and mask.dtype == torch.bool
    assert torch.equal(mask, torch.ones(t, s, dtype=torch.bool).tril(diagonal=s - t))
    assert mask[-1].all()


def test_causal_mask_of_new_queries_is_the_bottom_rows_of_the_full_mask() -> None:
    assert torch.equal(causal_mask(2, 6), causal_mask(6)[-2:])


def test_additive_forms_hold_zero_and_minus_inf() -> None:
    add = causal_mask(4, additive=True, dtype=torch.float64)
    assert add.dtype == torch.float64
    assert torch.equal(add == 0, causal_mask(4))
    assert torch.isneginf(add[~causal_mask(4)]).all()
    assert torch.equal(to_additive(causal_mask(4), torch.float64), add)


def test_additive_and_boolean_forms_give_same_attention() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 5, 4).unbind(0)
    bool_out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(5))
    add_out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(5, additive=True))
    assert_close(bool_out, add_out)


@pytest.mark.parametrize(("t", "s", "window"), [(6, 6, 1), (6, 6, 3), (2, 7, 3), (5, 5, 10)])
def test_sliding_window_sees_the_last_window_keys(t: int, s: int, window: int) -> None:
    mask = sliding_window_mask(t, window, s)
    assert torch.equal(mask & ~causal_mask(t, s), torch.zeros_like(mask))  # never more than causal
    positions = torch.arange(t) + (s - t)
    assert torch.equal(mask.sum(-1), torch.clamp(positions + 1, max=window))
    if window >= s:
        assert torch.equal(mask, causal_mask(t, s))


def test_sliding_window_one_is_the_diagonal() -> None:
    assert torch.equal(sliding_window_mask(4, 1), torch.eye(4, dtype=torch.bool))


def test_padding_mask_hides_pad_keys() -> None:
    ids = torch.tensor([[5, 6, 0, 0], [7, 8, 9, 0]])
    mask = padding_mask(ids, pad_id=0)
    assert mask.shape == (2, 1, 1, 4)
    assert torch.equal(mask[:, 0, 0], ids != 0)
    add = padding_mask(ids, pad_id=0, additive=True)
    assert torch.equal(add == 0, mask) and torch.isneginf(add[~mask]).all()


def test_combine_boolean_masks_is_logical_and() -> None:
    ids = torch.tensor([[1, 2, 0], [3, 0, 0]])
    combined = combine_masks(causal_mask(3), padding_mask(ids, 0))
    assert combined.shape == (2, 1, 3, 3) and combined.dtype == torch.bool
    for b in range(2):
        assert torch.equal(combined[b, 0], causal_mask(3) & (ids[b] != 0))


def test_combine_mixed_kinds_is_additive_and_matches_boolean_and() -> None:
    ids = torch.tensor([[1, 2, 0]])
    mixed = combine_masks(causal_mask(3, additive=True), padding_mask(ids, 0))
    assert mixed.dtype == torch.float32
    assert torch.equal(mixed, to_additive(causal_mask(3) & padding_mask(ids, 0)))


def test_combine_additive_masks_adds_biases() -> None:
    bias = torch.randn(3, 3)
    assert_close(combine_masks(bias, causal_mask(3, additive=True)), bias + causal_mask(3, additive=True))


def test_combine_skips_none() -> None:
    assert combine_masks() is None and combine_masks(None, None) is None
    assert torch.equal(combine_masks(None, causal_mask(2)), causal_mask(2))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: causal_mask(0), ValueError, "t=0"),
        (lambda: causal_mask(2.5), TypeError, "t must be an int"),
        (lambda: causal_mask(4, 3), ValueError, "s=3 is smaller than t=4"),
        (lambda: sliding_window_mask(3, 0), ValueError, "window=0"),
        (lambda: padding_mask(torch.ones(2, 3), 0), TypeError, "integer token ids"),
        (lambda: padding_mask(torch.ones(3, dtype=torch.long), 0), ValueError, "ids must have 2 dimensions"),
        (lambda: padding_mask(torch.ones(1, 3, dtype=torch.long), 0.5), TypeError, "pad_id"),
        (lambda: combine_masks(causal_mask(3), causal_mask(4)), ValueError, "do not broadcast"),
        (lambda: combine_masks(torch.ones(3, dtype=torch.long)), TypeError, r"masks\[0\]"),
        (lambda: to_additive(causal_mask(2), torch.long), TypeError, "floating-point"),
    ],
)
def test_bad_arguments_raise_clear_errors(call, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


# ------------------------------------------------------------------------------ packed sequences: document_mask


def test_document_mask_small_example() -> None:
    """doc_ids [0, 0, 1, 1, 1]: one causal block per document, nothing across documents (the docstring's example)."""
    expected = torch.block_diag(causal_mask(2), causal_mask(3))
    assert torch.equal(document_mask(torch.tensor([0, 0, 1, 1, 1])), expected)
    assert torch.equal(document_mask(torch.tensor([0, 0, 1, 1, 1]), causal=False),
                       torch.block_diag(torch.ones(2, 2, dtype=torch.bool), torch.ones(3, 3, dtype=torch.bool)))


def test_one_document_is_the_causal_mask() -> None:
    assert torch.equal(document_mask(torch.full((6,), 7)), causal_mask(6))
    assert torch.equal(document_mask(torch.zeros(6, dtype=torch.long), additive=True), causal_mask(6, additive=True))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("lengths", [[3, 1, 4], [1, 1, 1, 1], [5], [2, 6]])
def test_packed_attention_equals_attention_on_each_document(lengths: list[int], causal: bool) -> None:
    """The reason for the mask: attention over the packed row equals attention over each document alone."""
    torch.manual_seed(sum(lengths))
    t = sum(lengths)
    q, k, v = torch.randn(3, 2, t, 8).unbind(0)  # (H, T, D_h) each
    doc_ids = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))  # (T,)
    packed = F.scaled_dot_product_attention(q, k, v, attn_mask=document_mask(doc_ids, causal=causal))
    pieces, start = [], 0
    for n in lengths:
        part = slice(start, start + n)
        pieces.append(F.scaled_dot_product_attention(q[:, part], k[:, part], v[:, part], is_causal=causal))
        start += n
    assert_close(packed, torch.cat(pieces, dim=1))


def test_batched_document_ids_give_one_mask_per_row() -> None:
    doc_ids = torch.tensor([[0, 0, 1, 1], [0, 1, 2, 2]])
    mask = document_mask(doc_ids)
    assert mask.shape == (2, 1, 4, 4)
    for b in range(2):
        assert torch.equal(mask[b, 0], document_mask(doc_ids[b]))


def test_document_mask_rejects_bad_input() -> None:
    with pytest.raises(TypeError, match="doc_ids"):
        document_mask(torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="doc_ids"):
        document_mask(torch.zeros(1, 2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="causal"):
        document_mask(torch.tensor([0, 1]), causal="yes")


def test_prefix_lm_mask_small_example() -> None:
    """t = 4, prefix 2: rows 0 and 1 see keys 0 and 1 (the prefix, both ways); row 2 sees 0..2, row 3 all."""
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(prefix_lm_mask(4, 2), expected)


@pytest.mark.parametrize("t", [1, 5, 9])
def test_prefix_lm_mask_limits_are_causal_and_full(t: int) -> None:
    assert torch.equal(prefix_lm_mask(t, 0), causal_mask(t)) and torch.equal(prefix_lm_mask(t, 1), causal_mask(t))
    assert prefix_lm_mask(t, t).all()


def test_prefix_lm_outputs_after_the_prefix_ignore_later_tokens_but_prefix_reads_all_of_itself() -> None:
    """Changing a token after the prefix leaves every earlier output unchanged; changing the last prefix token
    changes the first prefix position's output (bidirectional inside the prefix)."""
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 1, 8, 4).unbind(0)
    mask = prefix_lm_mask(8, 3)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    k2, v2 = k.clone(), v.clone()
    k2[..., 5, :], v2[..., 5, :] = torch.randn(4), torch.randn(4)
    assert_close(F.scaled_dot_product_attention(q, k2, v2, attn_mask=mask)[..., :5, :], out[..., :5, :])
    k3, v3 = k.clone(), v.clone()
    k3[..., 2, :], v3[..., 2, :] = torch.randn(4), torch.randn(4)
    assert not torch.allclose(F.scaled_dot_product_attention(q, k3, v3, attn_mask=mask)[..., 0, :], out[..., 0, :])


def test_prefix_lm_mask_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="prefix_len=5 is larger than t=4"):
        prefix_lm_mask(4, 5)
    with pytest.raises(ValueError, match="prefix_len=-1"):
        prefix_lm_mask(4, -1)
    assert torch.equal(prefix_lm_mask(3, 1, additive=True) == 0, prefix_lm_mask(3, 1))
