"""Chapter 2's exercise checks: a right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from companion.exercises.testing import assert_fails, assert_passes
from companion.positions import sinusoidal_encoding


def test_embedding_lookup() -> None:
    assert_passes("embedding_lookup", lambda ids, table: table[ids])
    assert_passes("embedding_lookup", lambda ids, table: F.one_hot(ids, table.shape[0]).float() @ table)
    assert_fails("embedding_lookup", lambda ids, table: table[ids - 1], "count from 0")
    assert_fails("embedding_lookup", lambda ids, table: table[ids] * math.sqrt(table.shape[1]), "no √d_model")
    assert_fails("embedding_lookup", lambda ids, table: table.T[:, ids], "columns of the table")


def _pe(ids, table):
    return sinusoidal_encoding(ids.shape[1], table.shape[1])


def test_embedding_input() -> None:
    """X = √D · table[ids] + PE[0:T], with the (T, D) position table broadcast over the batch."""
    assert_passes("embedding_input", lambda ids, t: math.sqrt(t.shape[1]) * t[ids] + _pe(ids, t))
    assert_fails(
        "embedding_input", lambda ids, t: math.sqrt(t.shape[1]) * (t[ids] + _pe(ids, t)), "position was scaled"
    )
    assert_fails("embedding_input", lambda ids, t: t[ids] + _pe(ids, t), "factor is missing")
    assert_fails("embedding_input", lambda ids, t: t.shape[1] * t[ids] + _pe(ids, t), "not d_model")
    assert_fails("embedding_input", lambda ids, t: t[ids] / math.sqrt(t.shape[1]) + _pe(ids, t), "dividing")


def test_embedding_norm() -> None:
    """Entries ~ N(0, 1/d) times √d have size 1; d of them give a length of about √d = 16 at d = 256."""
    assert_passes("embedding_norm", 16)
    assert_fails("embedding_norm", 1, "before scaling")
    assert_fails("embedding_norm", math.sqrt(128), "sinusoidal position")
    assert_fails("embedding_norm", 256, "not d")


def test_tied_saving() -> None:
    """One V × D matrix: 50,257 × 1,024 = 51,463,168."""
    assert_passes("tied_saving", 50257 * 1024)
    assert_fails("tied_saving", 2 * 50257 * 1024, "one matrix is saved")
    assert_fails("tied_saving", 51.463168, "not millions")
    assert_fails("tied_saving", 24 * 50257 * 1024, "once per layer")
    assert_fails("tied_saving", 50257 + 1024, "not v plus d")


def test_tying_effect() -> None:
    assert_passes("tying_effect", "b")
    assert_fails("tying_effect", "a", "not flops")
    assert_fails("tying_effect", "c", "same shape")
    assert_fails("tying_effect", "d", "independent")


def test_checks_leave_the_global_rng_alone() -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert_passes("embedding_lookup", lambda ids, table: table[ids])
    assert_passes("embedding_norm", 16)
    assert torch.equal(torch.rand(3), expected)
