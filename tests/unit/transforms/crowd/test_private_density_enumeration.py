"""Exact enumeration of the ``histogram`` mechanism's output distribution on small neighbouring
inputs (issue 29; docs/PRIVACY.md "Crowd", the histogram mechanism).

One object on a public grid of 3 points (``ValueGrid(0, 2, 1)``), ``n`` claims, ``m = 2`` released
claims, ε = 2. The released claims are a function of the clipped noisy counts ``max(ỹ, 0)`` and the
stratified offset ``U``; the test enumerates every clipped-count vector up to ``c + K`` (the mass
beyond, at most a few 10⁻⁶, is the ``tail`` slack), and for each the exact law of the released
multiset over ``U`` (the sampler's output is constant between the breakpoints ``U = k − m·F_j``).
Each step is the module's own code: ``grid_points``, the public bins ``DensityParameters.bins``,
``object_counts``, ``noise_scale``, ``released_density`` and ``stratified_points``.

Claim: for every pair of neighbours (one claim's value changed) and every output ``o``,
``P_D(o) ≤ e^ε (P_D'(o) + tail_D')``. Known-bad variants must break it on the same inputs: the
sensitivity taken as 1 (noise half as wide), bins fitted to the object's claims, and claim weights
that depend on the object's other claims (an agreeing claim counts twice, as a robust local weight
would make it)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest

from transforms.core.discrete_laplace import discrete_laplace_scale
from transforms.crowd.private_density import (
    DensityBins,
    DensityParameters,
    grid_points,
    noise_scale,
    object_counts,
    released_density,
    stratified_points,
)
from transforms.crowd.value_grid import ValueGrid

EPSILON = 2.0
GRID = ValueGrid(0.0, 2.0, 1.0)
M = 2
K = 12
"""Clipped counts enumerated up to ``c_b + K``: the discrete Laplace of scale 1 puts ``e^{-13}/(1 + e^{-1})``
beyond, per bin."""


@dataclass(frozen=True)
class Variant:
    scale: Callable[[float], Fraction]
    bins: Callable[[np.ndarray], DensityBins]
    counts: Callable[[np.ndarray, DensityBins], np.ndarray]


PARAMETERS = DensityParameters(GRID, claims_per_object=M, epsilon=EPSILON)
CORRECT = Variant(noise_scale, lambda points: PARAMETERS.bins(len(points)), object_counts)
SENSITIVITY_ONE = Variant(lambda epsilon: discrete_laplace_scale(epsilon, 1), CORRECT.bins, object_counts)
FITTED_BINS = Variant(noise_scale, lambda points: DensityBins(1 if len(set(points.tolist())) == 1 else 3, 3),
                      object_counts)


def agreeing_counts_twice(points: np.ndarray, bins: DensityBins) -> np.ndarray:
    """A claim that agrees with another claim of its object weighs 2 (a data-dependent local weight)."""
    weights = np.array([2 if np.count_nonzero(points == point) > 1 else 1 for point in points])
    return np.bincount(bins.bin_of(points), weights=weights, minlength=bins.bins).astype(np.int64)


LOCAL_WEIGHTS = Variant(noise_scale, CORRECT.bins, agreeing_counts_twice)


def clipped_pmf(count: int, scale: Fraction) -> np.ndarray:
    """P(max(c + Z, 0) = v) for v = 0..c + K, Z discrete Laplace of ``scale``."""
    p = math.exp(-1 / float(scale))
    values = np.arange(count + K + 1)
    pmf = (1 - p) / (1 + p) * p ** np.abs(values - count)
    pmf[0] = p**count / (1 + p)  # P(Z <= -c)
    return pmf


def released_law(mass: np.ndarray, bins: DensityBins) -> dict[tuple[int, ...], float]:
    """The exact law of the released multiset over the offset U (the sampler is constant between
    the breakpoints where a quantile (k − U)/m meets a point's cumulative mass)."""
    cumulative = np.concatenate([[0.0], np.cumsum(np.repeat(mass / bins.sizes, bins.sizes))])
    breaks = {0.0, 1.0}
    for k in range(1, M + 1):
        for edge in cumulative:
            u = k - M * edge
            if 0 < u < 1:
                breaks.add(float(u))
    ordered = sorted(breaks)
    law: dict[tuple[int, ...], float] = {}
    for low, high in zip(ordered, ordered[1:], strict=False):
        if high - low <= 0:
            continue
        drawn = tuple(sorted(stratified_points(mass, bins, M, 0.5 * (low + high)).tolist()))
        law[drawn] = law.get(drawn, 0.0) + (high - low)
    return law


def output_law(values: tuple[float, ...], variant: Variant) -> tuple[dict[tuple[int, ...], float], float]:
    """The enumerated law of the released multiset for an object's claims, and the mass not enumerated."""
    points = grid_points(np.array(values), GRID)
    bins = variant.bins(points)
    counts = variant.counts(points, bins)
    scale = variant.scale(EPSILON)
    pmfs = [clipped_pmf(int(count), scale) for count in counts]
    law: dict[tuple[int, ...], float] = {}
    total = 0.0
    for clipped in itertools.product(*(range(len(pmf)) for pmf in pmfs)):
        probability = math.prod(pmf[value] for pmf, value in zip(pmfs, clipped, strict=True))
        total += probability
        for drawn, weight in released_law(released_density(np.array(clipped), bins), bins).items():
            law[drawn] = law.get(drawn, 0.0) + probability * weight
    return law, 1.0 - total


def neighbours(claims: int) -> list[tuple[tuple[float, ...], tuple[float, ...]]]:
    """Every pair of ``claims``-claim objects on the 3-point grid that differ in one claim's value."""
    inputs = list(itertools.combinations_with_replacement((0.0, 1.0, 2.0), claims))
    pairs = []
    for first in inputs:
        for position in range(claims):
            for value in (0.0, 1.0, 2.0):
                second = tuple(sorted(first[:position] + (value,) + first[position + 1:]))
                if second != first:
                    pairs.append((first, second))
    return pairs


def worst_excess(claims: int, variant: Variant) -> float:
    """max over neighbours and outputs of ``P_D(o) − e^ε (P_D'(o) + tail_D')`` (≤ 0: the claim holds)."""
    laws = {values: output_law(values, variant) for values in
            itertools.combinations_with_replacement((0.0, 1.0, 2.0), claims)}
    worst = -math.inf
    for first, second in neighbours(claims):
        law, _ = laws[first]
        other, tail = laws[second]
        for drawn, probability in law.items():
            worst = max(worst, probability - math.exp(EPSILON) * (other.get(drawn, 0.0) + tail))
    return worst


def test_the_enumerated_laws_are_distributions() -> None:
    law, tail = output_law((0.0, 2.0), CORRECT)
    assert 0 <= tail < 1e-4
    assert sum(law.values()) == pytest.approx(1 - tail, abs=1e-9)
    assert all(len(drawn) == M for drawn in law)


@pytest.mark.parametrize("claims", [2, 3])
def test_every_output_satisfies_the_stated_epsilon(claims: int) -> None:
    assert worst_excess(claims, CORRECT) <= 0


@pytest.mark.parametrize("variant", [SENSITIVITY_ONE, FITTED_BINS, LOCAL_WEIGHTS],
                         ids=["sensitivity-one", "fitted-bins", "local-weights"])
def test_each_known_bad_variant_breaks_it(variant: Variant) -> None:
    assert worst_excess(2, variant) > 1e-3
