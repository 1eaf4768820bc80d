"""The rounded-value kernel probability (``transforms/crowd/rounded_kernel.py``) against the normal CDF,
adaptive quadrature in both tails and the Mills ratio far out."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import norm

from transforms.crowd.rounded_kernel import rounded_value_log_probability

HALF_LOG_TWO_PI = 0.5 * math.log(2.0 * math.pi)


def quadrature_log_mass(y: float, x: float, h: float, p: float) -> float:
    """log of ∫ over the cell [y − p/2, y + p/2] of the N(x, h²) density, by adaptive quadrature.

    Written around the cell centre ``m = (y − x)/h`` as ``φ(m)·∫ exp(g(s)) ds`` with
    ``g(s) = −m s − s²/2`` over ``s ∈ [−w/2, w/2]``, and ``g``'s maximum on the cell factored
    out, so that neither tail underflows or overflows.
    """
    m = (y - x) / h
    half = 0.5 * p / h
    peak = min(max(-m, -half), half)
    peak_value = -m * peak - 0.5 * peak * peak
    interior_points = [peak] if -half < peak < half else None
    value, _ = integrate.quad(
        lambda s: math.exp(-m * s - 0.5 * s * s - peak_value),
        -half,
        half,
        points=interior_points,
        epsabs=0.0,
        epsrel=1e-13,
        limit=400,
    )
    return -0.5 * m * m - HALF_LOG_TWO_PI + peak_value + math.log(value)


def test_log_probability_matches_cdf_difference_in_the_centre() -> None:
    rng = np.random.default_rng(11)
    y = rng.normal(0.0, 2.0, 400)
    x = rng.normal(0.0, 2.0, 400)
    h = rng.uniform(0.5, 3.0, 400)
    p = 0.7
    ours = rounded_value_log_probability(y, x, h, p)
    upper = (y + p / 2 - x) / h
    lower = (y - p / 2 - x) / h
    direct = np.log(np.where(lower > 0, norm.sf(lower) - norm.sf(upper), norm.cdf(upper) - norm.cdf(lower)))
    np.testing.assert_allclose(ours, direct, rtol=0, atol=1e-12)


@pytest.mark.parametrize("width", [1e-9, 1e-5, 1e-2, 0.09, 0.3, 1.0, 4.0, 30.0])
@pytest.mark.parametrize("centre", [-60.0, -37.5, -9.0, -1.3, -0.02, 0.0, 0.4, 2.5, 11.0, 55.0])
def test_log_probability_matches_quadrature_in_both_tails(width: float, centre: float) -> None:
    h = 1.7
    x = 3.0
    y = x + centre * h
    reference = quadrature_log_mass(y, x, h, width * h)
    ours = float(rounded_value_log_probability(np.array(y), np.array(x), h, width * h))
    assert math.isfinite(ours)
    assert abs(ours - reference) <= 1e-11 * max(1.0, abs(reference))


def test_log_probability_far_tail_stays_finite_and_matches_mills_ratio() -> None:
    for distance in [1e3, 1e5, 1e7]:
        log_mass = float(rounded_value_log_probability(np.array(distance), np.array(0.0), 1.0, 1.0))
        lower = distance - 0.5
        mills = -0.5 * lower * lower - HALF_LOG_TWO_PI - math.log(lower)
        assert math.isfinite(log_mass)
        assert abs(log_mass - mills) <= 1e-9 * abs(mills) + 1e-6


def test_log_probability_broadcasts_and_is_at_most_zero() -> None:
    y = np.array([[0.0], [1.0], [2.0]])
    seeds = np.array([[0.0, 1.0, 5.0, 9.0]])
    out = rounded_value_log_probability(y, seeds, np.array([[0.5], [1.0], [2.0]]), 0.01)
    assert out.shape == (3, 4)
    for row in range(3):
        for column in range(4):
            single = rounded_value_log_probability(y[row, 0], seeds[0, column], [0.5, 1.0, 2.0][row], 0.01)
            assert out[row, column] == single
    huge_cell = rounded_value_log_probability(np.array(0.0), np.array(0.0), 1.0, 1e6)
    assert huge_cell <= 0.0 and huge_cell > -1e-300


def test_log_probability_is_symmetric_in_the_distance() -> None:
    rng = np.random.default_rng(5)
    distance = rng.normal(0, 10, 200)
    left = rounded_value_log_probability(distance, 0.0, 1.3, 0.05)
    right = rounded_value_log_probability(-distance, 0.0, 1.3, 0.05)
    np.testing.assert_array_equal(left, right)


def test_elementwise_results_do_not_depend_on_array_layout() -> None:
    """Bitwise: an element's value is the same alone, in a long array, or in a strided view.

    The block synthesis relies on this to give every object the same result whatever else
    shares its block or chunk.
    """
    rng = np.random.default_rng(8)
    y = np.round(rng.normal(0, 20, 3001), 2)
    x = np.where(np.arange(3001) % 2 == 0, y + rng.normal(0, 0.5, 3001), rng.normal(0, 20, 3001))
    h = rng.uniform(0.01, 5.0, 3001)
    whole = rounded_value_log_probability(y, x, h, 0.01)
    strided = rounded_value_log_probability(y[::7], x[::7], h[::7], 0.01)
    np.testing.assert_array_equal(whole[::7], strided)
    for index in range(0, 3001, 97):
        assert rounded_value_log_probability(y[index], x[index], h[index], 0.01) == whole[index]


def test_the_exact_cells_tile_the_span_at_a_precision_that_is_not_a_binary_fraction() -> None:
    """The exact kernel draw decides a cell by its edges' CDF in ``mpmath``; the edges must be the
    same number for both neighbours, or a uniform between them belongs to no cell and the draw
    never returns (a review found 3,490 such gaps on ``[0, 100]`` at precision 0.01 when each cell
    took ``value ± p/2`` in float64; e.g. 70.005 against 70.00500000000001). Checked exactly at
    200 bits around those cells and at random ones, in both orientations; then a word at the edge
    of 70.00 and 70.01 draws one of the two."""
    import mpmath

    from transforms.crowd.rounded_kernel import _cell_interval, exact_truncated_kernel_draws
    from transforms.crowd.value_grid import ValueGrid

    grid = ValueGrid(0.0, 100.0, 0.01)
    positions = list(range(6995, 7010)) + [int(p) for p in np.random.default_rng(4).integers(0, grid.size - 1, 40)]
    for seed, mirrored in ((70.0, False), (70.0, True), (12.34, False)):
        for position in positions:
            here = _cell_interval(position, seed, 0.01, grid, mirrored, 200)
            there = _cell_interval(position + 1, seed, 0.01, grid, mirrored, 200)
            assert (here[1] == there[0]) if not mirrored else (there[1] == here[0]), position
    with mpmath.workprec(200):
        edge = _cell_interval(7000, 70.0, 0.01, grid, False, 200)[1]
        word = int(mpmath.floor(edge * mpmath.mpf(2) ** 64))
    drawn = exact_truncated_kernel_draws(np.array([70.0]), np.array([0.01]), grid, np.array([word], dtype=np.uint64),
                                         lambda _: np.random.default_rng(1))
    assert float(drawn[0]) in (70.0, 70.01)
