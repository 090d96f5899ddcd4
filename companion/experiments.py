"""Experiments that hold up: run a setting over seeds, report mean ± sd, conclude only beyond the spread.

One training run is one sample of a random process. Its initial weights and batches come from the seed, and
even the order in which the processor adds floats matters: AVX-512, AVX2 and generic kernels round
differently, and training amplifies the difference until a loss changes in its second decimal. So a claim such
as "the pretrained encoder is better" is measured over several seeds per setting and drawn only when the gap
is larger than the spread. This module is the one place the chapters do that::

    dense = over_seeds(lambda seed: train_dense(seed), seeds=range(3), name="dense")
    moe = over_seeds(lambda seed: train_moe(seed), seeds=range(3), name="MoE")
    print(runs_table([dense, moe]))          # name, mean ± sd, min–max, n
    print(compare(dense, moe))            # the verdict in words: a clear difference, or none
    assert_clear(dense, moe)              # a comparison the prose relies on, checked on every machine

The rule for a *clear* difference is deliberately simple: the ranges do not overlap (every run of one setting
is on the same side of every run of the other). With no real difference, all of 3 runs land on one side of 3
others with probability 2/20 = 0.1, all of 5 beside 5 with 2/252 < 0.01; a clear verdict on 3 seeds is
therefore a hint, on 5 a finding. The verdict does not depend on the last digits of any run, so it is the same
on every processor when the difference is real, which is what lets a chapter assert it.

Checked against: ``statistics.mean`` and ``statistics.stdev`` (sample standard deviation, ddof = 1).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Runs", "Comparison", "seed_everything", "over_seeds", "runs_table", "compare", "assert_clear"]


def seed_everything(seed: int = 0) -> None:
    """Seed Python's, NumPy's and torch's random generators with ``seed`` (an int in [0, 2**32)).

    The range is NumPy's; it is checked before anything is seeded, so a bad seed changes no generator.
    """
    import numpy as np
    import torch

    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed={seed} is out of range; expected 0 <= seed < 2**32 (NumPy's limit)")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass(frozen=True)
class Runs:
    """The results of one setting over several seeds.

    Attributes:
        name: what was run ("dense", "LoRA r=8"), used in tables and verdicts.
        values: one number per seed, in the order of ``seeds``.
        seeds: the seeds that produced them.
    """

    name: str
    values: tuple[float, ...]
    seeds: tuple[int, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str, got {self.name!r}")
        if len(self.values) == 0:
            raise ValueError(f"Runs {self.name!r} has no values; expected one number per seed")
        if len(self.values) != len(self.seeds):
            raise ValueError(
                f"Runs {self.name!r} has {len(self.values)} values but {len(self.seeds)} seeds; expected one per seed"
            )
        for seed, value in zip(self.seeds, self.values):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Runs {self.name!r}: seed {seed} gave {value!r}; expected a number")
            if not math.isfinite(value):
                raise ValueError(f"Runs {self.name!r}: seed {seed} gave {value}; expected a finite number")

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def sd(self) -> float:
        """Sample standard deviation (ddof = 1); 0.0 for a single run."""
        return statistics.stdev(self.values) if self.n > 1 else 0.0

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    def renamed(self, name: str) -> Runs:
        """The same results under another name (for a table whose rows are settings of one measure)."""
        return Runs(name, self.values, self.seeds)

    def describe(self, digits: int = 3) -> str:
        """``"3.201 ± 0.012 (3.19–3.21, n=3)"``."""
        f = f".{digits}f"
        return f"{self.mean:{f}} ± {self.sd:{f}} ({self.low:{f}}–{self.high:{f}}, n={self.n})"

    def __str__(self) -> str:
        return f"{self.name}: {self.describe()}"


def _check_seeds(seeds: Iterable[int]) -> tuple[int, ...]:
    if isinstance(seeds, int):
        raise TypeError(f"seeds must be an iterable of ints such as range(3), got the int {seeds}")
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("seeds is empty; expected at least one seed (3 or more to compare settings)")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int):
            raise TypeError(f"seeds must hold ints, got {s!r} ({type(s).__name__})")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds={seeds} repeats a seed; expected distinct seeds")
    return seeds


def over_seeds(
    fn: Callable[[int], float | Mapping[str, float]], seeds: Iterable[int] = range(3), name: str = "run"
) -> Runs | dict[str, Runs]:
    """Call ``fn(seed)`` for each seed (after seeding Python, NumPy and torch with it) and collect the results.

    Args:
        fn: runs one experiment for one seed and returns a number, or a mapping of names to numbers when
            one run measures several things (then the result is a dict of :class:`Runs`, one per name).
        seeds: distinct ints; 3 where runs are costly, 5 where they are cheap.
        name: the setting's name (ignored when ``fn`` returns a mapping: its keys name the results).

    Raises:
        TypeError / ValueError: bad ``fn``, ``seeds`` or a result that is not a finite number.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable (seed -> number), got {type(fn).__name__}")
    seeds = _check_seeds(seeds)
    results = []
    for seed in seeds:
        seed_everything(seed)
        results.append(fn(seed))
    if all(isinstance(r, Mapping) for r in results):
        keys = list(results[0])
        for seed, r in zip(seeds, results):
            if list(r) != keys:
                raise ValueError(f"fn returned keys {list(r)} for seed {seed} but {keys} for seed {seeds[0]}")
        return {k: Runs(k, tuple(_as_float(k, s, r[k]) for s, r in zip(seeds, results)), seeds) for k in keys}
    for seed, r in zip(seeds, results):
        if isinstance(r, Mapping):
            raise TypeError(f"fn returned a mapping for seed {seed} but a number for another seed")
    return Runs(name, tuple(_as_float(name, s, r) for s, r in zip(seeds, results)), seeds)


def _as_float(name: str, seed: int, value: Any) -> float:
    if hasattr(value, "item"):  # a 0-d tensor or NumPy scalar
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: fn({seed}) returned {value!r}; expected a number")
    return float(value)


def runs_table(runs: Sequence[Runs] | Mapping[str, Runs], digits: int = 3) -> str:
    """A plain-text table: one row per setting with its mean ± sd, its range and its number of seeds."""
    rows = list(runs.values()) if isinstance(runs, Mapping) else list(runs)
    if not rows or not all(isinstance(r, Runs) for r in rows):
        raise TypeError("runs must be a non-empty sequence (or mapping) of Runs")
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 0:
        raise ValueError(f"digits={digits!r} is invalid; expected an int >= 0")
    f = f".{digits}f"
    cells = [(r.name, f"{r.mean:{f}} ± {r.sd:{f}}", f"{r.low:{f}}–{r.high:{f}}", f"{r.n}") for r in rows]
    head = ("setting", "mean ± sd", "min–max", "seeds")
    widths = [max(len(row[k]) for row in [head, *cells]) for k in range(4)]
    lines = []
    for row in [head, *cells]:
        name, *numbers = row
        lines.append("  ".join([name.ljust(widths[0]), *(x.rjust(w) for x, w in zip(numbers, widths[1:]))]))
    return "\n".join(lines)


@dataclass(frozen=True)
class Comparison:
    """The verdict on two settings: which is better on average, by how much, and whether beyond the spread.

    Attributes:
        better, worse: the two :class:`Runs`, the one with the better mean first.
        gap: ``|better.mean - worse.mean|``.
        clear: True when the ranges do not overlap (every run of ``better`` beats every run of ``worse``).
        lower_is_better: the direction used.
    """

    better: Runs
    worse: Runs
    gap: float
    clear: bool
    lower_is_better: bool

    def __str__(self) -> str:
        word = "lower" if self.lower_is_better else "higher"
        if self.clear:
            return (f"{self.better.name} is {word} than {self.worse.name} by {self.gap:.3g}, beyond the spread "
                    f"(every {self.better.name} run beats every {self.worse.name} run; n={self.better.n}, "
                    f"{self.worse.n})")
        return (f"no clear difference between {self.better.name} and {self.worse.name} (means {self.gap:.3g} "
                f"apart; their runs overlap)")


def compare(a: Runs, b: Runs, lower_is_better: bool = True) -> Comparison:
    """Compare two settings; see the module docstring for the rule."""
    for label, r in (("a", a), ("b", b)):
        if not isinstance(r, Runs):
            raise TypeError(f"{label} must be Runs (from over_seeds), got {type(r).__name__}")
    if not isinstance(lower_is_better, bool):
        raise TypeError(f"lower_is_better must be a bool, got {lower_is_better!r}")
    sign = 1.0 if lower_is_better else -1.0
    better, worse = (a, b) if sign * a.mean <= sign * b.mean else (b, a)
    if lower_is_better:
        clear = better.high < worse.low
    else:
        clear = better.low > worse.high
    return Comparison(better, worse, abs(a.mean - b.mean), clear, lower_is_better)


def assert_clear(better: Runs, worse: Runs, lower_is_better: bool = True) -> None:
    """Assert that ``better`` beats ``worse`` beyond the spread.

    Raises:
        AssertionError: the difference is in the other direction or within the spread; the message holds both
            settings' results, so the failure says what was measured.
    """
    result = compare(better, worse, lower_is_better)
    if not (result.clear and result.better is better):
        raise AssertionError(f"expected {better.name} to beat {worse.name} beyond the spread; got: {result}\n"
                             + runs_table([better, worse]))
