"""Exact discrete Laplace sampling (Canonne-Kamath-Steinke 2020) against its closed-form pmf."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from transforms.core.discrete_laplace import (
    bernoulli_exp_minus_fraction,
    discrete_laplace_pmf,
    discrete_laplace_scale,
    sample_discrete_laplace,
)

SAMPLES = 100_000


def closed_form_pmf(values: np.ndarray, scale: float) -> np.ndarray:
    """``P(x) = tanh(1/(2b)) · e^{−|x|/b}``, the same pmf written independently of the module."""
    return math.tanh(0.5 / scale) * np.exp(-np.abs(values) / scale)


def goodness_of_fit_pvalue(samples: np.ndarray, scale: float) -> float:
    """Chi-square over the integers in [−L, L] with both tails pooled into end cells (expected ≥ 5)."""
    limit = 0
    while closed_form_pmf(np.array([limit + 1]), scale)[0] * samples.size >= 5:
        limit += 1
    inner = np.arange(-limit, limit + 1)
    expected_inner = closed_form_pmf(inner, scale) * samples.size
    tail = (samples.size - expected_inner.sum()) / 2
    observed = [np.sum(samples < -limit)] + [np.sum(samples == v) for v in inner] + [np.sum(samples > limit)]
    expected = [tail, *expected_inner, tail]
    if tail < 1e-9:
        observed, expected = observed[1:-1], expected[1:-1]
    return float(stats.chisquare(observed, f_exp=np.asarray(expected) * sum(observed) / sum(expected)).pvalue)


@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(3, 2), Fraction(7), Fraction(40, 3)])
def test_samples_follow_the_discrete_laplace_pmf(scale: Fraction) -> None:
    samples = sample_discrete_laplace(scale, SAMPLES, np.random.default_rng(int(scale * 1000)))
    assert samples.dtype == np.int64 and samples.shape == (SAMPLES,)
    assert goodness_of_fit_pvalue(samples, float(scale)) > 1e-3


@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(3, 2), Fraction(7)])
def test_a_thirty_percent_wrong_scale_is_rejected(scale: Fraction) -> None:
    samples = sample_discrete_laplace(scale, SAMPLES, np.random.default_rng(int(scale * 1000)))
    assert goodness_of_fit_pvalue(samples, 1.3 * float(scale)) < 1e-6
    assert goodness_of_fit_pvalue(samples, 0.7 * float(scale)) < 1e-6


def test_module_pmf_matches_the_closed_form_and_sums_to_one() -> None:
    values = np.arange(-200, 201)
    np.testing.assert_allclose(
        discrete_laplace_pmf(values, Fraction(5, 2)), closed_form_pmf(values, 2.5), rtol=1e-12
    )
    assert abs(discrete_laplace_pmf(values, Fraction(5, 2)).sum() - 1.0) < 1e-12


@pytest.mark.parametrize(("numerator", "denominator"), [(0, 1), (1, 3), (1, 1), (5, 7), (999, 1000)])
def test_bernoulli_exp_minus_gamma_has_the_right_frequency(numerator: int, denominator: int) -> None:
    coins = bernoulli_exp_minus_fraction(
        np.full(40_000, numerator), denominator, np.random.default_rng(numerator)
    )
    probability = math.exp(-numerator / denominator)
    if numerator == 0:
        assert coins.all()
        return
    assert stats.binomtest(int(coins.sum()), coins.size, probability).pvalue > 1e-3
    assert stats.binomtest(int(coins.sum()), coins.size, min(1.0, probability * 1.05)).pvalue < 1e-4


def test_sampling_is_deterministic_for_a_seeded_generator() -> None:
    first = sample_discrete_laplace(Fraction(9, 4), 1000, np.random.default_rng(42))
    second = sample_discrete_laplace(Fraction(9, 4), 1000, np.random.default_rng(42))
    np.testing.assert_array_equal(first, second)
    assert sample_discrete_laplace(Fraction(9, 4), 0, np.random.default_rng(1)).shape == (0,)


@pytest.mark.parametrize(("epsilon", "sensitivity"), [(1.0, 2), (0.1, 22), (0.3, 1), (7.77, 30), (1e-3, 4)])
def test_scale_is_never_smaller_than_sensitivity_over_epsilon(epsilon: float, sensitivity: int) -> None:
    scale = discrete_laplace_scale(epsilon, sensitivity)
    exact = Fraction(sensitivity) / Fraction(epsilon)
    assert isinstance(scale, Fraction)
    assert exact <= scale < exact + Fraction(1, 10**6)
    assert (scale * 10**6).denominator == 1


@pytest.mark.parametrize(
    ("epsilon", "sensitivity"), [(0.0, 2), (-1.0, 2), (math.inf, 2), (math.nan, 2), (1.0, 0), (1.0, 1.5)]
)
def test_scale_refuses_bad_parameters(epsilon: float, sensitivity) -> None:
    with pytest.raises(ValueError):
        discrete_laplace_scale(epsilon, sensitivity)


def test_sampler_refuses_bad_scales() -> None:
    with pytest.raises(ValueError):
        sample_discrete_laplace(Fraction(0), 10, np.random.default_rng(0))
    with pytest.raises(TypeError):
        sample_discrete_laplace(1.5, 10, np.random.default_rng(0))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        sample_discrete_laplace(Fraction(1), -1, np.random.default_rng(0))
