"""The keyed disjoint split of record positions into DS, DT and DP."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from transforms.core.keyed_randomness import keyed_generator
from transforms.tabular.data_split import minimum_record_count, part_sizes, split_positions


def test_parts_are_disjoint_sorted_and_sized_by_the_fractions() -> None:
    split = split_positions(1000, 0.5, 0.2, 0.29, np.random.default_rng(1))
    assert (split.seeds.size, split.structure.size, split.parameters.size) == (500, 200, 290)
    union = np.concatenate([split.seeds, split.structure, split.parameters])
    assert np.unique(union).size == union.size
    assert union.min() >= 0 and union.max() < 1000
    for part in (split.seeds, split.structure, split.parameters):
        assert part.dtype == np.int64
        np.testing.assert_array_equal(part, np.sort(part))


def test_sizes_read_fractions_as_decimals() -> None:
    assert 0.29 * 100 < 29  # binary rounding would give floor(28.999…) = 28
    assert part_sizes(100, 0.29, 0.3, 0.41) == (29, 30, 41)
    assert part_sizes(7, 1.0, 0.0, 0.0) == (7, 0, 0)
    assert part_sizes(0, 0.4, 0.3, 0.3) == (0, 0, 0)


@pytest.mark.parametrize(
    "fractions",
    [(0.5, 0.3, 0.3), (-0.1, 0.5, 0.5), (1.2, 0.0, 0.0), (float("nan"), 0.1, 0.1), (0.5, True, 0.1)],
)
def test_bad_fractions_are_refused(fractions: tuple) -> None:
    with pytest.raises(ValueError):
        split_positions(10, *fractions, np.random.default_rng(0))


def test_split_is_reproducible_from_the_keyed_stream(fixed_secret: bytes) -> None:
    first = split_positions(500, 0.4, 0.3, 0.3, keyed_generator(fixed_secret, "r1", "tabular-split", 0))
    second = split_positions(500, 0.4, 0.3, 0.3, keyed_generator(fixed_secret, "r1", "tabular-split", 0))
    other = split_positions(500, 0.4, 0.3, 0.3, keyed_generator(fixed_secret, "r2", "tabular-split", 0))
    np.testing.assert_array_equal(first.seeds, second.seeds)
    np.testing.assert_array_equal(first.parameters, second.parameters)
    assert not np.array_equal(first.seeds, other.seeds)


def test_every_position_is_equally_likely_to_be_a_seed() -> None:
    rng = np.random.default_rng(12)
    hits = np.zeros(20, dtype=np.int64)
    for _ in range(3000):
        hits[split_positions(20, 0.25, 0.25, 0.5, rng).seeds] += 1
    assert stats.chisquare(hits).pvalue > 1e-3
    biased = hits + np.arange(20) * 20  # a 0-to-50% drift across positions must be detected
    assert stats.chisquare(biased).pvalue < 1e-6


def test_minimum_record_count_is_the_smallest_sufficient_count() -> None:
    for k, fractions in [
        (5, (0.3, 0.3, 0.4)),
        (50, (0.29, 0.01, 0.7)),
        (1, (0.5, 0.25, 0.25)),
        (17, (0.33, 0.33, 0.33)),
    ]:
        needed = minimum_record_count(k, *fractions)
        brute = next(
            n
            for n in range(1, 100_000)
            if (sizes := part_sizes(n, *fractions))[0] >= k and sizes[1] >= 1 and sizes[2] >= 1
        )
        assert needed == brute
    with pytest.raises(ValueError, match="structure_fraction is 0"):
        minimum_record_count(5, 0.5, 0.0, 0.5)


@pytest.mark.parametrize("count", [0, 1, 2, 9, 1000, 65_537])
def test_split_parts_is_the_split_of_split_positions_in_one_byte_a_record(count: int) -> None:
    from transforms.tabular.data_split import split_parts

    split = split_positions(count, 0.5, 0.3, 0.15, np.random.default_rng(count))
    parts = split_parts(count, 0.5, 0.3, 0.15, np.random.default_rng(count))
    assert parts.dtype == np.int8 and parts.shape == (count,)
    np.testing.assert_array_equal(np.flatnonzero(parts == 0), split.seeds)
    np.testing.assert_array_equal(np.flatnonzero(parts == 1), split.structure)
    np.testing.assert_array_equal(np.flatnonzero(parts == 2), split.parameters)
    assert (parts == 3).sum() == count - split.seeds.size - split.structure.size - split.parameters.size
