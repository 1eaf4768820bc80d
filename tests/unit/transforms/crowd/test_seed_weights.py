"""The seed weights a release samples with and their public bounds
(``transforms/crowd/combined_weights.py``: ``weight_bounds``, ``seed_weights``, ``normalize``).

What the guarantee needs from them (``transforms/crowd/guarantee.py``): within each object the
max/min ratio is at most ``R``; the part that depends on the object's own claims (the local
factor) has ratio at most ``R_l``; so, with the global qualities fixed, a changed claim moves
every *other* claim's weight by a factor at most ``ρ = R_l²``. The last is checked over 1,500
random objects and single-claim changes with the real local weights (``local_weights``), with a
negative control: clipping after the product (the form used before) breaks it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.unit.transforms.crowd.test_gaussian_kernel import (
    claim_mask,
    random_block,
    random_split,
    spread_bandwidths,
)
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.combined_weights import (
    clip_weight_ratio,
    combined_weights,
    normalize,
    seed_weights,
    weight_bounds,
)
from transforms.crowd.local_weights import local_weights

METHODS = ("uniform", "global", "local", "combined")
FLOAT_SLACK = 1 + 2.0**-50
"""The product of two ratio-clipped factors, renormalized, is within ``R`` up to a few ulps."""


def one_object(values: list[float]) -> ClaimsBlock:
    n = len(values)
    return ClaimsBlock.from_frame(pd.DataFrame({"object_id": [0] * n, "source_id": range(n), "value": values}))


def ratios(block: ClaimsBlock, weights: np.ndarray) -> np.ndarray:
    return np.maximum.reduceat(weights, block.offsets[:-1]) / np.minimum.reduceat(weights, block.offsets[:-1])


@pytest.mark.parametrize(
    ("method", "expected"),
    [("uniform", (1.0, 1.0)), ("global", (4.0, 1.0)), ("local", (4.0, 16.0)), ("combined", (4.0, 2.25))],
)
def test_weight_bounds_of_each_method(method: str, expected: tuple[float, float]) -> None:
    assert weight_bounds(method, 4.0, 1.5) == expected


def test_weight_bounds_refuse_a_local_cap_outside_one_to_r_and_unknown_methods() -> None:
    assert weight_bounds("combined", 3.0, 3.0) == (3.0, 9.0)
    assert weight_bounds("combined", 3.0, 1.0) == (3.0, 1.0)
    for local_cap in (0.5, 3.5):
        with pytest.raises(ValueError, match="local ratio cap"):
            weight_bounds("combined", 3.0, local_cap)
    with pytest.raises(ValueError, match="local ratio cap"):
        seed_weights(one_object([0.0, 1.0]), "combined", np.ones(2), np.ones(2), 3.0, 4.0)
    with pytest.raises(ValueError, match="unknown weighting method"):
        weight_bounds("robust", 3.0, 1.5)


def test_seed_weights_by_hand() -> None:
    """One object, ``g = (1, 4, 9)`` and ``l = (0.64, 0.16, 0.04)``: square roots ``(1, 2, 3)`` and
    ``(0.8, 0.4, 0.2)``; with ``R = 4, R_l = 2`` the global factor is clipped to ratio 2:
    ``(1.5, 2, 3)/6.5`` and the local one to ratio 2: ``(0.5, 0.25, 0.25)``; the product
    renormalized is ``(0.375, 0.25, 0.375)``."""
    block = one_object([0.0, 1.0, 2.0])
    g, local = np.array([1.0, 4.0, 9.0]), np.array([0.64, 0.16, 0.04])
    np.testing.assert_allclose(seed_weights(block, "combined", local, g, 4.0, 2.0), [0.375, 0.25, 0.375], rtol=1e-15)
    np.testing.assert_allclose(seed_weights(block, "global", local, g, 4.0, 2.0), [1 / 6, 2 / 6, 3 / 6], rtol=1e-15)
    np.testing.assert_allclose(seed_weights(block, "local", local, g, 4.0, 2.0), [4 / 7, 2 / 7, 1 / 7], rtol=1e-15)
    np.testing.assert_allclose(seed_weights(block, "uniform", local, g, 4.0, 2.0), [1 / 3] * 3, rtol=1e-15)
    # with R = 2 the global factor alone is clipped to ratio 2, the local one to 2 as well
    np.testing.assert_allclose(seed_weights(block, "global", local, g, 2.0, 2.0), [1.5 / 6.5, 2 / 6.5, 3 / 6.5],
                               rtol=1e-15)
    np.testing.assert_allclose(seed_weights(block, "local", local, g, 2.0, 2.0), [0.5, 0.25, 0.25], rtol=1e-15)
    # missing factors are ones
    np.testing.assert_allclose(seed_weights(block, "combined", None, g, 4.0, 2.0), [1.5 / 6.5, 2 / 6.5, 3 / 6.5],
                               rtol=1e-15)
    np.testing.assert_allclose(seed_weights(block, "combined", local, None, 4.0, 2.0), [0.5, 0.25, 0.25], rtol=1e-15)


def test_normalize_divides_by_each_objects_total() -> None:
    block = ClaimsBlock(np.array([1, 2]), np.array([0, 2, 5]), np.arange(5), np.zeros(5))
    np.testing.assert_allclose(normalize(block, np.array([1.0, 3.0, 2.0, 2.0, 4.0])),
                               [0.25, 0.75, 0.25, 0.25, 0.5], rtol=1e-15)


def random_inputs(seed: int, objects: int = 120) -> tuple[ClaimsBlock, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    block = random_block(rng, objects)
    local = local_weights(block, spread_bandwidths(block), 1e-6, 100).weights
    quality = rng.gamma(0.5, size=block.number_of_claims) + 1e-6
    return block, local, quality


@pytest.mark.parametrize(("ratio_cap", "local_cap"), [(4.0, 2.0), (3.0, 1.7), (2.5, 2.5), (10.0, 1.0), (1.1, 1.05)])
def test_each_objects_ratio_is_at_most_r_and_its_local_part_at_most_r_l(ratio_cap: float, local_cap: float) -> None:
    for seed in range(3):
        block, local, quality = random_inputs(seed)
        for method in METHODS:
            weights = seed_weights(block, method, local, quality, ratio_cap, local_cap)
            np.testing.assert_allclose(np.add.reduceat(weights, block.offsets[:-1]), 1.0, rtol=1e-12)
            bound, _ = weight_bounds(method, ratio_cap, local_cap)
            slack = FLOAT_SLACK if method == "combined" else 1.0
            assert np.all(ratios(block, weights) <= bound * slack), method
        combined = seed_weights(block, "combined", local, quality, ratio_cap, local_cap)
        global_part = clip_weight_ratio(np.sqrt(quality), block.offsets, ratio_cap / local_cap)
        assert np.all(ratios(block, combined / global_part) <= local_cap * FLOAT_SLACK)
        # without source qualities the combined weights are the local factor alone
        alone = seed_weights(block, "combined", local, None, ratio_cap, local_cap)
        assert np.all(ratios(block, alone) <= local_cap * FLOAT_SLACK)


def test_the_ratio_cap_binds_on_skewed_inputs() -> None:
    """The random inputs do reach the caps (so the bounds above are exercised, not vacuous)."""
    block, local, quality = random_inputs(0)
    combined = seed_weights(block, "combined", local, quality, 4.0, 2.0)
    assert np.mean(ratios(block, combined)[block.counts > 5] > 3.99) > 0.4


def changed_objects(seed: int, objects: int = 1_500) -> tuple[ClaimsBlock, ClaimsBlock, np.ndarray]:
    """Random objects of 2-15 claims (some outliers) and the same objects with one claim changed
    each: moved anywhere, onto another claim, or slightly. Objects are independent, so one block
    holds 1,500 single-claim changes. Returns both blocks and a mask of the unchanged claims."""
    rng = np.random.default_rng(seed)
    rows = []
    for object_id in range(objects):
        n = int(rng.integers(2, 16))
        values = rng.uniform(-50, 50) + rng.choice([0.3, 2.0, 10.0]) * rng.standard_normal(n)
        values[rng.random(n) < 0.15] += rng.normal(0, 40)
        rows += [(object_id, source, float(value)) for source, value in enumerate(values)]
    block = ClaimsBlock.from_frame(pd.DataFrame(rows, columns=["object_id", "source_id", "value"]))
    values = block.values.copy()
    changed = np.array([block.offsets[i] + rng.integers(0, block.counts[i]) for i in range(objects)])
    for index, claim in enumerate(changed):
        part = block.object_slice(index)
        kind = index % 3
        if kind == 0:
            values[claim] = rng.uniform(-100, 100)
        elif kind == 1:
            values[claim] = block.values[rng.integers(part.start, part.stop)]
        else:
            values[claim] += rng.normal(0, 1)
    unchanged = np.ones(block.number_of_claims, dtype=bool)
    unchanged[changed] = False
    return block, ClaimsBlock(block.object_ids, block.offsets, block.source_ids, values), unchanged


def largest_move(before: np.ndarray, after: np.ndarray, unchanged: np.ndarray) -> float:
    return float(np.max(np.maximum(before / after, after / before)[unchanged]))


@pytest.mark.parametrize(("method", "ratio_cap", "local_cap"),
                         [("combined", 4.0, 2.0), ("combined", 3.0, 1.3), ("local", 3.0, 3.0), ("global", 4.0, 2.0),
                          ("uniform", 4.0, 2.0)])
def test_a_changed_claim_moves_the_other_weights_by_at_most_rho(method: str, ratio_cap: float, local_cap: float) -> None:
    block, neighbour, unchanged = changed_objects(5)
    bandwidths = np.full(block.number_of_objects, 3.0)  # public: the same for both datasets
    quality = np.random.default_rng(6).uniform(0.2, 5.0, block.number_of_claims)  # fixed (DP, released)
    before = seed_weights(block, method, local_weights(block, bandwidths, 1e-9, 200).weights, quality,
                          ratio_cap, local_cap)
    after = seed_weights(neighbour, method, local_weights(neighbour, bandwidths, 1e-9, 200).weights, quality,
                         ratio_cap, local_cap)
    _, rho = weight_bounds(method, ratio_cap, local_cap)
    move = largest_move(before, after, unchanged)
    assert move <= rho * (1 + 1e-12)
    if rho > 1:
        assert move > rho**0.5, "the changes must move the other weights noticeably"
    else:
        assert move == 1.0


def test_clipping_after_the_product_would_break_rho() -> None:
    """Negative control: PrisCrowd's product clipped to ``R`` as a whole (``combined_weights``)
    lets a changed claim move the others by more than ``R_l²``, on the same changes."""
    block, neighbour, unchanged = changed_objects(5)
    bandwidths = np.full(block.number_of_objects, 3.0)
    quality = np.random.default_rng(6).uniform(0.2, 5.0, block.number_of_claims)
    before = combined_weights(block, local_weights(block, bandwidths, 1e-9, 200).weights, quality, 4.0)
    after = combined_weights(neighbour, local_weights(neighbour, bandwidths, 1e-9, 200).weights, quality, 4.0)
    assert largest_move(before, after, unchanged) > 2.0**2


def test_each_objects_seed_weights_do_not_depend_on_its_block() -> None:
    rng = np.random.default_rng(9)
    block, local, quality = random_inputs(9)
    for method in METHODS:
        whole = seed_weights(block, method, local, quality, 4.0, 2.0)
        for mask in random_split(rng, block, 3):
            claims = claim_mask(block, mask)
            part = seed_weights(block.select_objects(mask), method, local[claims], quality[claims], 4.0, 2.0)
            np.testing.assert_array_equal(part, whole[claims])


def test_the_largest_object_keeps_every_seed_weight_above_the_sampler_floor() -> None:
    """Refusing by count (``largest_object_for``) replaces a refusal by values: a review made one
    claim decide between publishing and failing with n = 10,000 claims and R = 545,462. At the
    largest accepted n the worst weights (one at the floor of the cap, the rest at the cap) pass the
    sampler's check; one claim more could fail it."""
    from transforms.crowd.synthesis import SMALLEST_SEED_WEIGHT, WEIGHT_RATIO_SLACK, largest_object_for

    for ratio_cap in (1.0, 4.0, 545_462.0, 1e6):
        n = largest_object_for(ratio_cap)
        smallest_share = 1.0 / (1.0 + (n - 1) * ratio_cap * WEIGHT_RATIO_SLACK)
        assert smallest_share >= SMALLEST_SEED_WEIGHT
        assert 1.0 / (1.0 + n * ratio_cap * WEIGHT_RATIO_SLACK) < SMALLEST_SEED_WEIGHT
    assert largest_object_for(545_462.0) < 10_000
