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
(``transforms/crowd/value_grid.py``). The release draws a cell *exactly* from that law
(``exact_truncated_kernel_draws``): a 64-bit word is the leading bits of a uniform real ``u``; the
floating-point inverse CDF proposes the cell, whose CDF edges, evaluated in float64 with a safe
error bracket, confirm it unless ``u`` lies within the bracket of an edge (about one draw in
``10^11``), in which case the edges are evaluated with ``mpmath`` at growing precision and ``u``
extended from the draw's own stream until the cell is decided.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mpmath
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


_CDF_BRACKET = 2.0**-44
"""Absolute error bound, before division by the span's mass, of a float64 CDF edge (a few ulps
of ``ndtr`` and of the subtraction; far inside)."""


def _oriented_cdf(edges: np.ndarray, seeds: np.ndarray, bandwidth: np.ndarray,
                  grid: ValueGrid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(G, error bound, mirrored)``: the truncated kernel's CDF at ``edges`` in the orientation the
    sampler uses — ``G(e) = F(e)`` for seeds at or below the span's centre, ``G(e) = 1 − F(e)`` (the
    CDF of the mirrored kernel, decreasing in ``e``) above it — so that ``Φ`` is evaluated in its
    accurate lower tail. The error bound is absolute and also covers the float ``edges`` against the
    exact cell edges ``(step ± ½)·p`` (a few ulps of the edge, times the density ``≤ 0.399/h``)."""
    lower = (grid.low - 0.5 * grid.precision - seeds) / bandwidth
    upper = (grid.high + 0.5 * grid.precision - seeds) / bandwidth
    point = (edges - seeds) / bandwidth
    mirrored = (lower + upper) > 0
    low_end = np.where(mirrored, -upper, lower)
    high_end = np.where(mirrored, -lower, upper)
    at = np.clip(np.where(mirrored, -point, point), low_end, high_end)
    base = ndtr(low_end)
    mass = ndtr(high_end) - base
    edge_error = (np.abs(edges) + np.abs(seeds) + grid.precision) * 2.0**-50 * 0.4 / bandwidth
    return (np.clip((ndtr(at) - base) / mass, 0.0, 1.0), (_CDF_BRACKET + edge_error) / mass + 2.0**-50,
            mirrored)


def _exact_edge(half_steps: int, grid: ValueGrid) -> mpmath.mpf:
    """The cell edge ``(half_steps / 2)·p`` exactly (``half_steps`` odd): neighbouring cells share it,
    so the cells tile the span without gaps or overlaps at any precision."""
    return mpmath.mpf(grid.precision) * half_steps / 2


def _exact_oriented_cdf(edge: mpmath.mpf, seed: float, bandwidth: float, grid: ValueGrid, mirrored: bool,
                        bits: int) -> mpmath.mpf:
    with mpmath.workprec(bits):
        h, x = mpmath.mpf(bandwidth), mpmath.mpf(seed)
        first = 2 * grid.first_step
        low = mpmath.ncdf((_exact_edge(first - 1, grid) - x) / h)
        high = mpmath.ncdf((_exact_edge(first + 2 * grid.size - 1, grid) - x) / h)
        cdf = (mpmath.ncdf((edge - x) / h) - low) / (high - low)
        return 1 - cdf if mirrored else cdf


def _cell_interval(position: int, seed: float, bandwidth: float, grid: ValueGrid, mirrored: bool,
                   bits: int) -> tuple[mpmath.mpf, mpmath.mpf]:
    """``[G_start, G_end)`` of a cell in the sampler's orientation, exactly to ``bits``."""
    with mpmath.workprec(bits):
        step = 2 * (grid.first_step + position)
        lower_edge, upper_edge = _exact_edge(step - 1, grid), _exact_edge(step + 1, grid)
        at_lower = mpmath.mpf(0) if position == 0 else _exact_oriented_cdf(lower_edge, seed, bandwidth, grid,
                                                                           mirrored, bits)
        at_upper = mpmath.mpf(1) if position == grid.size - 1 else _exact_oriented_cdf(
            upper_edge, seed, bandwidth, grid, mirrored, bits)
    if position == 0 and mirrored:
        at_lower = mpmath.mpf(1)
    if position == grid.size - 1 and mirrored:
        at_upper = mpmath.mpf(0)
    return (at_upper, at_lower) if mirrored else (at_lower, at_upper)


def _refined_cell(word: int, seed: float, bandwidth: float, grid: ValueGrid, mirrored: bool,
                  refine: np.random.Generator) -> int:
    """The grid position whose cell holds the uniform real with leading 64 bits ``word``, decided
    with ``mpmath``: extend the real 64 bits at a time until its interval lies inside one cell's
    ``[G_start, G_end)``, the edges evaluated 64 bits beyond the real's."""
    numerator, bits = word, 64
    while True:
        precision = bits + 64
        with mpmath.workprec(precision):
            low = mpmath.mpf(numerator) / mpmath.mpf(2) ** bits
            high = low + mpmath.mpf(2) ** (-bits)
            slack = mpmath.mpf(2) ** (-(bits + 32))
            first, last = 0, grid.size - 1
            # cells in the order the orientation visits them: increasing positions, or decreasing
            order = (lambda index: grid.size - 1 - index) if mirrored else (lambda index: index)
            while first < last:
                middle = (first + last) // 2
                if _cell_interval(order(middle), seed, bandwidth, grid, mirrored, precision)[1] <= low:
                    first = middle + 1
                else:
                    last = middle
            start, end = _cell_interval(order(first), seed, bandwidth, grid, mirrored, precision)
            if start + slack <= low and high <= end - slack:
                return order(first)
        numerator = (numerator << 64) | int(refine.integers(0, 2**64, dtype=np.uint64))
        bits += 64


def exact_truncated_kernel_draws(
    seeds: np.ndarray, bandwidth: np.ndarray, grid: ValueGrid, words: np.ndarray,
    refine: Callable[[int], np.random.Generator],
) -> np.ndarray:
    """Grid values drawn *exactly* from the truncated rounded kernel around ``seeds`` (module
    docstring), one 64-bit word each; ``refine(flat position)`` is the stream of an undecided draw.
    Arguments broadcast to one shape (a bandwidth per draw or one for all)."""
    words = np.asarray(words, dtype=np.uint64)
    seeds, bandwidth = np.broadcast_arrays(np.asarray(seeds, dtype=np.float64), np.asarray(bandwidth, dtype=np.float64))
    seeds, bandwidth = np.broadcast_to(seeds, words.shape), np.broadcast_to(bandwidth, words.shape)
    uniform = words.astype(np.float64) * 2.0**-64
    proposed = truncated_kernel_draws(seeds, bandwidth, grid, uniform)
    position = np.clip(np.rint((proposed - grid.values(0)) / grid.precision).astype(np.int64), 0, grid.size - 1)
    values = grid.values(position)
    at_lower, lower_error, mirrored = _oriented_cdf(values - 0.5 * grid.precision, seeds, bandwidth, grid)
    at_upper, upper_error, _ = _oriented_cdf(values + 0.5 * grid.precision, seeds, bandwidth, grid)
    first, last = position == 0, position == grid.size - 1
    at_lower = np.where(first, np.where(mirrored, 1.0, 0.0), at_lower)
    at_upper = np.where(last, np.where(mirrored, 0.0, 1.0), at_upper)
    lower_error, upper_error = np.where(first, 0.0, lower_error), np.where(last, 0.0, upper_error)
    start = np.where(mirrored, at_upper, at_lower)
    end = np.where(mirrored, at_lower, at_upper)
    start_error = np.where(mirrored, upper_error, lower_error)
    end_error = np.where(mirrored, lower_error, upper_error)
    conversion = 2.0**-52  # a uint64 read as a float64 uniform is within 2^-53 (plus the word's width)
    confirmed = (start + start_error + conversion <= uniform) & (uniform + conversion <= end - end_error)
    for flat in np.flatnonzero(~confirmed):
        position.flat[flat] = _refined_cell(int(words.flat[flat]), float(seeds.flat[flat]),
                                            float(bandwidth.flat[flat]), grid, bool(mirrored.flat[flat]),
                                            refine(int(flat)))
    return grid.values(position)
