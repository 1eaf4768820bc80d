"""The crowd release's worker-side functions (``pipelines/crowd/blocks.py``) on small hand-built
frames, against hand-computed bandwidths and weights and the ``transforms.crowd`` functions called
directly; each object's output must not depend on the other objects of its frame."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines.crowd.blocks import (
    BANDWIDTH,
    SUMMARY_ROW,
    BoundSide,
    GlobalPassSide,
    SynthesisSide,
    bound_block,
    global_pass_block,
    object_weights,
    prepare_block,
    prepared_block,
    prepared_schema,
    released_rows,
    summary_rows,
    synthesis_block,
)
from transforms.crowd.bandwidth import object_bandwidths
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.combined_weights import clip_weight_ratio, combined_weights
from transforms.crowd.contribution_bound import bound_source_contributions
from transforms.crowd.global_weights import SourceQuality, global_weights, source_loss_contributions
from transforms.crowd.local_weights import local_weights
from transforms.crowd.synthesis import SynthesisParameters, synthesize_block

SECRET = bytes(range(32))
FLOOR = 1e-3
# Object 20 has claims from sources 1..5, object 10 from 1, 3, 4 (one outlier), object 30 only equal values.
CLAIMS = pd.DataFrame(
    {
        "object_id": [20, 10, 20, 30, 20, 10, 20, 30, 10, 20, 30],
        "source_id": [5, 4, 3, 1, 1, 3, 4, 2, 1, 2, 3],
        "value": [10.0, 7.0, 3.0, 2.5, 1.0, 0.5, 4.0, 2.5, 0.0, 2.0, 2.5],
    }
)
QUALITY = SourceQuality(source_ids=np.array([1, 2, 3, 4, 5]), quality=np.array([1.0, 2.0, 0.5, 4.0, 1.5]))
PARAMETERS = SynthesisParameters(claims_per_object=3, k=3, gamma=2.0, epsilon0=1.0, precision=0.01,
                                 max_attempts_per_object=200, batch_size=16)


def silverman(values: list[float], floor: float) -> float:
    """``max(0.9 · min(sd, IQR/1.349, MAD/0.6745) · n^(-1/5), floor)`` with NumPy's own statistics."""
    array = np.array(values)
    sd = np.std(array, ddof=1)
    q1, q3 = np.percentile(array, [25, 75])
    mad = np.median(np.abs(array - np.median(array)))
    return max(0.9 * min(sd, (q3 - q1) / 1.349, mad / 0.6745) * len(array) ** -0.2, floor)


def side(method: str, cap: float = 3.0) -> SynthesisSide:
    return SynthesisSide(source_quality=QUALITY, weights_method=method, local_tolerance=1e-6,
                         local_max_iterations=50, weight_ratio_cap=cap, parameters=PARAMETERS, secret=SECRET,
                         release_id="blocks")


def test_prepared_schema_appends_the_bandwidth() -> None:
    schema = pa.schema([pa.field("object_id", pa.int64()), pa.field("source_id", pa.int64()),
                        pa.field("value", pa.float64())])
    prepared = prepared_schema(schema)
    assert prepared.names == ["object_id", "source_id", "value", BANDWIDTH]
    assert prepared.field(BANDWIDTH).type == pa.float64() and not prepared.field(BANDWIDTH).nullable


def test_prepare_block_orders_the_claims_and_attaches_hand_computed_bandwidths() -> None:
    prepared = prepare_block(CLAIMS.sample(frac=1.0, random_state=3), FLOOR)
    assert list(prepared.columns) == ["object_id", "source_id", "value", BANDWIDTH]
    assert prepared["object_id"].tolist() == [10, 10, 10, 20, 20, 20, 20, 20, 30, 30, 30]
    assert prepared["source_id"].tolist() == [1, 3, 4, 1, 2, 3, 4, 5, 1, 2, 3]
    assert prepared["value"].tolist() == [0.0, 0.5, 7.0, 1.0, 2.0, 3.0, 4.0, 10.0, 2.5, 2.5, 2.5]
    expected = {10: silverman([0.0, 0.5, 7.0], FLOOR), 20: silverman([1.0, 2.0, 3.0, 4.0, 10.0], FLOOR), 30: FLOOR}
    for object_id, bandwidth in expected.items():
        np.testing.assert_allclose(prepared.loc[prepared["object_id"] == object_id, BANDWIDTH], bandwidth, rtol=1e-12)
    assert expected[10] > FLOOR and expected[20] > FLOOR


def test_prepared_block_recovers_the_block_and_one_bandwidth_per_object() -> None:
    prepared = prepare_block(CLAIMS, FLOOR)
    block, bandwidths = prepared_block(prepared.iloc[::-1].reset_index(drop=True))
    reference = ClaimsBlock.from_frame(CLAIMS)
    for name in ("object_ids", "offsets", "source_ids", "values"):
        np.testing.assert_array_equal(getattr(block, name), getattr(reference, name))
    np.testing.assert_array_equal(bandwidths, object_bandwidths(reference, FLOOR))


def test_global_pass_matches_the_source_loss_contributions() -> None:
    prepared = prepare_block(CLAIMS, FLOOR)
    result = global_pass_block(prepared, GlobalPassSide(QUALITY))
    block = ClaimsBlock.from_frame(CLAIMS)
    expected = source_loss_contributions(block, object_bandwidths(block, FLOOR), QUALITY)
    pd.testing.assert_frame_equal(result, expected)
    assert result["source_id"].tolist() == [1, 2, 3, 4, 5]
    assert result["objects"].tolist() == [3, 2, 3, 2, 1]


def test_object_weights_of_each_method() -> None:
    block, bandwidths = prepared_block(prepare_block(CLAIMS, FLOOR))
    uniform = object_weights(block, bandwidths, side("uniform"))
    np.testing.assert_allclose(uniform, np.repeat([1 / 3, 1 / 5, 1 / 3], [3, 5, 3]), rtol=1e-15)
    global_ = object_weights(block, bandwidths, side("global", cap=100.0))
    # Object 10 (sources 1, 3, 4: g = 1, 0.5, 4) and object 20 (sources 1..5: g = 1, 2, 0.5, 4, 1.5).
    np.testing.assert_allclose(global_[:3], np.array([1.0, 0.5, 4.0]) / 5.5, rtol=1e-15)
    np.testing.assert_allclose(global_[3:8], np.array([1.0, 2.0, 0.5, 4.0, 1.5]) / 9.0, rtol=1e-15)
    # With R = 2 the smallest weight of object 10 is raised to 4/2 = 2: weights (2, 2, 4) / 8.
    capped = object_weights(block, bandwidths, side("global", cap=2.0))
    np.testing.assert_allclose(capped[:3], [0.25, 0.25, 0.5], rtol=1e-15)
    np.testing.assert_array_equal(capped, clip_weight_ratio(global_weights(block, QUALITY), block.offsets, 2.0))
    local = local_weights(block, bandwidths, 1e-6, 50).weights
    np.testing.assert_array_equal(object_weights(block, bandwidths, side("local")),
                                  clip_weight_ratio(local, block.offsets, 3.0))
    np.testing.assert_array_equal(object_weights(block, bandwidths, side("combined")),
                                  combined_weights(block, local, QUALITY.lookup(block.source_ids), 3.0))
    for method in ("uniform", "global", "local", "combined"):
        weights = object_weights(block, bandwidths, side(method))
        totals = np.add.reduceat(weights, block.offsets[:-1])
        np.testing.assert_allclose(totals, 1.0, rtol=1e-12)
        ratios = np.maximum.reduceat(weights, block.offsets[:-1]) / np.minimum.reduceat(weights, block.offsets[:-1])
        assert np.all(ratios <= 3.0)


@pytest.mark.parametrize("method", ["combined", "uniform"])
def test_synthesis_block_is_synthesize_block_with_one_summary_row_per_object(method: str) -> None:
    prepared = prepare_block(CLAIMS, FLOOR)
    result = synthesis_block(prepared, side(method))
    block, bandwidths = prepared_block(prepared)
    direct = synthesize_block(block, bandwidths, object_weights(block, bandwidths, side(method)), PARAMETERS,
                              SECRET, "blocks")
    assert result["object_id"].tolist() == sorted(result["object_id"].tolist())
    claims = released_rows(result, None)
    assert list(claims.columns) == ["object_id", "claim_index", "value"]
    assert claims["claim_index"].dtype == np.int32
    expected_claims = direct.claims.astype({"claim_index": np.int32, "value": np.float64})
    pd.testing.assert_frame_equal(claims, expected_claims[["object_id", "claim_index", "value"]].reset_index(drop=True))
    summary = summary_rows(result, None)
    assert summary["claim_index"].tolist() == [SUMMARY_ROW] * 3
    assert summary["object_id"].tolist() == [10, 20, 30]
    for column in ("claims", "released", "attempts", "suppressed", "reason"):
        assert summary[column].tolist() == direct.objects[column].tolist(), column
    assert summary["claims"].tolist() == [3, 5, 3]
    assert summary["suppressed"].tolist() == [False, False, False]
    assert (summary["released"] <= PARAMETERS.claims_per_object).all()
    assert summary["released"].sum() == len(claims) > 0


def test_each_objects_synthesis_does_not_depend_on_the_other_objects() -> None:
    prepared = prepare_block(CLAIMS, FLOOR)
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
    result = synthesis_block(prepare_block(small, FLOOR), side("uniform"))
    summary = summary_rows(result, None).set_index("object_id")
    assert bool(summary.loc["b", "suppressed"]) and summary.loc["b", "released"] == 0
    assert summary.loc["b", "reason"] != "" and summary.loc["a", "reason"] == ""
    assert set(released_rows(result, None)["object_id"]) <= {"a"}


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
