"""Arrow-level helpers shared by the local, Spark and Beam engines, and the one Parquet writer.

Every engine funnels its rows through the same few functions here, so that the three engines
agree byte for byte where it matters (DESIGN.md, "Engine interface"):

* the Arrow <-> pandas boundary (``frame_to_table``, ``table_to_frame``): a batch function
  sees the same dtypes on every engine, and its output is cast to the declared schema;
* the key partitioner (``key_partition_ids``): CRC-32 of ``canonical_key`` bytes, so a key's
  partition does not depend on Python's salted ``hash`` or on the process;
* the cutter that hands whole groups to a batch function in bounded chunks
  (``whole_group_chunks``), used on a sorted stream of Arrow batches;
* exact integer sums (``partial_sums`` / ``merge_partial_sums`` / ``finish_sums``): each int64
  is split into a signed high and an unsigned low 32-bit half, the halves are summed in int64
  (no overflow below 2**31 rows per key and partial), and the driver reassembles exact Python
  integers, so totals do not depend on partitioning or summation order;
* the fragment-task body of ``map_fragments`` (``fragment_tables``), the per-partition smallest
  row of ``first_row`` (``smallest_row``) and the partial column metrics of ``column_metrics``
  (``partial_metrics`` / ``finish_metrics``), each merged on the driver by the same function on
  every engine;
* the Parquet writer (``write_parquet_file``): plain Parquet (no pandas or Spark metadata, no
  field ids, readable by pyiceberg ``add_files``), written to a hidden temporary name and
  renamed into place, so a retried task atomically overwrites its own file.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.engines import storage
from pipelines.engines.base import ColumnMetrics, EngineError
from schemas.keys import canonical_key

DEFAULT_ROWS_PER_CALL = 250_000
"""Most rows handed to one batch-function call (a single larger group is never split)."""

READ_BATCH_ROWS = 65_536
"""Rows per Arrow batch when an engine streams a Parquet file or a partition."""

PARQUET_COMPRESSION = "zstd"

SUPPORTED_TYPES: tuple[pa.DataType, ...] = (
    pa.int64(),
    pa.int32(),
    pa.int16(),
    pa.int8(),
    pa.float64(),
    pa.float32(),
    pa.string(),
    pa.large_string(),
    pa.bool_(),
)

_LOW_HALF_MASK = 0xFFFFFFFF
_HIGH_SUFFIX = ":high"
_LOW_SUFFIX = ":low"
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

ArrowData = pa.Table | pa.RecordBatch


def check_schema(schema: pa.Schema) -> None:
    """Refuse column types the engines do not map identically (one sentence naming the column)."""
    for field in schema:
        if field.type not in SUPPORTED_TYPES:
            raise EngineError(
                f"column {field.name!r} has type {field.type}, which the engines do not support "
                "(use int64, int32, int16, int8, float64, float32, string or bool)"
            )


def check_key(schema: pa.Schema, key: str) -> None:
    """A grouping key must be an integer or string column, the types ``canonical_key`` accepts."""
    if key not in schema.names:
        raise EngineError(f"key column {key!r} is not in the collection's columns {schema.names}")
    key_type = schema.field(key).type
    if not (
        pa.types.is_integer(key_type) or pa.types.is_string(key_type) or pa.types.is_large_string(key_type)
    ):
        raise EngineError(f"key column {key!r} has type {key_type}; a key must be an integer or a string")


def check_integer_columns(schema: pa.Schema, columns: Sequence[str]) -> None:
    for column in columns:
        if column not in schema.names:
            raise EngineError(f"column {column!r} to sum is not in the collection's columns {schema.names}")
        if not pa.types.is_integer(schema.field(column).type):
            raise EngineError(
                f"column {column!r} has type {schema.field(column).type}; sum_by_key sums integer columns only"
            )


def as_table(data: ArrowData) -> pa.Table:
    return data if isinstance(data, pa.Table) else pa.Table.from_batches([data])


def conform_table(data: ArrowData, schema: pa.Schema) -> pa.Table:
    """``data``'s columns in ``schema`` order, cast (safely) to ``schema``'s types, no metadata."""
    table = as_table(data)
    missing = [name for name in schema.names if name not in table.column_names]
    if missing:
        raise EngineError(f"rows are missing the declared column(s) {missing}")
    table = table.select(schema.names)
    if table.schema.remove_metadata() != schema.remove_metadata():
        try:
            table = table.cast(schema.remove_metadata(), safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            raise EngineError(f"rows do not fit the declared schema: {error}") from error
    return table.replace_schema_metadata(None)


def frame_to_table(frame: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """A batch function's output as an Arrow table of exactly ``schema`` (safe casts only)."""
    if not isinstance(frame, pd.DataFrame):
        raise EngineError(f"a batch function must return a pandas DataFrame, not {type(frame).__name__}")
    missing = [name for name in schema.names if name not in frame.columns]
    if missing:
        raise EngineError(f"a batch function's result lacks the declared column(s) {missing}")
    try:
        table = pa.Table.from_pandas(
            frame[schema.names], schema=schema.remove_metadata(), preserve_index=False, safe=True
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as error:
        raise EngineError(f"a batch function's result does not fit the declared schema: {error}") from error
    return table.replace_schema_metadata(None)


def table_to_frame(data: ArrowData) -> pd.DataFrame:
    """The pandas view every engine gives a batch function and ``collect`` returns.

    Plain NumPy dtypes (int64, float64, bool, object for strings); an integer column with
    nulls becomes float64 with NaN, as Arrow's default conversion does.
    """
    return as_table(data).to_pandas(ignore_metadata=True)


def empty_table(schema: pa.Schema) -> pa.Table:
    return schema.remove_metadata().empty_table()


def split_rows(table: pa.Table, pieces: int) -> list[pa.Table]:
    """``table`` cut into ``pieces`` contiguous slices of near-equal length (some may be empty)."""
    bounds = np.linspace(0, table.num_rows, pieces + 1).round().astype(np.int64)
    return [
        table.slice(int(start), int(stop - start))
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True)
    ]


def sort_by_key(table: pa.Table, key: str) -> pa.Table:
    """Rows ordered by ``key`` (nulls first, like Spark's ascending sort); a compact copy."""
    order = pc.sort_indices(table, sort_keys=[(key, "ascending", "at_start")])
    return table.take(order)


def sort_by_columns(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """Rows ordered by ``columns`` in turn (each ascending, nulls first); a compact copy."""
    order = pc.sort_indices(table, sort_keys=[(column, "ascending", "at_start") for column in columns])
    return table.take(order)


def key_partition_ids(column: pa.Array | pa.ChunkedArray, partitions: int) -> np.ndarray:
    """Partition of every row: CRC-32 of its key's ``canonical_key`` bytes, modulo ``partitions``.

    The hash is computed once per distinct key; a null key goes to partition 0.
    """
    values = column.to_pandas()
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    unique_ids = np.fromiter(
        (zlib.crc32(canonical_key(_python_key(value))) % partitions for value in uniques),
        dtype=np.int64,
        count=len(uniques),
    )
    ids = np.zeros(len(codes), dtype=np.int64)
    present = codes >= 0
    ids[present] = unique_ids[codes[present]]
    return ids


def _python_key(value: Any) -> Any:
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def partition_by_key(table: pa.Table, key: str, partitions: int) -> list[pa.Table]:
    """Hash-partition ``table`` on ``key`` into ``partitions`` tables, each sorted by ``key``."""
    if table.num_rows == 0:
        return [empty_table(table.schema) for _ in range(partitions)]
    ids = key_partition_ids(table.column(key), partitions)
    return [sort_by_key(table.take(np.flatnonzero(ids == index)), key) for index in range(partitions)]


def row_shard_ids(table: pa.Table, shards: int) -> np.ndarray:
    """A content-derived shard per row (pandas' fixed-key row hash), independent of batching."""
    hashes = pd.util.hash_pandas_object(table_to_frame(table), index=False).to_numpy()
    return (hashes % np.uint64(shards)).astype(np.int64)


def _run_starts(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Row indices (> 0) where the value differs from the previous row's, nulls equal to nulls."""
    length = len(column)
    if length < 2:
        return np.empty(0, dtype=np.int64)
    following = column.slice(1)
    preceding = column.slice(0, length - 1)
    values_differ = pc.fill_null(pc.not_equal(following, preceding), False)
    nullness_differs = pc.xor(pc.is_null(following), pc.is_null(preceding))
    differ = pc.or_(values_differ, nullness_differs)
    return np.flatnonzero(np.asarray(differ.to_numpy(zero_copy_only=False), dtype=bool)) + 1


def _pack_groups(table: pa.Table, group_starts: np.ndarray, max_rows: int) -> Iterator[pa.Table]:
    """Cut ``table`` (whole groups starting at 0 and at ``group_starts``) into chunks of at
    most ``max_rows`` rows, each cut on a group boundary; a larger single group stays whole."""
    boundaries = np.concatenate([group_starts, [table.num_rows]]).astype(np.int64)
    begin = 0
    while begin < table.num_rows:
        position = int(np.searchsorted(boundaries, begin + max_rows, side="right")) - 1
        end = int(boundaries[position]) if position >= 0 else 0
        if end <= begin:
            end = int(boundaries[np.searchsorted(boundaries, begin, side="right")])
        yield table.slice(begin, end - begin)
        begin = end


def whole_group_chunks(pieces: Iterable[ArrowData], key: str, max_rows: int) -> Iterator[pa.Table]:
    """Re-cut a stream of Arrow batches, sorted by ``key``, into chunks of whole groups.

    Each chunk has at most ``max_rows`` rows unless one group alone is larger; the stream is
    consumed incrementally, so memory stays near ``max_rows`` rows plus one input batch.
    """
    buffer: pa.Table | None = None
    for piece in pieces:
        if piece.num_rows == 0:
            continue
        table = as_table(piece)
        buffer = table if buffer is None else pa.concat_tables([buffer, table])
        if buffer.num_rows < max_rows:
            continue
        starts = _run_starts(buffer.column(key))
        if len(starts) == 0:
            continue
        last_group_start = int(starts[-1])
        yield from _pack_groups(buffer.slice(0, last_group_start), starts[:-1], max_rows)
        buffer = buffer.slice(last_group_start)
    if buffer is not None and buffer.num_rows:
        yield from _pack_groups(buffer, _run_starts(buffer.column(key)), max_rows)


def row_chunks(pieces: Iterable[ArrowData], max_rows: int) -> Iterator[pa.Table]:
    """Re-cut a stream of Arrow batches into chunks of at most ``max_rows`` rows."""
    buffer: pa.Table | None = None
    for piece in pieces:
        if piece.num_rows == 0:
            continue
        table = as_table(piece)
        buffer = table if buffer is None else pa.concat_tables([buffer, table])
        while buffer.num_rows >= max_rows:
            yield buffer.slice(0, max_rows)
            buffer = buffer.slice(max_rows)
    if buffer is not None and buffer.num_rows:
        yield buffer


def apply_batch_function(
    fn: Callable[[pd.DataFrame, Any], pd.DataFrame], table: pa.Table, side: Any, schema: pa.Schema
) -> pa.Table:
    """``fn`` on the pandas view of ``table``, its result conformed to ``schema``."""
    return frame_to_table(fn(table_to_frame(table), side), schema)


def fragment_tables(
    fn: Callable[[Any, Any], Any], fragments: Iterable[Any], side: Any, schema: pa.Schema
) -> Iterator[pa.Table]:
    """``fn(fragment, side)`` for each fragment of one task, conformed to ``schema`` (an Arrow
    table or batch is cast safely; a pandas frame converted as a batch function's result is)."""
    for fragment in fragments:
        result = fn(fragment, side)
        if isinstance(result, pa.Table | pa.RecordBatch):
            table = conform_table(result, schema)
        elif isinstance(result, pd.DataFrame):
            table = frame_to_table(result, schema)
        else:
            raise EngineError(
                f"a fragment function must return an Arrow table or a pandas DataFrame, not {type(result).__name__}"
            )
        if table.num_rows:
            yield table


def fragment_tasks(fragments: Sequence[Any], per_task: int) -> list[tuple[Any, ...]]:
    """The fragments cut into tasks of ``per_task`` consecutive fragments."""
    if per_task < 1:
        raise EngineError(f"fragments_per_task must be at least 1, not {per_task}")
    items = list(fragments)
    return [tuple(items[start:start + per_task]) for start in range(0, len(items), per_task)]


def check_orderable(schema: pa.Schema, column: str) -> None:
    """``first_row`` orders by an integer or string column (row ids, keys)."""
    if column not in schema.names:
        raise EngineError(f"column {column!r} is not in the collection's columns {schema.names}")
    column_type = schema.field(column).type
    if not (pa.types.is_integer(column_type) or pa.types.is_string(column_type)
            or pa.types.is_large_string(column_type)):
        raise EngineError(f"column {column!r} has type {column_type}; first_row orders by an integer or string column")


def smallest_row(tables: Iterable[ArrowData | None], column: str) -> pa.Table | None:
    """The row of ``tables`` (one schema) with the smallest non-null ``column`` value, as a
    one-row table; ``None`` when no row has one. Ties are broken by the other columns (those of
    an orderable type, ascending, nulls first), so the row does not depend on how the rows were
    split when it is unique on them. Linear in the rows: only the tied rows are sorted."""
    pieces = [as_table(table) for table in tables if table is not None and table.num_rows]
    if not pieces:
        return None
    whole = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
    values = whole.column(column)
    smallest = pc.min(values)
    if not smallest.is_valid:
        return None
    tied = whole.filter(pc.fill_null(pc.equal(values, smallest), False))
    if tied.num_rows > 1:
        others = [name for name in tied.column_names if name != column
                  and _sortable(tied.schema.field(name).type)]
        order = pc.sort_indices(tied, sort_keys=[(name, "ascending", "at_start") for name in others])
        tied = tied.take(order[:1])
    return tied.slice(0, 1).combine_chunks()


def _sortable(data_type: pa.DataType) -> bool:
    return (pa.types.is_integer(data_type) or pa.types.is_floating(data_type) or pa.types.is_string(data_type)
            or pa.types.is_large_string(data_type) or pa.types.is_boolean(data_type))


def row_dict(table: pa.Table | None) -> dict[str, Any] | None:
    """A one-row table as column name -> Python value (``None`` for no table)."""
    return None if table is None or table.num_rows == 0 else table.slice(0, 1).to_pylist()[0]


def metrics_schema(schema: pa.Schema, columns: Sequence[str]) -> pa.Schema:
    """The one-row partial of ``column_metrics``: ``rows``, then per column (by position, so
    any column name travels) its nulls, NaNs, smallest and largest value (the column's type)."""
    for column in columns:
        if column not in schema.names:
            raise EngineError(f"column {column!r} is not in the collection's columns {schema.names}")
    fields = [pa.field("rows", pa.int64())]
    for index, column in enumerate(columns):
        column_type = schema.field(column).type
        fields += [pa.field(f"nulls_{index}", pa.int64()), pa.field(f"nans_{index}", pa.int64()),
                   pa.field(f"min_{index}", column_type), pa.field(f"max_{index}", column_type)]
    return pa.schema(fields)


def partial_metrics(tables: Iterable[ArrowData], schema: pa.Schema, columns: Sequence[str]) -> pa.Table:
    """One row of ``metrics_schema``: the metrics of ``tables`` (columns of ``schema``)."""
    partial_schema = metrics_schema(schema, columns)
    rows = 0
    nulls = [0] * len(columns)
    nans = [0] * len(columns)
    lows: list[list[Any]] = [[] for _ in columns]
    highs: list[list[Any]] = [[] for _ in columns]
    for piece in tables:
        if piece.num_rows == 0:
            continue
        rows += piece.num_rows
        for index, column in enumerate(columns):
            values = piece.column(column)
            nulls[index] += values.null_count
            if pa.types.is_floating(values.type):
                is_nan = pc.fill_null(pc.is_nan(values), False)
                nans[index] += pc.sum(is_nan).as_py() or 0
                values = pc.filter(values, pc.invert(is_nan))
            low, high = _min_max(values)
            if low is not None:
                lows[index].append(low)
                highs[index].append(high)
    data: dict[str, list[Any]] = {"rows": [rows]}
    for index, _ in enumerate(columns):
        data[f"nulls_{index}"] = [nulls[index]]
        data[f"nans_{index}"] = [nans[index]]
        data[f"min_{index}"] = [min(lows[index]) if lows[index] else None]  # str: code point = UTF-8 byte order
        data[f"max_{index}"] = [max(highs[index]) if highs[index] else None]
    return pa.Table.from_pydict(data, schema=partial_schema)


def _min_max(values: pa.Array | pa.ChunkedArray) -> tuple[Any, Any]:
    if len(values) == values.null_count:
        return None, None
    extremes = pc.min_max(values)
    return extremes["min"].as_py(), extremes["max"].as_py()


def merge_metrics(partials: Iterable[ArrowData], schema: pa.Schema, columns: Sequence[str]) -> pa.Table:
    """Partial metrics (any number of ``metrics_schema`` rows, in any order) as one such row:
    counts added, extremes of the extremes (Python orders ``str`` by code point, which is UTF-8
    byte order)."""
    partial_schema = metrics_schema(schema, columns)
    pieces = [conform_table(piece, partial_schema) for piece in partials if piece.num_rows]
    whole = pa.concat_tables(pieces) if pieces else partial_schema.empty_table()
    data: dict[str, list[Any]] = {"rows": [int(pc.sum(whole.column("rows")).as_py() or 0)]}
    for index, _ in enumerate(columns):
        lows = [value for value in whole.column(f"min_{index}").to_pylist() if value is not None]
        highs = [value for value in whole.column(f"max_{index}").to_pylist() if value is not None]
        data[f"nulls_{index}"] = [int(pc.sum(whole.column(f"nulls_{index}")).as_py() or 0)]
        data[f"nans_{index}"] = [int(pc.sum(whole.column(f"nans_{index}")).as_py() or 0)]
        data[f"min_{index}"] = [min(lows) if lows else None]
        data[f"max_{index}"] = [max(highs) if highs else None]
    return pa.Table.from_pydict(data, schema=partial_schema)


def finish_metrics(partials: Iterable[ArrowData], schema: pa.Schema, columns: Sequence[str]) -> dict[str, ColumnMetrics]:
    """The partial metrics of every partition (any number, in any order) merged on the driver."""
    merged = merge_metrics(partials, schema, columns).to_pylist()[0]
    return {
        column: ColumnMetrics(rows=merged["rows"], nulls=merged[f"nulls_{index}"], nans=merged[f"nans_{index}"],
                              min=merged[f"min_{index}"], max=merged[f"max_{index}"])
        for index, column in enumerate(columns)
    }


def partial_sums(table: pa.Table, key: str, columns: Sequence[str]) -> pa.Table:
    """Per key, the sums of the high and low 32-bit halves of each integer column.

    ``v = high * 2**32 + low`` with ``high = v >> 32`` (arithmetic) and ``low = v & 0xFFFFFFFF``;
    both halves have magnitude below 2**32, so their int64 sums are exact for fewer than 2**31
    rows. Null values count as zero.
    """
    halves: dict[str, pa.Array | pa.ChunkedArray] = {key: table.column(key)}
    for column in columns:
        values = pc.fill_null(pc.cast(table.column(column), pa.int64()), 0)
        halves[column + _HIGH_SUFFIX] = pc.shift_right(values, 32)
        halves[column + _LOW_SUFFIX] = pc.bit_wise_and(values, pa.scalar(_LOW_HALF_MASK, pa.int64()))
    return _sum_halves(pa.table(halves), key, columns)


def half_sum_names(columns: Sequence[str]) -> list[str]:
    return [column + suffix for column in columns for suffix in (_HIGH_SUFFIX, _LOW_SUFFIX)]


def _sum_halves(halves: pa.Table, key: str, columns: Sequence[str]) -> pa.Table:
    names = half_sum_names(columns)
    summed = halves.group_by(key, use_threads=False).aggregate([(name, "sum") for name in names])
    return pa.table({key: summed.column(key), **{name: summed.column(name + "_sum") for name in names}})


def merge_partial_sums(partials: Sequence[pa.Table], key: str, columns: Sequence[str]) -> pa.Table:
    """Partial sums of several partitions combined into one row per key (still exact).

    ``partials`` must hold at least one table (an ``empty_partial_sums`` will do); each table
    must hold one row per key (a table gathering several partitions' partials, whose keys
    repeat, goes through ``sum_gathered_partials``).
    """
    non_empty = [partial for partial in partials if partial.num_rows]
    if not non_empty:
        return partials[0]
    if len(non_empty) == 1:
        return non_empty[0]
    return _sum_halves(pa.concat_tables(non_empty, promote_options="permissive"), key, columns)


def sum_gathered_partials(gathered: pa.Table, key: str, columns: Sequence[str]) -> pa.Table:
    """One row per key of a table holding the partial sums of several partitions (a key once
    per partition that has it), e.g. every Spark task's partials gathered on the driver."""
    return _sum_halves(gathered, key, columns) if gathered.num_rows else gathered


def empty_partial_sums(schema: pa.Schema, key: str, columns: Sequence[str]) -> pa.Table:
    fields = [pa.field(key, schema.field(key).type)] + [
        pa.field(name, pa.int64()) for name in half_sum_names(columns)
    ]
    return pa.schema(fields).empty_table()


def finish_sums(partials: pa.Table, key: str, columns: Sequence[str], key_type: pa.DataType) -> pd.DataFrame:
    """Exact per-key totals from high/low half sums: a frame sorted by key with int64 columns.

    Raises ``EngineError`` if a total does not fit in int64.
    """
    keyed = partials.set_column(
        partials.column_names.index(key), key, pc.cast(partials.column(key), key_type)
    )
    ordered = sort_by_key(keyed, key)
    result = table_to_frame(ordered.select([key]))
    for column in columns:
        high = ordered.column(column + _HIGH_SUFFIX).fill_null(0).to_numpy().astype(object)
        low = ordered.column(column + _LOW_SUFFIX).fill_null(0).to_numpy().astype(object)
        totals = high * (1 << 32) + low
        outside = [index for index, total in enumerate(totals) if not _INT64_MIN <= total <= _INT64_MAX]
        if outside:
            # the key is not named: keys can be input values (object or source ids)
            raise EngineError(
                f"the sum of column {column!r} exceeds the int64 range for {len(outside)} "
                f"key{'s' if len(outside) > 1 else ''}"
            )
        result[column] = np.array(totals.tolist(), dtype=np.int64)
    return result


def part_file_name(index: int) -> str:
    """The deterministic name of partition (or shard) ``index``'s Parquet file."""
    return f"part-{index:05d}.parquet"


ROW_GROUP_ROWS = 1 << 16
"""Rows per Parquet row group of every file ``write_parquet_file`` writes (the last one smaller):
a function of the file's row count alone, on every engine — not of the batches the engine hands
over (Spark's follow ``spark.sql.execution.arrow.maxRecordsPerBatch``, a cluster setting)."""


def write_parquet_file(
    pieces: Iterable[ArrowData], directory: storage.Where | str, file_name: str, schema: pa.Schema,
    attempt: str = "0",
) -> storage.Where | None:
    """Stream ``pieces`` into ``directory/file_name`` as plain Parquet in row groups of
    :data:`ROW_GROUP_ROWS` rows; ``None`` if no rows.

    A local file is written under a hidden temporary name (unique per ``attempt``) and renamed
    into place; an object-store object becomes visible whole when its upload completes
    (:class:`storage.ParquetSink`). Either way readers never see half a file and a retried task
    overwrites.
    """
    directory = Path(directory) if isinstance(directory, str) else directory
    clean_schema = schema.remove_metadata()
    sink: storage.ParquetSink | None = None
    try:
        conformed = (conform_table(piece, clean_schema) for piece in pieces if piece.num_rows)
        for group in row_chunks(conformed, ROW_GROUP_ROWS):
            if sink is None:
                storage.make_folder(directory)
                sink = storage.ParquetSink(directory / file_name, clean_schema, attempt,
                                           compression=PARQUET_COMPRESSION)
            sink.write(group, ROW_GROUP_ROWS)
        if sink is None:
            return None
        written, sink = sink.commit(), None
        return written
    finally:
        if sink is not None:
            sink.abort()


def write_group_files(table: pa.Table, key: str, directory: storage.Where, parts: int) -> list[storage.Where]:
    """A driver-held ``table`` staged for ``Engine.read_groups``: hash-partitioned on ``key``
    into at most ``parts`` files (``part-NNNNN.parquet``), each holding whole groups sorted by
    ``key`` (the local and Beam engines' CRC-32 partitioning), as ``write_groups`` writes them,
    without shipping the rows through an engine shuffle when the driver has them anyway."""
    check_key(table.schema, key)
    written = [
        write_parquet_file([piece], directory, part_file_name(index), table.schema)
        for index, piece in enumerate(partition_by_key(table, key, parts))
    ]
    return [path for path in written if path is not None]


def read_key_rows(paths: Sequence[storage.Where], key: str, keys: Sequence[Any], schema: pa.Schema) -> pa.Table:
    """The rows of ``paths`` (files sorted by ``key``, as ``write_groups`` writes them) whose ``key``
    is one of ``keys`` (a few), reading only the row groups whose statistics can hold one of them
    (all of a row group without statistics): for the driver to fetch a few groups' rows without a
    job over every file."""
    wanted = sorted(set(keys))
    found: list[pa.Table] = []
    for path in paths if wanted else ():
        parquet_file = storage.parquet_file(path)
        column = parquet_file.schema_arrow.get_field_index(key)
        groups = []
        for group in range(parquet_file.metadata.num_row_groups):
            statistics = parquet_file.metadata.row_group(group).column(column).statistics
            if statistics is None or not statistics.has_min_max or any(
                    statistics.min <= value <= statistics.max for value in wanted):
                groups.append(group)
        if groups:
            table = conform_table(parquet_file.read_row_groups(groups, columns=schema.names), schema)
            found.append(table.filter(pc.is_in(table.column(key), value_set=pa.array(wanted, schema.field(key).type))))
    return pa.concat_tables(found) if found else empty_table(schema)


def read_parquet_batches(
    path: storage.Where | str, schema: pa.Schema, batch_rows: int = READ_BATCH_ROWS
) -> Iterator[pa.Table]:
    """The rows of one Parquet file (local or object store) as conformed Arrow tables of at most
    ``batch_rows`` rows."""
    parquet_file = storage.parquet_file(path)
    missing = [name for name in schema.names if name not in parquet_file.schema_arrow.names]
    if missing:
        raise EngineError(f"Parquet file {path} lacks the column(s) {missing}")
    for batch in parquet_file.iter_batches(batch_size=batch_rows, columns=schema.names):
        yield conform_table(batch, schema)
