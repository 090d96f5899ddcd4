"""Wall-clock timing for the chapters' cost demonstrations.

The best of a few runs is the least disturbed by whatever else the machine is doing. Chapters print such
timings only under ``# NBVAL_IGNORE_OUTPUT`` and assert a ratio with a wide margin, never a number of
seconds; ``benchmarks/`` holds the careful measurements.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from companion._checks import check_positive_int

__all__ = ["best_time"]


def best_time(fn: Callable[..., Any], *args: Any, repeat: int = 5, **kwargs: Any) -> float:
    """Seconds taken by the fastest of ``repeat`` calls ``fn(*args, **kwargs)``.

    Raises:
        TypeError: ``fn`` is not callable or ``repeat`` is not an int.
        ValueError: ``repeat`` < 1.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    check_positive_int("repeat", repeat)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return min(times)
