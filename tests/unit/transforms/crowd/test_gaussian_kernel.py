"""Squared RKHS distances by the kernel trick (transforms/crowd/gaussian_kernel.py).

What is compared:
* the vectorized kernel trick against a plain double loop over each object's claims with
  ``math.exp`` (the definition ``k(x,x) − 2 Σ w k(x,x_t) + Σ Σ w w k(x_t,x_u)``);
* the RKHS norm against an L2 integral computed numerically with ``scipy.integrate.quad``:
  for the unit-norm Gaussian kernel of bandwidth ``h``, ``k(x, y) = h √(2π) ∫ g(t−x) g(t−y) dt``
  with ``g`` the N(0, h²/2) density, so ``‖Φ(x) − Σ w_t Φ(x_t)‖² = h √(2π) ∫ (g(t−x) −
  Σ w_t g(t−x_t))² dt`` — an independent route to the same number;
* bitwise independence of each object's result from the other objects of its block, from
  the tiling and from the kernel cache.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, stats

from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.gaussian_kernel import (
    WithinObjectKernel,
    gaussian_kernel,
    object_chunks,
    rkhs_squared_distances,
)


def random_block(
    rng: np.random.Generator, objects: int, max_claims: int = 25, sources: int = 40
) -> ClaimsBlock:
    """Objects with 1..max_claims claims from distinct sources, scales varying by object."""
    rows = []
    for object_id in range(objects):
        count = int(rng.integers(1, max_claims + 1))
        scale = 10.0 ** rng.uniform(-2, 6)
        centre = rng.normal(0, 5) * scale
        chosen = rng.choice(sources, size=min(count, sources), replace=False)
        values = centre + scale * rng.standard_t(3, size=len(chosen))
        rows += [(object_id, int(source), float(value)) for source, value in zip(chosen, values, strict=True)]
    return ClaimsBlock.from_frame(pd.DataFrame(rows, columns=["object_id", "source_id", "value"]))


def random_split(rng: np.random.Generator, block: ClaimsBlock, parts: int) -> list[np.ndarray]:
    """Boolean object masks of a random partition of the block's objects."""
    label = rng.integers(0, parts, size=block.number_of_objects)
    return [label == part for part in range(parts)]


def claim_mask(block: ClaimsBlock, object_mask: np.ndarray) -> np.ndarray:
    return np.repeat(object_mask, block.counts)


def random_simplex_weights(rng: np.random.Generator, block: ClaimsBlock) -> np.ndarray:
    raw = rng.gamma(0.7, size=block.number_of_claims) + 1e-3
    totals = np.bincount(block.object_of_claim, weights=raw)
    return raw / totals[block.object_of_claim]


def spread_bandwidths(block: ClaimsBlock) -> np.ndarray:
    """A positive bandwidth per object on the object's own scale (not the rule under test)."""
    scale = np.array([np.ptp(block.values[block.object_slice(i)]) for i in range(block.number_of_objects)])
    return np.maximum(0.3 * scale, 1e-3)


def brute_force_distances(values: np.ndarray, weights: np.ndarray, h: float) -> list[float]:
    def k(x: float, y: float) -> float:
        return math.exp(-((x - y) ** 2) / (2 * h * h))

    n = len(values)
    quadratic = sum(weights[t] * weights[u] * k(values[t], values[u]) for t in range(n) for u in range(n))
    return [
        max(
            k(values[j], values[j])
            - 2 * sum(weights[t] * k(values[j], values[t]) for t in range(n))
            + quadratic,
            0.0,
        )
        for j in range(n)
    ]


def test_kernel_trick_matches_brute_force_double_loop():
    rng = np.random.default_rng(11)
    block = random_block(rng, objects=60)
    bandwidths = spread_bandwidths(block)
    weights = random_simplex_weights(rng, block)
    distances = rkhs_squared_distances(block, bandwidths, weights)
    for i in range(block.number_of_objects):
        part = block.object_slice(i)
        expected = brute_force_distances(block.values[part], weights[part], bandwidths[i])
        np.testing.assert_allclose(distances[part], expected, rtol=0, atol=1e-12)


def test_rkhs_distance_equals_l2_distance_of_half_variance_gaussians():
    values = np.array([-1.3, 0.2, 0.25, 1.7, 4.0])
    weights = np.array([0.1, 0.3, 0.2, 0.15, 0.25])
    h = 0.8
    block = ClaimsBlock(np.array([0]), np.array([0, 5]), np.arange(5), values)
    distances = rkhs_squared_distances(block, np.array([h]), weights)
    half_scale = h / math.sqrt(2)

    def half_density(t: float | np.ndarray) -> np.ndarray:
        return np.exp(-0.5 * (np.asarray(t) / half_scale) ** 2) / (half_scale * math.sqrt(2 * math.pi))

    lower, upper = values.min() - 12 * h, values.max() + 12 * h
    for j, x in enumerate(values):

        def squared_difference(t: float, x: float = x) -> float:
            return float(half_density(t - x) - np.dot(weights, half_density(t - values))) ** 2

        integral, _ = integrate.quad(
            squared_difference, lower, upper, points=list(values), limit=400, epsabs=1e-13, epsrel=1e-11
        )
        assert distances[j] == pytest.approx(h * math.sqrt(2 * math.pi) * integral, rel=1e-8, abs=1e-10)
    assert distances.min() > 1e-3


def test_kernel_is_the_l2_inner_product_of_half_variance_gaussians():
    h = 1.7
    half = stats.norm(scale=h / math.sqrt(2))
    for x, y in [(0.0, 0.0), (0.0, 1.0), (-2.0, 3.5)]:
        integral, _ = integrate.quad(
            lambda t, x=x, y=y: half.pdf(t - x) * half.pdf(t - y), -40, 40, points=[x, y]
        )
        assert float(gaussian_kernel(np.array(x), np.array(y), h)) == pytest.approx(
            h * math.sqrt(2 * math.pi) * integral, rel=1e-9
        )


def test_distances_lie_in_zero_two_and_do_not_depend_on_units():
    rng = np.random.default_rng(5)
    block = random_block(rng, objects=40)
    bandwidths = spread_bandwidths(block)
    weights = random_simplex_weights(rng, block)
    distances = rkhs_squared_distances(block, bandwidths, weights)
    assert np.all((distances >= 0) & (distances <= 2))
    rescaled = ClaimsBlock(block.object_ids, block.offsets, block.source_ids, block.values * 1e6 + 3e9)
    np.testing.assert_allclose(
        rkhs_squared_distances(rescaled, bandwidths * 1e6, weights), distances, rtol=0, atol=1e-6
    )


def test_far_apart_claims_reach_the_bound_and_identical_claims_give_zero():
    block = ClaimsBlock(
        np.array([0, 1]), np.array([0, 2, 5]), np.arange(5), np.array([0.0, 1e9, 7.0, 7.0, 7.0])
    )
    weights = np.array([0.5, 0.5, 0.2, 0.3, 0.5])
    distances = rkhs_squared_distances(block, np.array([1.0, 1.0]), weights)
    np.testing.assert_allclose(distances[:2], [0.5, 0.5], atol=1e-15)
    assert np.all(distances[2:] == 0.0)


def test_each_object_is_bitwise_independent_of_its_block_tiling_and_cache():
    rng = np.random.default_rng(3)
    block = random_block(rng, objects=120, max_claims=30)
    bandwidths = spread_bandwidths(block)
    weights = random_simplex_weights(rng, block)
    whole = rkhs_squared_distances(block, bandwidths, weights)
    for mask in random_split(rng, block, 3):
        claims = claim_mask(block, mask)
        part = rkhs_squared_distances(block.select_objects(mask), bandwidths[mask], weights[claims])
        assert np.array_equal(part, whole[claims])
    for tile_entries, cache_bytes in [(1, 0), (50, 10_000), (1 << 12, 0), (1 << 24, 1 << 30)]:
        kernel = WithinObjectKernel(block, bandwidths, cache_bytes=cache_bytes, tile_entries=tile_entries)
        assert np.array_equal(kernel.squared_distances(weights), whole)


def test_restrict_keeps_the_kept_objects_bitwise():
    rng = np.random.default_rng(8)
    block = random_block(rng, objects=50)
    bandwidths = spread_bandwidths(block)
    weights = random_simplex_weights(rng, block)
    kernel = WithinObjectKernel(block, bandwidths, tile_entries=300)
    whole = kernel.squared_distances(weights)
    keep = rng.random(block.number_of_objects) < 0.4
    restricted = kernel.restrict(keep)
    assert np.array_equal(restricted.objects, np.flatnonzero(keep))
    local = restricted.squared_distances_local(weights[restricted.claims])
    assert np.array_equal(local, whole[claim_mask(block, keep)])
    twice = restricted.restrict(np.arange(restricted.number_of_objects) % 2 == 0)
    assert np.array_equal(twice.squared_distances_local(weights[twice.claims]), whole[twice.claims])


def test_objects_larger_than_a_tile_are_split_by_rows():
    rng = np.random.default_rng(2)
    values = rng.normal(size=70)
    weights = rng.dirichlet(np.ones(70))
    block = ClaimsBlock(np.array([0]), np.array([0, 70]), np.arange(70), values)
    kernel = WithinObjectKernel(block, np.array([0.5]), tile_entries=200)
    assert len(kernel.tiles) > 1
    np.testing.assert_allclose(
        kernel.squared_distances(weights), brute_force_distances(values, weights, 0.5), atol=1e-12
    )


def test_non_positive_bandwidth_is_refused():
    block = ClaimsBlock(np.array([0]), np.array([0, 2]), np.arange(2), np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="positive"):
        rkhs_squared_distances(block, np.array([0.0]), np.array([0.5, 0.5]))


def test_object_chunks_cut_the_block_into_consecutive_whole_objects():
    rng = np.random.default_rng(14)
    block = random_block(rng, objects=70)
    bandwidths = spread_bandwidths(block)
    weights = random_simplex_weights(rng, block)
    whole = rkhs_squared_distances(block, bandwidths, weights)
    assert object_chunks(block, block.number_of_claims) == [block]
    for max_claims in (1, 40, 200):
        chunks = object_chunks(block, max_claims)
        assert len(chunks) > 1
        assert np.array_equal(np.concatenate([chunk.object_ids for chunk in chunks]), block.object_ids)
        assert np.array_equal(np.concatenate([chunk.values for chunk in chunks]), block.values)
        assert np.array_equal(np.concatenate([chunk.source_ids for chunk in chunks]), block.source_ids)
        start = 0
        for chunk in chunks:
            stop = start + chunk.number_of_objects
            assert np.array_equal(chunk.counts, block.counts[start:stop])
            claims = slice(int(block.offsets[start]), int(block.offsets[stop]))
            part = rkhs_squared_distances(chunk, bandwidths[start:stop], weights[claims])
            assert np.array_equal(part, whole[claims])
            start = stop
