"""``arrow.read_key_rows``: a few groups' rows from group files (sorted by the key) with only the
row groups whose statistics can hold them read — what the crowd report's sample objects need
instead of a job over every staged file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.engines import arrow

SCHEMA = pa.schema([pa.field("object_id", pa.int64(), nullable=False), pa.field("value", pa.float64())])
TEXT_SCHEMA = pa.schema([pa.field("object_id", pa.string(), nullable=False), pa.field("value", pa.float64())])


def group_files(folder: Path, schema: pa.Schema, ids: list[np.ndarray]) -> list[Path]:
    paths = []
    for index, chosen in enumerate(ids):
        keys = np.sort(np.repeat(chosen, 3))
        table = pa.table({"object_id": keys if schema.field("object_id").type == pa.int64() else
                          [f"o-{key:05d}" for key in keys], "value": np.arange(len(keys), dtype=float)}, schema=schema)
        path = folder / f"part-{index:05d}.parquet"
        pq.write_table(table, path, row_group_size=30)
        paths.append(path)
    return paths


@pytest.mark.parametrize("schema", [SCHEMA, TEXT_SCHEMA], ids=["integer ids", "text ids"])
def test_only_the_wanted_groups_rows_from_only_the_row_groups_that_can_hold_them(
        tmp_path: Path, schema: pa.Schema, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = np.random.default_rng(2).permutation(600)
    paths = group_files(tmp_path, schema, [objects[:300], objects[300:]])
    read: list[tuple[str, list[int]]] = []
    original = pq.ParquetFile.read_row_groups

    def recording(self, row_groups, *arguments, **keywords):
        read.append((self.metadata.num_rows, list(row_groups)))
        return original(self, row_groups, *arguments, **keywords)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", recording)
    wanted = [int(objects[5]), int(objects[450]), 10_000]
    keys = wanted if schema == SCHEMA else [f"o-{key:05d}" for key in wanted]
    rows = arrow.read_key_rows(paths, "object_id", keys, schema)
    assert rows.schema == schema
    assert sorted(rows.column("object_id").to_pylist()) == sorted(keys[:2] * 3)
    assert sum(len(groups) for _, groups in read) <= 4, f"read more row groups than can hold the keys: {read}"
    assert arrow.read_key_rows(paths, "object_id", [], schema).num_rows == 0
