"""Rényi differential privacy of a linear latent filter for the private label, and its baseline.

Issue 5, step 4 (Chen, Navidi, Rajagopal, "Generating private data with user customization",
privacy analysis of the linear filter).

What is protected. Fix a record's latent ``z``; the filter releases ``z̃ = z + A·ε + B·e_y``. For two
labels ``y ≠ y′`` the outputs are ``N(z + B e_y, AAᵀ)`` and ``N(z + B e_{y′}, AAᵀ)``: two Gaussians with
the same covariance ``Σ = AAᵀ``, whose Rényi divergence of order ``α > 1`` is (Mironov 2017,
"Rényi differential privacy", Table 2; Gil, Alajaji, Linder 2013 for the multivariate case)::

    D_α = (α/2)·Δᵀ Σ⁻¹ Δ,    Δ = B(e_y − e_{y′}),

so the filter is ``(α, ε(α))``-RDP for the label with ``ε(α) = (α/2)·s²``, ``s² = max_{y≠y′} Δᵀ Σ⁻¹ Δ``
(the squared Mahalanobis sensitivity). When ``Σ`` is singular, the two outputs live on the affine
subspaces ``z + B e_y + range(A)``: if ``Δ ∈ range(Σ)`` they share it and the same formula holds with
the pseudo-inverse ``Σ⁺``; otherwise they are mutually singular and ``D_α = ∞``. This bound is about
the label's *use by the filter* (the shift ``B e_y``) with ``z`` held fixed; the association between
``y`` and ``z`` itself (what the encoder's latent already says about the label) is not covered by it —
that is what the adversarial training and the retrained-adversary evaluation measure. Nothing in the
adversarial objective keeps ``s`` small, so a trained filter's ``ε`` is often very large; the
training's ``max_sensitivity`` cap (``latent_filter.py``) bounds it by construction.

Conversion to ``(ε, δ)``:

* ``"balle2020"`` (default): Balle, Barthe, Gaboardi, Hsu, Sato 2020, "Hypothesis testing
  interpretations and Rényi differential privacy", Theorem 21 (equivalently Canonne, Kamath,
  Steinke 2020, Proposition 12): ``ε = ε(α) + log((α−1)/α) − (log δ + log α)/(α−1)``;
* ``"mironov2017"``: Mironov 2017, Proposition 3: ``ε = ε(α) + log(1/δ)/(α−1)``;

each minimized over the given orders. Because the mechanism is exactly Gaussian, the tight
``(ε, δ)`` is also available: ``gaussian_exact_epsilon`` solves the analytic Gaussian mechanism's
``δ(ε) = Φ(s/2 − ε/s) − e^ε Φ(−s/2 − ε/s)`` (Balle and Wang 2018, "Improving the Gaussian mechanism",
Theorem 8) for ``ε``; the worst label pair is the one with the largest ``s`` since ``δ(ε)`` grows with ``s``.

Baseline (issue 5): the additive Gaussian mechanism ``z̃ = z + N(0, σ²I)`` (``A = σI``, ``B = 0``) with
``σ`` chosen so that its distortion ``D(q_f ‖ q_e) = (1/n) Σ_i ½ Σ_j (σ²/σ_{ij}² − log(1 + σ²/σ_{ij}²))``
(``latent_filter.py``) equals the same budget ``b``. Its label RDP above is 0 (it never uses the label);
its protection is only the noise, compared with the filter's at equal distortion by the evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import numpy as np
from scipy.special import log_ndtr

from transforms.filter.latent_filter import LinearLatentFilter, label_sensitivity

DEFAULT_ORDERS: tuple[float, ...] = (
    1.25,
    1.5,
    2.0,
    3.0,
    4.0,
    5.0,
    6.0,
    8.0,
    10.0,
    12.0,
    16.0,
    20.0,
    32.0,
    64.0,
    128.0,
    256.0,
)


def filter_sensitivity(latent_filter: LinearLatentFilter) -> float:
    """``s = max_{y≠y′} √(Δᵀ(AAᵀ)⁺Δ)`` (``∞`` if some pair is mutually singular; 0 for one class;
    ``latent_filter.label_pair_mahalanobis`` computes the pairs)."""
    return label_sensitivity(latent_filter)


def _check_sensitivity(sensitivity: float) -> None:
    """A NaN sensitivity (an overflowed computation) would state ε ≈ 0: refused where ``s`` enters
    a formula."""
    if math.isnan(sensitivity) or sensitivity < 0:
        raise ValueError("the sensitivity must be a non-negative number (not NaN)")


def renyi_epsilon_of_sensitivity(sensitivity: float, orders: Iterable[float] = DEFAULT_ORDERS) -> dict[float, float]:
    """``ε(α) = (α/2)·s²`` for every order ``α > 1`` (``∞`` when ``s = ∞``)."""
    _check_sensitivity(sensitivity)
    result: dict[float, float] = {}
    for order in orders:
        if not order > 1:
            raise ValueError(f"Rényi orders must exceed 1 (got {order})")
        result[float(order)] = 0.5 * order * sensitivity * sensitivity  # float products overflow to ∞, ``**`` raises
    return result


def filter_renyi_epsilon(
    latent_filter: LinearLatentFilter, orders: Iterable[float] = DEFAULT_ORDERS
) -> dict[float, float]:
    """``ε(α) = (α/2)·s²`` of the filter for every order ``α > 1`` (``∞`` when ``s = ∞``)."""
    return renyi_epsilon_of_sensitivity(filter_sensitivity(latent_filter), orders)


def renyi_to_approximate_dp(
    renyi_epsilons: Mapping[float, float],
    delta: float,
    conversion: Literal["balle2020", "mironov2017"] = "balle2020",
) -> tuple[float, float]:
    """The smallest ``ε`` over the orders for which ``(α, ε(α))``-RDP implies ``(ε, δ)``-DP, and
    the order that gives it (module docstring); ``ε`` is floored at 0."""
    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1)")
    if not renyi_epsilons:
        raise ValueError("no Rényi orders to convert")
    best = (math.inf, float(next(iter(renyi_epsilons))))
    for order, epsilon in renyi_epsilons.items():
        if not order > 1:
            raise ValueError(f"Rényi orders must exceed 1 (got {order})")
        if math.isinf(epsilon):
            continue
        if conversion == "balle2020":
            value = (
                epsilon + math.log((order - 1) / order) - (math.log(delta) + math.log(order)) / (order - 1)
            )
        elif conversion == "mironov2017":
            value = epsilon + math.log(1 / delta) / (order - 1)
        else:
            raise ValueError(f"unknown conversion {conversion!r}")
        value = max(value, 0.0)
        if value < best[0]:
            best = (value, float(order))
    return best


def gaussian_delta(sensitivity: float, epsilon: float) -> float:
    """``δ(ε)`` of the Gaussian pair ``N(0, 1)`` vs ``N(s, 1)``:
    ``Φ(s/2 − ε/s) − e^ε Φ(−s/2 − ε/s)`` (Balle and Wang 2018, Theorem 8)."""
    if sensitivity == 0:
        return 0.0
    if math.isinf(sensitivity):
        return 1.0
    first = math.exp(float(log_ndtr(sensitivity / 2 - epsilon / sensitivity)))
    second = math.exp(epsilon + float(log_ndtr(-sensitivity / 2 - epsilon / sensitivity)))
    return max(first - second, 0.0)


def gaussian_exact_epsilon(sensitivity: float, delta: float, iterations: int = 200) -> float:
    """The smallest ``ε ≥ 0`` with ``δ(ε) ≤ delta`` for the Gaussian pair at Mahalanobis distance
    ``sensitivity`` (bisection on the decreasing ``δ(ε)``, returning the upper end)."""
    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1)")
    _check_sensitivity(sensitivity)
    if math.isinf(sensitivity):
        return math.inf
    if gaussian_delta(sensitivity, 0.0) <= delta:
        return 0.0
    low, high = 0.0, 1.0
    while gaussian_delta(sensitivity, high) > delta:
        low, high = high, 2 * high
    for _ in range(iterations):
        middle = 0.5 * (low + high)
        if gaussian_delta(sensitivity, middle) > delta:
            low = middle
        else:
            high = middle
    return high


def sensitivity_privacy_summary(
    sensitivity: float,
    delta: float,
    orders: Iterable[float] = DEFAULT_ORDERS,
    conversion: Literal["balle2020", "mironov2017"] = "balle2020",
) -> dict[str, Any]:
    """JSON-ready label privacy of a Gaussian label shift with Mahalanobis sensitivity ``s``:
    ``epsilon_rdp`` per order (keys are the orders as text; ``None`` for ``∞``), the converted
    ``(ε, δ)`` and its order, and the exact Gaussian ``ε``."""
    renyi = renyi_epsilon_of_sensitivity(sensitivity, orders)
    epsilon, order = renyi_to_approximate_dp(renyi, delta, conversion)
    try:
        exact = gaussian_exact_epsilon(sensitivity, delta)
    except OverflowError:  # a sensitivity so large that no finite ε is worth stating
        exact = math.inf

    def finite(value: float) -> float | None:
        return None if math.isinf(value) else value

    return {
        "sensitivity": finite(sensitivity),
        "epsilon_rdp": {repr(key): finite(value) for key, value in renyi.items()},
        "delta": delta,
        "epsilon": finite(epsilon),
        "epsilon_order": order if math.isfinite(epsilon) else None,
        "conversion": conversion,
        "epsilon_exact_gaussian": finite(exact),
    }


def filter_privacy_summary(
    latent_filter: LinearLatentFilter,
    delta: float,
    orders: Iterable[float] = DEFAULT_ORDERS,
    conversion: Literal["balle2020", "mironov2017"] = "balle2020",
) -> dict[str, Any]:
    """``sensitivity_privacy_summary`` of the filter's label sensitivity."""
    return sensitivity_privacy_summary(filter_sensitivity(latent_filter), delta, orders, conversion)


def _isotropic_distortion(noise_scale: float, precision: np.ndarray) -> float:
    ratio = noise_scale**2 * precision
    return float(0.5 * (ratio - np.log1p(ratio)).sum(axis=1).mean())


def gaussian_baseline_noise_scale(
    latent_log_variance: np.ndarray, budget: float, iterations: int = 100
) -> float:
    """The ``σ`` of ``z̃ = z + N(0, σ²I)`` whose distortion equals ``budget`` (nats; module
    docstring), by bisection on ``log σ`` (the distortion increases with ``σ``)."""
    log_variance = np.asarray(latent_log_variance, dtype=np.float64)
    if log_variance.ndim != 2 or log_variance.shape[0] == 0:
        raise ValueError("latent_log_variance must be a non-empty (n, k) matrix")
    if not budget > 0:
        raise ValueError("the budget of the Gaussian baseline must be positive")
    precision = np.exp(-log_variance)
    low, high = 0.0, 1.0
    while _isotropic_distortion(high, precision) < budget:
        low, high = high, 2 * high
    for _ in range(iterations):
        middle = 0.5 * (low + high)
        if _isotropic_distortion(middle, precision) <= budget:
            low = middle
        else:
            high = middle
    return low


def gaussian_baseline_filter(
    latent_dimension: int, private_classes: int, noise_scale: float
) -> LinearLatentFilter:
    """The baseline as a filter: ``A = σI_k``, ``B = 0`` (so it runs through the same code)."""
    return LinearLatentFilter(
        noise_scale * np.eye(latent_dimension), np.zeros((latent_dimension, private_classes))
    )
