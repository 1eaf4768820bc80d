"""The truncated, rounded kernel of the crowd release (``transforms/crowd/rounded_kernel.py``:
``span_log_mass``, ``truncated_log_probability``, ``truncated_kernel_draws``): a distribution on
the grid for any seed in the range and any bandwidth, equal to the cell masses of
``scipy.stats.truncnorm``; the draws' law is tested in ``test_sampler_statistics.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from transforms.crowd.rounded_kernel import span_log_mass, truncated_kernel_draws, truncated_log_probability
from transforms.crowd.value_grid import ValueGrid

GRID = ValueGrid(-20.0, 30.0, 0.5)
BANDWIDTHS = [1e-3, 0.05, 0.5, 3.0, 40.0, 1e4, 1e9]


def truncnorm_cells(grid: ValueGrid, seed: float, bandwidth: float) -> np.ndarray:
    """The cell masses of ``N(seed, h²)`` truncated to ``[low − p/2, high + p/2]`` by scipy."""
    half = grid.precision / 2
    a, b = (grid.low - half - seed) / bandwidth, (grid.high + half - seed) / bandwidth
    law = stats.truncnorm(a, b, loc=seed, scale=bandwidth)
    y = grid.all_values()
    return law.cdf(y + half) - law.cdf(y - half)


@pytest.mark.parametrize("bandwidth", BANDWIDTHS)
@pytest.mark.parametrize("seed", [-20.0, -19.75, -3.3, 0.0, 5.25, 29.9, 30.0])
def test_the_truncated_kernel_is_a_distribution_on_the_grid(seed: float, bandwidth: float) -> None:
    log_probability = truncated_log_probability(GRID.all_values(), seed, bandwidth, GRID)
    assert log_probability.shape == (GRID.size,) and np.all(log_probability <= 0.0)
    assert logsumexp(log_probability) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("bandwidth", [0.05, 0.5, 3.0, 40.0, 1e4])
@pytest.mark.parametrize("seed", [-20.0, -3.3, 0.0, 29.9, 30.0])
def test_the_cell_masses_are_those_of_scipys_truncated_normal(seed: float, bandwidth: float) -> None:
    probability = np.exp(truncated_log_probability(GRID.all_values(), seed, bandwidth, GRID))
    expected = truncnorm_cells(GRID, seed, bandwidth)
    large = expected > 1e-8
    np.testing.assert_allclose(probability[large], expected[large], rtol=1e-8)
    np.testing.assert_allclose(probability[~large], expected[~large], atol=1e-13)


def test_a_narrow_kernel_by_hand() -> None:
    """``h = p/10`` at a grid value: the seed's cell holds ``2Φ(5) − 1`` of the untruncated mass and
    the span all but ``Φ(−5)`` on one side (the seed is the range's low end)."""
    grid = ValueGrid(0.0, 10.0, 1.0)
    log_probability = truncated_log_probability(grid.all_values(), 0.0, 0.1, grid)
    # the span [−½, 10½] holds Φ(105) − Φ(−5) of N(0, 0.01); the cell of 0, [−½, ½], Φ(5) − Φ(−5)
    span = stats.norm.cdf(105) - stats.norm.cdf(-5)
    assert math.exp(log_probability[0]) == pytest.approx((stats.norm.cdf(5) - stats.norm.cdf(-5)) / span, rel=1e-14)
    assert math.exp(log_probability[1]) == pytest.approx((stats.norm.cdf(15) - stats.norm.cdf(5)) / span, rel=1e-9)
    # far cells: log of the Mills-ratio tail, finite though the mass underflows float64
    assert np.all(np.isfinite(log_probability)) and log_probability[-1] < -4000


def test_a_very_wide_kernel_is_nearly_uniform() -> None:
    log_probability = truncated_log_probability(GRID.all_values(), GRID.low, 1e9, GRID)
    np.testing.assert_allclose(np.exp(log_probability), 1.0 / GRID.size, rtol=1e-12)


def test_the_span_mass_by_hand() -> None:
    for seed, bandwidth in [(-20.0, 3.0), (5.0, 40.0), (30.0, 0.01), (0.0, 1e5)]:
        half = GRID.precision / 2
        expected = stats.norm.cdf((GRID.high + half - seed) / bandwidth) - stats.norm.cdf((GRID.low - half - seed) / bandwidth)
        assert math.exp(float(span_log_mass(np.float64(seed), bandwidth, GRID))) == pytest.approx(expected, rel=1e-12)


def test_the_log_probability_broadcasts_over_candidates_and_seeds() -> None:
    y = GRID.values(np.array([0, 7, 50, 100]))
    seeds = np.array([-20.0, 1.0, 30.0])
    bandwidths = np.array([0.5, 3.0, 40.0])
    together = truncated_log_probability(y[:, None, None], seeds[None, :, None], bandwidths[None, None, :], GRID)
    assert together.shape == (4, 3, 3)
    for i, j, k in np.ndindex(together.shape):
        single = truncated_log_probability(y[i], seeds[j], bandwidths[k], GRID)
        assert together[i, j, k] == pytest.approx(float(single), rel=1e-15, abs=1e-300)


def test_draws_are_grid_values_monotone_in_the_uniform_and_stay_in_the_range() -> None:
    """The inverse CDF: draws are grid values in the range, monotone in the uniform (increasing,
    or decreasing for a seed whose span is evaluated mirrored), and a wide kernel reaches both ends."""
    uniforms = np.linspace(0.0, 1.0 - 2.0**-53, 20_001)
    for seed, bandwidth in [(-20.0, 2.0), (0.0, 5.0), (30.0, 100.0), (29.5, 0.01), (5.0, 1e6)]:
        draws = truncated_kernel_draws(np.full(uniforms.size, seed), bandwidth, GRID, uniforms)
        steps = np.diff(draws)
        assert np.all(steps >= 0) or np.all(steps <= 0), (seed, bandwidth)
        np.testing.assert_array_equal(GRID.round(draws), draws)
        assert draws.min() >= GRID.low and draws.max() <= GRID.high
    wide = truncated_kernel_draws(np.zeros(uniforms.size), 1e6, GRID, uniforms)
    assert {wide[0], wide[-1]} == {GRID.low, GRID.high}
    # a tiny bandwidth never leaves the seed's own cell
    narrow = truncated_kernel_draws(np.full(uniforms.size - 2, 5.0), 1e-3, GRID, uniforms[1:-1])
    assert set(narrow.tolist()) == {5.0}
