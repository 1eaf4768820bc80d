"""The private per-object density (issue 29): ``synthesis.mechanism: histogram``.

PrisCrowd (``synthesis.py``) pays for every released claim: a randomized privacy test per claim
slot, composed over the ``m`` slots of an object, so its whole-release ε grows with ``m``. Here
each object's *density* is released privately once, and the synthetic claims are drawn from it
afterwards — post-processing, so ``m`` is free.

Per object ``i`` with ``n_i`` claims (the counts are public under both units, docs/PRIVACY.md):

1. **Public bins** (:class:`DensityBins`). The value grid's ``P = J + 1`` points (``ValueGrid``:
   the public range at the release's precision) split into ``B_i`` contiguous bins, point ``s``
   in bin ``⌊s·B_i/P⌋``, ``B_i = clip(2⌊n_i ε_i / 8⌋ + 1, 5, min(255, P))`` (:func:`bins_for`).
   A claim's point is ``round((clip(x) − lo)/p)``: a function of the claim alone, so moving a
   claim moves one unit of count from one bin to another and changes nothing else. The rule is
   the bias–variance balance of a noisy histogram's median: clipped noise leaves about ``1/ε``
   junk mass per bin, ``B/ε`` in all, against the object's ``n`` claims; ``B ≈ nε/4`` keeps the
   junk near a quarter of the signal while the bins are as fine as that allows. ``B`` is odd so
   that the range's centre is a bin's centre, not an edge (on data whose claims pile up at the
   centre, an edge there shifts the median by half a bin).
2. **Noisy counts** (:func:`noisy_counts`). ``c_ib = #{claims of i in bin b}``; ``ỹ_ib = c_ib +
   Z_ib``, ``Z_ib`` discrete Laplace of scale ``Δ/ε_i`` (``transforms/core/discrete_laplace.py``,
   an exact sampler) with ``Δ = 2``: one claim's value moves ``c_i`` by at most 2 in L1 (one bin
   down, another up). Pure ``ε_i``-DP for one claim's value (Ghosh, Roughgarden, Sundararajan 2009).
3. **The density** (:func:`released_density`, post-processing of ``ỹ_i``): ``h_ib = max(ỹ_ib, 0)``,
   normalized; within a bin the mass is spread evenly over its grid points. An object whose every
   ``h_ib`` is 0 gets the uniform density on the grid.
4. **Synthetic claims** (:func:`stratified_points`, post-processing): ``m`` claims at the
   quantiles ``(k − U_i)/m``, ``k = 1..m``, of that density, one uniform offset ``U_i`` per
   object, then shuffled — stratified sampling: the released claims' median is within one
   ``1/m`` quantile cell of the density's median, where ``m`` independent draws would add an
   ``O(1/√m)`` quantile error.

**Whole release.** Claim unit: each claim enters one object's histogram, so the release is pure
``ε``-DP with ``ε_i = ε`` (parallel composition), whatever ``m`` is. Source unit with the
contribution bound ``L``: a source's claims change at most ``L`` objects' histograms, each by at
most 2 in L1 (one claim of the source per object), so the release is the ``L``-fold composition of
``ε_0``-DP steps; ``ε_0`` is the largest whose ``L``-fold composition (the platform's PLD
accountant, ``transforms/core/accounting.py``) stays within the configured ``ε`` at ``δ``
(:func:`per_object_epsilon`).

Randomness: object ``i``'s noise comes from ``keyed_generator(secret, release_id,
"crowd/histogram-noise", object_id)`` and its sampling from ``"crowd/histogram-sample"``, so an
object's output does not depend on which other objects share its block, its engine or a retry.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from transforms.core.accounting import PURE_DP, PrivacyStep, compose
from transforms.core.discrete_laplace import discrete_laplace_scale, sample_discrete_laplace
from transforms.core.keyed_randomness import keyed_generator
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.guarantee import privacy_unit
from transforms.crowd.synthesis import object_id_key
from transforms.crowd.value_grid import ValueGrid

NOISE_PURPOSE = "crowd/histogram-noise"
SAMPLE_PURPOSE = "crowd/histogram-sample"
COUNT_SENSITIVITY = 2
"""L1 sensitivity of an object's bin counts to one claim's value (one bin down, one up)."""
REASON_TOO_FEW_CLAIMS = "fewer claims than min_claims_per_object"
FEWEST_BINS = 5
MOST_BINS = 255
CLAIMS_PER_BIN_AT_UNIT_EPSILON = 8
"""The bin rule's ``nε/8`` (module docstring, step 1): twice the ``nε/4`` balance, made odd."""


def bins_for(claims: int, epsilon: float, grid_points: int) -> int:
    """``B = clip(2⌊n ε / 8⌋ + 1, 5, min(255, P))`` (module docstring, step 1): public, from the
    object's claim count ``n``, its ε and the grid's ``P`` points."""
    if claims < 0 or not (math.isfinite(epsilon) and epsilon > 0) or grid_points < 1:
        raise ValueError("bins_for needs claims >= 0, a positive finite epsilon and grid points >= 1")
    rule = 2 * math.floor(claims * epsilon / CLAIMS_PER_BIN_AT_UNIT_EPSILON) + 1
    return int(max(1, min(max(rule, FEWEST_BINS), MOST_BINS, grid_points)))


@dataclass(frozen=True)
class DensityBins:
    """``bins`` contiguous bins of a grid's ``points`` points: point ``s`` is in bin ``⌊s·bins/points⌋``."""

    bins: int
    points: int

    def __post_init__(self) -> None:
        if not 1 <= self.bins <= self.points:
            raise ValueError("a density needs between 1 and the grid's points bins")

    def bin_of(self, points: np.ndarray) -> np.ndarray:
        """The bin of each grid point (int64; exact: ``points × bins < 2⁴⁹``)."""
        return (np.asarray(points, dtype=np.int64) * self.bins) // self.points

    @property
    def first_points(self) -> np.ndarray:
        """(bins + 1,) the first grid point of each bin, and ``points`` last."""
        starts = -((-np.arange(self.bins + 1, dtype=np.int64) * self.points) // self.bins)  # ⌈b·P/B⌉
        return starts

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.first_points)


LOG_GRID_POINTS = 4096
"""Points of a public log grid (``value_transform: log``): 4,096 over the range's decades, about
0.4 % apart in value over 7 decades."""


@dataclass(frozen=True)
class LogDensityGrid:
    """A public grid uniform in ``t = log10(1 + x − lo)`` over the value range (``value_transform:
    log``, for scale data such as populations, whose objects' spread grows with their size): point
    ``j`` is ``t_j = j·T/(P − 1)``, ``T = log10(1 + hi − lo)``, released as the value grid's
    nearest value to ``lo + 10^{t_j} − 1``. A claim's point is ``round(t(clip(x))·(P − 1)/T)``,
    a function of the claim alone, so the mechanism's proof is unchanged; its bins are contiguous
    in ``t`` and the mass within a bin is spread evenly in ``t`` (log-uniformly in value)."""

    values_grid: ValueGrid
    size: int = LOG_GRID_POINTS

    def __post_init__(self) -> None:
        if self.size < 2:
            raise ValueError("a log grid needs at least 2 points")

    @property
    def span(self) -> float:
        return math.log10(1.0 + self.values_grid.high - self.values_grid.low)

    def points_of(self, values: np.ndarray) -> np.ndarray:
        clipped, _ = self.values_grid.clip(values)
        t = np.log10(1.0 + clipped - self.values_grid.low)
        return np.clip(np.rint(t * ((self.size - 1) / self.span)).astype(np.int64), 0, self.size - 1)

    def values(self, points: np.ndarray) -> np.ndarray:
        t = np.asarray(points, dtype=np.float64) * (self.span / (self.size - 1))
        return self.values_grid.round(self.values_grid.low + np.power(10.0, t) - 1.0)


def grid_points(values: np.ndarray, grid: ValueGrid | LogDensityGrid) -> np.ndarray:
    """Each claim's grid point ``round((clip(x) − lo)/p)`` (int64; a log grid's
    :meth:`LogDensityGrid.points_of`): a function of the claim alone."""
    if isinstance(grid, LogDensityGrid):
        return grid.points_of(values)
    clipped, _ = grid.clip(values)
    steps = np.rint(clipped / grid.precision).astype(np.int64) - grid.first_step
    return np.clip(steps, 0, grid.size - 1)


def object_counts(points: np.ndarray, bins: DensityBins) -> np.ndarray:
    """``c_b``: the object's claims in each bin (int64)."""
    return np.bincount(bins.bin_of(points), minlength=bins.bins).astype(np.int64)


def noise_scale(epsilon: float) -> Fraction:
    """The discrete Laplace scale of an object's counts for ``ε``-DP: ``Δ/ε`` with ``Δ = 2``, rounded up."""
    return discrete_laplace_scale(epsilon, COUNT_SENSITIVITY)


def noisy_counts(counts: np.ndarray, scale: Fraction, rng: np.random.Generator) -> np.ndarray:
    """``ỹ = c + Z``, ``Z`` exact discrete Laplace of ``scale`` per bin (module docstring, step 2)."""
    return np.asarray(counts, dtype=np.int64) + sample_discrete_laplace(scale, len(counts), rng)


def released_density(noisy: np.ndarray, bins: DensityBins) -> np.ndarray:
    """The released mass of each bin (float64, sums to 1): ``max(ỹ, 0)`` normalized; all zero: the
    uniform density on the grid (each bin its share of points). Post-processing of ``ỹ`` alone."""
    mass = np.maximum(np.asarray(noisy, dtype=np.int64), 0).astype(np.float64)
    total = mass.sum()
    if total == 0:
        return bins.sizes / bins.points
    return mass / total


def stratified_points(mass: np.ndarray, bins: DensityBins, claims: int, offset: float) -> np.ndarray:
    """The grid points at the quantiles ``(k − offset)/m``, ``k = 1..m``, of the density ``mass``
    (evenly spread over each bin's points): module docstring, step 4. Sorted, int64."""
    if not 0 <= offset < 1:
        raise ValueError("the offset must be in [0, 1)")
    quantiles = (np.arange(1, claims + 1, dtype=np.float64) - offset) / claims
    cumulative = np.cumsum(mass)
    cumulative[-1] = 1.0  # the float sum may fall short of 1 by an ulp: the last bin closes the range
    chosen = np.searchsorted(cumulative, quantiles, side="left")
    chosen = np.minimum(chosen, bins.bins - 1)
    below = np.where(chosen > 0, cumulative[np.maximum(chosen - 1, 0)], 0.0)
    inside = np.where(mass[chosen] > 0, (quantiles - below) / np.where(mass[chosen] > 0, mass[chosen], 1.0), 0.0)
    sizes = bins.sizes[chosen]
    position = np.minimum(np.floor(np.clip(inside, 0.0, 1.0) * sizes).astype(np.int64), sizes - 1)
    return bins.first_points[chosen] + position


@dataclass(frozen=True)
class DensityParameters:
    """The public parameters of the mechanism: the grid (linear, or a public log grid), ``m`` and each object's ``epsilon``
    (``ε`` for the claim unit, ``ε_0`` for the source unit: :func:`per_object_epsilon`)."""

    grid: ValueGrid | LogDensityGrid
    claims_per_object: int
    epsilon: float
    minimum_claims: int = 1

    def bins(self, claims: int) -> DensityBins:
        return DensityBins(bins_for(claims, self.epsilon, self.grid.size), self.grid.size)


@dataclass(frozen=True)
class DensityOutcome:
    """One block's outcome: the released claims (``object_id``, ``claim_index``, ``value``) and per
    object its bins and whether it was released (suppressed: fewer claims than the floor)."""

    claims: pd.DataFrame
    bins: np.ndarray
    released: np.ndarray


def synthesize_object(points: np.ndarray, parameters: DensityParameters, noise: np.random.Generator,
                      sampling: np.random.Generator) -> tuple[np.ndarray, int]:
    """One object's released grid points (``m``, shuffled) from its claims' ``points``, and its bins."""
    bins = parameters.bins(len(points))
    noisy = noisy_counts(object_counts(points, bins), noise_scale(parameters.epsilon), noise)
    mass = released_density(noisy, bins)
    offset = float(sampling.random())
    released = stratified_points(mass, bins, parameters.claims_per_object, offset)
    return sampling.permutation(released), bins.bins


def synthesize_density_block(block: ClaimsBlock, parameters: DensityParameters, secret: bytes,
                             release_id: str) -> DensityOutcome:
    """Every object of ``block``: its noisy histogram and ``m`` synthetic claims (module docstring).
    Objects below ``parameters.minimum_claims`` claims are suppressed (a public count)."""
    counts = block.counts
    m = parameters.claims_per_object
    released = counts >= max(1, parameters.minimum_claims)
    chosen = np.flatnonzero(released)
    values = np.empty(len(chosen) * m, dtype=np.float64)
    bins = np.zeros(block.number_of_objects, dtype=np.int64)
    for row, object_index in enumerate(chosen):
        object_id = object_id_key(block.object_ids[object_index])
        points = grid_points(block.values[block.object_slice(object_index)], parameters.grid)
        drawn, bins[object_index] = synthesize_object(
            points, parameters, keyed_generator(secret, release_id, NOISE_PURPOSE, object_id),
            keyed_generator(secret, release_id, SAMPLE_PURPOSE, object_id))
        values[row * m:(row + 1) * m] = parameters.grid.values(drawn)
    frame = pd.DataFrame({
        "object_id": np.repeat(block.object_ids[chosen], m),
        "claim_index": np.tile(np.arange(m, dtype=np.int32), len(chosen)),
        "value": values,
    })
    return DensityOutcome(frame, bins, released)


def per_object_epsilon(epsilon: float, delta: float, objects_per_unit: int) -> float:
    """The per-object ``ε_0`` (module docstring, "Whole release"): ``ε`` itself when a unit reaches
    one object (the claim unit); else the largest ``ε_0`` (to 10⁻⁶ relative, by bisection) whose
    ``objects_per_unit``-fold composition is within ``ε`` at ``δ``."""
    if not (math.isfinite(epsilon) and epsilon > 0) or not 0 < delta < 1 or objects_per_unit < 1:
        raise ValueError("per_object_epsilon needs a positive epsilon, delta in (0, 1) and objects_per_unit >= 1")
    if objects_per_unit == 1:
        return float(epsilon)

    def composed(epsilon0: float) -> float:
        return compose([PrivacyStep(PURE_DP, epsilon0, 0.0, objects_per_unit)], delta).epsilon

    low, high = epsilon / objects_per_unit, float(epsilon)  # basic composition's ε/L always fits
    for _ in range(60):
        if high - low <= 1e-6 * low:
            break
        middle = 0.5 * (low + high)
        low, high = (middle, high) if composed(middle) <= epsilon else (low, middle)
    return low


def density_steps(epsilon0: float, objects_per_unit: int) -> list[PrivacyStep]:
    """What one release runs for its unit: one object's noisy histogram (``ε_0``-DP), for each of
    the ``objects_per_unit`` objects a unit reaches."""
    return [PrivacyStep(PURE_DP, epsilon0, 0.0, objects_per_unit, what="one object's noisy histogram")]


HISTOGRAM_NOT_COVERED = (
    "the claim counts per object and which sources answered which objects (public by the neighbouring "
    "relation; each object's number of bins is a function of its claim count)",
    "operator figures in the internal table: clipped values, timings, the evaluation against ground truth",
    "the commit time of the published snapshot, which reveals roughly how long the release ran",
    "refusals: the guarantee is over valid inputs (finite, inside the value range or clipped into it); "
    "with out_of_range: reject or a failed validation the job publishes nothing, and that it refused is visible",
)


@dataclass(frozen=True)
class HistogramMechanism:
    """The public parameters of a ``histogram`` release's guarantee (none computed from the claims):
    the whole-release ``epsilon`` for the unit, ``m``, the suppression floor and ``L`` for the source
    unit (``None``: the claim unit)."""

    epsilon: float
    claims_per_object: int
    minimum_claims: int
    objects_per_source: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError("epsilon must be a finite positive number")
        if self.claims_per_object < 1 or self.minimum_claims < 1:
            raise ValueError("m and the suppression floor must be positive")
        if self.objects_per_source is not None and self.objects_per_source < 1:
            raise ValueError("L must be positive")

    @property
    def objects_per_unit(self) -> int:
        return 1 if self.objects_per_source is None else self.objects_per_source


def histogram_guarantee(mechanism: HistogramMechanism, delta: float | None) -> dict[str, Any]:
    """The guarantee of a ``histogram`` release as a JSON-ready dict (module docstring, "Whole
    release"): the headline (ε, δ) first, the per-object ``ε_0`` and the steps the ledger composes.
    Claim unit: pure ``ε``-DP (δ = 0), whatever ``m``. Source unit: the ``L``-fold composition of
    ``ε_0``-DP histograms at ``delta``, its (ε, δ) by the platform's accountant."""
    objects = mechanism.objects_per_unit
    if objects == 1:
        epsilon0, headline_delta = float(mechanism.epsilon), 0.0
    else:
        if delta is None:
            raise ValueError("the source unit needs privacy.delta (the L objects' histograms compose at it)")
        epsilon0, headline_delta = per_object_epsilon(mechanism.epsilon, delta, objects), float(delta)
    steps = density_steps(epsilon0, objects)
    composition = compose(steps, headline_delta) if objects > 1 else None
    epsilon = composition.epsilon if composition is not None else epsilon0
    unit = privacy_unit(mechanism.objects_per_source)
    step_json = [step.to_json() for step in steps]
    return {
        "epsilon": float(epsilon),
        "delta": headline_delta,
        "privacy_unit": unit,
        "scope": "everything the release publishes: every released claim of every object, whole release, "
                 "for any number of claims per object",
        "composition": composition.method if composition is not None else "parallel (one object per unit)",
        "basic_composition": {"epsilon": composition.basic_epsilon if composition is not None else epsilon0,
                              "delta": 0.0},
        "per_object": {"epsilon": epsilon0, "delta": 0.0, "sensitivity_l1": COUNT_SENSITIVITY,
                       "noise": f"discrete Laplace of scale {COUNT_SENSITIVITY}/epsilon_0 per bin (exact sampler)"},
        "per_record": {"epsilon": float(epsilon), "delta": headline_delta, "steps": step_json,
                       "covers": "one input claim is the record: it enters one object's histogram, so the "
                                 "per-record figure is the whole-release bound"},
        "steps": step_json,
        "mechanism": {"name": "histogram", **asdict(mechanism)},
        "not_covered": list(HISTOGRAM_NOT_COVERED),
    }
