"""Seed-based synthesis against a brute-force enumeration of the generative process."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.seed_synthesis import kept_and_resampled, sample_rows, synthesize_candidates

from .random_models import (
    brute_force_generation_probability,
    random_codes,
    random_conditionals,
    random_structure,
)


def candidate_distribution(seeds, structure, conditionals, omega, sizes) -> dict[tuple[int, ...], float]:
    outcomes = {}
    for y in itertools.product(*(range(size) for size in sizes)):
        outcomes[y] = sum(
            brute_force_generation_probability(y, seed, structure, conditionals, omega) for seed in seeds
        )
        outcomes[y] /= len(seeds)
    return outcomes


def chi_square_pvalue(candidates: np.ndarray, distribution: dict[tuple[int, ...], float]) -> float:
    observed_counts: dict[tuple[int, ...], int] = {}
    for row in map(tuple, candidates.tolist()):
        observed_counts[row] = observed_counts.get(row, 0) + 1
    assert all(distribution.get(y, 0.0) > 0 for y in observed_counts), "an impossible candidate was generated"
    support = [y for y, p in distribution.items() if p > 0]
    observed = np.array([observed_counts.get(y, 0) for y in support], dtype=float)
    expected = np.array([distribution[y] for y in support]) * candidates.shape[0]
    large = expected >= 5
    observed = np.append(observed[large], observed[~large].sum())
    expected = np.append(expected[large], expected[~large].sum())
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    return float(stats.chisquare(observed, f_exp=expected * observed.sum() / expected.sum()).pvalue)


@pytest.mark.parametrize(("case", "omega"), [(0, 3), (1, 2), (2, 1), (3, 4), (4, 2)])
def test_candidates_follow_the_seed_based_generative_process(case: int, omega: int) -> None:
    rng = np.random.default_rng(100 + case)
    sizes = tuple(int(s) for s in rng.integers(2, 4, 4))[: max(omega, 3)]
    structure = random_structure(len(sizes), 2, rng)
    conditionals = random_conditionals(structure, sizes, rng)
    seeds = random_codes(6, sizes, rng)
    distribution = candidate_distribution(seeds, structure, conditionals, omega, sizes)
    candidates = synthesize_candidates(seeds, structure, conditionals, omega, 30_000, rng)
    assert chi_square_pvalue(candidates.codes, distribution) > 1e-3
    wrong = random_conditionals(structure, sizes, np.random.default_rng(900 + case), zero_fraction=0.0)
    wrong_distribution = candidate_distribution(seeds, structure, wrong, omega, sizes)
    mixed = {y: 0.5 * distribution[y] + 0.5 * wrong_distribution[y] for y in distribution}
    assert chi_square_pvalue(candidates.codes, mixed) < 1e-6


def test_kept_attributes_come_from_the_candidates_own_seed() -> None:
    rng = np.random.default_rng(7)
    sizes = (3, 4, 2, 5, 3)
    structure = random_structure(5, 3, rng)
    conditionals = random_conditionals(structure, sizes, rng)
    seeds = random_codes(40, sizes, rng)
    for omega in range(6):
        candidates = synthesize_candidates(seeds, structure, conditionals, omega, 2000, rng)
        kept, resampled = kept_and_resampled(structure, omega)
        assert len(kept) == 5 - omega and len(resampled) == omega
        assert candidates.codes.dtype == np.int32
        np.testing.assert_array_equal(candidates.codes[:, kept], seeds[candidates.seed_positions][:, kept])
        if omega == 0:
            np.testing.assert_array_equal(candidates.codes, seeds[candidates.seed_positions])


def test_seeds_are_chosen_uniformly() -> None:
    rng = np.random.default_rng(8)
    sizes = (2, 2)
    structure = NetworkStructure(order=(0, 1), parents=((), (0,)))
    conditionals = random_conditionals(structure, sizes, rng)
    seeds = random_codes(25, sizes, rng)
    positions = synthesize_candidates(seeds, structure, conditionals, 1, 50_000, rng).seed_positions
    counts = np.bincount(positions, minlength=25)
    assert counts.size == 25 and stats.chisquare(counts).pvalue > 1e-3


def test_inverse_cdf_lookup_matches_searchsorted_and_skips_zero_probability_values() -> None:
    rng = np.random.default_rng(9)
    probabilities = rng.dirichlet(np.ones(7), size=30)
    probabilities[:, [0, 3, 6]] = 0.0
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    cumulative = np.cumsum(probabilities, axis=1)
    cumulative[:, -1] = 1.0
    rows = rng.integers(0, 30, 20_000)
    uniforms = rng.random(20_000)
    uniforms[:30] = cumulative[rows[:30], 2]  # exactly on an edge: the next value is chosen
    chosen = sample_rows(cumulative, rows, uniforms)
    expected = np.array(
        [np.searchsorted(cumulative[r], u, side="right") for r, u in zip(rows, uniforms, strict=True)]
    )
    np.testing.assert_array_equal(chosen, expected)
    assert not np.isin(chosen, [0, 3, 6]).any()


def test_bad_arguments_are_refused() -> None:
    rng = np.random.default_rng(10)
    sizes = (2, 3)
    structure = NetworkStructure(order=(1, 0), parents=((1,), ()))
    conditionals = random_conditionals(structure, sizes, rng)
    seeds = random_codes(5, sizes, rng)
    with pytest.raises(ValueError, match="omega"):
        synthesize_candidates(seeds, structure, conditionals, 3, 10, rng)
    with pytest.raises(ValueError, match="omega"):
        synthesize_candidates(seeds, structure, conditionals, -1, 10, rng)
    with pytest.raises(ValueError, match="no seed records"):
        synthesize_candidates(seeds[:0], structure, conditionals, 1, 10, rng)
    other = NetworkStructure(order=(0, 1), parents=((), (0,)))
    with pytest.raises(ValueError, match="different network structure"):
        synthesize_candidates(seeds, other, conditionals, 1, 10, rng)
