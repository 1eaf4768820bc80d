"""The randomized plausible-deniability test against direct computations and brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
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
