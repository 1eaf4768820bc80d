"""The Uniform and Basic baselines: weights by hand, Laplace noise by its distribution."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from transforms.core.keyed_randomness import keyed_generator
from transforms.crowd.baselines import basic_laplace_release, basic_laplace_scale, uniform_weights
from transforms.crowd.claims_block import ClaimsBlock

SECRET = bytes(range(32))


def block_of(object_ids: list[int], values: list[float]) -> ClaimsBlock:
    sources = [f"s{index:03d}" for index in range(len(values))]
    return ClaimsBlock.from_frame(
        pd.DataFrame({"object_id": object_ids, "source_id": sources, "value": values})
    )


def test_uniform_weights_are_one_over_the_object_claim_count() -> None:
    block = block_of([7, 7, 7, 3, 9, 9], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    # canonical order: object 3 (1 claim), 7 (3 claims), 9 (2 claims)
    np.testing.assert_allclose(uniform_weights(block), [1.0, 1 / 3, 1 / 3, 1 / 3, 0.5, 0.5])
    per_object = np.add.reduceat(uniform_weights(block), block.offsets[:-1])
    np.testing.assert_allclose(per_object, 1.0)


def large_block(objects: int, claims: int, low: float, high: float) -> ClaimsBlock:
    generator = np.random.default_rng(5)
    frame = pd.DataFrame(
        {
            "object_id": np.repeat(np.arange(objects, dtype=np.int64), claims),
            "source_id": np.tile(np.array([f"s{j:04d}" for j in range(claims)], dtype=object), objects),
            "value": generator.uniform(low, high, objects * claims),
        }
    )
    return ClaimsBlock.from_frame(frame)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 10.0])
def test_basic_noise_is_laplace_at_the_stated_scale(epsilon: float) -> None:
    low, high = 0.0, 10.0
    block = large_block(40, 400, low, high)
    released = basic_laplace_release(block, epsilon, (low, high), SECRET, "release-ks")
    noise = released["value"].to_numpy() - block.values
    true_scale = (high - low) / epsilon
    assert stats.kstest(noise, "laplace", args=(0.0, true_scale)).pvalue > 0.01
    # negative controls: a 30% wrong scale must be rejected
    assert stats.kstest(noise, "laplace", args=(0.0, 1.3 * true_scale)).pvalue < 1e-4
    assert stats.kstest(noise, "laplace", args=(0.0, true_scale / 1.3)).pvalue < 1e-4


def test_basic_clips_raw_claims_to_the_public_range() -> None:
    block = block_of([1, 1, 1, 1], [-50.0, 3.0, 10.0, 150.0])
    released = basic_laplace_release(block, 1e9, (0.0, 10.0), SECRET, "release-clip")
    # noise scale 1e-8: the released values are the clipped claims
    np.testing.assert_allclose(released["value"].to_numpy(), [0.0, 3.0, 10.0, 10.0], atol=1e-5)


def test_basic_draws_come_from_the_keyed_stream_of_each_object() -> None:
    block = block_of([4, 4, 4, 8, 8], [1.0, 2.0, 12.0, 5.0, -1.0])
    released = basic_laplace_release(block, 2.0, (0.0, 10.0), SECRET, "release-stream")
    for object_id, raw in ((4, [1.0, 2.0, 10.0]), (8, [5.0, 0.0])):
        noise = keyed_generator(SECRET, "release-stream", "crowd/basic", object_id).laplace(
            0.0, 5.0, size=len(raw)
        )
        got = released.loc[released["object_id"] == object_id, "value"].to_numpy()
        np.testing.assert_allclose(got, np.array(raw) + noise, rtol=0, atol=1e-12)


def test_basic_output_does_not_depend_on_the_other_objects_of_the_block() -> None:
    together = block_of([1, 1, 2, 2, 2], [1.0, 2.0, 3.0, 4.0, 5.0])
    alone = block_of([2, 2, 2], [3.0, 4.0, 5.0])
    both = basic_laplace_release(together, 1.0, (0.0, 10.0), SECRET, "r")
    single = basic_laplace_release(alone, 1.0, (0.0, 10.0), SECRET, "r")
    pd.testing.assert_frame_equal(both[both["object_id"] == 2].reset_index(drop=True), single)
    other_release = basic_laplace_release(alone, 1.0, (0.0, 10.0), SECRET, "r2")
    assert not np.allclose(other_release["value"], single["value"])


def test_basic_output_shape_and_types() -> None:
    block = block_of([5, 5, 6], [1.0, 2.0, 3.0])
    released = basic_laplace_release(block, 1.0, (0.0, 10.0), SECRET, "r")
    assert list(released.columns) == ["object_id", "claim_index", "value"]
    assert released["claim_index"].tolist() == [0, 1, 0]
    assert released["claim_index"].dtype == np.int32
    assert released["value"].dtype == np.float64
    assert released["object_id"].tolist() == [5, 5, 6]


@pytest.mark.parametrize(
    ("epsilon", "public_range"),
    [
        (0.0, (0.0, 1.0)),
        (-1.0, (0.0, 1.0)),
        (float("inf"), (0.0, 1.0)),
        (1.0, (1.0, 1.0)),
        (1.0, (0.0, float("nan"))),
    ],
)
def test_basic_refuses_invalid_parameters(epsilon: float, public_range: tuple[float, float]) -> None:
    with pytest.raises(ValueError):
        basic_laplace_scale(epsilon, public_range)
    with pytest.raises(ValueError):
        basic_laplace_release(block_of([1], [0.5]), epsilon, public_range, SECRET, "r")
