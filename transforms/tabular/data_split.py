"""The disjoint split of the records into seeds ``DS``, structure data ``DT`` and parameter data ``DP``.

Issue 3, step 3 (Bindschaedler et al., VLDB 2017, Section 5: the generative model is learned on
records disjoint from the seeds). The split is a keyed random permutation of the record
*positions* cut by the configured fractions, so it depends only on the public record count and
the release's keyed randomness, never on the values.

Neighbouring notion of the tabular kind: the number of records is public and neighbouring
datasets differ by replacing the record at one position. Because the permutation is the same on
both datasets, the replaced record falls in the same part on both, and the other parts are
identical — which is what parallel composition over ``DS``, ``DT`` and ``DP`` needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np


@dataclass(frozen=True)
class DataSplit:
    """Sorted, pairwise disjoint record positions (int64) of each part; positions in no part are unused."""

    seeds: np.ndarray
    structure: np.ndarray
    parameters: np.ndarray


def _as_decimal_fraction(name: str, value: float) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number in [0, 1]")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1] (got {value})")
    return Fraction(repr(float(value)))


def part_sizes(
    record_count: int, seed_fraction: float, structure_fraction: float, parameter_fraction: float
) -> tuple[int, int, int]:
    """``floor(fraction · n)`` for each part, the fractions read as the decimals they print as
    (``0.29`` is exactly 29/100), so sizes do not suffer binary rounding. The fractions must sum to
    at most one."""
    if isinstance(record_count, bool) or not isinstance(record_count, int | np.integer) or record_count < 0:
        raise ValueError("record_count must be a non-negative integer")
    fractions = [
        _as_decimal_fraction("seed_fraction", seed_fraction),
        _as_decimal_fraction("structure_fraction", structure_fraction),
        _as_decimal_fraction("parameter_fraction", parameter_fraction),
    ]
    if sum(fractions) > 1:
        raise ValueError(
            f"the split fractions must sum to at most 1 (got {seed_fraction} + {structure_fraction} "
            f"+ {parameter_fraction})"
        )
    seeds, structure, parameters = (math.floor(fraction * int(record_count)) for fraction in fractions)
    return seeds, structure, parameters


def split_positions(
    record_count: int,
    seed_fraction: float,
    structure_fraction: float,
    parameter_fraction: float,
    rng: np.random.Generator,
) -> DataSplit:
    """Cut ``rng.permutation(record_count)`` into the seed, structure and parameter parts, in that
    order, of ``part_sizes`` records each; every part is returned sorted."""
    seeds, structure, parameters = part_sizes(
        record_count, seed_fraction, structure_fraction, parameter_fraction
    )
    permutation = rng.permutation(int(record_count)).astype(np.int64)
    return DataSplit(
        seeds=np.sort(permutation[:seeds]),
        structure=np.sort(permutation[seeds : seeds + structure]),
        parameters=np.sort(permutation[seeds + structure : seeds + structure + parameters]),
    )


def minimum_record_count(
    k: int, seed_fraction: float, structure_fraction: float, parameter_fraction: float
) -> int:
    """The smallest record count whose split has at least ``k`` seeds and at least one record in each of
    ``DT`` and ``DP`` (the smallest ``n`` with ``floor(f·n) ≥ c`` is ``ceil(c/f)``, exactly)."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError("k must be a positive integer")
    needed = 0
    for name, fraction, count in (
        ("seed_fraction", seed_fraction, int(k)),
        ("structure_fraction", structure_fraction, 1),
        ("parameter_fraction", parameter_fraction, 1),
    ):
        exact = _as_decimal_fraction(name, fraction)
        if exact == 0:
            raise ValueError(f"{name} is 0: that part of the split would be empty for any number of records")
        needed = max(needed, math.ceil(count / exact))
    part_sizes(needed, seed_fraction, structure_fraction, parameter_fraction)
    return needed


PART_OF_SEEDS, PART_OF_STRUCTURE, PART_OF_PARAMETERS, PART_OF_NONE = 0, 1, 2, 3


def split_parts(
    record_count: int,
    seed_fraction: float,
    structure_fraction: float,
    parameter_fraction: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """The part of every position (int8: 0 seeds, 1 structure, 2 parameters, 3 unused) of exactly
    the split :func:`split_positions` makes with the same ``rng``, in 5 bytes per record instead
    of 40: ``Generator.permutation(n)`` shuffles ``arange(n)`` with draws that do not depend on the
    array's type, so an int32 (or int64 above 2^31 records) array shuffled in place is the same
    permutation."""
    seeds, structure, parameters = part_sizes(
        record_count, seed_fraction, structure_fraction, parameter_fraction
    )
    count = int(record_count)
    permutation = np.arange(count, dtype=np.int32 if count < 2**31 else np.int64)
    rng.shuffle(permutation)
    parts = np.full(count, PART_OF_NONE, dtype=np.int8)
    parts[permutation[:seeds]] = PART_OF_SEEDS
    parts[permutation[seeds : seeds + structure]] = PART_OF_STRUCTURE
    parts[permutation[seeds + structure : seeds + structure + parameters]] = PART_OF_PARAMETERS
    return parts
