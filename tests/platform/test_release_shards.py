"""A release's files cut from hash-ordered outcome files (``pipelines/platform/release_shards.py``):
the layout is a function of the released rows and the file count alone (docs/PRIVACY.md, "The
layout of a release"), whatever tasks computed the rows and however many buckets their outcome
files have."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.platform.bucket_files import key_hashes
from pipelines.platform.release_shards import (
    ShardSide,
    outcome_buckets,
    release_shard_tasks,
    shard_buckets,
    shard_count,
    top_bits,
    write_outcome,
    write_release_shard,
    written_files,
)

SCHEMA = pa.schema([pa.field("object_id", pa.int64(), nullable=False),
                    pa.field("claim_index", pa.int32(), nullable=False),
                    pa.field("value", pa.float64(), nullable=False)])
MIX = 0x9E3779B97F4A7C15


@pytest.mark.parametrize(("rows", "files"), [
    (0, 1), (1, 1), (500_000, 1), (500_001, 2), (1_500_000, 2), (1_999_999, 4), (2_000_000, 4),
    (5_000_000, 8), (8_000_001, 16),
])
def test_the_file_count_is_the_largest_power_of_two_not_above_the_rows_over_the_file_rows(rows: int, files: int) -> None:
    assert shard_count(rows, 500_000) == files


def test_an_integer_key_goes_to_the_top_bits_of_its_fibonacci_hash() -> None:
    """Expected values by Python's unbounded integers, not by the numpy code under test."""
    ids = [0, 1, 7, 123_456_789, -5, 2**62 + 3]
    hashes = key_hashes(pa.array(ids, pa.int64()))
    for key, value in zip(ids, hashes.tolist(), strict=True):
        assert value == ((key % 2**64) * MIX) % 2**64
    for shards in (1, 2, 8, 1024):
        bits = shards.bit_length() - 1
        expected = [(((key % 2**64) * MIX) % 2**64) >> (64 - bits) if bits else 0 for key in ids]
        assert top_bits(hashes, shards).tolist() == expected


def test_a_text_key_hash_is_fixed() -> None:
    first = key_hashes(pa.array(["a", "object-17", "ü"]))
    again = key_hashes(pa.chunked_array([["a"], ["object-17", "ü"]]))
    assert first.tolist() == again.tolist()
    assert len(set(first.tolist())) == 3


@pytest.mark.parametrize(("shards", "buckets", "expected"), [
    (1, 1, (0, 0)), (1, 8, (0, 7)), (2, 8, (4, 7)), (8, 8, (5, 5)), (16, 8, (2, 2)),
])
def test_a_release_file_is_a_range_of_outcome_buckets(shards: int, buckets: int, expected: tuple[int, int]) -> None:
    shard = 5 if shards >= 8 else shards - 1
    assert shard_buckets(shard, shards, buckets) == expected


def _released(rng: np.random.Generator, objects: int, per_object: int) -> pd.DataFrame:
    ids = rng.choice(10**9, size=objects, replace=False)
    return pd.DataFrame({
        "object_id": np.repeat(ids, per_object),
        "claim_index": np.tile(np.arange(per_object, dtype=np.int32), objects),
        "value": rng.random(objects * per_object).round(2),
    })


def _write_release(rows: pd.DataFrame, parts: list[np.ndarray], buckets: int, rows_per_file: int,
                   folder: Path) -> dict[str, pd.DataFrame]:
    outcome = folder / "outcome"
    outcome.mkdir(parents=True)
    files = []
    for index, part in enumerate(parts):  # each "task": its objects' rows in its own order
        where = outcome / f"part-{index:05d}.arrow"
        write_outcome(pa.Table.from_pandas(rows.iloc[part], schema=SCHEMA, preserve_index=False), "object_id",
                      buckets, where)
        files.append(where)
    side = ShardSide(tuple(files), buckets, "object_id", ("claim_index",), folder / "data", SCHEMA)
    names = []
    for task in release_shard_tasks(len(rows), rows_per_file):
        names += write_release_shard(task, side).column("path").to_pylist()
    return {path.name: pq.read_table(path).to_pandas() for path in written_files(folder / "data", names)}


def test_the_release_files_follow_the_rows_alone(tmp_path: Path) -> None:
    """Two partitionings of the same released rows into tasks (objects split apart differently, rows
    in different orders), with outcome files of fewer buckets than files (the filtering path), as
    many, and more, give byte-equal release files; each file holds exactly the rows whose key hash
    has its number as top bits, sorted by object then claim index."""
    rng = np.random.default_rng(7)
    rows = _released(rng, 3_000, 5)  # 15,000 rows, 1,000 a file: 8 files
    order = rng.permutation(len(rows))
    partitionings = [
        [np.arange(len(rows))],
        np.array_split(order, 7),
    ]
    results = []
    for number, parts in enumerate(partitionings):
        for buckets in (2, 8, 64):
            results.append(_write_release(rows, parts, buckets, 1_000, tmp_path / f"{number}-{buckets}"))
    first = results[0]
    assert sorted(first) == [f"part-{shard:05d}.parquet" for shard in range(8)]
    for other in results[1:]:
        assert sorted(other) == sorted(first)
        for name in first:
            pd.testing.assert_frame_equal(other[name], first[name])
    everything = pd.concat(first.values(), ignore_index=True)
    assert len(everything) == len(rows)
    for name, frame in first.items():
        shard = int(name[5:10])
        expected = [(((key % 2**64) * MIX) % 2**64) >> 61 for key in frame["object_id"].tolist()]
        assert set(expected) == {shard}
        assert frame.equals(frame.sort_values(["object_id", "claim_index"]).reset_index(drop=True))
    merged = everything.sort_values(["object_id", "claim_index"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(merged, rows.sort_values(["object_id", "claim_index"]).reset_index(drop=True))


def test_an_empty_release_file_is_not_written(tmp_path: Path) -> None:
    rows = _released(np.random.default_rng(3), 1, 4)  # one object: one file of two has its rows
    written = _write_release(rows, [np.arange(4)], 2, 2, tmp_path)
    assert len(written) == 1
    assert len(next(iter(written.values()))) == 4


def test_outcome_buckets_cover_the_largest_release() -> None:
    assert outcome_buckets(5_000_000, 500_000) == 8
    assert outcome_buckets(0, 500_000) == 1
    assert outcome_buckets(10**15, 1) == 1 << 16
