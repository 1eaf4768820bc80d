"""The local engine: the engine interface in-process, on Arrow tables and pandas frames.

A collection is a list of partitions (Arrow tables). ``map_groups`` hash-partitions rows by
CRC-32 of the key's ``canonical_key`` bytes into ``parallelism`` partitions (default 4),
sorts each by the key and calls the batch function on chunks of whole groups, exactly as the
Spark and Beam engines do on their workers. Partitioning is real, so a pipeline whose results
depended on which groups share a call would differ between engines and fail the conformance
suite (tests/engines).

``read_groups_streaming`` (issue 15) gives a collection whose partitions are its files, read only
when a job iterates them; ``map_batches`` and ``map_groups`` over such a collection are computed
partition by partition as a later job reads them, and never held (``persist`` holds them), so a
chain of jobs from group files to written files or sums holds one file's rows at a time in this
process, which on the local engine is the driver.

``map_fragments`` runs each task (``fragments_per_task`` fragments) in this process, one
partition per task, as the local engine runs every other map; ``first_row`` and
``column_metrics`` reduce each partition and merge the partials as the other engines' drivers do.

**Grouping a large input spills** (issue 15). ``cluster_by_key`` (so ``map_groups`` and
``write_groups``) holds its input while it is at most ``spill_bytes`` (default 256 MiB); beyond,
it writes every partition's rows, as it reads them, to ``parallelism × 64`` key buckets (CRC-32 of
the key modulo the bucket count) in Arrow files under a temporary folder, and the clustered
collection's partitions are those buckets, each read and sorted by the key only when a job reads
it (and never held, as ``read_groups_streaming``'s). The process then holds one input partition
while spilling and one bucket (about 1/64 of a partition) while mapping. Groups stay whole and
sorted, so every group meets the same function: only which groups share a partition changes, which
no result depends on (the conformance suite runs every release on several partitionings). The
folder is removed when the collection (and every collection mapped from it) is gone.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.engines import arrow
from pipelines.engines.base import (
    BatchFunction,
    Collection,
    ColumnMetrics,
    Engine,
    EngineError,
    FragmentFunction,
)

DEFAULT_PARALLELISM = 4
DEFAULT_SPILL_BYTES = 1 << 28
"""The most input bytes ``cluster_by_key`` holds in this process before it spills to key buckets."""
SPILL_BUCKETS_PER_PARTITION = 64


class LazyPartitions(Sequence[pa.Table]):
    """Partitions computed each time they are read (``make(index)``), never held."""

    def __init__(self, count: int, make: Callable[[int], pa.Table]):
        self.count, self.make = count, make

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self.make(position) for position in range(self.count)[index]]
        if not -self.count <= index < self.count:
            raise IndexError(index)
        return self.make(index % self.count)

    def __iter__(self) -> Iterator[pa.Table]:
        return (self.make(index) for index in range(self.count))


def _spill_by_key(partitions: Iterable[pa.Table], schema: pa.Schema, key: str, buckets: int,
                  sort: Sequence[str], directory: Path) -> list[tuple[int, Callable[[], pa.Table]]]:
    """Rows spilled to key buckets, for grouping or sharding more rows than this process holds
    (``cluster_by_key`` above ``spill_bytes``, ``write_by_key``).

    Each partition, as it is read, is conformed to ``schema`` and its rows are appended to their
    bucket's Arrow stream file under ``directory``; the bucket is CRC-32 of the key's
    ``canonical_key`` bytes modulo ``buckets`` (``arrow.key_partition_ids``, as every engine
    partitions), and a bucket's rows keep their input order. Returns the buckets that got rows,
    ascending, each with a function that reads its rows back sorted by ``sort`` (a stable sort, so
    ties keep input order). So this process holds one partition and one bucket's share of it while
    spilling, and one bucket when it reads. The files are closed here, also on an error; the caller
    owns ``directory`` and removes it.
    """
    sinks: dict[int, tuple[pa.NativeFile, pa.ipc.RecordBatchStreamWriter]] = {}

    def spill(partition: pa.Table) -> None:  # a function, so its arrays are freed before the next partition
        partition = arrow.conform_table(partition, schema)
        ids = arrow.key_partition_ids(partition.column(key), buckets)
        order = np.argsort(ids, kind="stable")  # each bucket's rows, in input order
        sorted_ids = ids[order]
        starts = np.concatenate([[0], np.flatnonzero(np.diff(sorted_ids)) + 1, [len(sorted_ids)]])
        for start, end in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
            bucket = int(sorted_ids[start])
            if bucket not in sinks:
                sink = pa.OSFile(str(directory / f"{bucket:06d}.arrow"), "wb")
                sinks[bucket] = (sink, pa.ipc.new_stream(sink, schema))
            sinks[bucket][1].write_table(partition.take(pa.array(order[start:end])))

    try:
        for partition in partitions:
            if partition.num_rows:
                spill(partition)
    finally:
        for sink, writer in sinks.values():
            writer.close()
            sink.close()

    def reader(bucket: int) -> Callable[[], pa.Table]:
        def read() -> pa.Table:
            with pa.OSFile(str(directory / f"{bucket:06d}.arrow")) as stored:
                return arrow.sort_by_columns(pa.ipc.open_stream(stored).read_all(), sort)
        return read

    return [(bucket, reader(bucket)) for bucket in sorted(sinks)]


@dataclass(eq=False)
class LocalCollection(Collection):
    """Rows held in memory as ``partitions``; ``clustered_key`` is set when every partition
    holds whole groups of that key, sorted by it (the result of ``cluster_by_key``)."""

    schema: pa.Schema
    partitions: Sequence[pa.Table]
    clustered_key: str | None = None
    engine_id: int = field(default=0, repr=False)


class LocalEngine(Engine):
    """In-process engine; ``parallelism`` partitions, at most ``rows_per_call`` rows per call."""

    name: ClassVar[str] = "local"
    tasks_in_driver = True

    def __init__(self, parallelism: int | None = None, rows_per_call: int = arrow.DEFAULT_ROWS_PER_CALL,
                 spill_bytes: int | None = None):
        if parallelism is not None and parallelism < 1:
            raise EngineError(f"parallelism must be at least 1, not {parallelism}")
        if rows_per_call < 1:
            raise EngineError(f"rows_per_call must be at least 1, not {rows_per_call}")
        if spill_bytes is not None and spill_bytes < 0:
            raise EngineError(f"spill_bytes must not be negative, not {spill_bytes}")
        self.parallelism = parallelism or DEFAULT_PARALLELISM
        self.rows_per_call = rows_per_call
        self.spill_bytes = DEFAULT_SPILL_BYTES if spill_bytes is None else spill_bytes

    def protection(self) -> dict[str, Any]:
        return {"engine": self.name, "in_process": True, "key_material": "this process's memory"}

    def _collection(
        self, schema: pa.Schema, partitions: Sequence[pa.Table], clustered_key: str | None = None
    ) -> LocalCollection:
        return LocalCollection(
            schema=schema.remove_metadata(),
            partitions=partitions,
            clustered_key=clustered_key,
            engine_id=id(self),
        )

    def _own(self, collection: Collection) -> LocalCollection:
        if not isinstance(collection, LocalCollection) or collection.engine_id != id(self):
            raise EngineError("this collection belongs to another engine")
        return collection

    def read_parquet(self, paths: Sequence[Path], schema: pa.Schema) -> LocalCollection:
        arrow.check_schema(schema)
        tables = [batch for path in paths for batch in arrow.read_parquet_batches(path, schema)]
        whole = pa.concat_tables(tables) if tables else arrow.empty_table(schema)
        return self._collection(schema, arrow.split_rows(whole, self.parallelism))

    def from_pandas(self, frame: pd.DataFrame, schema: pa.Schema) -> LocalCollection:
        arrow.check_schema(schema)
        return self._collection(
            schema, arrow.split_rows(arrow.frame_to_table(frame, schema), self.parallelism)
        )

    def map_batches(
        self, collection: Collection, fn: BatchFunction, schema: pa.Schema, side: Any = None
    ) -> LocalCollection:
        source = self._own(collection)
        arrow.check_schema(schema)

        def mapped(partition: pa.Table) -> pa.Table:
            return self._concat(
                [
                    arrow.apply_batch_function(fn, chunk, side, schema)
                    for chunk in arrow.row_chunks(
                        partition.to_batches(arrow.READ_BATCH_ROWS), self.rows_per_call
                    )
                ],
                schema,
            )

        if isinstance(source.partitions, LazyPartitions):
            partitions = source.partitions
            return self._collection(schema, LazyPartitions(len(partitions), lambda index: mapped(partitions[index])))
        return self._collection(schema, [mapped(partition) for partition in source.partitions])

    def map_groups(
        self,
        collection: Collection,
        key: str,
        fn: BatchFunction,
        schema: pa.Schema,
        side: Any = None,
        keeps_groups: bool = False,
    ) -> LocalCollection:
        clustered = self.cluster_by_key(collection, key)
        arrow.check_schema(schema)

        def mapped(partition: pa.Table) -> pa.Table:
            chunks = arrow.whole_group_chunks(
                partition.to_batches(arrow.READ_BATCH_ROWS), key, self.rows_per_call
            )
            return self._concat([arrow.apply_batch_function(fn, chunk, side, schema) for chunk in chunks], schema)

        kept = key if keeps_groups else None
        if isinstance(clustered.partitions, LazyPartitions):
            partitions = clustered.partitions
            return self._collection(schema, LazyPartitions(len(partitions), lambda index: mapped(partitions[index])),
                                    kept)
        return self._collection(schema, [mapped(partition) for partition in clustered.partitions], kept)

    def map_fragments(
        self,
        fragments: Sequence[Any],
        fn: FragmentFunction,
        schema: pa.Schema,
        side: Any = None,
        fragments_per_task: int = 1,
    ) -> LocalCollection:
        arrow.check_schema(schema)
        tasks = arrow.fragment_tasks(fragments, fragments_per_task)
        partitions = [self._concat(list(arrow.fragment_tables(fn, task, side, schema)), schema) for task in tasks]
        return self._collection(schema, partitions or [arrow.empty_table(schema)])

    def first_row(self, collection: Collection, column: str = "ROW_ID") -> dict[str, Any] | None:
        source = self._own(collection)
        arrow.check_orderable(source.schema, column)
        partials = [arrow.smallest_row([partition], column) for partition in source.partitions]
        return arrow.row_dict(arrow.smallest_row(partials, column))

    def column_metrics(self, collection: Collection, columns: Sequence[str] | None = None) -> dict[str, ColumnMetrics]:
        source = self._own(collection)
        names = list(source.schema.names if columns is None else columns)
        partials = [arrow.partial_metrics([partition], source.schema, names) for partition in source.partitions]
        return arrow.finish_metrics(partials, source.schema, names)

    def cluster_by_key(self, collection: Collection, key: str) -> LocalCollection:
        source = self._own(collection)
        arrow.check_key(source.schema, key)
        if source.clustered_key == key:
            return source
        held: list[pa.Table] = []
        size = 0
        partitions = iter(source.partitions)
        for partition in partitions:
            held.append(partition)
            size += partition.nbytes
            if size > self.spill_bytes:
                return self._spilled_clusters(source.schema, key, held, partitions)
        whole = self._concat(held, source.schema)
        del held
        return self._collection(source.schema, arrow.partition_by_key(whole, key, self.parallelism), key)

    def _spilled_clusters(self, schema: pa.Schema, key: str, held: list[pa.Table],
                          rest: Iterator[pa.Table]) -> LocalCollection:
        """``cluster_by_key`` of an input above ``spill_bytes`` (module docstring): every row written
        to its key bucket's Arrow file as its partition is read; the buckets, read and sorted on
        demand, are the partitions."""
        directory = Path(tempfile.mkdtemp(prefix="privlake-groups-"))

        def partitions_once() -> Iterator[pa.Table]:  # a held partition is let go once spilled
            while held:
                yield held.pop(0)
            yield from rest

        try:
            buckets = _spill_by_key(partitions_once(), schema, key, self.parallelism * SPILL_BUCKETS_PER_PARTITION,
                                    [key], directory)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        if not buckets:
            shutil.rmtree(directory, ignore_errors=True)
            return self._collection(schema, [arrow.empty_table(schema)], key)
        partitions = LazyPartitions(len(buckets), lambda index: buckets[index][1]())
        weakref.finalize(partitions, shutil.rmtree, directory, True)
        return self._collection(schema, partitions, key)

    def sum_by_key(self, collection: Collection, key: str, columns: Sequence[str]) -> pd.DataFrame:
        source = self._own(collection)
        arrow.check_key(source.schema, key)
        arrow.check_integer_columns(source.schema, columns)
        partials = [arrow.empty_partial_sums(source.schema, key, columns)]
        partials += [
            arrow.partial_sums(partition, key, columns)
            for partition in source.partitions
            if partition.num_rows
        ]
        merged = arrow.merge_partial_sums(partials, key, columns)
        return arrow.finish_sums(merged, key, columns, source.schema.field(key).type)

    def persist(self, collection: Collection) -> LocalCollection:
        source = self._own(collection)
        if isinstance(source.partitions, LazyPartitions):  # held from now on, as persist means
            return self._collection(source.schema, list(source.partitions), source.clustered_key)
        return source

    def unpersist(self, collection: Collection) -> None:
        self._own(collection)

    def count(self, collection: Collection) -> int:
        return sum(partition.num_rows for partition in self._own(collection).partitions)

    def collect(self, collection: Collection) -> pd.DataFrame:
        source = self._own(collection)
        return arrow.table_to_frame(self._concat(source.partitions, source.schema))

    def write_parquet(self, collection: Collection, directory: Path, schema: pa.Schema) -> list[Path]:
        source = self._own(collection)
        arrow.check_schema(schema)
        written = [
            arrow.write_parquet_file(
                partition.to_batches(arrow.READ_BATCH_ROWS), directory, arrow.part_file_name(index), schema
            )
            for index, partition in enumerate(source.partitions)
        ]
        return sorted((path for path in written if path is not None), key=str)

    def write_groups(self, collection: Collection, key: str, directory: Path, schema: pa.Schema) -> list[Path]:
        return self.write_parquet(self.cluster_by_key(collection, key), directory, schema)

    def write_by_key(self, collection: Collection, key: str, order: Sequence[str], shards: int, directory: Path,
                     schema: pa.Schema) -> list[Path]:
        """One pass over the partitions spills each shard's rows to a local Arrow file, then each
        shard is sorted and written in turn: this process holds one partition, then one shard."""
        source = self._own(collection)
        arrow.check_schema(schema)
        arrow.check_key(source.schema, key)
        written = []
        with tempfile.TemporaryDirectory(prefix="privlake-shards-") as spill:
            for shard, read in _spill_by_key(source.partitions, source.schema, key, shards, [key, *order], Path(spill)):
                written.append(arrow.write_parquet_file(read().to_batches(arrow.READ_BATCH_ROWS), directory,
                                                        arrow.part_file_name(shard), schema))
        return sorted((path for path in written if path is not None), key=str)

    def read_groups(self, paths: Sequence[Path], key: str, schema: pa.Schema) -> LocalCollection:
        arrow.check_schema(schema)
        arrow.check_key(schema, key)
        partitions = [
            self._concat(list(arrow.read_parquet_batches(path, schema)), schema) for path in paths
        ]
        return self._collection(schema, partitions or [arrow.empty_table(schema)], key)

    def read_groups_streaming(self, paths: Sequence[Path], key: str, schema: pa.Schema) -> LocalCollection:
        """``read_groups`` whose files are read only when a job iterates them (module docstring)."""
        arrow.check_schema(schema)
        arrow.check_key(schema, key)
        if not paths:
            return self._collection(schema, [arrow.empty_table(schema)], key)
        files = list(paths)
        return self._collection(schema, LazyPartitions(
            len(files), lambda index: self._concat(list(arrow.read_parquet_batches(files[index], schema)), schema)), key)

    @staticmethod
    def _concat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
        non_empty = [table for table in tables if table.num_rows]
        if not non_empty:
            return arrow.empty_table(schema)
        return pa.concat_tables(non_empty).combine_chunks() if len(non_empty) > 1 else non_empty[0]
