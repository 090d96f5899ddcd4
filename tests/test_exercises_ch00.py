"""Chapter 0's exercise checks: a right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import torch

from companion.exercises.testing import assert_fails, assert_passes


def test_attention_rnn_flop_ratio() -> None:
    """Derived by hand: attention 4·(2·B·T·D²) + 2·(2·B·T²·D), RNN T·(2·B·2·D²); the ratio is
    2 + T / D = 2 + 1024 / 64 = 18."""
    assert_passes("attention_rnn_flop_ratio", 18)
    assert_fails("attention_rnn_flop_ratio", 16, "four projections")
    assert_fails("attention_rnn_flop_ratio", 6, "grows with the sequence length")
    assert_fails("attention_rnn_flop_ratio", 17.5, "the output projection")
    assert_fails("attention_rnn_flop_ratio", 258, "you squared")
    assert_fails("attention_rnn_flop_ratio", 1 / 18, "upside down")
    assert_fails("attention_rnn_flop_ratio", 1026, "d does not cancel")
    assert_fails("attention_rnn_flop_ratio", 20, "too high")


def shapes_ok(batch_size, src_len, tgt_len, d_model, vocab_size):
    return {
        "src_ids": (batch_size, src_len),
        "memory": (batch_size, src_len, d_model),
        "tgt_ids": (batch_size, tgt_len),
        "logits": (batch_size, tgt_len, vocab_size),
        "next_token_probs": (batch_size, vocab_size),
    }


def _with(key, make):
    def fn(b, s, t, d, v):
        out = shapes_ok(b, s, t, d, v)
        out[key] = make(b, s, t, d, v)
        return out

    return fn


def test_pipeline_shapes() -> None:
    assert_passes("pipeline_shapes", shapes_ok)
    assert_passes("pipeline_shapes", lambda *a: {k: torch.Size(v) for k, v in shapes_ok(*a).items()})
    assert_fails("pipeline_shapes", _with("memory", lambda b, s, t, d, v: (b, t, d)), "per *source* token")
    assert_fails("pipeline_shapes", _with("logits", lambda b, s, t, d, v: (b, t, d)), "to V logits")
    assert_fails("pipeline_shapes", _with("logits", lambda b, s, t, d, v: (b, s, v)), "per *target* position")
    assert_fails(
        "pipeline_shapes", _with("next_token_probs", lambda b, s, t, d, v: (b, t, v)), "only the last position"
    )
    assert_fails("pipeline_shapes", lambda *a: [1, 2], "expected a dict")


def test_runs_per_token() -> None:
    assert_passes("runs_per_token", "b")
    assert_fails("runs_per_token", "a", "runs once per source sentence")
    assert_fails("runs_per_token", "c", "teacher forcing")
    assert_fails("runs_per_token", "d", "one parallel pass")


def test_sublayer_count() -> None:
    """Derived by hand: 6 encoder layers × 2 sub-layers + 6 decoder layers × 3 = 30."""
    assert_passes("sublayer_count", 30)
    assert_fails("sublayer_count", 24, "cross-attention")
    assert_fails("sublayer_count", 36, "only 2 sub-layers")
    assert_fails("sublayer_count", 5, "n = 6")
    assert_fails("sublayer_count", 12, "number of layers")


def test_checks_leave_the_global_rng_alone() -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert_passes("attention_rnn_flop_ratio", 18)
    assert_passes("pipeline_shapes", shapes_ok)
    assert_passes("sublayer_count", 30)
    assert torch.equal(torch.rand(3), expected)
