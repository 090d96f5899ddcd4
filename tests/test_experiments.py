"""companion.experiments: runs over seeds, mean ± sd, verdicts beyond the spread."""

import random
import statistics

import pytest
import torch

from companion.experiments import Runs, assert_clear, compare, over_seeds, runs_table


def test_over_seeds_seeds_every_generator_and_matches_statistics():
    """fn sees each seed, and the generators are seeded with it: two calls give the same numbers."""
    seen = []

    def fn(seed):
        seen.append(seed)
        return torch.rand(()).item() + random.random()

    runs = over_seeds(fn, seeds=[3, 1, 4], name="x")
    again = over_seeds(fn, seeds=[3, 1, 4], name="x")
    assert seen == [3, 1, 4, 3, 1, 4]
    assert runs.values == again.values and runs.seeds == (3, 1, 4)
    assert runs.mean == pytest.approx(statistics.mean(runs.values))
    assert runs.sd == pytest.approx(statistics.stdev(runs.values))
    assert (runs.low, runs.high) == (min(runs.values), max(runs.values))


def test_over_seeds_mapping_gives_one_runs_per_key():
    out = over_seeds(lambda s: {"loss": float(s), "acc": 1.0 - s / 10}, seeds=range(3))
    assert set(out) == {"loss", "acc"}
    assert out["loss"].values == (0.0, 1.0, 2.0) and out["acc"].name == "acc"


def test_tensor_results_become_floats():
    runs = over_seeds(lambda s: torch.tensor(float(s)), seeds=range(2))
    assert runs.values == (0.0, 1.0)


def test_verdict_is_clear_only_when_ranges_separate():
    a = Runs("a", (1.0, 1.1, 1.2), (0, 1, 2))
    b = Runs("b", (1.3, 1.4, 1.5), (0, 1, 2))
    c = Runs("c", (1.15, 1.4, 1.5), (0, 1, 2))  # overlaps a's range
    assert compare(a, b).clear and compare(b, a).better is a
    assert not compare(a, c).clear
    assert "no clear difference" in str(compare(a, c))
    assert compare(a, b, lower_is_better=False).better is b
    assert_clear(a, b)
    assert compare(a, b).gap == pytest.approx(0.3)
    with pytest.raises(AssertionError, match="expected c to beat a"):
        assert_clear(c, a)
    with pytest.raises(AssertionError, match="their runs overlap"):
        assert_clear(a, c)


def test_table_lists_each_setting_with_its_spread():
    a = Runs("dense", (3.2, 3.21, 3.19), (0, 1, 2))
    text = runs_table([a, Runs("MoE", (3.3, 3.25, 3.27), (0, 1, 2))], digits=2)
    assert "dense" in text and "3.20 ± 0.01" in text and "3.19–3.21" in text
    assert text.splitlines()[0].startswith("setting")
    assert len(text.splitlines()) == 3


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: over_seeds(lambda s: 1.0, seeds=3), TypeError, "seeds must be an iterable"),
        (lambda: over_seeds(lambda s: 1.0, seeds=[]), ValueError, "seeds is empty"),
        (lambda: over_seeds(lambda s: 1.0, seeds=[1, 1]), ValueError, "repeats a seed"),
        (lambda: over_seeds(lambda s: 1.0, seeds=[1.5]), TypeError, "seeds must hold ints"),
        (lambda: over_seeds(3.0), TypeError, "fn must be callable"),
        (lambda: over_seeds(lambda s: "x", seeds=[0]), TypeError, "expected a number"),
        (lambda: over_seeds(lambda s: float("nan"), seeds=[0]), ValueError, "expected a finite number"),
        (lambda: over_seeds(lambda s: {"loss": "x"}, seeds=[0]), TypeError, "loss: fn\\(0\\) returned 'x'"),
        (lambda: over_seeds(lambda s: {"a": 1.0} if s else 1.0, seeds=[0, 1]), TypeError, "mapping"),
        (lambda: Runs("a", (), ()), ValueError, "has no values"),
        (lambda: Runs("a", (1.0,), (0, 1)), ValueError, "one per seed"),
        (lambda: compare(1.0, Runs("a", (1.0,), (0,))), TypeError, "a must be Runs"),
        (lambda: runs_table([]), TypeError, "non-empty"),
    ],
)
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()
