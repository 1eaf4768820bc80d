"""Global source weights (transforms/crowd/global_weights.py) against a brute-force loop and on synthetic sources."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tests.unit.transforms.crowd.test_gaussian_kernel import (
    claim_mask,
    random_block,
    random_split,
    spread_bandwidths,
)
from transforms.crowd.bandwidth import object_bandwidths
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.global_weights import (
    LOSS_FIXED_POINT_SCALE,
    MINIMUM_SOURCE_QUALITY,
    SourceQuality,
    estimate_global_weights,
    global_weights,
    source_loss_contributions,
    source_quality_change,
    update_source_quality,
)

TINY = pd.DataFrame(
    [
        ("o1", "A", 1.0),
        ("o1", "B", 1.2),
        ("o1", "C", 5.0),
        ("o2", "A", 10.0),
        ("o2", "C", 14.0),
        ("o3", "B", 0.3),
        ("o3", "C", 0.1),
        ("o3", "D", 0.9),
    ],
    columns=["object_id", "source_id", "value"],
)
TINY_BANDWIDTHS = {"o1": 0.7, "o2": 2.0, "o3": 0.4}


def brute_force_iteration(claims: pd.DataFrame, bandwidths: dict, quality: dict) -> dict:
    """One KDEm/PrisCrowd global iteration written out with plain loops."""
    loss: dict = {}
    objects: dict = {}
    for object_id, rows in claims.groupby("object_id"):
        sources, values = list(rows["source_id"]), list(rows["value"])
        h = bandwidths[object_id]
        g = [quality.get(s, 1.0) for s in sources]
        w = [gs / sum(g) for gs in g]

        def k(x: float, y: float, h: float = h) -> float:
            return math.exp(-((x - y) ** 2) / (2 * h * h))

        n = len(values)
        for j in range(n):
            squared = k(values[j], values[j]) - 2 * sum(w[t] * k(values[j], values[t]) for t in range(n))
            squared += sum(w[t] * w[u] * k(values[t], values[u]) for t in range(n) for u in range(n))
            loss[sources[j]] = loss.get(sources[j], 0.0) + max(squared, 0.0) / n
            objects[sources[j]] = objects.get(sources[j], 0) + 1
    total = sum(loss.values())
    return {s: math.log(total / (loss[s] / objects[s])) for s in loss}


def tiny_block() -> tuple[ClaimsBlock, np.ndarray]:
    block = ClaimsBlock.from_frame(TINY)
    return block, np.array([TINY_BANDWIDTHS[o] for o in block.object_ids])


def as_dict(quality: SourceQuality) -> dict:
    return dict(zip(quality.source_ids.tolist(), quality.quality.tolist(), strict=True))


def test_one_and_two_iterations_match_the_brute_force_loop():
    block, bandwidths = tiny_block()
    expected_first = brute_force_iteration(TINY, TINY_BANDWIDTHS, {})
    first = update_source_quality(source_loss_contributions(block, bandwidths, SourceQuality.uniform()))
    assert list(first.source_ids) == ["A", "B", "C", "D"]
    for source, value in as_dict(first).items():
        assert value == pytest.approx(expected_first[source], rel=1e-10)
    expected_second = brute_force_iteration(TINY, TINY_BANDWIDTHS, expected_first)
    second = update_source_quality(source_loss_contributions(block, bandwidths, first))
    for source, value in as_dict(second).items():
        assert value == pytest.approx(expected_second[source], rel=1e-9)


def test_loop_converges_to_the_brute_force_fixed_point():
    block, bandwidths = tiny_block()
    quality: dict = {}
    iteration = 0
    while iteration < 200:
        iteration += 1
        updated = brute_force_iteration(TINY, TINY_BANDWIDTHS, quality)
        change = max(abs(updated[s] - quality.get(s, 1.0)) / quality.get(s, 1.0) for s in updated)
        quality = updated
        if change <= 1e-9:
            break
    estimated, iterations, converged = estimate_global_weights(block, bandwidths, tolerance=1e-9)
    assert converged and iterations == iteration
    for source, value in as_dict(estimated).items():
        assert value == pytest.approx(quality[source], rel=1e-8)


def test_contributions_are_fixed_point_losses_per_claim():
    block, bandwidths = tiny_block()
    sums = source_loss_contributions(block, bandwidths, SourceQuality.uniform())
    assert list(sums.columns) == ["source_id", "loss_fixed", "objects"]
    assert sums["loss_fixed"].dtype == np.int64 and sums["objects"].dtype == np.int64
    assert dict(zip(sums["source_id"], sums["objects"], strict=True)) == {"A": 2, "B": 2, "C": 3, "D": 1}
    # D's only claim: distance of 0.9 to the uniform KDE of (0.3, 0.1, 0.9) with h = 0.4, divided by 3
    values, h = np.array([0.3, 0.1, 0.9]), 0.4
    kernel = np.exp(-((values[:, None] - values[None, :]) ** 2) / (2 * h * h))
    w = np.full(3, 1 / 3)
    loss_d = 1 - 2 * kernel[2] @ w + w @ kernel @ w
    assert int(sums.loc[sums["source_id"] == "D", "loss_fixed"].iloc[0]) == round(
        loss_d / 3 * LOSS_FIXED_POINT_SCALE
    )


def test_global_weights_formula_and_unknown_sources():
    block, _ = tiny_block()
    quality = SourceQuality(np.array(["A", "B", "C"]), np.array([2.0, 1.0, 0.5]))
    weights = global_weights(block, quality)
    # o1: A, B, C -> 2, 1, 0.5 ; o2: A, C -> 2, 0.5 ; o3: B, C, D(unknown -> 1) -> 1, 0.5, 1
    expected = [2 / 3.5, 1 / 3.5, 0.5 / 3.5, 2 / 2.5, 0.5 / 2.5, 1 / 2.5, 0.5 / 2.5, 1 / 2.5]
    np.testing.assert_allclose(weights, expected, rtol=1e-15)
    assert np.array_equal(quality.lookup(np.array(["D", "A", "Z"])), [1.0, 2.0, 1.0])
    assert np.array_equal(SourceQuality.uniform().lookup(np.array([5, 6])), [1.0, 1.0])
    np.testing.assert_allclose(
        global_weights(block, SourceQuality.uniform()), 1 / np.repeat(block.counts, block.counts)
    )


def synthetic_sources(
    rng: np.random.Generator, noise: np.ndarray, objects: int = 300, per_object: int = 10
) -> ClaimsBlock:
    rows = []
    for object_id in range(objects):
        truth = rng.normal(0, 50)
        for source in rng.choice(len(noise), per_object, replace=False):
            rows.append((object_id, int(source), truth + noise[source] * rng.standard_normal()))
    return ClaimsBlock.from_frame(pd.DataFrame(rows, columns=["object_id", "source_id", "value"]))


def test_reliable_sources_get_larger_quality_and_equal_sources_do_not_separate():
    rng = np.random.default_rng(21)
    noise = np.linspace(0.2, 4.0, 25)
    block = synthetic_sources(rng, noise)
    quality, _, converged = estimate_global_weights(block, object_bandwidths(block, 1e-3))
    assert converged
    correlation = stats.spearmanr(quality.quality, noise[quality.source_ids]).statistic
    assert correlation < -0.9
    assert quality.quality[quality.source_ids < 5].min() > quality.quality[quality.source_ids >= 20].max()

    equal = synthetic_sources(rng, np.full(25, 2.0))
    control, _, _ = estimate_global_weights(equal, object_bandwidths(equal, 1e-3))
    assert abs(stats.spearmanr(control.quality, control.source_ids).statistic) < 0.5
    spread = np.ptp(control.quality) / control.quality.mean()
    assert spread < 0.5 * np.ptp(quality.quality) / quality.quality.mean()


def test_convergence_flag_and_iteration_cap():
    rng = np.random.default_rng(5)
    block = synthetic_sources(rng, np.linspace(0.2, 4.0, 15), objects=80)
    bandwidths = object_bandwidths(block, 1e-3)
    capped, iterations, converged = estimate_global_weights(
        block, bandwidths, tolerance=1e-15, max_iterations=2
    )
    assert (iterations, converged) == (2, False)
    quality, iterations, converged = estimate_global_weights(block, bandwidths, tolerance=1e-8)
    assert converged and 2 <= iterations < 100
    again = update_source_quality(source_loss_contributions(block, bandwidths, quality))
    assert source_quality_change(quality, again) <= 1e-7
    assert source_quality_change(capped, quality) > 0
    first, iterations, converged = estimate_global_weights(block, bandwidths, tolerance=math.inf)
    assert (iterations, converged) == (1, True)
    with pytest.raises(ValueError):
        estimate_global_weights(block, bandwidths, max_iterations=0)


def test_source_quality_change_is_the_largest_relative_change():
    old = SourceQuality(np.array([1, 2, 3]), np.array([2.0, 4.0, 1.0]))
    new = SourceQuality(np.array([1, 2, 4]), np.array([2.5, 3.0, 1.5]))
    # 1: 0.25, 2: 0.25, 3: new misses it -> 1.0 vs 1.0 = 0, 4: old misses it -> 1.0 -> 1.5 = 0.5
    assert source_quality_change(old, new) == pytest.approx(0.5)
    assert source_quality_change(SourceQuality.uniform(), SourceQuality.uniform()) == 0.0


def test_update_floors_keep_qualities_positive_and_finite():
    single = update_source_quality(pd.DataFrame({"source_id": [7], "loss_fixed": [12345], "objects": [1]}))
    assert single.quality.tolist() == [MINIMUM_SOURCE_QUALITY]
    zero = update_source_quality(pd.DataFrame({"source_id": [1, 2], "loss_fixed": [0, 0], "objects": [3, 1]}))
    assert np.all(zero.quality == MINIMUM_SOURCE_QUALITY)
    perfect = update_source_quality(
        pd.DataFrame({"source_id": [1, 2], "loss_fixed": [0, 2**40], "objects": [1, 1]})
    )
    assert perfect.quality[0] == pytest.approx(math.log(1.0 / 2**-40))
    assert perfect.quality[1] == MINIMUM_SOURCE_QUALITY
    with pytest.raises(ValueError):
        update_source_quality(pd.DataFrame({"source_id": [1], "loss_fixed": [-1], "objects": [1]}))


def test_unreduced_contributions_are_summed_per_source():
    parts = pd.DataFrame(
        {"source_id": ["b", "a", "b"], "loss_fixed": [2**39, 2**40, 2**39], "objects": [1, 2, 1]}
    )
    quality = update_source_quality(parts)
    # L_a = 1, n_a = 2; L_b = 1, n_b = 2; total 2 -> g = log(2 / 0.5) for both
    assert quality.source_ids.tolist() == ["a", "b"]
    np.testing.assert_allclose(quality.quality, [math.log(4.0)] * 2, rtol=1e-15)


def test_source_sums_are_exactly_additive_over_any_split_of_objects():
    rng = np.random.default_rng(17)
    block = random_block(rng, objects=200, sources=30)
    bandwidths = spread_bandwidths(block)
    quality = SourceQuality(np.arange(30), rng.uniform(0.1, 5.0, 30))
    whole = source_loss_contributions(block, bandwidths, quality).set_index("source_id").sort_index()
    for parts in (2, 3, 7):
        pieces = [
            source_loss_contributions(block.select_objects(mask), bandwidths[mask], quality)
            for mask in random_split(rng, block, parts)
        ]
        summed = pd.concat(pieces).groupby("source_id").sum().sort_index()
        assert summed.index.equals(whole.index)
        assert np.array_equal(summed["loss_fixed"].to_numpy(), whole["loss_fixed"].to_numpy())
        assert np.array_equal(summed["objects"].to_numpy(), whole["objects"].to_numpy())
        assert np.array_equal(
            update_source_quality(pd.concat(pieces)).quality,
            update_source_quality(whole.reset_index()).quality,
        )


def test_global_weights_per_object_are_bitwise_independent_of_the_block():
    rng = np.random.default_rng(19)
    block = random_block(rng, objects=100, sources=30)
    quality = SourceQuality(np.arange(30), rng.uniform(0.1, 5.0, 30))
    whole = global_weights(block, quality)
    for mask in random_split(rng, block, 3):
        assert np.array_equal(
            global_weights(block.select_objects(mask), quality), whole[claim_mask(block, mask)]
        )
