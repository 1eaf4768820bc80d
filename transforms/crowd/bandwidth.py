"""Per-object kernel bandwidths (PrisCrowd step 3: ``f_i = Σ_s c_is K_h(·, x_is)``).

The paper leaves the bandwidth open; we use the robust rule of thumb of Silverman (Density
Estimation for Statistics and Data Analysis, 1986, eq. 3.31), with the median absolute
deviation as a third spread::

    h_i = 0.9 · min(sd_i, IQR_i / 1.349, MAD_i / 0.6745) · n_i^(−1/5)

per object ``i`` with ``n_i`` claims, ``sd_i`` the sample standard deviation (``ddof = 1``) and
``IQR_i`` the interquartile range (linear interpolation between order statistics, NumPy's
default percentile method). ``IQR / 1.349`` and ``MAD / 0.6745`` are the standard deviation of a normal with that IQR or
MAD, so the minimum protects against heavy tails and outlying claims. The MAD matters for the
small objects of real crowd data: with three claims of which one is absurd (a vandalized
city population of 10^16), the interpolated IQR is as absurd as the standard deviation, while
the MAD is the gap between the two sane claims. When more than half of an object's claims are
identical the MAD is 0 and so is the rule (also for all-identical claims or a single claim):
the robust spread of such an object really is nil, whatever a minority claims. Finally
``h_i = max(h_i, floor)`` so that identical claims never give a zero bandwidth; the floor is
public configuration (by default the release's value precision), never derived from the data.

Everything is computed per object from that object's claims only (sequential ``bincount``
sums, per-object sorting), so each object's bandwidth is bitwise the same in any block.
"""

from __future__ import annotations

import numpy as np

from transforms.crowd.claims_block import ClaimsBlock

SILVERMAN_FACTOR = 0.9
NORMAL_IQR = 1.349
NORMAL_MAD = 0.6745
SORT_CHUNK_CLAIMS = 1 << 20
"""Whole objects are sorted in chunks of about this many claims (cache-friendly; same result)."""


def per_object_percentiles(
    values: np.ndarray,
    offsets: np.ndarray,
    percentiles: tuple[float, ...],
    chunk_claims: int = SORT_CHUNK_CLAIMS,
) -> np.ndarray:
    """(len(percentiles), O) percentiles of ``values`` within each object.

    Linear interpolation between order statistics (NumPy's default ``method="linear"``:
    position ``p/100 · (n − 1)``), computed for every object at once after one sort by
    ``(object, value)`` (done in chunks of whole objects of about ``chunk_claims`` claims).
    Objects must have at least one claim.
    """
    values = np.asarray(values, dtype=np.float64)
    offsets = np.asarray(offsets, dtype=np.int64)
    counts = np.diff(offsets)
    object_of_claim = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    ordered = np.empty_like(values)
    cuts = np.searchsorted(offsets, np.arange(chunk_claims, len(values), chunk_claims))
    bounds = np.unique(np.concatenate([[0], cuts, [len(counts)]]))
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        first, last = offsets[start], offsets[stop]
        part = values[first:last]
        ordered[first:last] = part[np.lexsort((part, object_of_claim[first:last]))]
    result = np.empty((len(percentiles), len(counts)))
    last = counts - 1
    for row, percentile in enumerate(percentiles):
        position = (percentile / 100.0) * last
        below = np.floor(position).astype(np.int64)
        above = np.minimum(below + 1, last)
        fraction = position - below
        lower = ordered[offsets[:-1] + below]
        upper = ordered[offsets[:-1] + above]
        difference = upper - lower
        result[row] = np.where(
            fraction >= 0.5, upper - difference * (1.0 - fraction), lower + difference * fraction
        )
    return result


def object_bandwidths(block: ClaimsBlock, floor: float | np.ndarray) -> np.ndarray:
    """(O,) bandwidth ``h_i`` of each object by the robust Silverman rule, floored.

    ``h_i = max(0.9 · min(sd_i, IQR_i / 1.349, MAD_i / 0.6745) · n_i^(−1/5), floor)``, the
    zero when more than half of the claims coincide (see the module docstring). ``floor`` is a positive scalar or an (O,) array.
    """
    floor_array = np.broadcast_to(np.asarray(floor, dtype=np.float64), (block.number_of_objects,))
    if not np.all(floor_array > 0):
        raise ValueError("the bandwidth floor must be positive")
    counts = block.counts
    if block.number_of_objects == 0:
        return np.empty(0)
    if np.any(counts == 0):
        raise ValueError("every object of a block needs at least one claim")
    object_of_claim = block.object_of_claim
    mean = np.bincount(object_of_claim, weights=block.values, minlength=len(counts)) / counts
    deviation = block.values - mean[object_of_claim]
    squares = np.bincount(object_of_claim, weights=deviation * deviation, minlength=len(counts))
    standard_deviation = np.sqrt(squares / np.maximum(counts - 1, 1))
    first_quartile, median, third_quartile = per_object_percentiles(block.values, block.offsets, (25.0, 50.0, 75.0))
    normal_iqr_spread = (third_quartile - first_quartile) / NORMAL_IQR
    (absolute_deviation_median,) = per_object_percentiles(
        np.abs(block.values - median[object_of_claim]), block.offsets, (50.0,)
    )
    normal_mad_spread = absolute_deviation_median / NORMAL_MAD
    spread = np.minimum(np.minimum(standard_deviation, normal_iqr_spread), normal_mad_spread)
    bandwidth = SILVERMAN_FACTOR * spread * counts.astype(np.float64) ** (-0.2)
    return np.maximum(bandwidth, floor_array)


BANDWIDTH_METHODS = ("fixed", "range", "silverman")
PUBLIC_BANDWIDTH_METHODS = ("fixed", "range")


def public_bandwidth(method: str, grid_low: float, grid_high: float, precision: float,
                     value: float | None = None, fraction: float | None = None) -> float:
    """The release's kernel bandwidth from public configuration only, the same for every object:
    ``fixed`` (``value``) or ``range`` (``fraction × (high − low)`` of the public value range); never
    below the precision. The robust Silverman rule above is fitted to each object's claims, so a
    changed claim changes the generative model: it is for evaluation, never for a release."""
    if method == "fixed":
        if value is None or not value > 0:
            raise ValueError("a fixed bandwidth needs a positive value")
        bandwidth = float(value)
    elif method == "range":
        if fraction is None or not 0 < fraction <= 1:
            raise ValueError("a range bandwidth needs a fraction in (0, 1]")
        bandwidth = float(fraction) * (float(grid_high) - float(grid_low))
    else:
        raise ValueError(f"{method!r} is not a public bandwidth method (use {' or '.join(PUBLIC_BANDWIDTH_METHODS)})")
    return max(bandwidth, float(precision))
