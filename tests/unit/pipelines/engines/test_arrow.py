"""The Arrow helpers every engine shares (``pipelines/engines/arrow.py``): the key partitioner against
CRC-32 of hand-written key bytes, exact integer sums beyond 2**53 with the int64 overflow refused,
whole-group chunking, the Arrow/pandas boundary and the plain Parquet writer."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.engines.arrow import (
    check_integer_columns,
    check_key,
    check_schema,
    empty_partial_sums,
    finish_sums,
    frame_to_table,
    key_partition_ids,
    merge_partial_sums,
    part_file_name,
    partial_sums,
    partition_by_key,
    read_parquet_batches,
    row_chunks,
    sort_by_key,
    split_rows,
    table_to_frame,
    whole_group_chunks,
    write_group_files,
    write_parquet_file,
)
from pipelines.engines.base import EngineError


def crc_partition(key_bytes: bytes, partitions: int) -> int:
    return zlib.crc32(key_bytes) % partitions


def test_integer_keys_go_to_the_crc32_of_their_decimal_bytes_whatever_the_column_type() -> None:
    keys = [0, 7, -3, 120, 2**31 - 1, 17]
    expected = [crc_partition(b"i" + str(key).encode(), 5) for key in keys]
    assert expected == [zlib.crc32(b"i0") % 5, zlib.crc32(b"i7") % 5, zlib.crc32(b"i-3") % 5,
                        zlib.crc32(b"i120") % 5, zlib.crc32(b"i2147483647") % 5, zlib.crc32(b"i17") % 5]
    for arrow_type in (pa.int64(), pa.int32(), pa.float64()):
        ids = key_partition_ids(pa.array(keys, arrow_type), 5)
        assert ids.dtype == np.int64 and ids.tolist() == expected, arrow_type
    small = [0, 7, -3, 120, 17]
    small_expected = [crc_partition(b"i" + str(key).encode(), 5) for key in small]
    for arrow_type in (pa.int16(), pa.int8()):
        assert key_partition_ids(pa.array(small, arrow_type), 5).tolist() == small_expected
    chunked = pa.chunked_array([pa.array(keys[:2], pa.int32()), pa.array(keys[2:], pa.int32())])
    assert key_partition_ids(chunked, 5).tolist() == expected


def test_string_keys_go_to_the_crc32_of_their_utf8_bytes_and_a_null_key_to_partition_zero() -> None:
    keys = ["a", "object-17", "é", "", None, "a"]
    expected = [crc_partition(b"s" + key.encode("utf-8"), 7) if key is not None else 0 for key in keys]
    for arrow_type in (pa.string(), pa.large_string()):
        assert key_partition_ids(pa.array(keys, arrow_type), 7).tolist() == expected
    assert key_partition_ids(pa.array([None, 3, None], pa.int64()), 4).tolist() == [0, crc_partition(b"i3", 4), 0]


def test_partition_by_key_puts_each_key_in_one_sorted_partition() -> None:
    rng = np.random.default_rng(0)
    keys = rng.integers(-50, 50, 400)
    table = pa.table({"key": pa.array(keys, pa.int32()), "row": np.arange(400)})
    parts = partition_by_key(table, "key", 3)
    assert len(parts) == 3 and sum(part.num_rows for part in parts) == 400
    for index, part in enumerate(parts):
        part_keys = part.column("key").to_numpy()
        assert np.all(np.diff(part_keys) >= 0)
        assert all(crc_partition(b"i" + str(int(key)).encode(), 3) == index for key in part_keys)
    rows = np.sort(np.concatenate([part.column("row").to_numpy() for part in parts]))
    np.testing.assert_array_equal(rows, np.arange(400))
    empty = partition_by_key(table.slice(0, 0), "key", 2)
    assert [part.num_rows for part in empty] == [0, 0] and empty[0].schema == table.schema


def test_sort_by_key_puts_nulls_first() -> None:
    table = pa.table({"key": pa.array([3, None, 1, 2, None]), "row": [0, 1, 2, 3, 4]})
    assert sort_by_key(table, "key").column("key").to_pylist() == [None, None, 1, 2, 3]


def python_totals(keys: list, values: list[int | None]) -> dict:
    totals: dict = {}
    for key, value in zip(keys, values, strict=True):
        totals[key] = totals.get(key, 0) + (value or 0)
    return totals


def test_sums_are_exact_beyond_two_to_the_53_whatever_the_partitioning() -> None:
    rng = np.random.default_rng(4)
    size = 3000
    keys = rng.integers(0, 6, size).tolist()
    keys[:5] = [0, 1, 2, 3, 4]
    big: list[int | None] = [int(v) for v in rng.integers(2**50, 2**51, size)]
    big[:5] = [2**62, 2**62 - 1, -(2**62), -(2**62) + 1, None]
    small = [int(v) for v in rng.integers(-5, 5, size)]
    table = pa.table({"key": pa.array(keys, pa.int64()), "big": pa.array(big, pa.int64()),
                      "small": pa.array(small, pa.int32())})
    expected_big = python_totals(keys, big)
    expected_small = python_totals(keys, small)
    assert all(-(2**63) <= total < 2**63 for total in expected_big.values())
    assert all(abs(total) > 2**53 for total in expected_big.values())
    results = []
    for pieces in (1, 2, 7):
        partials = [partial_sums(piece, "key", ["big", "small"]) for piece in split_rows(table, pieces)]
        merged = merge_partial_sums(partials[::-1], "key", ["big", "small"])
        result = finish_sums(merged, "key", ["big", "small"], pa.int64())
        assert result["key"].tolist() == sorted(expected_big)
        assert result["big"].dtype == np.int64 and result["small"].dtype == np.int64
        assert [int(v) for v in result["big"]] == [expected_big[key] for key in sorted(expected_big)]
        assert [int(v) for v in result["small"]] == [expected_small[key] for key in sorted(expected_small)]
        results.append(result)
    pd.testing.assert_frame_equal(results[0], results[1])
    pd.testing.assert_frame_equal(results[0], results[2])


def test_a_float_sum_would_lose_what_the_exact_sum_keeps() -> None:
    values = [2**53, 1, 1]
    table = pa.table({"key": pa.array(["k"] * 3), "v": pa.array(values, pa.int64())})
    result = finish_sums(partial_sums(table, "key", ["v"]), "key", ["v"], pa.string())
    assert int(result["v"].iloc[0]) == 2**53 + 2
    assert float(np.sum(np.array(values, dtype=np.float64))) != 2**53 + 2


def test_sums_outside_int64_are_refused_naming_the_column_not_the_key() -> None:
    over = pa.table({"key": pa.array([2, 2, 1]), "v": pa.array([2**63 - 1, 1, 5], pa.int64())})
    with pytest.raises(EngineError, match=r"^the sum of column 'v' exceeds the int64 range for 1 key$"):
        finish_sums(partial_sums(over, "key", ["v"]), "key", ["v"], pa.int64())
    under = pa.table({"key": pa.array(["b", "secret-id", "secret-id", "c", "c"]),
                      "v": pa.array([0, -(2**63), -1, 2**63 - 1, 2], pa.int64())})
    with pytest.raises(EngineError) as caught:
        finish_sums(partial_sums(under, "key", ["v"]), "key", ["v"], pa.string())
    assert str(caught.value) == "the sum of column 'v' exceeds the int64 range for 2 keys"
    edge = pa.table({"key": pa.array([1, 1]), "v": pa.array([2**63 - 2, 1], pa.int64())})
    assert int(finish_sums(partial_sums(edge, "key", ["v"]), "key", ["v"], pa.int64())["v"].iloc[0]) == 2**63 - 1


def test_an_integer_key_is_not_shown_in_any_form() -> None:
    """Once a strict xfail (the line showed ``for key np.int64(2)``): keys can be input values
    (object or source ids), so an error line never carries one, as a NumPy repr or a number."""
    over = pa.table({"key": pa.array([7321, 7321]), "v": pa.array([2**63 - 1, 1], pa.int64())})
    with pytest.raises(EngineError) as caught:
        finish_sums(partial_sums(over, "key", ["v"]), "key", ["v"], pa.int64())
    assert "7321" not in str(caught.value) and "np.int64" not in str(caught.value)
    assert str(caught.value) == "the sum of column 'v' exceeds the int64 range for 1 key"


def test_empty_partials_merge_to_an_empty_result() -> None:
    schema = pa.schema([pa.field("key", pa.int32()), pa.field("v", pa.int64())])
    empty = empty_partial_sums(schema, "key", ["v"])
    assert empty.schema.names == ["key", "v:high", "v:low"] and empty.num_rows == 0
    merged = merge_partial_sums([empty, empty], "key", ["v"])
    assert merged.num_rows == 0
    result = finish_sums(merged, "key", ["v"], pa.int32())
    assert list(result.columns) == ["key", "v"] and len(result) == 0
    one = partial_sums(pa.table({"key": pa.array([4], pa.int32()), "v": pa.array([9], pa.int64())}), "key", ["v"])
    assert merge_partial_sums([empty, one, empty], "key", ["v"]) is one


def test_only_integer_columns_are_summed() -> None:
    schema = pa.schema([pa.field("key", pa.int64()), pa.field("n", pa.int16()), pa.field("x", pa.float64())])
    check_integer_columns(schema, ["n"])
    with pytest.raises(EngineError, match="sums integer columns only"):
        check_integer_columns(schema, ["x"])
    with pytest.raises(EngineError, match="'absent' to sum is not in"):
        check_integer_columns(schema, ["absent"])


def sorted_groups_stream(rng: np.random.Generator, groups: int, with_nulls: bool) -> tuple[pa.Table, list[pa.Table]]:
    sizes = rng.integers(1, 30, groups)
    sizes[rng.integers(0, groups)] = 120
    keys: list = np.repeat(np.arange(groups), sizes).tolist()
    if with_nulls:
        keys = [None] * 9 + keys
    table = pa.table({"key": pa.array(keys, pa.int64()), "row": np.arange(len(keys))})
    cuts = np.sort(rng.choice(np.arange(1, table.num_rows), size=12, replace=False))
    bounds = np.concatenate([[0], cuts, [table.num_rows]])
    pieces = [table.slice(int(a), int(b - a)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    pieces.insert(3, table.slice(0, 0))
    return table, pieces


@pytest.mark.parametrize("seed", range(6))
def test_whole_group_chunks_never_split_a_group(seed: int) -> None:
    rng = np.random.default_rng(seed)
    table, pieces = sorted_groups_stream(rng, 40, with_nulls=seed % 2 == 0)
    max_rows = 50
    chunks = list(whole_group_chunks(pieces, "key", max_rows))
    rows = np.concatenate([chunk.column("row").to_numpy() for chunk in chunks])
    np.testing.assert_array_equal(rows, np.arange(table.num_rows))
    seen: set = set()
    for chunk in chunks:
        chunk_keys = chunk.column("key").to_pylist()
        distinct = set(chunk_keys)
        assert not distinct & seen, "a group is split over two chunks"
        seen |= distinct
        assert chunk.num_rows <= max_rows or len(distinct) == 1
    sizes = table.group_by("key", use_threads=False).aggregate([("row", "count")])
    largest = max(sizes.column("row_count").to_pylist())
    assert largest == 120 and any(chunk.num_rows == 120 for chunk in chunks)


def test_row_chunks_cut_at_the_row_count() -> None:
    table = pa.table({"row": np.arange(23)})
    chunks = list(row_chunks([table.slice(0, 5), table.slice(5, 0), table.slice(5, 18)], 4))
    assert [chunk.num_rows for chunk in chunks] == [4, 4, 4, 4, 4, 3]
    assert np.concatenate([chunk.column("row").to_numpy() for chunk in chunks]).tolist() == list(range(23))


def test_split_rows_gives_contiguous_near_equal_slices() -> None:
    table = pa.table({"row": np.arange(10)})
    assert [piece.column("row").to_pylist() for piece in split_rows(table, 3)] == [
        [0, 1, 2], [3, 4, 5, 6], [7, 8, 9],
    ]


SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("small", pa.int32()),
        pa.field("x", pa.float64()),
        pa.field("name", pa.string()),
        pa.field("flag", pa.bool_()),
    ]
)


def test_the_pandas_boundary_casts_safely_to_the_declared_schema() -> None:
    frame = pd.DataFrame({"flag": [True, False], "name": ["a", None], "x": [0.5, np.nan], "small": [1, 2],
                          "id": [10, 11], "extra": ["dropped", "dropped"]})
    table = frame_to_table(frame, SCHEMA)
    assert table.schema == SCHEMA and table.schema.metadata is None
    assert table.to_pydict() == {"id": [10, 11], "small": [1, 2], "x": [0.5, None], "name": ["a", None],
                                 "flag": [True, False]}
    back = table_to_frame(table)
    assert [str(dtype) for dtype in back.dtypes] == ["int64", "int32", "float64", "object", "bool"]
    with_null = table_to_frame(pa.table({"n": pa.array([1, None], pa.int64())}))
    assert with_null["n"].dtype == np.float64 and np.isnan(with_null["n"].iloc[1])
    with pytest.raises(EngineError, match="lacks the declared column"):
        frame_to_table(frame.drop(columns=["flag"]), SCHEMA)
    with pytest.raises(EngineError, match="does not fit the declared schema"):
        frame_to_table(frame.assign(small=[1.5, 2.0]), SCHEMA)
    with pytest.raises(EngineError, match="must return a pandas DataFrame"):
        frame_to_table(table, SCHEMA)  # type: ignore[arg-type]


def test_unsupported_column_and_key_types_are_refused() -> None:
    check_schema(SCHEMA)
    with pytest.raises(EngineError, match="column 'when' has type timestamp"):
        check_schema(pa.schema([pa.field("when", pa.timestamp("s"))]))
    check_key(SCHEMA, "id")
    check_key(SCHEMA, "name")
    with pytest.raises(EngineError, match="key column 'x' has type double"):
        check_key(SCHEMA, "x")
    with pytest.raises(EngineError, match="key column 'absent' is not in"):
        check_key(SCHEMA, "absent")


def test_write_parquet_file_writes_plain_parquet_that_reads_back_identically(tmp_path: Path) -> None:
    rows = pa.table(
        {"id": pa.array(np.arange(10), pa.int64()), "small": pa.array(np.arange(10) - 5, pa.int32()),
         "x": pa.array([0.1 * i if i != 3 else None for i in range(10)]), "name": pa.array([f"n{i}" for i in range(10)]),
         "flag": pa.array([i % 3 == 0 for i in range(10)])}
    ).replace_schema_metadata({b"pandas": b"{}"})
    pieces = [rows.slice(0, 4), rows.slice(4, 0), rows.select(["flag", "name", "x", "small", "id"]).slice(4, 6)]
    path = write_parquet_file(pieces, tmp_path / "out", part_file_name(3), SCHEMA)
    assert path == tmp_path / "out" / "part-00003.parquet"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["part-00003.parquet"]
    parquet = pq.ParquetFile(path)
    assert parquet.schema_arrow.metadata is None or b"pandas" not in parquet.schema_arrow.metadata
    assert all(field.metadata is None for field in parquet.schema_arrow)
    assert parquet.metadata.row_group(0).column(0).compression == "ZSTD"
    read = pq.read_table(path)
    assert read.schema.remove_metadata() == SCHEMA
    assert read.to_pydict() == rows.to_pydict()
    batches = list(read_parquet_batches(path, SCHEMA.remove_metadata(), batch_rows=3))
    assert [batch.num_rows for batch in batches] == [3, 3, 3, 1]
    assert pa.concat_tables(batches).to_pydict() == rows.to_pydict()


def test_write_parquet_file_overwrites_writes_nothing_for_no_rows_and_cleans_up_on_failure(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("v", pa.int64())])
    first = write_parquet_file([pa.table({"v": [1, 2]})], tmp_path, "part-00000.parquet", schema)
    second = write_parquet_file([pa.table({"v": [3]})], tmp_path, "part-00000.parquet", schema, attempt="1")
    assert first == second and pq.read_table(second).column("v").to_pylist() == [3]
    assert write_parquet_file([pa.table({"v": pa.array([], pa.int64())})], tmp_path / "none", "p.parquet", schema) is None
    assert not (tmp_path / "none").exists()

    def failing():
        yield pa.table({"v": [7]})
        yield pa.table({"v": [1.5]})

    with pytest.raises(EngineError, match="rows do not fit the declared schema"):
        write_parquet_file(failing(), tmp_path, "part-00001.parquet", schema)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part-00000.parquet"]
    with pytest.raises(EngineError, match="lacks the column"):
        list(read_parquet_batches(second, pa.schema([pa.field("w", pa.int64())])))


def test_write_group_files_stage_whole_sorted_groups_per_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    table = pa.table({"key": pa.array(rng.choice(["a", "b", "c", "d", "e", "f"], 200)), "row": np.arange(200)})
    paths = write_group_files(table, "key", tmp_path, 4)
    assert [path.name for path in paths] == sorted(path.name for path in paths)
    assert all(path.name.startswith("part-0000") for path in paths)
    seen: set = set()
    total = 0
    for path in paths:
        read = pq.read_table(path)
        keys = read.column("key").to_pylist()
        assert keys == sorted(keys)
        assert not set(keys) & seen
        seen |= set(keys)
        index = int(path.name[5:10])
        assert all(crc_partition(b"s" + key.encode(), 4) == index for key in keys)
        total += read.num_rows
    assert total == 200 and seen == {"a", "b", "c", "d", "e", "f"}
