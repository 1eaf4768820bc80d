"""The discrete Laplace sampler at the scales a release actually uses: ``discrete_laplace_scale`` output
with a ``10^6`` denominator (``t/s`` with ``s > 1``, so the ``floor(X/s)`` step of Canonne-Kamath-Steinke
Algorithm 2 is exercised) and large scales (hundreds), against the closed-form law.

The existing tests use small integer or small-denominator scales. Here: a chi-square test of the
folded law ``|X|`` on cells of equal expected mass, a binomial test of the sign, and a negative
control — the same samples must reject a scale only 4% off, which shows the test has the power to
see a bias far smaller than a wrong sensitivity or a factor-2 mistake.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from transforms.core.discrete_laplace import discrete_laplace_scale, sample_discrete_laplace
from transforms.core.keyed_randomness import keyed_generator

SAMPLES = 200_000
SECRET = bytes(range(32))


def folded_survival(magnitude: np.ndarray, scale: float) -> np.ndarray:
    """``Pr{|X| ≥ j}`` for the discrete Laplace with ratio ``r = e^{−1/b}``: 1 at 0, ``2r^j/(1+r)`` above."""
    ratio = math.exp(-1.0 / scale)
    magnitude = np.asarray(magnitude, dtype=np.float64)
    return np.where(magnitude <= 0, 1.0, 2.0 * np.power(ratio, magnitude) / (1.0 + ratio))


def folded_chi_square_pvalue(samples: np.ndarray, scale: float, cells: int = 40) -> float:
    """Chi-square of ``|X|`` on about ``cells`` cells of roughly equal expected mass under scale ``b``."""
    magnitudes = np.abs(samples)
    upper = int(magnitudes.max()) + 2
    survival = folded_survival(np.arange(upper + 1), scale)
    cumulative = 1.0 - survival
    edges = sorted(
        {int(np.searchsorted(cumulative, q, side="right")) for q in np.linspace(0, 1, cells + 1)[1:-1]}
    )
    edges = [edge for edge in edges if 0 < edge <= upper]
    bounds = [0, *edges]
    expected = [survival[low] - survival[high] for low, high in zip(bounds, bounds[1:], strict=False)]
    expected.append(survival[bounds[-1]])
    observed = [
        np.sum((magnitudes >= low) & (magnitudes < high))
        for low, high in zip(bounds, bounds[1:], strict=False)
    ]
    observed.append(np.sum(magnitudes >= bounds[-1]))
    expected_counts = np.asarray(expected) * samples.size
    return float(stats.chisquare(observed, expected_counts * sum(observed) / expected_counts.sum()).pvalue)


@pytest.mark.parametrize(("epsilon", "sensitivity"), [(0.7, 30), (0.013, 4)])
def test_release_scales_follow_the_closed_form(epsilon: float, sensitivity: int) -> None:
    scale = discrete_laplace_scale(epsilon, sensitivity)
    assert scale.denominator > 1  # a non-integer t/s: the floor(X/s) step is used
    samples = sample_discrete_laplace(scale, SAMPLES, keyed_generator(SECRET, "review", "dl", sensitivity))
    assert folded_chi_square_pvalue(samples, float(scale)) > 1e-3
    nonzero = samples[samples != 0]
    assert stats.binomtest(int((nonzero > 0).sum()), nonzero.size, 0.5).pvalue > 1e-3
    assert folded_chi_square_pvalue(samples, 1.04 * float(scale)) < 1e-6
    assert folded_chi_square_pvalue(samples, 0.96 * float(scale)) < 1e-6


def test_zero_is_not_double_counted_at_a_large_denominator() -> None:
    """CKS Algorithm 2 rejects (sign −, magnitude 0); forgetting it doubles ``P(0)``. With ``s = 10^6``
    many ``X`` values floor to magnitude 0, so the check is sharp here."""
    scale = Fraction(3_500_001, 1_000_000)
    samples = sample_discrete_laplace(scale, SAMPLES, keyed_generator(SECRET, "review", "dl-zero", 0))
    ratio = math.exp(-1.0 / float(scale))
    zero_probability = (1.0 - ratio) / (1.0 + ratio)
    assert stats.binomtest(int((samples == 0).sum()), SAMPLES, zero_probability).pvalue > 1e-3
    assert stats.binomtest(int((samples == 0).sum()), SAMPLES, 1.1 * zero_probability).pvalue < 1e-6
