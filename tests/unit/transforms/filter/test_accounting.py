"""Rényi DP of the filter for the private label against numerical Rényi divergences, the (ε, δ)
conversions against the exact Gaussian hockey-stick divergence, and the Gaussian baseline."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import logsumexp

from transforms.filter.accounting import (
    DEFAULT_ORDERS,
    filter_privacy_summary,
    filter_renyi_epsilon,
    filter_sensitivity,
    gaussian_baseline_filter,
    gaussian_baseline_noise_scale,
    gaussian_delta,
    gaussian_exact_epsilon,
    renyi_to_approximate_dp,
    sensitivity_privacy_summary,
)
from transforms.filter.latent_filter import (
    LinearLatentFilter,
    filter_distortion,
    label_pair_mahalanobis,
    label_sensitivity,
)


def gaussian_log_density(points: np.ndarray, mean: np.ndarray, covariance: np.ndarray) -> np.ndarray:
    centred = points - mean
    _, log_determinant = np.linalg.slogdet(2 * math.pi * covariance)
    return -0.5 * (centred @ np.linalg.inv(covariance) * centred).sum(axis=1) - 0.5 * log_determinant


def numerical_renyi_2d(mean_p: np.ndarray, mean_q: np.ndarray, covariance: np.ndarray, order: float) -> float:
    """``1/(α−1) log ∫ p^α q^{1−α}`` by a Riemann sum on a fine grid around the integrand's centre."""
    centre = order * mean_p + (1 - order) * mean_q
    extent = 12 * math.sqrt(np.linalg.eigvalsh(covariance).max())
    axis = np.linspace(-extent, extent, 401)
    step = axis[1] - axis[0]
    grid = np.stack(np.meshgrid(axis + centre[0], axis + centre[1], indexing="ij"), axis=-1).reshape(-1, 2)
    log_p = gaussian_log_density(grid, mean_p, covariance)
    log_q = gaussian_log_density(grid, mean_q, covariance)
    return float(logsumexp(order * log_p + (1 - order) * log_q) + 2 * math.log(step)) / (order - 1)


def test_renyi_epsilon_equals_the_worst_pairs_numerical_renyi_divergence() -> None:
    rng = np.random.default_rng(1)
    noise = np.array([[0.9, 0.3], [-0.2, 0.7]])
    shift = rng.normal(size=(2, 3))
    latent_filter = LinearLatentFilter(noise, shift)
    covariance = noise @ noise.T
    latent = rng.normal(size=2)
    for order in (1.5, 2.0, 5.0):
        worst = max(
            numerical_renyi_2d(latent + shift[:, y], latent + shift[:, other], covariance, order)
            for y in range(3)
            for other in range(3)
            if y != other
        )
        assert filter_renyi_epsilon(latent_filter, [order])[order] == pytest.approx(worst, rel=1e-6)


def test_singular_noise_is_finite_along_its_range_and_infinite_off_it() -> None:
    direction = np.array([[1.0], [2.0]])
    along = LinearLatentFilter(direction, np.array([[0.0, 0.5], [0.0, 1.0]]))
    across = LinearLatentFilter(direction, np.array([[0.0, 1.0], [0.0, 0.0]]))
    order = 3.0
    norm = math.sqrt(5.0)
    offset = (0.5 * 1.0 + 1.0 * 2.0) / norm

    def integrand(t: float) -> float:
        return math.exp(
            order * stats.norm.logpdf(t, offset, norm) + (1 - order) * stats.norm.logpdf(t, 0.0, norm)
        )

    centre = order * offset
    integral, _ = integrate.quad(integrand, centre - 20 * norm, centre + 20 * norm, points=[centre])
    expected = math.log(integral) / (order - 1)
    assert filter_renyi_epsilon(along, [order])[order] == pytest.approx(expected, rel=1e-7)
    assert math.isinf(filter_renyi_epsilon(across, [order])[order])
    assert math.isinf(filter_sensitivity(across))


def test_degenerate_filters_have_zero_or_infinite_loss() -> None:
    no_shift = LinearLatentFilter(np.zeros((3, 3)), np.ones((3, 2)))
    assert filter_sensitivity(no_shift) == 0.0
    assert set(filter_renyi_epsilon(no_shift).values()) == {0.0}
    one_class = LinearLatentFilter(np.eye(2), np.ones((2, 1)))
    assert filter_sensitivity(one_class) == 0.0
    noiseless = LinearLatentFilter(np.zeros((2, 2)), np.array([[0.0, 1e-3], [0.0, 0.0]]))
    assert math.isinf(filter_sensitivity(noiseless))
    pairs = label_pair_mahalanobis(
        LinearLatentFilter(2 * np.eye(2), np.array([[0.0, 2.0, 0.0], [0.0, 0.0, 4.0]]))
    )
    np.testing.assert_allclose(pairs, [[0, 1, 4], [1, 0, 5], [4, 5, 0]], rtol=1e-12)


def test_gaussian_delta_equals_the_numerical_hockey_stick_divergence() -> None:
    for sensitivity, epsilon in [(0.5, 0.1), (1.0, 1.0), (3.0, 2.0), (8.0, 10.0)]:
        crossing = (sensitivity**2 / 2 - epsilon) / sensitivity

        def positive_part(x: float, s: float = sensitivity, e: float = epsilon) -> float:
            return max(stats.norm.pdf(x) - math.exp(e) * stats.norm.pdf(x, loc=s), 0.0)

        numerical, _ = integrate.quad(positive_part, -40, 40, points=[crossing], limit=200, epsabs=1e-14)
        assert gaussian_delta(sensitivity, epsilon) == pytest.approx(numerical, rel=1e-6, abs=1e-13)


def test_exact_epsilon_is_the_smallest_epsilon_and_conversions_bound_it_from_above() -> None:
    delta = 1e-5
    for sensitivity in (0.3, 1.0, 4.0, 20.0):
        exact = gaussian_exact_epsilon(sensitivity, delta)
        assert gaussian_delta(sensitivity, exact) <= delta
        assert exact == 0.0 or gaussian_delta(sensitivity, exact * (1 - 1e-6)) > delta
        renyi = {order: 0.5 * order * sensitivity**2 for order in DEFAULT_ORDERS}
        balle, _ = renyi_to_approximate_dp(renyi, delta, "balle2020")
        mironov, _ = renyi_to_approximate_dp(renyi, delta, "mironov2017")
        assert exact <= balle + 1e-12 <= mironov + 1e-12


def test_conversion_formulas_by_hand() -> None:
    renyi = {2.0: 0.5, 10.0: 2.5}
    delta = 1e-6
    mironov_by_order = {2.0: 0.5 + math.log(1e6), 10.0: 2.5 + math.log(1e6) / 9}
    assert renyi_to_approximate_dp(renyi, delta, "mironov2017") == (
        pytest.approx(min(mironov_by_order.values())),
        10.0,
    )
    balle_10 = 2.5 + math.log(0.9) - (math.log(delta) + math.log(10)) / 9
    assert renyi_to_approximate_dp(renyi, delta)[0] == pytest.approx(balle_10)
    assert renyi_to_approximate_dp({2.0: math.inf}, delta)[0] == math.inf
    with pytest.raises(ValueError):
        renyi_to_approximate_dp(renyi, 0.0)


def test_privacy_summary_is_json_ready_and_consistent() -> None:
    latent_filter = LinearLatentFilter(np.array([[1.0, 0.0], [0.0, 0.5]]), np.array([[0.0, 1.0], [0.0, 0.0]]))
    summary = filter_privacy_summary(latent_filter, 1e-5, orders=[2.0, 8.0])
    assert json.loads(json.dumps(summary)) == summary
    assert summary["sensitivity"] == pytest.approx(1.0)
    assert summary["epsilon_rdp"] == {"2.0": pytest.approx(1.0), "8.0": pytest.approx(4.0)}
    assert summary["epsilon_exact_gaussian"] <= summary["epsilon"]
    singular = filter_privacy_summary(LinearLatentFilter(np.zeros((2, 2)), latent_filter.label_shift), 1e-5)
    assert singular["epsilon"] is None and set(singular["epsilon_rdp"].values()) == {None}


def test_gaussian_baseline_spends_exactly_the_budget_and_never_uses_the_label() -> None:
    rng = np.random.default_rng(3)
    log_variance = rng.uniform(-4, 0.5, size=(300, 6))
    labels = rng.integers(0, 2, 300)
    for budget in (0.01, 0.5, 4.0, 30.0):
        sigma = gaussian_baseline_noise_scale(log_variance, budget)
        baseline = gaussian_baseline_filter(6, 2, sigma)
        assert filter_distortion(baseline, log_variance, labels) == pytest.approx(budget, rel=1e-8)
        assert filter_sensitivity(baseline) == 0.0


@pytest.mark.parametrize("sensitivity", [1e10, 1e160, 1e300, float("inf")])
def test_a_huge_sensitivity_states_no_finite_epsilon_instead_of_overflowing(sensitivity: float) -> None:
    """A trained filter (or a cap) with an enormous sensitivity raised OverflowError (exit 1, the
    reliability issue's row 1); it must give an infinite (unstated) ε, which the release refuses."""
    summary = sensitivity_privacy_summary(sensitivity, 1e-5)
    assert summary["epsilon_exact_gaussian"] is None
    assert summary["epsilon"] is None or summary["epsilon"] > 1e15


def test_an_overflowing_label_shift_is_infinite_sensitivity_and_nan_is_refused() -> None:
    """A shift so large that ``Δᵀ(AAᵀ)⁺Δ`` overflows is ``s = ∞`` (never NaN, which would pass any
    ``s > cap`` check and come out as ε ≈ 0); the accountant refuses a NaN sensitivity outright."""
    noise = np.eye(2)
    shift = np.array([[0.0, 1.7e308, -1.7e308], [0.0, 0.0, 0.0]])
    assert math.isinf(label_sensitivity(LinearLatentFilter(noise, shift)))
    assert label_sensitivity(LinearLatentFilter(noise, np.array([[0.0, 3.0], [0.0, 0.0]]))) == pytest.approx(3.0)
    for function in (lambda: gaussian_exact_epsilon(math.nan, 1e-5), lambda: sensitivity_privacy_summary(math.nan, 1e-5)):
        with pytest.raises(ValueError, match="NaN"):
            function()
