"""Chapter 8 exercise checks: each right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import torch

from companion.exercises.testing import assert_fails, assert_passes


def attend(q, k, v, mask=None, dim=-1, scale=True):
    scores = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5 if scale else 1.0)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=dim) @ v


def cross_ok(y, memory, w_q, w_k, w_v, padding_mask=None):
    mask = None if padding_mask is None else padding_mask[:, None, :]
    return attend(y @ w_q, memory @ w_k, memory @ w_v, mask)


def test_cross_attention() -> None:
    assert_passes("cross_attention", cross_ok)
    assert_fails("cross_attention", lambda y, m, wq, wk, wv, padding_mask=None: cross_ok(y, y, wq, wk, wv),
                 "that was self-attention")

    def over_queries(y, m, wq, wk, wv, padding_mask=None):
        mask = None if padding_mask is None else padding_mask[:, None, :]
        return attend(y @ wq, m @ wk, m @ wv, mask, dim=-2)

    def causal(y, m, wq, wk, wv, padding_mask=None):
        lower = torch.ones(y.shape[1], m.shape[1], dtype=torch.bool).tril()
        mask = lower if padding_mask is None else lower & padding_mask[:, None, :]
        return attend(y @ wq, m @ wk, m @ wv, mask)

    def unscaled(y, m, wq, wk, wv, padding_mask=None):
        mask = None if padding_mask is None else padding_mask[:, None, :]
        return attend(y @ wq, m @ wk, m @ wv, mask, scale=False)

    def no_padding(y, m, wq, wk, wv, padding_mask=None):
        return attend(y @ wq, m @ wk, m @ wv)

    assert_fails("cross_attention", over_queries, "not over the queries")
    assert_fails("cross_attention", causal, "no causal mask")
    assert_fails("cross_attention", unscaled, "sqrt(d_k)")
    assert_fails("cross_attention", no_padding, "padding keys")


def masks_ok(src, tgt, pad_id):
    src_pad, tgt_pad = (src != pad_id)[:, None, None, :], (tgt != pad_id)[:, None, None, :]
    t = tgt.shape[1]
    return src_pad, torch.ones(t, t, dtype=torch.bool).tril() & tgt_pad, src_pad


def test_encoder_decoder_masks() -> None:
    assert_passes("encoder_decoder_masks", masks_ok)

    def causal_cross(src, tgt, p):
        enc, dec, cross = masks_ok(src, tgt, p)
        return enc, dec, cross & torch.ones(tgt.shape[1], src.shape[1], dtype=torch.bool).tril()

    def no_causal_decoder(src, tgt, p):
        enc, _, cross = masks_ok(src, tgt, p)
        return enc, (tgt != p)[:, None, None, :], cross

    def causal_encoder(src, tgt, p):
        enc, dec, cross = masks_ok(src, tgt, p)
        s = src.shape[1]
        return enc & torch.ones(s, s, dtype=torch.bool).tril(), dec, cross

    def target_padding_cross(src, tgt, p):
        enc, dec, _ = masks_ok(src, tgt, p)
        return enc, dec, (tgt != p)[:, None, None, :]

    assert_fails("encoder_decoder_masks", causal_cross, "no causal mask")
    assert_fails("encoder_decoder_masks", no_causal_decoder, "also needs the causal mask")
    assert_fails("encoder_decoder_masks", causal_encoder, "both directions")
    assert_fails("encoder_decoder_masks", target_padding_cross, "SOURCE padding")
    assert_fails("encoder_decoder_masks", lambda s, t, p: masks_ok(s, t, p)[:2], "three masks")


def test_cross_weights_shape() -> None:
    assert_passes("cross_weights_shape", (2, 4, 11, 10))
    assert_fails("cross_weights_shape", (2, 4, 10, 11), "rows are queries")
    assert_fails("cross_weights_shape", (2, 4, 11, 11), "decoder's self-attention")
    assert_fails("cross_weights_shape", (2, 4, 10, 10), "encoder's self-attention")
    assert_fails("cross_weights_shape", (2, 11, 10), "every head")


def test_cross_kv_cache() -> None:
    assert_passes("cross_kv_cache", "b")
    assert_fails("cross_kv_cache", "a", "without the cache")
    assert_fails("cross_kv_cache", "c", "number of decoder layers")
    assert_fails("cross_kv_cache", "d", "72")
