"""Seed-based synthesis: candidates generated from seed records through the Bayesian network.

Issue 3, step 6 (Bindschaedler et al., VLDB 2017, Section 5, "seed-based synthesis"): pick a
seed ``d`` uniformly from ``DS``; keep its first ``m − ω`` attributes in the order σ; resample the
other ``ω`` attributes, in σ order, each from its conditional distribution given the
candidate's own (already final) parent values. Parents come before their child in σ, so every
parent value is final when the child is drawn. ``ω = m`` is plain sampling from the model; ``ω = 0``
copies the seed.

Draws from ``rng``, in this order: the seed positions (one ``integers`` call), then one array of
uniforms per resampled attribute in σ order. A value is the first child code whose cumulative
probability exceeds the uniform (inverse CDF; a zero-probability code is never chosen).

The seeds are a matrix, or any :class:`SeedRows` — their number and the rows at given positions —
so that a caller may keep them elsewhere (an engine's staged files) and read only the rows a batch
draws; the candidates are the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from transforms.tabular.contingency import joint_index
from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.parameter_learning import ConditionalTables


@dataclass(frozen=True)
class Candidates:
    """``codes`` int32 ``(count, m)``; ``seed_positions`` int64: each candidate's seed, a row of the seed matrix."""

    codes: np.ndarray
    seed_positions: np.ndarray


@runtime_checkable
class SeedRows(Protocol):
    """Seeds kept elsewhere: ``seed_count`` rows of ``attribute_count`` codes, in position order."""

    seed_count: int
    attribute_count: int

    def take_rows(self, positions: np.ndarray) -> np.ndarray:
        """The int32 ``(len(positions), m)`` codes of the seeds at ``positions``."""


def kept_and_resampled(structure: NetworkStructure, omega: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The first ``m − ω`` attributes of σ (kept from the seed) and the last ``ω`` (resampled), in σ order."""
    attribute_count = structure.attribute_count
    if (
        isinstance(omega, bool)
        or not isinstance(omega, int | np.integer)
        or not 0 <= omega <= attribute_count
    ):
        raise ValueError(f"omega must be an integer in [0, {attribute_count}] (got {omega})")
    cut = attribute_count - int(omega)
    return tuple(structure.order[:cut]), tuple(structure.order[cut:])


def cumulative_table(conditionals: ConditionalTables, attribute: int) -> np.ndarray:
    """Row-wise cumulative sums of the flat conditional table, the last column set to exactly 1."""
    cumulative = np.cumsum(conditionals.flat_table(attribute), axis=1)
    cumulative[:, -1] = 1.0
    return cumulative


def sample_rows(cumulative: np.ndarray, rows: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """For each ``(row, u)``, the smallest column ``c`` with ``cumulative[row, c] > u`` (vectorized binary search)."""
    column_count = cumulative.shape[1]
    flat = cumulative.reshape(-1)
    base = rows.astype(np.int64) * column_count
    low = np.zeros(rows.shape[0], dtype=np.int64)
    high = np.full(rows.shape[0], column_count - 1, dtype=np.int64)
    while True:
        open_ = low < high
        if not open_.any():
            return low
        middle = (low + high) // 2
        above = flat[base + middle] > uniforms
        high = np.where(open_ & above, middle, high)
        low = np.where(open_ & ~above, middle + 1, low)


def synthesize_candidates(
    seeds_codes: np.ndarray,
    structure: NetworkStructure,
    conditionals: ConditionalTables,
    omega: int,
    candidate_count: int,
    rng: np.random.Generator,
) -> Candidates:
    """``candidate_count`` candidates, each from a seed of ``seeds_codes`` (a matrix or
    :class:`SeedRows`) chosen uniformly (module docstring)."""
    if isinstance(seeds_codes, SeedRows):
        seed_count, width, take = seeds_codes.seed_count, seeds_codes.attribute_count, seeds_codes.take_rows
    else:
        seeds_codes = np.asarray(seeds_codes)
        if seeds_codes.ndim != 2:
            raise ValueError(f"seeds_codes must be an (n, {structure.attribute_count}) matrix")
        seed_count, width, take = seeds_codes.shape[0], seeds_codes.shape[1], seeds_codes.__getitem__
    if width != structure.attribute_count:
        raise ValueError(f"seeds_codes must be an (n, {structure.attribute_count}) matrix")
    if seed_count == 0:
        raise ValueError("there are no seed records to synthesize from")
    if (
        isinstance(candidate_count, bool)
        or not isinstance(candidate_count, int | np.integer)
        or candidate_count < 0
    ):
        raise ValueError("candidate_count must be a non-negative integer")
    if tuple(conditionals.parents) != tuple(structure.parents):
        raise ValueError("the conditionals were learned for a different network structure")
    _, resampled = kept_and_resampled(structure, omega)
    seed_positions = rng.integers(0, seed_count, size=int(candidate_count), dtype=np.int64)
    codes = np.asarray(take(seed_positions)).astype(np.int32)
    sizes = conditionals.domain_sizes
    for attribute in resampled:
        rows = joint_index(codes, structure.parents[attribute], sizes)
        uniforms = rng.random(codes.shape[0])
        codes[:, attribute] = sample_rows(cumulative_table(conditionals, attribute), rows, uniforms)
    return Candidates(codes=codes, seed_positions=seed_positions)
