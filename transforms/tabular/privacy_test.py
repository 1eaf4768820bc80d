"""The randomized plausible-deniability test for seed-based synthesis, in its general and indexed forms.

Issue 3, step 7; Bindschaedler, Shokri, Gunter (VLDB 2017), Privacy Test 2 (randomized) and
Theorem 1. For a candidate ``y`` generated from the seed ``d``: find the integer ``a ≥ 0`` with
``γ^{-a-1} < Pr{y = M(d)} ≤ γ^{-a}``, count the seeds ``d'`` of ``DS`` (``d`` included) whose
``Pr{y = M(d')}`` falls in the same interval — that count is ``k'`` — and release ``y`` iff
``k' ≥ k̃ = k + Lap(1/ε0)``.

Two computations of ``k'``, which must agree (tested):

* General: ``Pr{y = M(d)}`` for every candidate and every seed, by the chain rule over σ of the
  generative process: a kept attribute contributes ``1[y_j = d_j]``, a resampled one
  ``P(y_j | y's parent values)``; then the γ-interval of every entry, in log space.
* Indexed (this model's exact shortcut): the resampled factors depend on ``y`` only, so
  ``Pr{y = M(d')} = 1[d' agrees with y on the kept attributes] · Q(y)`` with the same ``Q(y) > 0``
  for every agreeing seed. All agreeing seeds share ``d``'s interval and all others have
  probability zero (in no interval), so ``k'`` is the number of seeds that agree with ``y`` on
  the kept attributes: a count from an index of ``DS`` grouped by those attributes (a
  ``groupBy().count()`` at scale).

Privacy (Theorem 1): one invocation — seed, candidate, test — is ``(ε0 + ln(1 + γ/t),
e^{−ε0(k−t)})``-DP on ``DS`` for every integer ``1 ≤ t < k``, neighbours being seed sets of the same
public size that differ by one replaced record; see ``tabular_guarantee``. The
Laplace threshold is floating-point noise, acceptable because only the comparison's outcome is
released (DESIGN.md); it is drawn by ``transforms.core.plausible_deniability.noisy_threshold``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from transforms.core.plausible_deniability import (
    deniability_counts,
    deniability_interval_index,
    noisy_threshold,
)
from transforms.tabular.contingency import joint_index
from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.parameter_learning import ConditionalTables
from transforms.tabular.seed_synthesis import kept_and_resampled

DEFAULT_CHUNK_CELLS = 1 << 22
"""Entries of the candidates × seeds matrix computed at once by the general form (bounds memory)."""

_KEY_LIMIT = 1 << 62


def resampled_log_probability(
    candidate_codes: np.ndarray, structure: NetworkStructure, conditionals: ConditionalTables, omega: int
) -> np.ndarray:
    """``log Q(y) = Σ_{resampled j} log P(y_j | y_{Π_j})`` per candidate (``−inf`` where a factor is zero)."""
    candidate_codes = np.asarray(candidate_codes)
    _, resampled = kept_and_resampled(structure, omega)
    total = np.zeros(candidate_codes.shape[0], dtype=np.float64)
    with np.errstate(divide="ignore"):
        for attribute in resampled:
            rows = joint_index(candidate_codes, structure.parents[attribute], conditionals.domain_sizes)
            total += np.log(conditionals.flat_table(attribute)[rows, candidate_codes[:, attribute]])
    return total


def _log_probability_blocks(
    candidate_codes: np.ndarray,
    seeds_codes: np.ndarray,
    structure: NetworkStructure,
    conditionals: ConditionalTables,
    omega: int,
    chunk_cells: int,
) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(start, stop, log Pr{y = M(d)})`` for consecutive row blocks of about ``chunk_cells`` entries."""
    candidate_codes = np.asarray(candidate_codes)
    seeds_codes = np.asarray(seeds_codes)
    kept, _ = kept_and_resampled(structure, omega)
    candidate_count, seed_count = candidate_codes.shape[0], seeds_codes.shape[0]
    rows_per_chunk = max(1, int(chunk_cells) // max(1, seed_count))
    resampled_part = resampled_log_probability(candidate_codes, structure, conditionals, omega)
    for start in range(0, candidate_count, rows_per_chunk):
        stop = min(candidate_count, start + rows_per_chunk)
        block = np.zeros((stop - start, seed_count), dtype=np.float64)
        for attribute in kept:
            agrees = candidate_codes[start:stop, attribute][:, None] == seeds_codes[None, :, attribute]
            block[~agrees] = -np.inf
        block += resampled_part[start:stop, None]
        yield start, stop, block


def candidate_log_probabilities_under_seeds(
    candidate_codes: np.ndarray,
    seeds_codes: np.ndarray,
    structure: NetworkStructure,
    conditionals: ConditionalTables,
    omega: int,
    chunk_cells: int = DEFAULT_CHUNK_CELLS,
) -> np.ndarray:
    """``log Pr{y = M(d)}`` for every candidate ``y`` (rows) and seed ``d`` (columns), by the chain rule.

    Walks σ: the ``m − ω`` kept attributes each multiply by ``1[y_j = d_j]`` (``0`` or ``−inf`` in
    log), the ``ω`` resampled ones by ``P(y_j | y_{Π_j})`` (the same for every seed, computed once).
    Computed ``chunk_cells`` entries at a time; the result itself is candidates × seeds.
    """
    result = np.empty((np.shape(candidate_codes)[0], np.shape(seeds_codes)[0]), dtype=np.float64)
    for start, stop, block in _log_probability_blocks(
        candidate_codes, seeds_codes, structure, conditionals, omega, chunk_cells
    ):
        result[start:stop] = block
    return result


def general_deniability_counts_chunked(
    candidate_codes: np.ndarray,
    seed_positions: np.ndarray,
    seeds_codes: np.ndarray,
    structure: NetworkStructure,
    conditionals: ConditionalTables,
    omega: int,
    gamma: float,
    chunk_cells: int = DEFAULT_CHUNK_CELLS,
) -> np.ndarray:
    """The general form's ``k'`` without holding the whole matrix: the γ-interval counts block by block
    (memory bounded by ``chunk_cells``; the benchmark's general vectorized form)."""
    seed_positions = np.asarray(seed_positions, dtype=np.int64)
    counts = np.empty(seed_positions.shape[0], dtype=np.int64)
    for start, stop, block in _log_probability_blocks(
        candidate_codes, seeds_codes, structure, conditionals, omega, chunk_cells
    ):
        counts[start:stop] = deniability_counts(block, seed_positions[start:stop], gamma)
    return counts


def candidate_probabilities_under_seeds(
    candidate_codes: np.ndarray,
    seeds_codes: np.ndarray,
    structure: NetworkStructure,
    conditionals: ConditionalTables,
    omega: int,
    chunk_cells: int = DEFAULT_CHUNK_CELLS,
) -> np.ndarray:
    """``Pr{y = M(d)}`` (candidates × seeds): the general form (``exp`` of the log form)."""
    return np.exp(
        candidate_log_probabilities_under_seeds(
            candidate_codes, seeds_codes, structure, conditionals, omega, chunk_cells
        )
    )


def deniability_interval(probabilities: np.ndarray, gamma: float) -> np.ndarray:
    """The ``a ≥ 0`` with ``γ^{-a-1} < p ≤ γ^{-a}``, computed from ``log p``; ``p = 0`` is in no interval (−1)."""
    with np.errstate(divide="ignore"):
        return deniability_interval_index(np.log(np.asarray(probabilities, dtype=np.float64)), gamma)


def general_deniability_counts(
    probabilities: np.ndarray, seed_positions: np.ndarray, gamma: float
) -> np.ndarray:
    """``k'`` per candidate from the candidates × seeds probability matrix and each candidate's own seed."""
    with np.errstate(divide="ignore"):
        log_probabilities = np.log(np.asarray(probabilities, dtype=np.float64))
    return deniability_counts(log_probabilities, np.asarray(seed_positions, dtype=np.int64), gamma)


@dataclass(frozen=True)
class SeedIndex:
    """The seeds grouped by their values on the kept attributes: sorted keys and their counts.

    A key is the mixed-radix ``joint_index`` of the kept attributes. When the product of their
    domain sizes would overflow int64 the key is built in blocks: after a block the partial keys
    are replaced by their rank among the seeds' distinct partial keys (a value no seed has gets
    the rank ``len(ranks)``, which then matches no seed), so keys stay exact.
    """

    kept_attributes: tuple[int, ...]
    domain_sizes: tuple[int, ...]
    blocks: tuple[tuple[int, ...], ...]
    block_ranks: tuple[np.ndarray, ...]
    keys: np.ndarray
    counts: np.ndarray

    @classmethod
    def build(
        cls, seeds_codes: np.ndarray, structure: NetworkStructure, omega: int, domain_sizes: Sequence[int]
    ) -> SeedIndex:
        seeds_codes = np.asarray(seeds_codes)
        if seeds_codes.ndim != 2 or seeds_codes.shape[1] != structure.attribute_count:
            raise ValueError(f"seeds_codes must be an (n, {structure.attribute_count}) matrix")
        sizes = tuple(int(size) for size in domain_sizes)
        kept, _ = kept_and_resampled(structure, omega)
        blocks: list[tuple[int, ...]] = []
        current: list[int] = []
        bound = 1
        for attribute in kept:
            if current and bound * sizes[attribute] > _KEY_LIMIT:
                blocks.append(tuple(current))
                current, bound = [], seeds_codes.shape[0] + 1
            current.append(attribute)
            bound *= sizes[attribute]
        blocks.append(tuple(current))
        block_ranks: list[np.ndarray] = []
        key = np.zeros(seeds_codes.shape[0], dtype=np.int64)
        for position, block in enumerate(blocks):
            key = _extend_key(key, seeds_codes, block, sizes)
            if position < len(blocks) - 1:
                ranks = np.unique(key)
                block_ranks.append(ranks)
                key = np.searchsorted(ranks, key).astype(np.int64)
        keys, counts = np.unique(key, return_counts=True)
        return cls(
            kept_attributes=kept,
            domain_sizes=sizes,
            blocks=tuple(blocks),
            block_ranks=tuple(block_ranks),
            keys=keys,
            counts=counts.astype(np.int64),
        )

    @staticmethod
    def fits_one_key(structure: NetworkStructure, omega: int, domain_sizes: Sequence[int]) -> bool:
        """Whether the kept attributes' joint values fit one int64 key (no blocks), so the index can
        be counted anywhere as ``groupBy(joint_index).count()`` and assembled by ``from_key_counts``."""
        kept, _ = kept_and_resampled(structure, omega)
        bound = 1
        for attribute in kept:
            bound *= int(domain_sizes[attribute])
        return bound <= _KEY_LIMIT

    @classmethod
    def from_key_counts(
        cls,
        structure: NetworkStructure,
        omega: int,
        domain_sizes: Sequence[int],
        keys: np.ndarray,
        counts: np.ndarray,
    ) -> SeedIndex:
        """The index from seed counts per ``joint_index`` of the kept attributes (computed elsewhere,
        e.g. summed over partitions); only when ``fits_one_key``. Equal to ``build`` on the same seeds."""
        if not cls.fits_one_key(structure, omega, domain_sizes):
            raise ValueError("the kept attributes' key overflows int64: build the index from the seeds")
        kept, _ = kept_and_resampled(structure, omega)
        order = np.argsort(np.asarray(keys, dtype=np.int64), kind="stable")
        return cls(
            kept_attributes=kept,
            domain_sizes=tuple(int(size) for size in domain_sizes),
            blocks=(kept,),
            block_ranks=(),
            keys=np.asarray(keys, dtype=np.int64)[order],
            counts=np.asarray(counts, dtype=np.int64)[order],
        )

    def keys_of(self, codes: np.ndarray) -> np.ndarray:
        """The index key of each row of ``codes`` (codes within their domains)."""
        codes = np.asarray(codes)
        key = np.zeros(codes.shape[0], dtype=np.int64)
        for position, block in enumerate(self.blocks):
            key = _extend_key(key, codes, block, self.domain_sizes)
            if position < len(self.blocks) - 1:
                key = _rank_or_absent(self.block_ranks[position], key)
        return key

    def agreeing_counts(self, candidate_codes: np.ndarray) -> np.ndarray:
        """``k'`` per candidate: the number of seeds equal to it on every kept attribute (int64)."""
        key = self.keys_of(candidate_codes)
        if self.keys.size == 0:
            return np.zeros(key.shape[0], dtype=np.int64)
        position = np.searchsorted(self.keys, key)
        inside = position < self.keys.size
        found = np.zeros(key.shape[0], dtype=bool)
        found[inside] = self.keys[position[inside]] == key[inside]
        return np.where(found, self.counts[np.minimum(position, self.keys.size - 1)], 0).astype(np.int64)


def _extend_key(
    key: np.ndarray, codes: np.ndarray, block: tuple[int, ...], sizes: Sequence[int]
) -> np.ndarray:
    radix = int(np.prod([sizes[attribute] for attribute in block], dtype=np.int64)) if block else 1
    return key * radix + joint_index(codes, block, sizes)


def _rank_or_absent(ranks: np.ndarray, key: np.ndarray) -> np.ndarray:
    position = np.searchsorted(ranks, key)
    inside = position < ranks.size
    found = np.zeros(key.shape[0], dtype=bool)
    found[inside] = ranks[position[inside]] == key[inside]
    return np.where(found, position, ranks.size).astype(np.int64)


def plausible_deniability_test(
    k_prime: np.ndarray, k: int, epsilon0: float, rng: np.random.Generator
) -> np.ndarray:
    """Privacy Test 2: pass iff ``k' ≥ k + Lap(1/ε0)``, a fresh threshold per candidate (boolean mask)."""
    k_prime = np.asarray(k_prime)
    return k_prime >= noisy_threshold(k, epsilon0, rng, k_prime.shape)
