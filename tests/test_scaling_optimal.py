"""Tests of companion.scaling.compute_optimal_split: the compute-optimal N and D of a parametric loss.

The closed form (Hoffmann et al. 2022, eq. 4) is checked against a brute-force minimisation of
L(N, C / 6N) over a fine logarithmic grid of N, against the budget C = 6ND, and against the symmetric
case A = B, alpha = beta where N = D by symmetry.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from companion.scaling import compute_optimal_split

CHINCHILLA = dict(A=406.4, B=410.7, alpha=0.34, beta=0.28)  # Hoffmann et al. 2022, eq. 10 (rounded)


def loss(n, d, A, B, alpha, beta, E=1.69):
    return E + A / n**alpha + B / d**beta


@pytest.mark.parametrize("compute", [1e18, 3.15e23, 1e26])
def test_closed_form_is_the_minimum_on_a_grid(compute):
    n_opt, d_opt = compute_optimal_split(compute, **CHINCHILLA)
    grid = np.geomspace(n_opt / 100, n_opt * 100, 200_001)  # a 1e-4 relative step around the answer
    losses = loss(grid, compute / (6 * grid), **CHINCHILLA)
    n_grid = grid[np.argmin(losses)]
    assert math.isclose(n_grid, n_opt, rel_tol=2e-4)
    assert loss(n_opt, d_opt, **CHINCHILLA) <= losses.min() + 1e-12


def test_budget_is_spent_exactly():
    n, d = compute_optimal_split(3.15e23, **CHINCHILLA)
    assert math.isclose(6 * n * d, 3.15e23, rel_tol=1e-12)


def test_symmetric_fit_splits_equally():
    n, d = compute_optimal_split(6e20, A=400.0, B=400.0, alpha=0.3, beta=0.3)
    assert math.isclose(n, d, rel_tol=1e-12) and math.isclose(n, 1e10, rel_tol=1e-9)


def test_exponent_of_n_opt_is_beta_over_alpha_plus_beta():
    n1, _ = compute_optimal_split(1e21, **CHINCHILLA)
    n2, _ = compute_optimal_split(1e23, **CHINCHILLA)
    slope = math.log(n2 / n1) / math.log(100)
    assert math.isclose(slope, 0.28 / (0.34 + 0.28), rel_tol=1e-9)


def test_quoted_fit_gives_far_more_than_20_tokens_per_parameter_at_gpt3_compute():
    """The rounded fit quoted in the paper's text gives ≈87 tokens/parameter, not the ≈20 of approaches 1–2."""
    n, d = compute_optimal_split(3.15e23, **CHINCHILLA)
    assert 80 < d / n < 95


@pytest.mark.parametrize("name", ["compute", "A", "B", "alpha", "beta"])
@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_input_names_the_argument(name, bad):
    args = dict(compute=1e21, **CHINCHILLA)
    args[name] = bad
    with pytest.raises(ValueError, match=rf"^{name}="):
        compute_optimal_split(**args)


def test_non_number_is_rejected():
    with pytest.raises(ValueError, match="compute="):
        compute_optimal_split("1e21", **CHINCHILLA)
    with pytest.raises(ValueError, match="alpha="):
        compute_optimal_split(1e21, A=406.4, B=410.7, alpha=True, beta=0.28)
