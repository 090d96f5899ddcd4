"""Helpers for tests of exercise checks: a right answer passes, a classic mistake fails with its hint.

Use them in ``tests/test_exercises_chNN.py``::

    from companion.exercises.testing import assert_fails, assert_passes

    def test_softmax() -> None:
        assert_passes("softmax", softmax_ok)
        assert_fails("softmax", softmax_wrong_axis, "wrong axis")
        assert_fails("attention_cost", 2048, ["too low", "forgot"])   # value checks take the answer

Each helper runs :func:`companion.exercises.check`, captures what it prints and returns it, so a test can
assert more about the text.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from typing import Any

from companion.exercises import CHECKS, check

__all__ = ["assert_fails", "assert_passes", "run_check"]


def run_check(name: str, answer: Any) -> tuple[bool, str]:
    """Run ``check(name, answer)``; return (its result, the text it printed)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        ok = check(name, answer)
    return ok, buffer.getvalue()


def assert_passes(name: str, answer: Any) -> str:
    """Assert that ``answer`` passes check ``name`` with a ✅ PASS line; return the printed text."""
    ok, out = run_check(name, answer)
    assert ok is True, f"check({name!r}) rejected a right answer:\n{out}"
    assert out.startswith(f"✅ PASS {CHECKS[name].name}: "), out
    return out


def assert_fails(name: str, answer: Any, hint: str | Sequence[str] = ()) -> str:
    """Assert that ``answer`` fails check ``name`` with a ❌ FAIL verdict whose text contains every string of
    ``hint`` (case-insensitive); return the printed text. A traceback in the output fails the assertion."""
    ok, out = run_check(name, answer)
    assert ok is False, f"check({name!r}) accepted a wrong answer:\n{out}"
    assert out.startswith(f"❌ FAIL {CHECKS[name].name}: "), out
    assert "Traceback" not in out, out
    wanted = [hint] if isinstance(hint, str) else list(hint)
    for part in wanted:
        assert part.lower() in out.lower(), f"expected {part!r} in the verdict:\n{out}"
    return out
