"""The crowd release's worker-side functions (``pipelines/crowd/blocks.py``) on small hand-built
frames, against hand-computed weights and the ``transforms.crowd`` functions called directly; each
object's output must not depend on the other objects of its frame. The bandwidth is the release's
public constant (the side values' ``bandwidth``), never fitted to the claims."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipelines.crowd.blocks import (
    SUMMARY_ROW,
    BoundSide,
    GlobalPassSide,
    SynthesisSide,
    bound_block,
    global_pass_block,
    object_block,
    object_weights,
    public_bandwidths,
    released_rows,
    summary_rows,
    synthesis_block,
)
from transforms.crowd.bandwidth import object_bandwidths
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.combined_weights import clip_weight_ratio, seed_weights
from transforms.crowd.contribution_bound import bound_source_contributions
from transforms.crowd.global_weights import SourceQuality, source_loss_contributions
from transforms.crowd.local_weights import local_weights
from transforms.crowd.synthesis import SynthesisParameters, synthesize_block
from transforms.crowd.value_grid import ValueGrid

SECRET = bytes(range(32))
BANDWIDTH_VALUE = 1.25
RATIO_CAP, LOCAL_RATIO_CAP = 3.0, 1.5
# Object 20 has claims from sources 1..5, object 10 from 1, 3, 4 (one outlier), object 30 only equal values.
CLAIMS = pd.DataFrame(
    {
        "object_id": [20, 10, 20, 30, 20, 10, 20, 30, 10, 20, 30],
        "source_id": [5, 4, 3, 1, 1, 3, 4, 2, 1, 2, 3],
        "value": [10.0, 7.0, 3.0, 2.5, 1.0, 0.5, 4.0, 2.5, 0.0, 2.0, 2.5],
    }
)
QUALITY = SourceQuality(source_ids=np.array([1, 2, 3, 4, 5]), quality=np.array([1.0, 2.0, 0.5, 4.0, 1.5]))
GRID = ValueGrid(-5.0, 15.0, 0.25)


def parameters(**overrides) -> SynthesisParameters:
    values = dict(claims_per_object=3, k=3, gamma=2.0, epsilon0=1.0, grid=GRID, fallback_probability=0.1,
                  max_attempts_per_claim=20, batch_size=16)
    values.update(overrides)
    return SynthesisParameters(**values)


PARAMETERS = parameters()


def side(method: str, cap: float = RATIO_CAP, local_cap: float = LOCAL_RATIO_CAP,
         synthesis: SynthesisParameters = PARAMETERS) -> SynthesisSide:
    return SynthesisSide(source_quality=QUALITY, weights_method=method, local_tolerance=1e-6,
                         local_max_iterations=50, weight_ratio_cap=cap, local_ratio_cap=local_cap,
                         parameters=synthesis, secret=SECRET, release_id="blocks", bandwidth=BANDWIDTH_VALUE)


def clipped_by_hand(factor: np.ndarray, cap: float) -> np.ndarray:
    """One object's factor with every entry raised to at least ``max / cap``, normalized."""
    raised = np.maximum(factor, factor.max() / cap)
    return raised / raised.sum()


def test_object_block_orders_the_claims_and_the_bandwidth_is_the_public_constant() -> None:
    block = object_block(CLAIMS.sample(frac=1.0, random_state=3))
    reference = ClaimsBlock.from_frame(CLAIMS)
    for name in ("object_ids", "offsets", "source_ids", "values"):
        np.testing.assert_array_equal(getattr(block, name), getattr(reference, name))
    np.testing.assert_array_equal(block.object_ids, [10, 20, 30])
    np.testing.assert_array_equal(block.source_ids, [1, 3, 4, 1, 2, 3, 4, 5, 1, 2, 3])
    # the same public constant for every object, whatever its claims (object 30's are all equal) ...
    np.testing.assert_array_equal(public_bandwidths(block, BANDWIDTH_VALUE), [BANDWIDTH_VALUE] * 3)
    moved = object_block(CLAIMS.assign(value=CLAIMS["value"] * 7.0 - 3.0))
    np.testing.assert_array_equal(public_bandwidths(moved, 4), [4.0] * 3)
    # ... and not the data-fitted rule: that would differ per object
    fitted = object_bandwidths(ClaimsBlock.from_frame(CLAIMS), 1e-3)
    assert len(set(fitted.tolist())) == 3


def test_global_pass_matches_the_source_loss_contributions() -> None:
    result = global_pass_block(CLAIMS, GlobalPassSide(QUALITY, BANDWIDTH_VALUE))
    block = ClaimsBlock.from_frame(CLAIMS)
    expected = source_loss_contributions(block, np.full(3, BANDWIDTH_VALUE), QUALITY)
    pd.testing.assert_frame_equal(result, expected)
    assert result["source_id"].tolist() == [1, 2, 3, 4, 5]
    assert result["objects"].tolist() == [3, 2, 3, 2, 1]
    # another bandwidth gives other losses: the side value really is used
    other = global_pass_block(CLAIMS, GlobalPassSide(QUALITY, 4.0 * BANDWIDTH_VALUE))
    assert not other["loss_fixed"].equals(result["loss_fixed"])


def test_uniform_and_global_weights_by_hand() -> None:
    block = object_block(CLAIMS)
    bandwidths = public_bandwidths(block, BANDWIDTH_VALUE)
    uniform = object_weights(block, bandwidths, side("uniform"))
    np.testing.assert_allclose(uniform, np.repeat([1 / 3, 1 / 5, 1 / 3], [3, 5, 3]), rtol=1e-15)
    # The global factor is sqrt(g): object 10 (sources 1, 3, 4: g = 1, 0.5, 4) has sqrt ratio 2 sqrt 2 < 100.
    global_ = object_weights(block, bandwidths, side("global", cap=100.0))
    root = np.sqrt([1.0, 0.5, 4.0])
    np.testing.assert_allclose(global_[:3], root / root.sum(), rtol=1e-15)
    root = np.sqrt([1.0, 2.0, 0.5, 4.0, 1.5])
    np.testing.assert_allclose(global_[3:8], root / root.sum(), rtol=1e-15)
    root = np.sqrt([1.0, 2.0, 0.5])  # object 30: sources 1, 2, 3
    np.testing.assert_allclose(global_[8:], root / root.sum(), rtol=1e-15)
    # With R = 2 the smallest factors of object 10 are raised to 2/2 = 1: (1, 1, 2) / 4.
    capped = object_weights(block, bandwidths, side("global", cap=2.0, local_cap=2.0))
    np.testing.assert_allclose(capped[:3], [0.25, 0.25, 0.5], rtol=1e-15)
    raised = np.array([1.0, np.sqrt(2.0), 1.0, 2.0, np.sqrt(1.5)])
    np.testing.assert_allclose(capped[3:8], raised / raised.sum(), rtol=1e-15)


@pytest.mark.parametrize("method", ["uniform", "global", "local", "combined"])
def test_object_weights_are_the_seed_weights_of_the_method(method: str) -> None:
    block = object_block(CLAIMS)
    bandwidths = public_bandwidths(block, BANDWIDTH_VALUE)
    weights = object_weights(block, bandwidths, side(method))
    local = local_weights(block, bandwidths, 1e-6, 50).weights
    np.testing.assert_array_equal(
        weights, seed_weights(block, method, local, QUALITY.lookup(block.source_ids), RATIO_CAP, LOCAL_RATIO_CAP)
    )
    global_factor, local_factor = np.sqrt(QUALITY.lookup(block.source_ids)), np.sqrt(local)
    for index in range(block.number_of_objects):
        part = block.object_slice(index)
        expected = {
            "uniform": np.full(block.counts[index], 1.0 / block.counts[index]),
            "global": clipped_by_hand(global_factor[part], RATIO_CAP),
            "local": clipped_by_hand(local_factor[part], RATIO_CAP),
            "combined": clipped_by_hand(clipped_by_hand(global_factor[part], RATIO_CAP / LOCAL_RATIO_CAP)
                                        * clipped_by_hand(local_factor[part], LOCAL_RATIO_CAP), np.inf),
        }[method]
        np.testing.assert_allclose(weights[part], expected, rtol=1e-12)
    totals = np.add.reduceat(weights, block.offsets[:-1])
    np.testing.assert_allclose(totals, 1.0, rtol=1e-12)
    ratios = np.maximum.reduceat(weights, block.offsets[:-1]) / np.minimum.reduceat(weights, block.offsets[:-1])
    assert np.all(ratios <= RATIO_CAP * (1 + 1e-12))


def test_the_local_factor_is_what_the_combined_weights_take_from_the_claims() -> None:
    """Object 10's outlier (7.0) gets a smaller local weight; in the combined weights its factor is
    lifted to at least ``max / R_l``, so the local part's ratio is at most ``R_l``."""
    block = object_block(CLAIMS)
    bandwidths = public_bandwidths(block, BANDWIDTH_VALUE)
    local = local_weights(block, bandwidths, 1e-6, 50).weights
    assert local[2] < local[0]
    combined = object_weights(block, bandwidths, side("combined"))
    global_part = clip_weight_ratio(np.sqrt(QUALITY.lookup(block.source_ids)), block.offsets,
                                    RATIO_CAP / LOCAL_RATIO_CAP)
    local_part = combined / global_part
    for index in range(block.number_of_objects):
        part = local_part[block.object_slice(index)]
        assert part.max() / part.min() <= LOCAL_RATIO_CAP * (1 + 1e-12)


@pytest.mark.parametrize(("method", "overrides"), [("combined", {}), ("uniform", {}),
                                                   ("global", {"max_attempts_per_claim": 1})])
def test_synthesis_block_is_synthesize_block_with_one_summary_row_per_object(method: str, overrides: dict) -> None:
    synthesis = parameters(**overrides)
    result = synthesis_block(CLAIMS.sample(frac=1.0, random_state=5), side(method, synthesis=synthesis))
    block = object_block(CLAIMS)
    bandwidths = public_bandwidths(block, BANDWIDTH_VALUE)
    local = local_weights(block, bandwidths, 1e-6, 50).weights
    weights = seed_weights(block, method, local, QUALITY.lookup(block.source_ids), RATIO_CAP, LOCAL_RATIO_CAP)
    direct = synthesize_block(block, np.full(3, BANDWIDTH_VALUE), weights, synthesis, SECRET, "blocks")
    assert result["object_id"].tolist() == sorted(result["object_id"].tolist())
    claims = released_rows(result, None)
    assert list(claims.columns) == ["object_id", "claim_index", "value"]
    assert claims["claim_index"].dtype == np.int32 and claims["value"].dtype == np.float64
    expected_claims = direct.claims.astype({"claim_index": np.int32, "value": np.float64})
    pd.testing.assert_frame_equal(claims, expected_claims[["object_id", "claim_index", "value"]].reset_index(drop=True))
    assert claims.groupby("object_id").size().tolist() == [3, 3, 3]
    assert claims["value"].between(GRID.low, GRID.high).all()
    np.testing.assert_array_equal(claims["value"] / GRID.precision, np.rint(claims["value"] / GRID.precision))
    summary = summary_rows(result, None)
    assert list(summary.columns) == ["object_id", "claim_index", "value", "claims", "released", "attempts",
                                     "fallbacks", "capped", "suppressed", "reason"]
    assert summary["claim_index"].tolist() == [SUMMARY_ROW] * 3
    assert summary["object_id"].tolist() == [10, 20, 30]
    for column in ("claims", "released", "attempts", "fallbacks", "capped", "suppressed", "reason"):
        assert summary[column].tolist() == direct.objects[column].tolist(), column
    assert summary["claims"].tolist() == [3, 5, 3]
    assert summary["suppressed"].tolist() == [False, False, False]
    assert summary["released"].tolist() == [3, 3, 3] and summary["released"].sum() == len(claims)
    assert (summary["attempts"] >= 3).all() and (summary["capped"] <= summary["fallbacks"]).all()
    if synthesis.max_attempts_per_claim == 1:
        # one attempt per slot: every slot whose attempt failed reached its cap
        assert summary["attempts"].tolist() == [3, 3, 3] and summary["capped"].sum() > 0


def test_each_objects_synthesis_does_not_depend_on_the_other_objects() -> None:
    prepared = CLAIMS
    together = synthesis_block(prepared, side("combined"))
    alone = pd.concat(
        [synthesis_block(prepared[prepared["object_id"] == object_id].reset_index(drop=True), side("combined"))
         for object_id in (10, 20, 30)],
        ignore_index=True,
    )
    pd.testing.assert_frame_equal(together, alone)


def test_an_object_with_fewer_than_k_claims_is_suppressed() -> None:
    small = pd.DataFrame({"object_id": ["b", "b", "a", "a", "a"], "source_id": [1, 2, 1, 2, 3],
                          "value": [1.0, 2.0, 0.0, 1.0, 5.0]})
    result = synthesis_block(small, side("uniform"))
    summary = summary_rows(result, None).set_index("object_id")
    assert bool(summary.loc["b", "suppressed"]) and summary.loc["b", "released"] == 0
    assert summary.loc["b", ["attempts", "fallbacks", "capped"]].tolist() == [0, 0, 0]
    assert summary.loc["b", "reason"] != "" and summary.loc["a", "reason"] == ""
    assert not bool(summary.loc["a", "suppressed"]) and summary.loc["a", "released"] == 3
    released = released_rows(result, None)
    assert released["object_id"].tolist() == ["a"] * 3 and released["claim_index"].tolist() == [0, 1, 2]


def test_released_and_summary_rows_split_the_staged_outcome() -> None:
    staged = pd.DataFrame({"object_id": [1, 1, 1, 2], "claim_index": np.array([0, 1, SUMMARY_ROW, SUMMARY_ROW], np.int32),
                           "value": [0.5, 0.7, 0.0, 0.0], "claims": [0, 0, 4, 1], "released": [0, 0, 2, 0]},
                          index=[7, 8, 9, 10])
    released = released_rows(staged, None)
    assert released.to_dict("list") == {"object_id": [1, 1], "claim_index": [0, 1], "value": [0.5, 0.7]}
    assert released.index.tolist() == [0, 1]
    summary = summary_rows(staged, None)
    assert summary["object_id"].tolist() == [1, 2] and summary["claims"].tolist() == [4, 1]
    assert summary.index.tolist() == [0, 1]


def test_bound_block_keeps_at_most_l_objects_per_source() -> None:
    rng = np.random.default_rng(2)
    claims = pd.DataFrame({"object_id": np.repeat(np.arange(12), 4), "source_id": np.tile([1, 2, 3, 4], 12),
                           "value": rng.normal(size=48)})
    claims = claims[~((claims["source_id"] == 4) & (claims["object_id"] > 1))].reset_index(drop=True)
    kept = bound_block(claims, BoundSide(max_objects_per_source=5, secret=SECRET, release_id="bound"))
    pd.testing.assert_frame_equal(kept, bound_source_contributions(claims, 5, SECRET, "bound"))
    assert kept.groupby("source_id").size().to_dict() == {1: 5, 2: 5, 3: 5, 4: 2}
    merged = kept.merge(claims, on=["object_id", "source_id"], suffixes=("", "_input"))
    assert len(merged) == len(kept) and (merged["value"] == merged["value_input"]).all()
    other = bound_block(claims, BoundSide(max_objects_per_source=5, secret=SECRET, release_id="other"))
    assert not other[["object_id", "source_id"]].equals(kept[["object_id", "source_id"]])
