"""Algorithm 1 on a block against the one-candidate-at-a-time reference, and its invariances."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import transforms.crowd.synthesis as crowd_synthesis
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.synthesis import (
    REASON_FEWER_THAN_K,
    SynthesisParameters,
    synthesis_round_generator,
    synthesize_block,
    synthesize_object_reference,
)

SECRET = bytes.fromhex("5a" * 32)
RELEASE = "release-test-1"


def make_parameters(**overrides) -> SynthesisParameters:
    values = dict(
        claims_per_object=6,
        k=4,
        gamma=2.0,
        epsilon0=1.0,
        precision=0.01,
        max_attempts_per_object=40,
        batch_size=7,
    )
    values.update(overrides)
    return SynthesisParameters(**values)


def make_block(
    seed: int, objects: int, string_ids: bool = False
) -> tuple[ClaimsBlock, np.ndarray, np.ndarray]:
    """Objects with 1..25 claims, mixed spreads and outliers; random weights and bandwidths."""
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(objects):
        n = int(rng.integers(1, 26))
        centre = rng.normal(0, 50)
        spread = rng.choice([0.01, 0.5, 3.0, 40.0])
        values = centre + spread * rng.standard_normal(n)
        values[rng.random(n) < 0.1] += rng.normal(0, 200)
        object_id = f"obj-{index:04d}" if string_ids else int(rng.integers(0, 10**12))
        rows.extend((object_id, f"s{j:03d}", float(v)) for j, v in enumerate(values))
    frame = pd.DataFrame(rows, columns=["object_id", "source_id", "value"]).drop_duplicates(
        ["object_id", "source_id"]
    )
    block = ClaimsBlock.from_frame(frame)
    raw = rng.uniform(0.2, 1.0, block.number_of_claims)
    totals = np.add.reduceat(raw, block.offsets[:-1])
    weights = raw / np.repeat(totals, block.counts)
    bandwidths = rng.choice([0.005, 0.2, 1.0, 7.0], block.number_of_objects)
    return block, bandwidths, weights


class CountingGenerator:
    """Counts the reference's per-candidate draws (one ``random(3)`` per attempt)."""

    calls = 0

    def __init__(self, inner: np.random.Generator) -> None:
        self.inner = inner

    def random(self, size):
        CountingGenerator.calls += 1
        return self.inner.random(size)


def reference_for(block: ClaimsBlock, bandwidths, weights, parameters, index: int) -> tuple[list[float], int]:
    object_id = block.object_ids[index]
    CountingGenerator.calls = 0
    released = synthesize_object_reference(
        block.values[block.object_slice(index)],
        weights[block.object_slice(index)],
        float(bandwidths[index]),
        parameters,
        lambda r: CountingGenerator(synthesis_round_generator(SECRET, RELEASE, object_id, r)),
    )
    return released, CountingGenerator.calls


@pytest.mark.parametrize(
    ("seed", "string_ids", "overrides"),
    [
        (1, False, {}),
        (2, True, {"gamma": 1.3, "epsilon0": 0.4, "batch_size": 3}),
        (3, False, {"k": 2, "claims_per_object": 3, "max_attempts_per_object": 5, "batch_size": 4}),
        (4, True, {"k": 8, "gamma": 5.0, "precision": 0.5, "batch_size": 16, "max_attempts_per_object": 64}),
    ],
)
def test_block_equals_the_reference_per_object(seed: int, string_ids: bool, overrides: dict) -> None:
    block, bandwidths, weights = make_block(seed, 60, string_ids)
    parameters = make_parameters(**overrides)
    result = synthesize_block(block, bandwidths, weights, parameters, SECRET, RELEASE)
    objects = result.objects.set_index("object_id")
    claims = result.claims.groupby("object_id", sort=False)["value"].apply(list).to_dict()
    outcomes = {"full": 0, "short": 0, "suppressed": 0}
    for index, object_id in enumerate(block.object_ids):
        expected, attempts = reference_for(block, bandwidths, weights, parameters, index)
        assert claims.get(object_id, []) == expected
        row = objects.loc[object_id]
        assert row["released"] == len(expected)
        assert row["attempts"] == attempts
        assert row["claims"] == block.counts[index]
        if row["suppressed"]:
            outcomes["suppressed"] += 1
        elif row["released"] == parameters.claims_per_object:
            outcomes["full"] += 1
        else:
            outcomes["short"] += 1
            assert row["attempts"] == parameters.max_attempts_per_object
    assert all(count > 0 for count in outcomes.values()), outcomes


def test_block_output_per_object_does_not_depend_on_the_other_objects() -> None:
    block, bandwidths, weights = make_block(7, 90)
    parameters = make_parameters()
    whole = synthesize_block(block, bandwidths, weights, parameters, SECRET, RELEASE)
    assignment = np.random.default_rng(0).integers(0, 4, block.number_of_objects)
    claim_parts, object_parts = [], []
    for part in range(4):
        mask = assignment == part
        claim_mask = np.repeat(mask, block.counts)
        piece = synthesize_block(
            block.select_objects(mask), bandwidths[mask], weights[claim_mask], parameters, SECRET, RELEASE
        )
        claim_parts.append(piece.claims)
        object_parts.append(piece.objects)
    order = ["object_id", "claim_index"]
    pd.testing.assert_frame_equal(
        pd.concat(claim_parts).sort_values(order, ignore_index=True),
        whole.claims.sort_values(order, ignore_index=True),
    )
    pd.testing.assert_frame_equal(
        pd.concat(object_parts).sort_values("object_id", ignore_index=True),
        whole.objects.sort_values("object_id", ignore_index=True),
    )
    assert len(whole.claims) > 0


def test_chunking_does_not_change_the_output(monkeypatch: pytest.MonkeyPatch) -> None:
    block, bandwidths, weights = make_block(9, 40)
    parameters = make_parameters()
    default = synthesize_block(block, bandwidths, weights, parameters, SECRET, RELEASE)
    monkeypatch.setattr(crowd_synthesis, "_PAIRS_PER_CHUNK", 50)
    chunked = synthesize_block(block, bandwidths, weights, parameters, SECRET, RELEASE)
    pd.testing.assert_frame_equal(default.claims, chunked.claims)
    pd.testing.assert_frame_equal(default.objects, chunked.objects)


def test_output_columns_types_and_rounding() -> None:
    block, bandwidths, weights = make_block(10, 30)
    parameters = make_parameters(precision=0.25)
    result = synthesize_block(block, bandwidths, weights, parameters, SECRET, RELEASE)
    assert list(result.claims.columns) == ["object_id", "claim_index", "value"]
    assert result.claims["claim_index"].dtype == np.int32
    assert result.claims["value"].dtype == np.float64
    assert list(result.objects.columns) == [
        "object_id",
        "claims",
        "released",
        "attempts",
        "suppressed",
        "reason",
    ]
    for column in ("claims", "released", "attempts"):
        assert result.objects[column].dtype == np.int64
    assert result.objects["suppressed"].dtype == bool
    quotient = result.claims["value"].to_numpy() / 0.25
    np.testing.assert_allclose(quotient, np.round(quotient), atol=1e-9)
    for object_id, group in result.claims.groupby("object_id"):
        assert group["claim_index"].tolist() == list(range(len(group)))
        assert len(group) == result.objects.set_index("object_id").loc[object_id, "released"]
    assert result.objects["released"].max() <= parameters.claims_per_object


def test_objects_with_fewer_than_k_claims_are_suppressed_and_never_sampled() -> None:
    block, bandwidths, weights = make_block(12, 50)
    parameters = make_parameters(k=10)
    result = synthesize_block(block, bandwidths, weights, parameters, SECRET, RELEASE)
    small = block.counts < 10
    assert small.any() and (~small).any()
    objects = result.objects
    assert objects["suppressed"].tolist() == small.tolist()
    assert (objects.loc[small, "reason"] == REASON_FEWER_THAN_K).all()
    assert (objects.loc[~small, "reason"] == "").all()
    assert (objects.loc[small, ["released", "attempts"]] == 0).all().all()
    assert not result.claims["object_id"].isin(block.object_ids[small]).any()


def test_hand_derivable_outcomes() -> None:
    """Identical claims: every seed shares the interval, k' = n. Far-apart claims: k' = 1."""
    n = 6
    frame = pd.DataFrame(
        {
            "object_id": [1] * n + [2] * n,
            "source_id": list(range(n)) * 2,
            "value": [3.0] * n + [1000.0 * j for j in range(n)],
        }
    )
    block = ClaimsBlock.from_frame(frame)
    weights = np.full(2 * n, 1.0 / n)
    parameters = make_parameters(k=n - 1, epsilon0=60.0, claims_per_object=5, max_attempts_per_object=30)
    result = synthesize_block(block, np.array([1.0, 1.0]), weights, parameters, SECRET, RELEASE)
    objects = result.objects.set_index("object_id")
    assert objects.loc[1, "released"] == 5 and objects.loc[1, "attempts"] == 5
    assert objects.loc[2, "released"] == 0 and objects.loc[2, "attempts"] == 30


def test_keyed_randomness_drives_every_draw() -> None:
    block, bandwidths, weights = make_block(13, 20)
    parameters = make_parameters()
    first = synthesize_block(block, bandwidths, weights, parameters, SECRET, RELEASE)
    again = synthesize_block(block, bandwidths, weights, parameters, SECRET, RELEASE)
    other_release = synthesize_block(block, bandwidths, weights, parameters, SECRET, "release-test-2")
    other_secret = synthesize_block(block, bandwidths, weights, parameters, bytes(32), RELEASE)
    pd.testing.assert_frame_equal(first.claims, again.claims)
    assert not first.claims["value"].equals(other_release.claims["value"])
    assert not first.claims["value"].equals(other_secret.claims["value"])


def test_empty_block() -> None:
    block = ClaimsBlock.from_frame(pd.DataFrame({"object_id": [], "source_id": [], "value": []}))
    result = synthesize_block(block, np.empty(0), np.empty(0), make_parameters(), SECRET, RELEASE)
    assert len(result.claims) == 0 and len(result.objects) == 0


@pytest.mark.parametrize(
    "overrides",
    [
        {"k": 0},
        {"gamma": 1.0},
        {"epsilon0": 0.0},
        {"claims_per_object": 0},
        {"precision": -0.1},
        {"max_attempts_per_object": 0},
        {"batch_size": 0},
        {"k": 2.5},
        {"gamma": float("nan")},
    ],
)
def test_invalid_parameters_are_refused(overrides: dict) -> None:
    with pytest.raises(ValueError):
        make_parameters(**overrides)


def test_invalid_inputs_are_refused() -> None:
    block, bandwidths, weights = make_block(14, 5)
    parameters = make_parameters()
    with pytest.raises(ValueError, match="bandwidths"):
        synthesize_block(block, bandwidths[:-1], weights, parameters, SECRET, RELEASE)
    with pytest.raises(ValueError, match="bandwidths"):
        synthesize_block(block, np.zeros_like(bandwidths), weights, parameters, SECRET, RELEASE)
    with pytest.raises(ValueError, match="combined_weights"):
        synthesize_block(block, bandwidths, weights[:-1], parameters, SECRET, RELEASE)
    with pytest.raises(ValueError, match="combined_weights"):
        synthesize_block(block, bandwidths, -weights, parameters, SECRET, RELEASE)
