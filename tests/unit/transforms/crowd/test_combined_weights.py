"""Combined weights and the public weight-ratio cap (transforms/crowd/combined_weights.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.unit.transforms.crowd.test_gaussian_kernel import claim_mask, random_block, random_split
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.combined_weights import clip_weight_ratio, combine_weights, combined_weights


def two_objects() -> ClaimsBlock:
    return ClaimsBlock(np.array([0, 1]), np.array([0, 3, 5]), np.array([1, 2, 3, 1, 3]), np.zeros(5))


def test_combine_matches_hand_computation():
    block = two_objects()
    local = np.array([0.5, 0.3, 0.2, 0.9, 0.1])
    quality = np.array([2.0, 8.0, 0.5, 2.0, 0.5])
    roots = [math.sqrt(1.0), math.sqrt(2.4), math.sqrt(0.1)], [math.sqrt(1.8), math.sqrt(0.05)]
    expected = [r / sum(roots[0]) for r in roots[0]] + [r / sum(roots[1]) for r in roots[1]]
    np.testing.assert_allclose(combine_weights(block, local, quality), expected, rtol=1e-15)


def test_combine_is_uniform_when_every_product_is_zero():
    block = two_objects()
    combined = combine_weights(
        block, np.array([0.0, 0.0, 0.0, 0.4, 0.6]), np.array([1.0, 1.0, 1.0, 1.0, 0.0])
    )
    np.testing.assert_allclose(combined, [1 / 3, 1 / 3, 1 / 3, 1.0, 0.0])
    with pytest.raises(ValueError):
        combine_weights(block, np.array([-0.1, 0.6, 0.5, 0.5, 0.5]), np.ones(5))


def test_clip_matches_hand_computation():
    clipped = clip_weight_ratio(np.array([0.7, 0.2, 0.1, 0.5, 0.5]), np.array([0, 3, 5]), 4.0)
    # object 0: floor 0.7 / 4 = 0.175 -> (0.7, 0.2, 0.175) / 1.075; object 1 already within the cap
    np.testing.assert_allclose(clipped, [0.7 / 1.075, 0.2 / 1.075, 0.175 / 1.075, 0.5, 0.5], rtol=1e-15)
    assert clipped[0] / clipped[2] <= 4.0


def test_clip_bounds_the_ratio_over_random_weights():
    rng = np.random.default_rng(2024)
    for trial in range(300):
        objects = int(rng.integers(1, 30))
        counts = rng.integers(1, 40, size=objects)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        weights = np.exp(rng.normal(0, rng.uniform(0.1, 12.0), size=offsets[-1]))
        weights[rng.random(offsets[-1]) < 0.1] = 0.0
        cap = float(np.exp(rng.uniform(0, 6))) if trial % 10 else float(rng.choice([1.0, 1.0 + 1e-12, 2.0]))
        clipped = clip_weight_ratio(weights, offsets, cap)
        for i in range(objects):
            part, original = clipped[offsets[i] : offsets[i + 1]], weights[offsets[i] : offsets[i + 1]]
            assert part.min() > 0
            assert part.max() / part.min() <= cap
            assert part.sum() == pytest.approx(1.0, rel=1e-12)
            if original.max() == 0:
                np.testing.assert_allclose(part, 1 / len(part))
                continue
            if original.min() > 0 and original.max() / original.min() <= cap / (1 + 1e-9):
                np.testing.assert_allclose(part, original / original.sum(), rtol=1e-12)
            assert part[np.argmax(original)] == part.max()
            order = np.argsort(original, kind="stable")
            assert np.all(np.diff(part[order]) >= -1e-15)


def test_clip_refuses_a_cap_below_one_and_bad_weights():
    with pytest.raises(ValueError):
        clip_weight_ratio(np.array([0.5, 0.5]), np.array([0, 2]), 0.9)
    with pytest.raises(ValueError):
        clip_weight_ratio(np.array([0.5, np.nan]), np.array([0, 2]), 2.0)


def test_combined_weights_combine_then_clip():
    rng = np.random.default_rng(3)
    block = random_block(rng, objects=40)
    local = rng.dirichlet(np.ones(5), size=block.number_of_claims)[:, 0]
    local[rng.random(block.number_of_claims) < 0.2] = 0.0
    quality = rng.uniform(1e-6, 9.0, block.number_of_claims)
    result = combined_weights(block, local, quality, 10.0)
    assert np.array_equal(
        result, clip_weight_ratio(combine_weights(block, local, quality), block.offsets, 10.0)
    )
    for i in range(block.number_of_objects):
        part = result[block.object_slice(i)]
        assert part.max() / part.min() <= 10.0


def test_each_object_is_bitwise_independent_of_its_block():
    rng = np.random.default_rng(4)
    block = random_block(rng, objects=120)
    local = rng.random(block.number_of_claims)
    quality = rng.uniform(0.1, 9.0, block.number_of_claims)
    whole = combined_weights(block, local, quality, 5.0)
    for mask in random_split(rng, block, 3):
        claims = claim_mask(block, mask)
        part = combined_weights(block.select_objects(mask), local[claims], quality[claims], 5.0)
        assert np.array_equal(part, whole[claims])
