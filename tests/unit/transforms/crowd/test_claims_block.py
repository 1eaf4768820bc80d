"""The claims block: canonical order and offsets."""

from __future__ import annotations

import numpy as np
import pandas as pd

from transforms.crowd.claims_block import (
    ClaimsBlock,
    in_canonical_order,
    is_in_canonical_order,
)


def shuffled_claims(seed: int, string_objects: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    objects = rng.integers(0, 30, size=400)
    frame = pd.DataFrame({"object_id": objects, "source_id": rng.permutation(400), "value": rng.normal(size=400)})
    if string_objects:
        frame["object_id"] = "o" + frame["object_id"].astype(str)
    return frame


def test_block_is_sorted_by_object_then_source_and_offsets_delimit_objects():
    for string_objects in (False, True):
        frame = shuffled_claims(1, string_objects)
        block = ClaimsBlock.from_frame(frame)
        assert block.number_of_claims == len(frame)
        for i, object_id in enumerate(block.object_ids):
            claims = block.object_slice(i)
            expected = frame[frame["object_id"] == object_id].sort_values("source_id")
            assert np.array_equal(block.source_ids[claims], expected["source_id"].to_numpy())
            assert np.array_equal(block.values[claims], expected["value"].to_numpy())
        assert list(block.object_ids) == sorted(set(frame["object_id"]))


def test_canonical_order_check_matches_a_sort():
    for seed in range(5):
        frame = shuffled_claims(seed, seed % 2 == 0)
        assert not is_in_canonical_order(frame)
        ordered = frame.sort_values(["object_id", "source_id"], ignore_index=True)
        assert is_in_canonical_order(ordered)
        pd.testing.assert_frame_equal(in_canonical_order(frame), ordered)
        duplicated = pd.concat([ordered.iloc[:1], ordered], ignore_index=True)
        assert not is_in_canonical_order(duplicated)

