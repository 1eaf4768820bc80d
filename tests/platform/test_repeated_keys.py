"""Repeated keys found with bounded memory per task (``pipelines/platform/repeated_keys.py``): the
map side's bucketed key files and the reduce over buckets give what a whole-input check gives —
the number of repeated rows, the first repeating row and the row its key came first in — whatever
the number of buckets and however the rows are split into fragments."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines.engines.local import LocalEngine
from pipelines.platform.repeated_keys import (
    INTEGER_KEYS,
    TEXT_KEYS,
    KeyBuckets,
    bucket_count,
    canonical_keys,
    find_repeated_keys,
    write_key_buckets,
)
from pipelines.platform.sources import ROW_BITS


def reference(keys: list, row_ids: np.ndarray) -> tuple[int, int | None, int | None]:
    frame = pd.DataFrame({"key": keys, "row": row_ids}).sort_values("row")
    repeated = frame[frame.duplicated("key", keep="first")]
    if repeated.empty:
        return 0, None, None
    first = repeated.iloc[0]
    earlier = frame[frame["key"] == first["key"]]["row"].min()
    return len(repeated), int(first["row"]), int(earlier)


def run(tmp_path: Path, keys: list, pieces: int, buckets: int) -> tuple[int, int | None, int | None]:
    """``keys`` split into ``pieces`` fragments (row ids ordinal << 40 | row), bucketed and reduced."""
    target = KeyBuckets(tmp_path / f"keys-{pieces}-{buckets}", buckets)
    row_ids = []
    for ordinal, part in enumerate(np.array_split(np.arange(len(keys)), pieces)):
        ids = (np.int64(ordinal) << ROW_BITS) + np.arange(len(part), dtype=np.int64)
        row_ids.append(ids)
        canonical, _ = canonical_keys(pa.array([keys[index] for index in part]))
        write_key_buckets(canonical, ids, target, ordinal)
    found = find_repeated_keys(LocalEngine(parallelism=3), target, list(range(pieces)))
    expected = reference(keys, np.concatenate(row_ids))
    assert (found.repeats, found.first_row_id, found.earlier_row_id) == expected
    return expected


@pytest.mark.parametrize("kind", ["integers", "text"])
def test_repeats_do_not_depend_on_buckets_or_fragments(tmp_path: Path, kind: str) -> None:
    rng = np.random.default_rng(4)
    values = rng.integers(0, 1500, 2000)
    keys = values.tolist() if kind == "integers" else [f"user-{value}" for value in values]
    results = {run(tmp_path, keys, pieces, buckets) for pieces in (1, 3, 7) for buckets in (1, 2, 5, 16)}
    assert len(results) == 1
    repeats, first, earlier = results.pop()
    assert repeats == 2000 - len(set(keys)) and first is not None and earlier is not None and earlier < first


def test_no_repeats_and_empty_fragments(tmp_path: Path) -> None:
    assert run(tmp_path, list(range(50)), 4, 3) == (0, None, None)
    target = KeyBuckets(tmp_path / "empty", 2)
    write_key_buckets(pa.array([], pa.int64()), np.zeros(0, dtype=np.int64), target, 0)
    write_key_buckets(pa.array([5, 5], pa.int64()), np.array([1 << ROW_BITS, (1 << ROW_BITS) + 1]), target, 1)
    found = find_repeated_keys(LocalEngine(), target, [0, 1])
    assert (found.repeats, found.first_row_id, found.earlier_row_id) == (1, (1 << ROW_BITS) + 1, 1 << ROW_BITS)


def test_keys_compare_by_value_within_their_kind() -> None:
    assert canonical_keys(pa.array([1, 2], pa.int32())) == (pa.array([1, 2], pa.int64()), INTEGER_KEYS)
    decoded, kind = canonical_keys(pa.array(["a", "b", "a"]).dictionary_encode())
    assert decoded.to_pylist() == ["a", "b", "a"] and kind == TEXT_KEYS
    assert canonical_keys(pa.array([1.5]))[1] == TEXT_KEYS


def test_the_bucket_count_follows_the_input_bytes() -> None:
    assert bucket_count([None, None], 4) == 4
    assert bucket_count([10 << 20, 10 << 20], 4) == 10
    assert bucket_count([1 << 40], 4) == 4096
