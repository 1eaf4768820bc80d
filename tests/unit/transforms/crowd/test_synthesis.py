"""The crowd synthesis on a block against the one-candidate-at-a-time reference, its invariances,
and its output law against the law enumerated by ``released_claim_law`` (which the privacy
analysis and the enumeration tests use: the sampler must draw from exactly that law)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.synthesis import (
    REASON_FEWER_THAN_K,
    SynthesisParameters,
    attempt_law,
    released_claim_law,
    synthesize_block,
    synthesize_object_reference,
)
from transforms.crowd.value_grid import ValueGrid

SECRET = bytes.fromhex("5a" * 32)
RELEASE = "release-test-1"
GRID = ValueGrid(-100.0, 100.0, 0.5)


def make_parameters(**overrides) -> SynthesisParameters:
    values = dict(claims_per_object=6, k=4, gamma=2.0, epsilon0=1.0, grid=GRID, fallback_probability=0.05,
                  max_attempts_per_claim=6, batch_size=7)
    values.update(overrides)
    return SynthesisParameters(**values)


def make_block(seed: int, objects: int, string_ids: bool = False) -> tuple[ClaimsBlock, np.ndarray, np.ndarray]:
    """Objects with 1..25 claims inside the grid's range, mixed spreads and outliers; random
    weights; public (per-object constant) bandwidths."""
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(objects):
        n = int(rng.integers(1, 26))
        centre = rng.uniform(-60, 60)
        spread = rng.choice([0.0, 0.5, 3.0, 30.0])
        values = centre + spread * rng.standard_normal(n)
        values[rng.random(n) < 0.1] += rng.normal(0, 80)
        values = np.clip(values, GRID.low, GRID.high)
        object_id = f"obj-{index:04d}" if string_ids else int(rng.integers(0, 10**12))
        rows.extend((object_id, f"s{j:03d}", float(v)) for j, v in enumerate(values))
    block = ClaimsBlock.from_frame(pd.DataFrame(rows, columns=["object_id", "source_id", "value"]))
    weights = rng.uniform(0.5, 1.0, block.number_of_claims)
    bandwidths = rng.choice([0.5, 2.0, 9.0], block.number_of_objects)
    return block, bandwidths, weights


@pytest.mark.parametrize(
    ("seed", "string_ids", "overrides"),
    [(1, False, {}), (2, True, {"max_attempts_per_claim": 2}), (3, False, {"batch_size": 1, "k": 2}),
     (4, True, {"fallback_probability": 0.3, "claims_per_object": 1})],
)
def test_block_equals_the_reference_per_object(seed: int, string_ids: bool, overrides: dict) -> None:
    block, bandwidths, weights = make_block(seed, 25, string_ids)
    parameters = make_parameters(**overrides)
    result = synthesize_block(block, bandwidths, weights, parameters, SECRET, RELEASE)
    capped = 0
    for index, object_id in enumerate(block.object_ids):
        part = block.object_slice(index)
        reference = synthesize_object_reference(block.values[part], weights[part], float(bandwidths[index]),
                                                parameters, SECRET, RELEASE, object_id)
        released = result.claims.loc[result.claims["object_id"] == object_id, "value"].tolist()
        assert released == reference, object_id
        capped += int(result.objects.loc[index, "capped"])
    if overrides.get("max_attempts_per_claim") == 2:
        assert capped > 0, "the case must exercise slots that reach their cap"


def test_block_output_per_object_does_not_depend_on_the_other_objects() -> None:
    block, bandwidths, weights = make_block(5, 30)
    parameters = make_parameters()
    whole = synthesize_block(block, bandwidths, weights, parameters, SECRET, RELEASE).claims
    half = np.arange(block.number_of_objects) % 2 == 0
    part = block.select_objects(half)
    claim_mask = np.repeat(half, block.counts)
    alone = synthesize_block(part, bandwidths[half], weights[claim_mask], parameters, SECRET, RELEASE).claims
    expected = whole[whole["object_id"].isin(part.object_ids)].reset_index(drop=True)
    pd.testing.assert_frame_equal(alone.reset_index(drop=True), expected)


def test_every_released_object_has_exactly_m_claims_on_the_grid() -> None:
    block, bandwidths, weights = make_block(6, 40)
    parameters = make_parameters(k=3)
    result = synthesize_block(block, bandwidths, weights, parameters, SECRET, RELEASE)
    claims, objects = result.claims, result.objects
    assert list(claims.columns) == ["object_id", "claim_index", "value"]
    assert claims["claim_index"].dtype == np.int32 and claims["value"].dtype == np.float64
    eligible = objects.loc[~objects["suppressed"], "object_id"]
    assert claims.groupby("object_id").size().reindex(eligible).eq(parameters.claims_per_object).all()
    steps = claims["value"] / GRID.precision
    assert np.allclose(steps, np.round(steps)) and claims["value"].between(GRID.low, GRID.high).all()
    assert (objects.loc[~objects["suppressed"], "attempts"] >= parameters.claims_per_object).all()


def test_objects_with_fewer_than_k_claims_are_suppressed_and_never_sampled() -> None:
    frame = pd.DataFrame({"object_id": [1, 1, 2, 2, 2, 2], "source_id": list("abcdef"), "value": [1.0, 2, 3, 3, 3, 3]})
    block = ClaimsBlock.from_frame(frame)
    result = synthesize_block(block, np.array([1.0, 1.0]), np.ones(6), make_parameters(), SECRET, RELEASE)
    small = result.objects.set_index("object_id").loc[1]
    assert bool(small["suppressed"]) and small["reason"] == REASON_FEWER_THAN_K and small["attempts"] == 0
    assert set(result.claims["object_id"]) == {2}


def test_keyed_randomness_drives_every_draw() -> None:
    block, bandwidths, weights = make_block(7, 10)
    parameters = make_parameters()
    first = synthesize_block(block, bandwidths, weights, parameters, SECRET, RELEASE).claims
    again = synthesize_block(block, bandwidths, weights, parameters, SECRET, RELEASE).claims
    other = synthesize_block(block, bandwidths, weights, parameters, bytes(32), RELEASE).claims
    pd.testing.assert_frame_equal(first, again)
    assert not first["value"].equals(other["value"])


@pytest.mark.parametrize(
    "overrides",
    [{"claims_per_object": 0}, {"k": 0}, {"gamma": 1.0}, {"epsilon0": 0.0}, {"fallback_probability": 0.0},
     {"fallback_probability": 1.0}, {"fallback_probability": 0.1234567}, {"max_attempts_per_claim": 0},
     {"batch_size": 0}],
)
def test_invalid_parameters_are_refused(overrides: dict) -> None:
    with pytest.raises(ValueError):
        make_parameters(**overrides)


def test_claims_outside_the_public_range_are_refused() -> None:
    block = ClaimsBlock.from_frame(pd.DataFrame({"object_id": [1] * 4, "source_id": list("abcd"),
                                                 "value": [0.0, 1.0, 2.0, 500.0]}))
    with pytest.raises(ValueError, match="value range"):
        synthesize_block(block, np.array([1.0]), np.ones(4), make_parameters(), SECRET, RELEASE)


def test_the_attempt_law_sums_to_the_pass_probability_and_the_claim_law_to_one() -> None:
    values = np.array([0.0, 0.0, 1.0, 40.0, 41.0])
    parameters = make_parameters(k=3)
    _, attempt = attempt_law(values, np.ones(5), 2.0, parameters)
    _, claim = released_claim_law(values, np.ones(5), 2.0, parameters)
    assert parameters.fallback_probability <= attempt.sum() <= 1.0
    assert claim.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(claim >= parameters.fallback_probability / GRID.size * 0.999)


@pytest.mark.parametrize(
    ("values", "bandwidth", "k"),
    [([0.0] * 5 + [10.0] * 5, 2.0, 5), ([0.0, 0.5, 1.0, 30.0, 60.0, 61.0], 3.0, 3), ([5.0] * 9 + [90.0], 1.0, 6)],
)
def test_released_claims_follow_the_enumerated_law(values: list[float], bandwidth: float, k: int) -> None:
    """Chi-square of 4,000 objects' single claims (one keyed stream each) against
    ``released_claim_law`` on cells with an expected count of at least 5, the rest pooled; the law
    with another bandwidth is rejected by the same test (so the test can fail)."""
    grid = ValueGrid(-10.0, 100.0, 1.0)
    parameters = SynthesisParameters(claims_per_object=1, k=k, gamma=2.0, epsilon0=1.5, grid=grid,
                                     fallback_probability=0.05, max_attempts_per_claim=40, batch_size=4)
    objects = 4_000
    frame = pd.DataFrame([(o, s, v) for o in range(objects) for s, v in enumerate(values)],
                         columns=["object_id", "source_id", "value"])
    block = ClaimsBlock.from_frame(frame)
    released = synthesize_block(block, np.full(objects, bandwidth), np.ones(block.number_of_claims), parameters,
                                SECRET, "law").claims["value"].to_numpy()
    observed = np.bincount(np.rint((released - grid.low) / grid.precision).astype(int), minlength=grid.size)

    def p_value(law: np.ndarray) -> float:
        expected = law * objects
        keep = expected >= 5
        f_obs, f_exp = observed[keep], expected[keep]
        if expected[~keep].sum() > 0:
            f_obs = np.append(f_obs, observed[~keep].sum())
            f_exp = np.append(f_exp, expected[~keep].sum())
        return float(stats.chisquare(f_obs, f_exp * f_obs.sum() / f_exp.sum()).pvalue)

    assert p_value(released_claim_law(np.array(values), np.ones(len(values)), bandwidth, parameters)[1]) > 1e-3
    assert p_value(released_claim_law(np.array(values), np.ones(len(values)), 2.5 * bandwidth, parameters)[1]) < 1e-6
