"""Robust Silverman bandwidth per object, with its floor (transforms/crowd/bandwidth.py)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from tests.unit.transforms.crowd.test_gaussian_kernel import random_block, random_split
from transforms.crowd.bandwidth import object_bandwidths, per_object_percentiles
from transforms.crowd.claims_block import ClaimsBlock


def block_of(*objects: list[float]) -> ClaimsBlock:
    values = np.concatenate([np.asarray(v, dtype=float) for v in objects])
    counts = [len(v) for v in objects]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    sources = np.concatenate([np.arange(c) for c in counts])
    return ClaimsBlock(np.arange(len(objects)), offsets, sources, values)


def hand_spread(claims: list[float]) -> float:
    """min of sd, IQR/1.349, MAD/0.6745 (statistics module, by hand)."""
    ordered = sorted(claims)
    quartiles = np.percentile(ordered, [25, 75])
    median = statistics.median(ordered)
    mad = statistics.median([abs(x - median) for x in ordered])
    return min(statistics.stdev(ordered), (quartiles[1] - quartiles[0]) / 1.349, mad / 0.6745)


def test_rule_matches_hand_computation():
    claims = [1.0, 2.0, 3.0, 4.0, 13.0]
    # sorted, n = 5: the 25th percentile sits at position 1 (value 2), the 75th at position 3 (value 4);
    # median 3, absolute deviations 2, 1, 0, 1, 10 -> MAD 1
    iqr_spread = (4.0 - 2.0) / 1.349
    mad_spread = 1.0 / 0.6745
    sd = statistics.stdev(claims)
    expected = 0.9 * min(sd, iqr_spread, mad_spread) * 5 ** (-0.2)
    assert iqr_spread < sd
    assert expected == pytest.approx(0.9 * hand_spread(claims) * 5 ** (-0.2), rel=1e-14)
    assert object_bandwidths(block_of(claims), 1e-9)[0] == pytest.approx(expected, rel=1e-14)


def test_median_absolute_deviation_tames_an_absurd_claim_among_three():
    claims = [100.0, 102.0, 1e16]
    # median 102, absolute deviations 2, 0, ~1e16 -> MAD 2; the IQR and sd are ~1e16
    expected = 0.9 * (2.0 / 0.6745) * 3 ** (-0.2)
    assert object_bandwidths(block_of(claims), 1e-9)[0] == pytest.approx(expected, rel=1e-12)


def test_rule_with_interpolated_quartiles_and_sd_smaller_than_iqr():
    claims = [0.0, 1.0, 2.0, 3.0]
    # positions 0.75 and 2.25: quartiles 0.75 and 2.25, IQR 1.5 -> 1.112; sd = 1.291
    # median 1.5, absolute deviations 1.5, 0.5, 0.5, 1.5 -> MAD 1.0 -> 1.483: the IQR term wins
    iqr_spread = 1.5 / 1.349
    sd = statistics.stdev(claims)
    expected = 0.9 * min(sd, iqr_spread, 1.0 / 0.6745) * 4 ** (-0.2)
    assert expected == pytest.approx(0.9 * iqr_spread * 4 ** (-0.2))
    assert object_bandwidths(block_of(claims), 1e-9)[0] == pytest.approx(expected, rel=1e-14)
    two_points = [0.0, 10.0]
    # IQR = 5 -> 3.71, MAD = 5 -> 7.41, sd = 7.07: the IQR term wins
    assert object_bandwidths(block_of(two_points), 1e-9)[0] == pytest.approx(0.9 * 5 / 1.349 * 2 ** (-0.2))


def test_a_majority_of_identical_claims_gets_the_floor_whatever_the_minority_claims():
    # quartiles both 5 and median absolute deviation 0 although the sd is large
    for claims in ([5.0, 5.0, 5.0, 5.0, 9.0], [18566.0, 6.6e18, 18566.0, 18566.0]):
        assert statistics.stdev(claims) > 1
        assert object_bandwidths(block_of(claims), 0.5)[0] == 0.5


def test_identical_claims_and_single_claims_get_the_floor():
    bandwidths = object_bandwidths(block_of([3.0, 3.0, 3.0], [7.5], [1.0, 2.0]), 0.01)
    assert bandwidths[0] == 0.01
    assert bandwidths[1] == 0.01
    assert bandwidths[2] == pytest.approx(0.9 * (1.0 / 2 / 1.349) * 2 ** (-0.2))


def test_floor_applies_only_when_the_rule_is_smaller_and_may_vary_per_object():
    block = block_of([0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0], [4.0, 4.0])
    rule = object_bandwidths(block, 1e-12)[0]
    bandwidths = object_bandwidths(block, np.array([rule / 2, rule * 3, 0.25]))
    assert bandwidths[0] == rule
    assert bandwidths[1] == rule * 3
    assert bandwidths[2] == 0.25


def test_floor_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        object_bandwidths(block_of([1.0, 2.0]), 0.0)


def test_per_object_percentiles_match_numpy():
    rng = np.random.default_rng(4)
    block = random_block(rng, objects=80)
    result = per_object_percentiles(block.values, block.offsets, (0.0, 25.0, 50.0, 95.0, 100.0))
    for chunk_claims in (1, 50, 333):
        chunked = per_object_percentiles(
            block.values, block.offsets, (0.0, 25.0, 50.0, 95.0, 100.0), chunk_claims
        )
        assert np.array_equal(chunked, result)
    for i in range(block.number_of_objects):
        claims = block.values[block.object_slice(i)]
        np.testing.assert_allclose(
            result[:, i], np.percentile(claims, [0, 25, 50, 95, 100]), rtol=1e-15, atol=0
        )


def test_bandwidths_scale_with_the_data():
    rng = np.random.default_rng(9)
    block = random_block(rng, objects=30)
    scaled = ClaimsBlock(block.object_ids, block.offsets, block.source_ids, block.values * 1000.0)
    spread = np.array(
        [np.ptp(block.values[block.object_slice(i)]) > 0 for i in range(block.number_of_objects)]
    )
    assert spread.sum() > 20
    np.testing.assert_allclose(
        object_bandwidths(scaled, 1e-300)[spread],
        1000.0 * object_bandwidths(block, 1e-300)[spread],
        rtol=1e-12,
    )
    assert math.isfinite(object_bandwidths(scaled, 1e-300).sum())


def test_each_object_is_bitwise_independent_of_its_block():
    rng = np.random.default_rng(12)
    block = random_block(rng, objects=150)
    whole = object_bandwidths(block, 1e-3)
    for mask in random_split(rng, block, 4):
        assert np.array_equal(object_bandwidths(block.select_objects(mask), 1e-3), whole[mask])
