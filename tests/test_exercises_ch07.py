"""Chapter 7 exercise checks: each right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import torch

from companion.exercises.testing import assert_fails, assert_passes


def causal_ok(t):
    return torch.tril(torch.ones(t, t, dtype=torch.bool))


def test_causal_mask() -> None:
    assert_passes("causal_mask", causal_ok)
    assert_passes("causal_mask", lambda t: torch.zeros(t, t).masked_fill(~causal_ok(t), float("-inf")))
    assert_fails("causal_mask", lambda t: ~causal_ok(t), "True = blocked")
    assert_fails("causal_mask", lambda t: causal_ok(t).T, "transposed")
    assert_fails("causal_mask", lambda t: torch.ones(t, t, dtype=torch.bool).tril(-1), "attend to itself")
    assert_fails("causal_mask", lambda t: causal_ok(t).float(), "0 (allowed) and -inf")
    assert_fails("causal_mask", lambda t: torch.zeros(t, t).masked_fill(~causal_ok(t), -1e9), "-1e9")


def padding_ok(ids, pad_id):
    return (ids != pad_id)[:, None, None, :]


def test_padding_mask() -> None:
    assert_passes("padding_mask", padding_ok)
    assert_fails("padding_mask", lambda ids, p: ~padding_ok(ids, p), "marked the PAD")
    assert_fails("padding_mask", lambda ids, p: ids != p, "singleton axes")
    assert_fails("padding_mask", lambda ids, p: (ids != p)[:, None, :, None], "not (B, 1, S, 1)")
    assert_fails("padding_mask", lambda ids, p: padding_ok(ids, 0), "compare with pad_id")
    assert_fails("padding_mask", lambda ids, p: padding_ok(ids, p).float(), "blocks nothing")


def window_ok(t, window):
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    return (j <= i) & (j > i - window)


def test_sliding_window_mask() -> None:
    assert_passes("sliding_window_mask", window_ok)
    band = lambda t, w: (torch.arange(t)[:, None] - torch.arange(t)[None, :]).abs() < w  # noqa: E731
    assert_fails("sliding_window_mask", band, "causal")
    assert_fails("sliding_window_mask", lambda t, w: window_ok(t, w + 1), "W + 1 keys")
    assert_fails("sliding_window_mask", lambda t, w: window_ok(t, w + 1) & ~torch.eye(t, dtype=torch.bool),
                 "keep the diagonal")
    assert_fails("sliding_window_mask", lambda t, w: ~window_ok(t, w), "True where a key is blocked")


def combined_ok(ids, pad_id):
    t = ids.shape[1]
    return causal_ok(t) & (ids != pad_id)[:, None, None, :]


def test_causal_padding_mask() -> None:
    assert_passes("causal_padding_mask", combined_ok)
    assert_passes("causal_padding_mask", lambda ids, p: combined_ok(ids, p).expand(ids.shape[0], 1, -1, -1).clone())
    assert_fails("causal_padding_mask", lambda ids, p: causal_ok(ids.shape[1]) | padding_ok(ids, p), "AND")
    assert_fails("causal_padding_mask", padding_ok, "add the causal mask")
    assert_fails("causal_padding_mask", lambda ids, p: causal_ok(ids.shape[1]), "add the padding mask")
    assert_fails("causal_padding_mask", lambda ids, p: causal_ok(ids.shape[1]) & (ids != p)[:, None, :, None],
                 "not queries")


def test_receptive_field() -> None:
    assert_passes("receptive_field", 16)
    assert_fails("receptive_field", 20, ["too high", "W - 1 new positions"])
    assert_fails("receptive_field", 4, "single layer")
    assert_fails("receptive_field", 15, "token itself")
    assert_fails("receptive_field", 24, "whole sequence")


def test_mask_convention() -> None:
    assert_passes("mask_convention", "b")
    assert_fails("mask_convention", "a", "opposite")
    assert_fails("mask_convention", "c", "accepted without complaint")
    assert_fails("mask_convention", "d", "reversed")


def test_mask_convention_answer_is_what_torch_does() -> None:
    """Choice b says: each query attends only to later keys, and the last query gets NaN."""
    from companion.masks import causal_mask

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 5, 8)
    _, weights = mha(x, x, x, attn_mask=causal_mask(5))  # the course's mask, passed unchanged
    assert torch.isnan(weights[0, -1]).all()
    assert torch.equal(weights[0, :-1] > 0, ~causal_mask(5)[:-1])  # only later keys get weight
