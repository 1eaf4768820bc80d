"""The randomized plausible-deniability test against direct computations and brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import norm

from transforms.core.plausible_deniability import (
    NO_INTERVAL,
    deniability_counts,
    deniability_interval_index,
    laplace_from_uniform,
    noisy_threshold,
    plausible_deniability_test,
    standard_normal_from_uniform,
)
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


def brute_force_interval(log_probability: float, gamma: float) -> int:
    if not math.isfinite(log_probability):
        return NO_INTERVAL
    log_gamma = math.log(gamma)
    a = 0
    while True:
        if -(a + 1) * log_gamma < log_probability <= -a * log_gamma:
            return a
        a += 1


def test_interval_index_matches_brute_force_of_the_inequalities() -> None:
    rng = np.random.default_rng(3)
    for gamma in [1.05, 1.5, 2.0, 10.0]:
        log_probability = -rng.exponential(20.0, 3000)
        log_probability[:5] = [0.0, -0.0, -np.inf, np.nan, -1e-300]
        exact = -np.arange(40) * math.log(gamma)
        values = np.concatenate(
            [log_probability, exact, np.nextafter(exact, 0.0), np.nextafter(exact, -np.inf)]
        )
        ours = deniability_interval_index(values, gamma)
        expected = np.array([brute_force_interval(float(v), gamma) for v in values])
        np.testing.assert_array_equal(ours, expected)


def test_interval_index_in_the_probability_domain() -> None:
    rng = np.random.default_rng(4)
    gamma = 2.0
    probability = rng.uniform(0.0, 1.0, 2000) ** 3
    index = deniability_interval_index(np.log(probability), gamma)
    assert np.all(gamma ** (-index - 1.0) < probability)
    assert np.all(probability <= gamma ** (-index * 1.0))
    log_probability = np.array([0.0, math.log(0.5), math.log(0.25), -np.inf])
    assert deniability_interval_index(log_probability, 2.0).tolist() == [0, 1, 2, NO_INTERVAL]


def brute_force_counts(log_probabilities: np.ndarray, seed_index: np.ndarray, gamma: float) -> np.ndarray:
    counts = np.zeros(len(seed_index), dtype=np.int64)
    for row in range(len(seed_index)):
        own = brute_force_interval(float(log_probabilities[row, seed_index[row]]), gamma)
        if own == NO_INTERVAL:
            continue
        for column in range(log_probabilities.shape[1]):
            if brute_force_interval(float(log_probabilities[row, column]), gamma) == own:
                counts[row] += 1
    return counts


def test_vectorized_test_matches_a_brute_force_loop() -> None:
    rng = np.random.default_rng(21)
    candidates, seeds = 600, 15
    values = np.round(rng.normal(0, 1, (candidates, seeds)) * rng.uniform(0.1, 3, (candidates, 1)), 1)
    seed_index = rng.integers(0, seeds, candidates)
    y = np.round(
        np.take_along_axis(values, seed_index[:, None], axis=1)[:, 0] + rng.normal(0, 0.5, candidates), 2
    )
    log_probabilities = rounded_value_log_probability(y[:, None], values, 0.5, 0.01)
    log_probabilities[:40, -3:] = -np.inf
    log_probabilities[40:45, :] = -np.inf
    thresholds = noisy_threshold(4, 0.7, np.random.default_rng(1), candidates)
    for gamma in [1.2, 2.0, 6.0]:
        counts = deniability_counts(log_probabilities, seed_index, gamma)
        expected = brute_force_counts(log_probabilities, seed_index, gamma)
        np.testing.assert_array_equal(counts, expected)
        decisions = plausible_deniability_test(log_probabilities, seed_index, gamma, thresholds)
        np.testing.assert_array_equal(decisions, expected >= thresholds)
        assert 0 < decisions.sum() < candidates
    assert np.all(deniability_counts(log_probabilities, seed_index, 2.0)[40:45] == 0)


def test_counts_accept_leading_axes() -> None:
    rng = np.random.default_rng(2)
    log_probabilities = -rng.exponential(3.0, (4, 5, 6))
    seed_index = rng.integers(0, 6, (4, 5))
    flat = deniability_counts(log_probabilities.reshape(20, 6), seed_index.reshape(20), 1.5)
    np.testing.assert_array_equal(deniability_counts(log_probabilities, seed_index, 1.5).reshape(20), flat)


def test_identical_seeds_all_count() -> None:
    log_probabilities = rounded_value_log_probability(np.array([[0.3]]), np.full((1, 7), 0.1), 1.0, 0.01)
    assert deniability_counts(log_probabilities, np.array([2]), 2.0).tolist() == [7]
    assert plausible_deniability_test(log_probabilities, np.array([2]), 2.0, np.array([7.0])).tolist() == [
        True
    ]
    assert plausible_deniability_test(log_probabilities, np.array([2]), 2.0, np.array([7.01])).tolist() == [
        False
    ]


def test_inverse_cdf_transforms_are_finite_and_antisymmetric() -> None:
    step = 2.0**-53
    j = np.concatenate(
        [np.arange(0, 1000), np.arange(2**52 - 500, 2**52 + 500), np.arange(2**53 - 1000, 2**53)]
    )
    uniform = j.astype(np.float64) * step
    mirrored = (2.0**53 - 1 - j).astype(np.float64) * step
    normal = standard_normal_from_uniform(uniform)
    laplace = laplace_from_uniform(uniform, 2.5)
    assert np.all(np.isfinite(normal)) and np.all(np.isfinite(laplace))
    np.testing.assert_array_equal(normal, -standard_normal_from_uniform(mirrored))
    np.testing.assert_array_equal(laplace, -laplace_from_uniform(mirrored, 2.5))
    assert np.all(np.diff(normal) > 0) and np.all(np.diff(laplace) > 0)
    probe = np.array([0.1, 0.3, 0.5, 0.9])
    np.testing.assert_allclose(
        standard_normal_from_uniform(probe), norm.ppf(probe + 2.0**-54), rtol=1e-14, atol=1e-15
    )
    np.testing.assert_allclose(
        laplace_from_uniform(probe, 2.0),
        [2 * math.log(0.2), 2 * math.log(0.6), 0.0, -2 * math.log(0.2)],
        atol=1e-14,
    )


def test_invalid_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        deniability_interval_index(np.array([-1.0]), 1.0)
    with pytest.raises(ValueError):
        rounded_value_log_probability(np.array(0.0), np.array(0.0), 0.0, 0.1)
    with pytest.raises(ValueError):
        rounded_value_log_probability(np.array(0.0), np.array(0.0), 1.0, 0.0)
    with pytest.raises(ValueError):
        noisy_threshold(3, 0.0, np.random.default_rng(0), 4)
