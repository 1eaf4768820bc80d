"""``P(y | x)`` of the crowd kind's generative model for the plausible-deniability test.

PrisCrowd (Huai et al., IJCAI 2019, Section 4.2) runs the test of
``transforms/core/plausible_deniability.py`` per object with the object's claims as the records
and the object's Gaussian kernel as the generative model.

Here the released values are rounded to a public ``precision``, so the output space is discrete
and ``P(y | x)`` is the exact probability mass of the rounding cell
``[y − p/2, y + p/2)`` under ``N(x, h²)``: ``Φ((y + p/2 − x)/h) − Φ((y − p/2 − x)/h)``. That makes
the interval index well defined for every bandwidth (a density would depend on the unit).

Everything is computed in the log domain (``log P``) so that claims many bandwidths away keep a
finite, exact interval index instead of underflowing to zero.

The release's generative model is this kernel *truncated to the public value range*: a draw
from seed ``x`` is ``N(x, h²)`` conditioned on the grid's span ``[low − p/2, high + p/2]``,
rounded to the grid, so ``P(y | x) = mass of y's cell / Z(x)`` with ``Z(x)`` the mass of the
span (``truncated_log_probability``). Every released value is then on the public grid
(``transforms/crowd/value_grid.py``). The draw itself (``truncated_kernel_draws``) is the inverse
CDF of the truncated normal in floating point: its law equals the model's up to a relative
``2^-52`` and tails beyond ``8.2`` bandwidths of mass ``2^-53``; the guarantee adds that to δ.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import log_ndtr, ndtr, ndtri

from transforms.crowd.value_grid import ValueGrid

_HALF_LOG_TWO_PI = 0.5 * math.log(2.0 * math.pi)
_NARROW_CELL_LIMIT = 0.1

# 4-point Gauss-Legendre rule on [-1, 1]: nodes ±t_j and weights w_j (exact for degree ≤ 7).
_LEGENDRE_NODES = (
    math.sqrt(3.0 / 7.0 - 2.0 / 7.0 * math.sqrt(6.0 / 5.0)),
    math.sqrt(3.0 / 7.0 + 2.0 / 7.0 * math.sqrt(6.0 / 5.0)),
)
_LEGENDRE_WEIGHTS = ((18.0 + math.sqrt(30.0)) / 36.0, (18.0 - math.sqrt(30.0)) / 36.0)


def _log_one_minus_exp(d: np.ndarray) -> np.ndarray:
    """``log(1 − e^d)`` for ``d ≤ 0``, accurate for every ``d`` (Mächler's ``log1mexp``)."""
    with np.errstate(divide="ignore"):
        return np.where(d > -math.log(2.0), np.log(-np.expm1(np.minimum(d, 0.0))), np.log1p(-np.exp(d)))


def rounded_value_log_probability(
    y: np.ndarray, seeds: np.ndarray, bandwidth: float | np.ndarray, precision: float
) -> np.ndarray:
    """``log P(y | x)``: log-mass of the rounding cell of ``y`` under the kernel ``N(x, h²)``.

    ``P = Φ((y + p/2 − x)/h) − Φ((y − p/2 − x)/h)`` (issue 2, step 5: the released value is a
    multiple of ``precision`` and ``P`` is the exact mass of that rounded value). Arguments
    broadcast against each other (e.g. ``y`` of shape ``(..., 1)`` against ``seeds`` of shape
    ``(..., n)``).

    Computation, stable in both tails: with ``μ = (y − x)/h`` and ``w = p/h`` the cell is
    ``[μ − w/2, μ + w/2]``; by the symmetry of the normal the mass is unchanged when ``μ`` is
    replaced by ``m = −|μ|``, so the arguments are in the left tail where ``log Φ`` is accurate.

    * Wide cells (``w·(|m| + 1) > 0.1``): ``log Φ(u) + log(1 − exp(log Φ(l) − log Φ(u)))`` with
      ``scipy.special.log_ndtr`` and a stable ``log1mexp``.
    * Narrow cells: a CDF difference would cancel, so the mass is integrated directly,
      ``φ(m) · ∫_{−w/2}^{w/2} e^{−m s − s²/2} ds``, by 4-point Gauss-Legendre on the symmetric
      cell (``cosh`` pairs the nodes). In that regime ``|m s| ≤ 0.05``, so the rule's relative
      error is below ``1e−16``.

    The result is ``−inf`` only when the mass truly underflows the log domain (arguments of
    order ``1e154`` bandwidths); it is clipped at ``0`` (a mass cannot exceed one).
    """
    y = np.asarray(y, dtype=np.float64)
    seeds = np.asarray(seeds, dtype=np.float64)
    bandwidth = np.asarray(bandwidth, dtype=np.float64)
    if not precision > 0.0:
        raise ValueError("precision must be positive")
    if np.any(bandwidth <= 0.0):
        raise ValueError("bandwidths must be positive")
    standardized_distance = (y - seeds) / bandwidth
    cell_width = precision / bandwidth
    shape = np.broadcast_shapes(standardized_distance.shape, cell_width.shape)
    centre = -np.abs(np.broadcast_to(standardized_distance, shape)).ravel()
    width = np.broadcast_to(cell_width, shape).ravel()
    result = np.empty(centre.shape, dtype=np.float64)

    narrow = width * (np.abs(centre) + 1.0) <= _NARROW_CELL_LIMIT
    wide = ~narrow
    if np.any(wide):
        m = centre[wide]
        half = 0.5 * width[wide]
        log_upper = log_ndtr(m + half)
        log_lower = log_ndtr(m - half)
        result[wide] = log_upper + _log_one_minus_exp(log_lower - log_upper)
    if np.any(narrow):
        m = centre[narrow]
        half = 0.5 * width[narrow]
        quadrature = np.zeros_like(m)
        for node, weight in zip(_LEGENDRE_NODES, _LEGENDRE_WEIGHTS, strict=True):
            scaled_node = half * node
            quadrature += weight * (
                np.exp(-0.5 * scaled_node * scaled_node) * (2.0 * np.cosh(m * scaled_node))
            )
        quadrature *= half
        with np.errstate(divide="ignore"):
            result[narrow] = -0.5 * m * m - _HALF_LOG_TWO_PI + np.log(quadrature)
    return np.minimum(result, 0.0).reshape(shape)


def span_log_mass(seeds: np.ndarray, bandwidth: float | np.ndarray, grid: ValueGrid) -> np.ndarray:
    """``log Z(x)``: the log-mass of the grid's span ``[low − p/2, high + p/2]`` under ``N(x, h²)``
    (the same stable cell computation, with the span as one wide cell)."""
    centre = 0.5 * (grid.low + grid.high)
    width = grid.high - grid.low + grid.precision
    return rounded_value_log_probability(np.float64(centre), seeds, bandwidth, width)


def truncated_log_probability(
    y: np.ndarray, seeds: np.ndarray, bandwidth: float | np.ndarray, grid: ValueGrid
) -> np.ndarray:
    """``log P(y | x)`` of the truncated, rounded kernel for grid values ``y`` (broadcasting as
    :func:`rounded_value_log_probability`)."""
    return np.minimum(
        rounded_value_log_probability(y, seeds, bandwidth, grid.precision) - span_log_mass(seeds, bandwidth, grid),
        0.0,
    )


def truncated_kernel_draws(
    seeds: np.ndarray, bandwidth: float | np.ndarray, grid: ValueGrid, uniforms: np.ndarray
) -> np.ndarray:
    """Grid values drawn from the truncated kernel around ``seeds`` by the inverse CDF of
    ``uniforms``: ``y = x + h Φ⁻¹(Φ(a) + u (Φ(b) − Φ(a)))`` with ``[a, b]`` the standardized span,
    rounded to the grid. The span is evaluated on the side of the seed where ``Φ`` keeps its
    precision (``Φ(−z) = 1 − Φ(z)``), so seeds near either end of the range draw accurately."""
    seeds = np.asarray(seeds, dtype=np.float64)
    bandwidth = np.asarray(bandwidth, dtype=np.float64)
    lower = (grid.low - 0.5 * grid.precision - seeds) / bandwidth
    upper = (grid.high + 0.5 * grid.precision - seeds) / bandwidth
    # mirror so that the span's centre is at or below zero: the lower tail of Φ is the accurate one
    mirrored = (lower + upper) > 0
    low_end = np.where(mirrored, -upper, lower)
    high_end = np.where(mirrored, -lower, upper)
    cdf_low, cdf_high = ndtr(low_end), ndtr(high_end)
    standard = ndtri(cdf_low + np.asarray(uniforms, dtype=np.float64) * (cdf_high - cdf_low))
    standard = np.clip(standard, low_end, high_end)
    draws = seeds + bandwidth * np.where(mirrored, -standard, standard)
    return grid.round(draws)
