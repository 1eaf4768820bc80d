"""ISE, SISE, the KDE-as-mixture and truth recovery against integrals and hand computation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, stats

from transforms.crowd.density_metrics import (
    GaussianMixture,
    gaussian_mixture_inner_product,
    integrated_squared_error,
    kde_mixture,
    normalized_integrated_squared_error,
    object_value_range,
    per_object_truth_estimate,
    released_density,
    scaled_integrated_squared_error,
    truth_mean_absolute_error,
    truth_recovery,
)


def random_mixture(generator: np.random.Generator, components: int) -> GaussianMixture:
    weights = generator.random(components) + 0.1
    return GaussianMixture(
        weights / weights.sum(),
        generator.uniform(-5.0, 5.0, components),
        generator.uniform(0.2, 2.5, components),
    )


def direct_pdf(mixture: GaussianMixture, x: float) -> float:
    """The mixture density summed term by term with scipy's normal pdf."""
    return sum(
        w * stats.norm.pdf(x, loc=m, scale=s)
        for w, m, s in zip(mixture.weights, mixture.means, mixture.scales, strict=True)
    )


def numerical_integral(function, *mixtures: GaussianMixture) -> float:
    means = np.concatenate([m.means for m in mixtures])
    widest = max(float(m.scales.max()) for m in mixtures)
    low, high = means.min() - 15 * widest, means.max() + 15 * widest
    value, _ = integrate.quad(
        function, low, high, points=sorted(means), limit=500, epsabs=1e-13, epsrel=1e-10
    )
    return value


@pytest.mark.parametrize("case", range(8))
def test_ise_closed_form_matches_numerical_integration(case: int) -> None:
    generator = np.random.default_rng(100 + case)
    f = random_mixture(generator, int(generator.integers(1, 5)))
    g = random_mixture(generator, int(generator.integers(1, 5)))
    numeric = numerical_integral(lambda x: (direct_pdf(f, x) - direct_pdf(g, x)) ** 2, f, g)
    assert integrated_squared_error(f, g) == pytest.approx(numeric, rel=1e-7, abs=1e-12)


@pytest.mark.parametrize("case", range(5))
def test_inner_product_matches_numerical_integration(case: int) -> None:
    generator = np.random.default_rng(200 + case)
    f = random_mixture(generator, 3)
    g = random_mixture(generator, 2)
    numeric = numerical_integral(lambda x: direct_pdf(f, x) * direct_pdf(g, x), f, g)
    assert gaussian_mixture_inner_product(f, g) == pytest.approx(numeric, rel=1e-8)


def test_ise_of_two_unit_normals_by_hand() -> None:
    # ∫N(0,1)² = 1/(2√π); ∫N(0,1)N(d,1) = e^{−d²/4}/(2√π)  ⇒  ISE = (1 − e^{−d²/4})/√π.
    for shift in (0.0, 0.5, 2.0, 7.0):
        f = GaussianMixture([1.0], [0.0], [1.0])
        g = GaussianMixture([1.0], [shift], [1.0])
        expected = (1.0 - math.exp(-shift * shift / 4.0)) / math.sqrt(math.pi)
        assert integrated_squared_error(f, g) == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_ise_is_zero_on_itself_and_symmetric() -> None:
    generator = np.random.default_rng(7)
    for _ in range(10):
        f = random_mixture(generator, 4)
        g = random_mixture(generator, 3)
        own_norm = gaussian_mixture_inner_product(f, f)
        assert integrated_squared_error(f, f) <= 1e-12 * own_norm
        assert integrated_squared_error(f, g) == pytest.approx(integrated_squared_error(g, f), rel=1e-12)
        assert integrated_squared_error(f, g) > 0


def test_sise_is_the_ise_of_the_scaled_values() -> None:
    generator = np.random.default_rng(11)
    for _ in range(4):
        f = random_mixture(generator, 3)
        g = random_mixture(generator, 2)
        low, scale = -3.0, 6.5
        # densities of u = (x − lo)/scale, written out: f_u(u) = scale · f(lo + scale·u)
        f_scaled = GaussianMixture(f.weights, (f.means - low) / scale, f.scales / scale)
        g_scaled = GaussianMixture(g.weights, (g.means - low) / scale, g.scales / scale)
        numeric = numerical_integral(
            lambda u, f=f, g=g, low=low, scale=scale: (
                (scale * direct_pdf(f, low + scale * u) - scale * direct_pdf(g, low + scale * u)) ** 2
            ),
            f_scaled,
            g_scaled,
        )
        assert scaled_integrated_squared_error(f, g, scale) == pytest.approx(numeric, rel=1e-7)


def test_sise_does_not_depend_on_the_unit_of_the_values() -> None:
    generator = np.random.default_rng(12)
    f = random_mixture(generator, 3)
    g = random_mixture(generator, 3)
    factor = 1000.0
    f_big = GaussianMixture(f.weights, f.means * factor, f.scales * factor)
    g_big = GaussianMixture(g.weights, g.means * factor, g.scales * factor)
    assert integrated_squared_error(f_big, g_big) == pytest.approx(integrated_squared_error(f, g) / factor)
    assert scaled_integrated_squared_error(f_big, g_big, 4.0 * factor) == pytest.approx(
        scaled_integrated_squared_error(f, g, 4.0)
    )
    with pytest.raises(ValueError):
        scaled_integrated_squared_error(f, g, 0.0)


def test_normalized_ise_is_bounded() -> None:
    f = GaussianMixture([1.0], [0.0], [1.0])
    assert normalized_integrated_squared_error(f, f) == pytest.approx(0.0, abs=1e-12)
    far = GaussianMixture([1.0], [1e3], [1.0])
    assert normalized_integrated_squared_error(f, far) == pytest.approx(1.0, abs=1e-12)
    near = GaussianMixture([1.0], [1.0], [2.0])
    assert 0.0 < normalized_integrated_squared_error(f, near) < 1.0


def test_mixture_pdf_matches_direct_sum() -> None:
    generator = np.random.default_rng(3)
    f = random_mixture(generator, 5)
    x = np.linspace(-9.0, 9.0, 37)
    expected = np.array([direct_pdf(f, point) for point in x])
    np.testing.assert_allclose(f.pdf(x), expected, rtol=1e-12, atol=1e-300)
    assert f.pdf(x.reshape(37, 1)).shape == (37, 1)


def test_kde_mixture_pdf_matches_direct_sum_of_normal_pdfs() -> None:
    values = np.array([1.0, 2.5, 2.7, 8.0])
    weights = np.array([2.0, 1.0, 1.0, 4.0])
    bandwidth = 0.8
    kde = kde_mixture(values, weights, bandwidth)
    x = np.linspace(-2.0, 12.0, 29)
    expected = sum(
        w / weights.sum() * stats.norm.pdf(x, loc=v, scale=bandwidth)
        for v, w in zip(values, weights, strict=True)
    )
    np.testing.assert_allclose(kde.pdf(x), expected, rtol=1e-12)
    total, _ = integrate.quad(lambda t: float(kde.pdf(t)), -20.0, 30.0, points=list(values), limit=200)
    assert total == pytest.approx(1.0, rel=1e-9)


def test_kde_mixture_with_one_bandwidth_per_point() -> None:
    values = np.array([0.0, 3.0])
    bandwidths = np.array([0.5, 2.0])
    kde = kde_mixture(values, np.array([1.0, 3.0]), bandwidths)
    x = np.array([-1.0, 0.0, 1.5, 3.0, 6.0])
    expected = 0.25 * stats.norm.pdf(x, 0.0, 0.5) + 0.75 * stats.norm.pdf(x, 3.0, 2.0)
    np.testing.assert_allclose(kde.pdf(x), expected, rtol=1e-12)


def test_released_density_weights_every_claim_equally() -> None:
    values = np.array([4.0, 5.0, 9.0])
    density = released_density(values, 1.5)
    x = np.linspace(0.0, 14.0, 15)
    expected = sum(stats.norm.pdf(x, v, 1.5) for v in values) / 3.0
    np.testing.assert_allclose(density.pdf(x), expected, rtol=1e-12)


def test_invalid_inputs_are_refused() -> None:
    with pytest.raises(ValueError):
        GaussianMixture([1.0], [0.0], [0.0])
    with pytest.raises(ValueError):
        GaussianMixture([-1.0], [0.0], [1.0])
    with pytest.raises(ValueError):
        kde_mixture(np.array([]), None, 1.0)
    with pytest.raises(ValueError):
        kde_mixture(np.array([1.0, 2.0]), np.array([0.0, 0.0]), 1.0)
    with pytest.raises(ValueError):
        object_value_range(np.array([3.0, 3.0]))
    assert object_value_range(np.array([3.0, -1.0, 2.0])) == 4.0


def test_truth_estimates_and_mae_by_hand() -> None:
    frame = pd.DataFrame(
        {
            "object_id": [1, 1, 1, 2, 2, 3, 3, 3, 3],
            "value": [1.0, 5.0, 3.0, 10.0, 20.0, 2.0, 2.0, 9.0, 100.0],
        }
    )
    median = per_object_truth_estimate(frame)
    # object 1: median of {1,3,5} = 3; object 2: (10+20)/2 = 15; object 3: (2+9)/2 = 5.5
    assert median.to_dict() == {1: 3.0, 2: 15.0, 3: 5.5}
    mean = per_object_truth_estimate(frame, method="mean")
    # object 3: (2+2+9+100)/4 = 28.25
    assert mean.to_dict() == {1: 3.0, 2: 15.0, 3: 28.25}
    with pytest.raises(ValueError):
        per_object_truth_estimate(frame, method="mode")

    truth = pd.Series({1: 2.0, 2: 20.0, 3: 5.5, 5: 1.0})
    # common objects 1, 2, 3: |3−2| + |15−20| + |5.5−5.5| = 6 over 3 objects
    recovery = truth_recovery(median, truth)
    assert recovery.mean_absolute_error == pytest.approx(2.0)
    assert recovery.objects_compared == 3
    truth_frame = pd.DataFrame({"object_id": [1, 2, 3, 5], "truth": [2.0, 20.0, 5.5, 1.0]})
    assert truth_mean_absolute_error(median, truth_frame) == pytest.approx(2.0)
    nothing = truth_recovery(median, pd.Series({9: 1.0}))
    assert nothing.objects_compared == 0 and math.isnan(nothing.mean_absolute_error)
