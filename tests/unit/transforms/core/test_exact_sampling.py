"""The exact samplers against their laws: chi-square goodness of fit with fixed generators
(deterministic), 100,000 draws, passing at ``α = 10⁻³`` at the true law and rejected at
``p < 10⁻⁶`` when the rate is 30% off either way; permute-and-flip against its choice
probabilities computed by enumerating the orders."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from transforms.core.exact_sampling import (
    bernoulli_exp_minus,
    permute_and_flip,
    rational_rate,
    sample_geometric_exp,
    sample_threshold_noise,
    threshold_noise_cdf,
)

DRAWS = 100_000


def chi_square_pvalue(samples: np.ndarray, pmf: dict[int, float]) -> float:
    """Chi-square over the support cells with expected count ≥ 5, the rest pooled into one cell."""
    cells = sorted(value for value, probability in pmf.items() if probability * samples.size >= 5)
    values, counts = np.unique(samples, return_counts=True)
    observed_by_value = dict(zip(values.tolist(), counts.tolist(), strict=True))
    observed = [observed_by_value.get(value, 0) for value in cells]
    expected = [pmf[value] * samples.size for value in cells]
    rest_observed = samples.size - sum(observed)
    rest_expected = samples.size - sum(expected)
    if rest_expected >= 5:
        observed.append(rest_observed)
        expected.append(rest_expected)
    expected = np.asarray(expected) * sum(observed) / sum(expected)
    return float(stats.chisquare(observed, f_exp=expected).pvalue)


def geometric_pmf(rate: float, limit: int = 400) -> dict[int, float]:
    ratio = math.exp(-rate)
    return {g: (1 - ratio) * ratio**g for g in range(limit)}


def threshold_pmf(epsilon0: float, limit: int = 400) -> dict[int, float]:
    """``P(⌈L⌉ = z) = P(z − 1 < L ≤ z)`` from the Laplace CDF written out here."""
    def cdf(x: float) -> float:
        return 0.5 * math.exp(epsilon0 * x) if x <= 0 else 1 - 0.5 * math.exp(-epsilon0 * x)

    return {z: cdf(z) - cdf(z - 1) for z in range(-limit, limit)}


@pytest.mark.parametrize("rate", [0.1, 0.5, 2.0, 4.5])
def test_geometric_follows_its_law_and_a_thirty_percent_error_is_caught(rate: float) -> None:
    samples = sample_geometric_exp(rate, DRAWS, np.random.default_rng(int(rate * 100)))
    assert samples.dtype == np.int64 and samples.min() >= 0
    assert chi_square_pvalue(samples, geometric_pmf(rate)) > 1e-3
    assert chi_square_pvalue(samples, geometric_pmf(0.7 * rate)) < 1e-6
    assert chi_square_pvalue(samples, geometric_pmf(1.3 * rate)) < 1e-6


@pytest.mark.parametrize("epsilon0", [0.25, 1.0, 2.0])
def test_threshold_noise_is_the_ceiling_of_laplace(epsilon0: float) -> None:
    samples = sample_threshold_noise(epsilon0, DRAWS, np.random.default_rng(int(epsilon0 * 100) + 1))
    assert chi_square_pvalue(samples, threshold_pmf(epsilon0)) > 1e-3
    assert chi_square_pvalue(samples, threshold_pmf(0.7 * epsilon0)) < 1e-6
    assert chi_square_pvalue(samples, threshold_pmf(1.3 * epsilon0)) < 1e-6
    # the pass probability of a count k' = k + z is P(N ≤ z) = P(L ≤ z): both halves of the CDF
    for z in (-3, -1, 0, 1, 2):
        assert threshold_noise_cdf(z, epsilon0) == pytest.approx(sum(p for v, p in threshold_pmf(epsilon0).items() if v <= z))


def test_rates_are_rounded_down_never_up() -> None:
    assert rational_rate(2.0) == Fraction(2)
    assert rational_rate(0.1) == Fraction(1, 10)
    rounded = rational_rate(0.3)
    assert rounded <= Fraction(0.3) and Fraction(0.3) - rounded < Fraction(1, 1_000_000)
    with pytest.raises(ValueError):
        rational_rate(1e-9)
    with pytest.raises(ValueError):
        rational_rate(float("inf"))


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(5, 2)])
def test_bernoulli_exp_minus_gamma(gamma: Fraction) -> None:
    rng = np.random.default_rng(int(gamma * 6) + 7)
    coins = np.array([bernoulli_exp_minus(gamma, rng) for _ in range(20_000)])
    probability = math.exp(-float(gamma))
    if gamma == 0:
        assert coins.all()
        return
    assert stats.binomtest(int(coins.sum()), coins.size, probability).pvalue > 1e-3
    assert stats.binomtest(int(coins.sum()), coins.size, probability * 1.3).pvalue < 1e-6


def permute_and_flip_probabilities(scores: np.ndarray, sensitivity: float, epsilon: float) -> np.ndarray:
    """Exact choice probabilities: the average over all visiting orders of ``p_r Π_{before r}(1 − p_j)``."""
    coins = np.exp(epsilon * (scores - scores.max()) / (2 * sensitivity))
    result = np.zeros(scores.size)
    orders = list(itertools.permutations(range(scores.size)))
    for order in orders:
        survive = 1.0
        for index in order:
            result[index] += survive * coins[index] / len(orders)
            survive *= 1 - coins[index]
    return result


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_permute_and_flip_chooses_with_its_exact_probabilities(epsilon: float) -> None:
    scores = np.array([0.0, 1.0, 1.5, 3.0, 2.2])
    rng = np.random.default_rng(int(epsilon * 10))
    draws = np.array([permute_and_flip(scores, 1.0, epsilon, rng) for _ in range(20_000)])
    truth = permute_and_flip_probabilities(scores, 1.0, epsilon)
    assert truth.sum() == pytest.approx(1.0)
    pmf = dict(enumerate(truth))
    assert chi_square_pvalue(draws, pmf) > 1e-3
    assert chi_square_pvalue(draws, dict(enumerate(permute_and_flip_probabilities(scores, 1.0, 1.3 * epsilon)))) < 1e-6


def test_permute_and_flip_is_never_worse_than_the_exponential_mechanism_in_expectation() -> None:
    scores = np.array([0.0, 1.0, 1.5, 3.0, 2.2])
    exponential = np.exp(scores / 2) / np.exp(scores / 2).sum()
    assert permute_and_flip_probabilities(scores, 1.0, 1.0) @ scores >= exponential @ scores


def test_samplers_are_deterministic_for_a_seeded_generator() -> None:
    first = sample_threshold_noise(0.7, 500, np.random.default_rng(3))
    np.testing.assert_array_equal(first, sample_threshold_noise(0.7, 500, np.random.default_rng(3)))
