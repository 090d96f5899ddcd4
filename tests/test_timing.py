"""companion.timing.best_time: the minimum over repeats, arguments passed through, bad input rejected."""

from __future__ import annotations

import itertools

import pytest

from companion import timing


def test_best_time_is_the_fastest_run_and_passes_arguments(monkeypatch) -> None:
    clock = itertools.chain([0.0, 3.0, 10.0, 11.0, 20.0, 22.0])  # runs of 3 s, 1 s and 2 s
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(clock))
    calls = []
    assert timing.best_time(lambda a, b=0: calls.append((a, b)), 1, b=2, repeat=3) == 1.0
    assert calls == [(1, 2)] * 3


@pytest.mark.parametrize(
    ("fn", "repeat", "error"), [(None, 1, TypeError), (print, 0, ValueError), (print, 1.5, TypeError)]
)
def test_best_time_rejects_bad_input(fn, repeat, error) -> None:
    with pytest.raises(error, match="fn|repeat"):
        timing.best_time(fn, repeat=repeat)
