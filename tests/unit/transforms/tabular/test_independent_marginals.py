"""The DP independent-marginals baseline: the noise law and scale (chi-square against the exact
discrete Laplace pmf, with a 30%-wrong-scale negative control), clipping and normalization by
hand, and the synthetic records' marginals and (lack of) dependencies."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from transforms.core.keyed_randomness import keyed_generator
from transforms.tabular.contingency import contingency_counts
from transforms.tabular.evaluation import cramers_v
from transforms.tabular.independent_marginals import (
    distributions_from_noisy_counts,
    independent_marginals_synthesis,
    noisy_one_way_counts,
)

SECRET = bytes(range(32))


def discrete_laplace_bins(scale: float, edge: int) -> np.ndarray:
    """P(X ≤ −edge), P(X = −edge+1), …, P(X = edge−1), P(X ≥ edge) of P(x) ∝ exp(−|x|/scale)."""
    ratio = math.exp(-1 / scale)
    pmf = lambda x: (1 - ratio) / (1 + ratio) * ratio ** abs(x)  # noqa: E731
    tail = pmf(edge) / (1 - ratio)
    return np.array([tail, *[pmf(x) for x in range(-edge + 1, edge)], tail])


def binned(values: np.ndarray, edge: int) -> np.ndarray:
    return np.bincount(np.clip(values, -edge, edge) + edge, minlength=2 * edge + 1)


def test_noise_is_discrete_laplace_with_scale_two_m_over_epsilon() -> None:
    sizes = (2500, 2500)
    rng = np.random.default_rng(1)
    codes = np.column_stack([rng.integers(0, s, size=4000) for s in sizes])
    noisy = noisy_one_way_counts(codes, sizes, 4.0, keyed_generator(SECRET, "baseline", "noise", 0))
    noise = np.concatenate([noisy[j] - contingency_counts(codes, (j,), sizes) for j in range(2)])
    observed = binned(noise, 4)
    right = discrete_laplace_bins(2 * 2 / 4.0, 4)
    assert stats.chisquare(observed, right * noise.size).pvalue > 1e-3
    wrong = discrete_laplace_bins(1.3 * 2 * 2 / 4.0, 4)
    assert stats.chisquare(observed, wrong * noise.size).pvalue < 1e-6


def test_clipping_and_normalization_by_hand() -> None:
    distributions = distributions_from_noisy_counts(
        [np.array([-3, 2, 6]), np.array([-1, -4]), np.array([0, 5])]
    )
    np.testing.assert_allclose(distributions[0], [0.0, 0.25, 0.75])
    np.testing.assert_allclose(distributions[1], [0.5, 0.5])
    np.testing.assert_allclose(distributions[2], [0.0, 1.0])


def test_large_epsilon_keeps_each_marginal_and_drops_the_dependencies() -> None:
    sizes = (3, 4, 2)
    rng = np.random.default_rng(2)
    first = rng.choice(3, size=5000, p=[0.6, 0.3, 0.1])
    codes = np.column_stack(
        [first, (first + rng.integers(0, 2, size=5000)) % 4, rng.choice(2, size=5000, p=[0.8, 0.2])]
    )
    synthetic = independent_marginals_synthesis(
        codes, sizes, 1e5, 6000, keyed_generator(SECRET, "baseline", "s", 0)
    )
    assert synthetic.shape == (6000, 3) and synthetic.dtype == np.int32
    assert np.all(synthetic >= 0) and np.all(synthetic < np.array(sizes))
    for attribute in range(3):
        real_share = contingency_counts(codes, (attribute,), sizes) / 5000
        observed = contingency_counts(synthetic, (attribute,), sizes)
        assert stats.chisquare(observed, real_share * 6000).pvalue > 1e-3
        shifted = np.roll(real_share, 1)
        assert stats.chisquare(observed, shifted * 6000).pvalue < 1e-6
    assert cramers_v(contingency_counts(codes, (0, 1), sizes)) > 0.5
    assert cramers_v(contingency_counts(synthetic, (0, 1), sizes)) < 0.05


def test_same_keyed_stream_same_records() -> None:
    sizes = (3, 5)
    codes = np.column_stack([np.arange(100) % 3, np.arange(100) % 5])
    first = independent_marginals_synthesis(
        codes, sizes, 1.0, 50, keyed_generator(SECRET, "r", "baseline", 0)
    )
    again = independent_marginals_synthesis(
        codes, sizes, 1.0, 50, keyed_generator(SECRET, "r", "baseline", 0)
    )
    other = independent_marginals_synthesis(
        codes, sizes, 1.0, 50, keyed_generator(SECRET, "r", "baseline", 1)
    )
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
