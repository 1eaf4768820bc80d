"""The Beam engine: the engine interface as Apache Beam pipelines (DirectRunner by default).

A collection is a lazy recipe — source Parquet files and a chain of steps — and each terminal operation (``collect``, ``count``, ``sum_by_key``,
``write_parquet``, ``persist``, ``cluster_by_key``) builds and runs one Beam pipeline. The
elements of the pipeline's PCollections are Arrow tables (batches of rows), not single rows,
so the batch functions run vectorized as on the other engines.

``map_groups`` keys each batch's rows by a *shard* of their key — CRC-32 of the key's
``canonical_key`` bytes modulo ``parallelism``, the local engine's partitioner — then
``GroupByKey`` on the shard, sorts each shard by the key and hands whole groups to the batch
function in chunks of at most ``rows_per_call`` rows. Keying by shard rather than by the key
itself keeps every group whole in one call while turning 10^5 per-key elements into a few per
batch, which is what makes the Python SDK fast enough here.

``cluster_by_key`` and ``persist`` run their pipeline at once and materialize the rows as
Parquet in a temporary folder owned by the engine (removed by ``close``); the clustered files
hold whole groups sorted by the key, so later ``map_groups`` on that key read them without a
new ``GroupByKey``. Files are named by shard, never at random, so a retried bundle overwrites.

With no ``--runner`` option the pipelines run on the DirectRunner's batch engine (Beam's
``FnApiRunner``) directly, skipping the DirectRunner's attempt to fetch and start the Prism
runner; any other runner and its options are passed through unchanged. With a remote runner,
``temp_dir`` must be a folder the workers and the driver share.

``map_fragments`` is a root of its own: ``Create`` of the fragment tasks (``fragments_per_task``
fragments each) and a ``ParDo`` that runs the fragment function on each task's fragments, so
every terminal operation reads the input again unless the collection is persisted.
``first_row`` and ``column_metrics`` are ``CombineGlobally`` over per-bundle partials (the
smallest row, one row of metrics) merged by the same functions as on the other engines.
Exceptions raised in the DoFns that run user code or read and write files travel back to the
driver through ``base.forward_errors`` and are raised again there (``base.worker_errors``).

Side values (and so the release secret they carry) are not part of any pipeline graph: on the
in-process runner (no ``--runner``, ``direct_running_mode`` ``in_memory`` or
``multi_threading``) the DoFns run in this interpreter, so a side value stays in this process's
memory (``_HELD_SIDES``) and the graph carries only a random token naming it. Any other runner
(a ``--runner`` flag, or ``multi_processing`` workers) needs the side inside the graph, pickled
into a ``Create`` that is shipped to the runner: it is refused (``EngineRefused``) unless
``allow_unencrypted``, and then the side goes into the graph as a side input.
"""

from __future__ import annotations

import itertools
import pickle
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import apache_beam as beam
import pandas as pd
import pyarrow as pa
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineState

from pipelines.engines import arrow, storage
from pipelines.engines.base import (
    BatchFunction,
    Collection,
    ColumnMetrics,
    Engine,
    EngineError,
    EngineRefused,
    FragmentFunction,
    forward_errors,
    worker_errors,
)

DEFAULT_PARALLELISM = 4
IN_PROCESS_RUNNING_MODES = ("in_memory", "multi_threading")

_HELD_SIDES: dict[str, Any] = {}
"""Side values of the in-process runner's DoFns, by token: the pipeline graph names a token, the
value never leaves this process's memory."""


@dataclass(frozen=True)
class _HeldSide:
    """A side value held in ``_HELD_SIDES``, as a step of a collection's recipe records it."""

    token: str


def _held_side(token: str) -> Any:
    try:
        return _HELD_SIDES[token]
    except KeyError:
        raise EngineError(
            "a side value held in the driver's memory was asked for outside the driver process "
            "(or after drop_cached): this runner does not run DoFns in process"
        ) from None


def runs_in_process(options: PipelineOptions) -> bool:
    """Whether pipelines with these flags run their DoFns in this interpreter: no ``--runner``
    (the engine's own ``FnApiRunner``) and workers in memory or in threads."""
    if options.view_as(StandardOptions).runner is not None:
        return False
    return options.view_as(DirectOptions).direct_running_mode in IN_PROCESS_RUNNING_MODES


@dataclass(eq=False)
class BeamCollection(Collection):
    """A recipe for rows with columns ``schema``.

    A root has ``source_files`` (``from_pandas`` writes the frame to the engine's temp folder
    first: inline data in a pipeline graph is pickled into it and is slow to ship), or a
    ``("fragments", tasks, fn, side)`` step and no parent (``map_fragments``); any other
    collection has a ``parent`` and a ``step``. ``materialized`` lists Parquet files that hold the rows once computed (persist,
    cluster_by_key). ``whole_groups_key`` is set when every element (and every materialized
    file) holds whole groups of that key, sorted by it.
    """

    schema: pa.Schema
    engine_id: int = field(default=0, repr=False)
    source_files: list[str | storage.Location] | None = None
    parent: BeamCollection | None = None
    step: tuple[Any, ...] | None = None
    materialized: list[str] | None = None
    materialized_folder: Path | None = None
    whole_groups_key: str | None = None


def _source_file(path: storage.Where) -> str | storage.Location:
    """A file a pipeline reads: a local path made absolute, or an object-store location as is."""
    return str(Path(path).resolve()) if storage.is_local(path) else path


class _ReadFiles(beam.DoFn):
    """Parquet file path -> Arrow tables (whole-group chunks when the file is clustered)."""

    def __init__(self, schema: pa.Schema, whole_groups_key: str | None, rows_per_call: int):
        self.schema = schema
        self.whole_groups_key = whole_groups_key
        self.rows_per_call = rows_per_call

    def process(self, path: str | storage.Location) -> Iterator[pa.Table]:
        batches = arrow.read_parquet_batches(path, self.schema)
        if self.whole_groups_key is None:
            yield from forward_errors(batches)
        else:
            yield from forward_errors(arrow.whole_group_chunks(batches, self.whole_groups_key, self.rows_per_call))


def check_runner(options: Sequence[str], allow_unencrypted: bool) -> bool:
    """Whether pipelines with these flags run in process; refused (``EngineRefused``) when they do
    not and the configuration did not opt out."""
    in_process = runs_in_process(PipelineOptions(flags=list(options)))
    if not in_process and not allow_unencrypted:
        raise EngineRefused(
            f"refused: the Beam options {' '.join(options)} run the pipeline outside this process, "
            "which needs the side values (with the release secret) pickled into the pipeline graph; "
            "run in process (no --runner) or opt out with engine.beam.allow_unencrypted: true "
            "(recorded in the manifest)"
        )
    return in_process


class _SideUser(beam.DoFn):
    """A DoFn whose side value is either a side input (``side``) or held in process (``side_token``)."""

    side_token: str | None = None

    def _side(self, side: Any) -> Any:
        return side if self.side_token is None else _held_side(self.side_token)


class _MapBatches(_SideUser):
    def __init__(self, fn: BatchFunction, schema: pa.Schema, rows_per_call: int):
        self.fn = fn
        self.schema = schema
        self.rows_per_call = rows_per_call

    def process(self, table: pa.Table, side: Any = None) -> Iterator[pa.Table]:
        return forward_errors(self._results(table, self._side(side)))

    def _results(self, table: pa.Table, side: Any) -> Iterator[pa.Table]:
        for chunk in arrow.row_chunks([table], self.rows_per_call):
            result = arrow.apply_batch_function(self.fn, chunk, side, self.schema)
            if result.num_rows:
                yield result


class _MapFragments(_SideUser):
    """A task (a tuple of fragments) -> the fragment function's tables."""

    def __init__(self, fn: FragmentFunction, schema: pa.Schema):
        self.fn = fn
        self.schema = schema

    def process(self, task: tuple[Any, ...], side: Any = None) -> Iterator[pa.Table]:
        return forward_errors(arrow.fragment_tables(self.fn, task, self._side(side), self.schema))


class _SmallestRow(beam.CombineFn):
    """The row with the smallest ``column`` of all batches (a one-row table, or ``None``)."""

    def __init__(self, column: str):
        self.column = column

    def create_accumulator(self) -> pa.Table | None:
        return None

    def add_input(self, accumulator: pa.Table | None, table: pa.Table) -> pa.Table | None:
        return arrow.smallest_row([accumulator, table], self.column)

    def merge_accumulators(self, accumulators: Iterable[pa.Table | None]) -> pa.Table | None:
        return arrow.smallest_row(list(accumulators), self.column)

    def extract_output(self, accumulator: pa.Table | None) -> pa.Table | None:
        return accumulator


class _MetricsCombineFn(beam.CombineFn):
    """Column metrics of all batches, as one partial row (``arrow.partial_metrics``)."""

    def __init__(self, schema: pa.Schema, columns: Sequence[str]):
        self.schema = schema
        self.columns = list(columns)

    def create_accumulator(self) -> pa.Table:
        return arrow.merge_metrics([], self.schema, self.columns)

    def add_input(self, accumulator: pa.Table, table: pa.Table) -> pa.Table:
        partial = arrow.partial_metrics([table], self.schema, self.columns)
        return arrow.merge_metrics([accumulator, partial], self.schema, self.columns)

    def merge_accumulators(self, accumulators: Iterable[pa.Table]) -> pa.Table:
        return arrow.merge_metrics(list(accumulators), self.schema, self.columns)

    def extract_output(self, accumulator: pa.Table) -> pa.Table:
        return accumulator


class _MapWholeGroups(_SideUser):
    """Elements that already hold whole groups sorted by ``key`` -> fn per bounded chunk."""

    def __init__(self, key: str, fn: BatchFunction, schema: pa.Schema, rows_per_call: int):
        self.key = key
        self.fn = fn
        self.schema = schema
        self.rows_per_call = rows_per_call

    def process(self, table: pa.Table, side: Any = None) -> Iterator[pa.Table]:
        return forward_errors(self._results(table, self._side(side)))

    def _results(self, table: pa.Table, side: Any) -> Iterator[pa.Table]:
        for chunk in arrow.whole_group_chunks([table], self.key, self.rows_per_call):
            result = arrow.apply_batch_function(self.fn, chunk, side, self.schema)
            if result.num_rows:
                yield result


class _ShardByKey(beam.DoFn):
    """A batch -> (shard of the key, the batch's rows of that shard)."""

    def __init__(self, key: str, shards: int):
        self.key = key
        self.shards = shards

    def process(self, table: pa.Table) -> Iterator[tuple[int, pa.Table]]:
        ids = arrow.key_partition_ids(table.column(self.key), self.shards)
        for shard in sorted(set(ids.tolist())):
            yield shard, table.take(pa.array((ids == shard).nonzero()[0]))


class _ShardByRow(beam.DoFn):
    """A batch -> (content-derived shard of each row, the batch's rows of that shard)."""

    def __init__(self, shards: int):
        self.shards = shards

    def process(self, table: pa.Table) -> Iterator[tuple[int, pa.Table]]:
        ids = arrow.row_shard_ids(table, self.shards)
        for shard in sorted(set(ids.tolist())):
            yield shard, table.take(pa.array((ids == shard).nonzero()[0]))


def _sorted_shard(tables: Iterable[pa.Table], key: str, schema: pa.Schema, order: Sequence[str] = ()) -> pa.Table:
    pieces = [table for table in tables if table.num_rows]
    whole = pa.concat_tables(pieces) if pieces else arrow.empty_table(schema)
    return arrow.sort_by_columns(whole, [key, *order]) if order else arrow.sort_by_key(whole, key)


class _ClusterShard(beam.DoFn):
    """(shard, batches) -> the shard's rows sorted by key, as whole-group chunks."""

    def __init__(self, key: str, schema: pa.Schema, rows_per_call: int):
        self.key = key
        self.schema = schema
        self.rows_per_call = rows_per_call

    def process(self, shard_rows: tuple[int, Iterable[pa.Table]]) -> Iterator[pa.Table]:
        _, tables = shard_rows
        ordered = _sorted_shard(tables, self.key, self.schema)
        yield from arrow.whole_group_chunks(
            ordered.to_batches(arrow.READ_BATCH_ROWS), self.key, self.rows_per_call
        )


class _MapShardGroups(_SideUser):
    """(shard, batches) -> sort by key -> fn on whole-group chunks."""

    def __init__(
        self, key: str, fn: BatchFunction, input_schema: pa.Schema, schema: pa.Schema, rows_per_call: int
    ):
        self.key = key
        self.fn = fn
        self.input_schema = input_schema
        self.schema = schema
        self.rows_per_call = rows_per_call

    def process(self, shard_rows: tuple[int, Iterable[pa.Table]], side: Any = None) -> Iterator[pa.Table]:
        return forward_errors(self._results(shard_rows, self._side(side)))

    def _results(self, shard_rows: tuple[int, Iterable[pa.Table]], side: Any) -> Iterator[pa.Table]:
        _, tables = shard_rows
        ordered = _sorted_shard(tables, self.key, self.input_schema)
        for chunk in arrow.whole_group_chunks(
            ordered.to_batches(arrow.READ_BATCH_ROWS), self.key, self.rows_per_call
        ):
            result = arrow.apply_batch_function(self.fn, chunk, side, self.schema)
            if result.num_rows:
                yield result


class _WriteShard(beam.DoFn):
    """(shard, batches) -> one Parquet file named by the shard (sorted by ``sort_key`` if given)."""

    def __init__(self, directory: storage.Where, schema: pa.Schema, sort_key: str | None = None,
                 order: Sequence[str] = ()):
        self.directory = directory
        self.schema = schema
        self.sort_key = sort_key
        self.order = tuple(order)

    def process(self, shard_rows: tuple[int, Iterable[pa.Table]]) -> Iterator[str]:
        return forward_errors(self._written(shard_rows))

    def _written(self, shard_rows: tuple[int, Iterable[pa.Table]]) -> Iterator[str]:
        shard, tables = shard_rows
        pieces: Iterable[pa.Table] = tables
        if self.sort_key is not None:
            pieces = _sorted_shard(tables, self.sort_key, self.schema, self.order).to_batches(arrow.READ_BATCH_ROWS)
        path = arrow.write_parquet_file(pieces, self.directory, arrow.part_file_name(shard), self.schema)
        if path is not None:
            yield path.name


class _PartialSumsCombineFn(beam.CombineFn):
    """Exact per-key sums (high/low 32-bit halves) of batches, merged associatively."""

    def __init__(self, key: str, columns: Sequence[str], empty: pa.Table):
        self.key = key
        self.columns = list(columns)
        self.empty = empty

    def create_accumulator(self) -> list[pa.Table]:
        return [self.empty]

    def add_input(self, accumulator: list[pa.Table], table: pa.Table) -> list[pa.Table]:
        accumulator.append(arrow.partial_sums(table, self.key, self.columns))
        if len(accumulator) > 32:
            accumulator = [arrow.merge_partial_sums(accumulator, self.key, self.columns)]
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list[pa.Table]]) -> list[pa.Table]:
        tables = [table for accumulator in accumulators for table in accumulator]
        return [arrow.merge_partial_sums(tables or [self.empty], self.key, self.columns)]

    def extract_output(self, accumulator: list[pa.Table]) -> pa.Table:
        return arrow.merge_partial_sums(accumulator, self.key, self.columns)


class _SaveResult(beam.DoFn):
    def __init__(self, path: str):
        self.path = path

    def process(self, values: list[Any]) -> Iterator[None]:
        temporary = Path(self.path + ".tmp")
        temporary.write_bytes(pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL))
        temporary.replace(self.path)
        yield from ()


class BeamEngine(Engine):
    """Engine on Beam; ``options`` are Beam pipeline flags (``--runner=...`` and the runner's
    own), ``parallelism`` the number of key and file shards (default 4). Flags that take the
    DoFns out of this process are refused (``EngineRefused``) unless ``allow_unencrypted``."""

    name: ClassVar[str] = "beam"

    def __init__(
        self,
        options: Sequence[str] | None = None,
        parallelism: int | None = None,
        rows_per_call: int = arrow.DEFAULT_ROWS_PER_CALL,
        temp_dir: str | Path | None = None,
        allow_unencrypted: bool = False,
    ):
        if parallelism is not None and parallelism < 1:
            raise EngineError(f"parallelism must be at least 1, not {parallelism}")
        if rows_per_call < 1:
            raise EngineError(f"rows_per_call must be at least 1, not {rows_per_call}")
        self.options = PipelineOptions(flags=list(options or []))
        self.runner_given = self.options.view_as(StandardOptions).runner is not None
        self.in_process = check_runner(options or [], allow_unencrypted)
        self.tasks_in_driver = self.in_process  # the in-process runner runs the DoFns in this interpreter
        self.allow_unencrypted = allow_unencrypted
        self._held_tokens: list[str] = []
        self.parallelism = parallelism or DEFAULT_PARALLELISM
        self.rows_per_call = rows_per_call
        self.temp_dir = Path(tempfile.mkdtemp(prefix="privlake-beam-", dir=temp_dir))
        self._counter = itertools.count()

    def drop_cached(self) -> None:
        """Delete the materialized collections (persist, cluster_by_key) and the held side values
        made so far."""
        self._release_sides()
        for folder in self.temp_dir.iterdir():
            shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        self._release_sides()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def protection(self) -> dict[str, Any]:
        runner = self.options.view_as(StandardOptions).runner
        return {
            "engine": self.name,
            "runner": runner or "FnApiRunner (in process)",
            "in_process": self.in_process,
            "allow_unencrypted": self.allow_unencrypted,
            "key_material": "this process's memory, not the pipeline graph"
            if self.in_process
            else "pickled into the pipeline graph (allow_unencrypted)",
        }

    def _hold(self, side: Any) -> Any:
        """What a recipe step keeps of ``side``: in process, a token naming it in ``_HELD_SIDES``."""
        if side is None or not self.in_process:
            return side
        token = secrets.token_hex(16)
        _HELD_SIDES[token] = side
        self._held_tokens.append(token)
        return _HeldSide(token)

    def _release_sides(self) -> None:
        for token in self._held_tokens:
            _HELD_SIDES.pop(token, None)
        self._held_tokens.clear()

    def _new_folder(self, purpose: str) -> Path:
        folder = self.temp_dir / f"{purpose}-{next(self._counter):05d}"
        folder.mkdir(parents=True)
        return folder

    def _own(self, collection: Collection) -> BeamCollection:
        if not isinstance(collection, BeamCollection) or collection.engine_id != id(self):
            raise EngineError("this collection belongs to another engine")
        return collection

    def _child(
        self, parent: BeamCollection, step: tuple[Any, ...], schema: pa.Schema, **extra: Any
    ) -> BeamCollection:
        return BeamCollection(
            schema=schema.remove_metadata(), engine_id=id(self), parent=parent, step=step, **extra
        )

    def read_parquet(self, paths: Sequence[Path], schema: pa.Schema) -> BeamCollection:
        arrow.check_schema(schema)
        return BeamCollection(
            schema=schema.remove_metadata(),
            engine_id=id(self),
            source_files=[_source_file(path) for path in paths],
        )

    def from_pandas(self, frame: pd.DataFrame, schema: pa.Schema) -> BeamCollection:
        arrow.check_schema(schema)
        table = arrow.frame_to_table(frame, schema)
        folder = self._new_folder("frame")
        written = [
            arrow.write_parquet_file([piece], folder, arrow.part_file_name(index), schema)
            for index, piece in enumerate(arrow.split_rows(table, self.parallelism))
        ]
        return BeamCollection(
            schema=schema.remove_metadata(),
            engine_id=id(self),
            source_files=[str(path) for path in written if path is not None],
        )

    def map_batches(
        self, collection: Collection, fn: BatchFunction, schema: pa.Schema, side: Any = None
    ) -> BeamCollection:
        source = self._own(collection)
        arrow.check_schema(schema)
        return self._child(source, ("map_batches", fn, self._hold(side)), schema)

    def map_groups(
        self,
        collection: Collection,
        key: str,
        fn: BatchFunction,
        schema: pa.Schema,
        side: Any = None,
        keeps_groups: bool = False,
    ) -> BeamCollection:
        source = self._own(collection)
        arrow.check_key(source.schema, key)
        arrow.check_schema(schema)
        return self._child(source, ("map_groups", key, fn, self._hold(side)), schema)

    def map_fragments(
        self,
        fragments: Sequence[Any],
        fn: FragmentFunction,
        schema: pa.Schema,
        side: Any = None,
        fragments_per_task: int = 1,
    ) -> BeamCollection:
        arrow.check_schema(schema)
        tasks = arrow.fragment_tasks(fragments, fragments_per_task)
        if not tasks:
            return BeamCollection(schema=schema.remove_metadata(), engine_id=id(self), source_files=[])
        return BeamCollection(
            schema=schema.remove_metadata(), engine_id=id(self), step=("fragments", tasks, fn, self._hold(side))
        )

    def first_row(self, collection: Collection, column: str = "ROW_ID") -> dict[str, Any] | None:
        source = self._own(collection)
        arrow.check_orderable(source.schema, column)
        (smallest,) = self._run(
            source, lambda rows, label: rows | f"{label} smallest" >> beam.CombineGlobally(_SmallestRow(column))
        )
        return arrow.row_dict(smallest)

    def column_metrics(self, collection: Collection, columns: Sequence[str] | None = None) -> dict[str, ColumnMetrics]:
        source = self._own(collection)
        names = list(source.schema.names if columns is None else columns)
        arrow.metrics_schema(source.schema, names)
        combine = _MetricsCombineFn(source.schema, names)
        (merged,) = self._run(source, lambda rows, label: rows | f"{label} metrics" >> beam.CombineGlobally(combine))
        return arrow.finish_metrics([merged], source.schema, names)

    def cluster_by_key(self, collection: Collection, key: str) -> BeamCollection:
        source = self._own(collection)
        arrow.check_key(source.schema, key)
        if source.whole_groups_key == key:
            return source
        clustered = self._child(source, ("cluster", key), source.schema, whole_groups_key=key)
        return self.persist(clustered)

    def persist(self, collection: Collection) -> BeamCollection:
        source = self._own(collection)
        if source.materialized is not None or (source.parent is None and source.step is None):
            return source
        folder = self._new_folder("persist")
        writer = self._shard_writer(folder, source.schema, source.whole_groups_key)
        source.materialized = [str(folder / name) for name in sorted(self._run(source, writer))]
        source.materialized_folder = folder
        return source

    def unpersist(self, collection: Collection) -> None:
        source = self._own(collection)
        if source.materialized_folder is not None:
            shutil.rmtree(source.materialized_folder, ignore_errors=True)
        source.materialized = None
        source.materialized_folder = None

    def count(self, collection: Collection) -> int:
        source = self._own(collection)
        (total,) = self._run(
            source,
            lambda rows, label: (
                rows
                | f"{label} sizes" >> beam.Map(lambda table: table.num_rows)
                | f"{label} total" >> beam.CombineGlobally(sum)
            ),
        )
        return int(total)

    def collect(self, collection: Collection) -> pd.DataFrame:
        source = self._own(collection)
        tables = [table for table in self._run(source, None) if table.num_rows]
        whole = pa.concat_tables(tables) if tables else arrow.empty_table(source.schema)
        return arrow.table_to_frame(arrow.conform_table(whole, source.schema))

    def sum_by_key(self, collection: Collection, key: str, columns: Sequence[str]) -> pd.DataFrame:
        source = self._own(collection)
        arrow.check_key(source.schema, key)
        arrow.check_integer_columns(source.schema, columns)
        empty = arrow.empty_partial_sums(source.schema, key, columns)
        combine = _PartialSumsCombineFn(key, columns, empty)
        (partials,) = self._run(
            source, lambda rows, label: rows | f"{label} sums" >> beam.CombineGlobally(combine)
        )
        return arrow.finish_sums(partials, key, columns, source.schema.field(key).type)

    def write_parquet(self, collection: Collection, directory: Path, schema: pa.Schema) -> list[Path]:
        return self._write_shards(self._own(collection), directory, schema, None)

    def write_groups(self, collection: Collection, key: str, directory: Path, schema: pa.Schema) -> list[Path]:
        source = self._own(collection)
        arrow.check_key(source.schema, key)
        return self._write_shards(source, directory, schema, key)

    def _write_shards(self, source: BeamCollection, directory: Path, schema: pa.Schema, key: str | None) -> list[Path]:
        """One Parquet file per shard (of rows, or of ``key`` with each file sorted by it)."""
        arrow.check_schema(schema)
        target = Path(directory).resolve() if storage.is_local(directory) else directory
        storage.make_folder(target)
        return [target / name for name in sorted(self._run(source, self._shard_writer(target, schema, key)))]

    def write_by_key(self, collection: Collection, key: str, order: Sequence[str], shards: int, directory: Path,
                     schema: pa.Schema) -> list[Path]:
        """Rows sharded by ``key`` (CRC-32 of its canonical bytes, as the local engine does) into
        ``shards`` groups, each written sorted by ``key`` and ``order`` as one file."""
        source = self._own(collection)
        arrow.check_key(source.schema, key)
        arrow.check_schema(schema)
        target = Path(directory).resolve() if storage.is_local(directory) else directory
        storage.make_folder(target)

        def write(rows: beam.PCollection, label: str) -> beam.PCollection:
            return (
                rows
                | f"{label} shard" >> beam.ParDo(_ShardByKey(key, shards))
                | f"{label} group" >> beam.GroupByKey()
                | f"{label} write" >> beam.ParDo(_WriteShard(target, schema, key, order))
            )

        return [target / name for name in sorted(self._run(source, write))]

    def read_groups(self, paths: Sequence[Path], key: str, schema: pa.Schema) -> BeamCollection:
        arrow.check_schema(schema)
        arrow.check_key(schema, key)
        return BeamCollection(
            schema=schema.remove_metadata(),
            engine_id=id(self),
            source_files=[_source_file(path) for path in paths],
            whole_groups_key=key,
        )

    def _shard_writer(
        self, folder: storage.Where, schema: pa.Schema, sort_key: str | None
    ) -> Callable[[beam.PCollection, str], beam.PCollection]:
        shards = self.parallelism

        def write(rows: beam.PCollection, label: str) -> beam.PCollection:
            sharder = _ShardByRow(shards) if sort_key is None else _ShardByKey(sort_key, shards)
            return (
                rows
                | f"{label} shard" >> beam.ParDo(sharder)
                | f"{label} group" >> beam.GroupByKey()
                | f"{label} write" >> beam.ParDo(_WriteShard(folder, schema, sort_key))
            )

        return write

    def _run(
        self, collection: BeamCollection, tail: Callable[[beam.PCollection, str], beam.PCollection] | None
    ) -> list[Any]:
        """Build one pipeline: the collection's recipe, ``tail``, then all outputs to the driver."""
        result_path = self._new_folder("result") / "values.pickle"
        if self.runner_given:
            pipeline = beam.Pipeline(options=self.options)
        else:
            from apache_beam.runners.portability.fn_api_runner import FnApiRunner

            pipeline = beam.Pipeline(runner=FnApiRunner(), options=self.options)
        labels = itertools.count()
        rows = self._expand(pipeline, collection, labels)
        outputs = rows if tail is None else tail(rows, f"{next(labels):03d} terminal")
        _ = (
            outputs
            | "gather" >> beam.CombineGlobally(beam.combiners.ToListCombineFn())
            | "save" >> beam.ParDo(_SaveResult(str(result_path)))
        )
        with worker_errors():
            state = pipeline.run().wait_until_finish()
        if state != PipelineState.DONE:
            raise EngineError(f"the Beam pipeline ended in state {state} instead of DONE")
        values = pickle.loads(result_path.read_bytes())
        shutil.rmtree(result_path.parent, ignore_errors=True)
        return values

    def _expand(
        self, pipeline: beam.Pipeline, collection: BeamCollection, labels: Iterator[int]
    ) -> beam.PCollection:
        """The PCollection of Arrow tables that ``collection`` denotes inside ``pipeline``."""
        files = collection.materialized if collection.materialized is not None else collection.source_files
        if files is not None:
            label = f"{next(labels):03d} read"
            return (
                pipeline
                | f"{label} paths" >> beam.Create(list(files), reshuffle=False)
                | f"{label} files"
                >> beam.ParDo(_ReadFiles(collection.schema, collection.whole_groups_key, self.rows_per_call))
            )
        assert collection.step is not None
        kind = collection.step[0]
        if kind == "fragments":
            _, tasks, fn, side = collection.step
            label = f"{next(labels):03d} fragments"
            dofn = _MapFragments(fn, collection.schema)
            return (
                pipeline
                | f"{label} tasks" >> beam.Create(list(tasks), reshuffle=False)
                | label >> self._par_do(pipeline, dofn, side, label)
            )
        assert collection.parent is not None
        upstream = self._expand(pipeline, collection.parent, labels)
        label = f"{next(labels):03d} {kind}"
        if kind == "map_batches":
            _, fn, side = collection.step
            dofn = _MapBatches(fn, collection.schema, self.rows_per_call)
            return upstream | label >> self._par_do(pipeline, dofn, side, label)
        if kind == "map_groups":
            _, key, fn, side = collection.step
            if collection.parent.whole_groups_key == key:
                dofn = _MapWholeGroups(key, fn, collection.schema, self.rows_per_call)
                return upstream | label >> self._par_do(pipeline, dofn, side, label)
            grouped = (
                upstream
                | f"{label} shard" >> beam.ParDo(_ShardByKey(key, self.parallelism))
                | f"{label} group" >> beam.GroupByKey()
            )
            dofn = _MapShardGroups(key, fn, collection.parent.schema, collection.schema, self.rows_per_call)
            return grouped | f"{label} apply" >> self._par_do(pipeline, dofn, side, label)
        if kind == "cluster":
            _, key = collection.step
            return (
                upstream
                | f"{label} shard" >> beam.ParDo(_ShardByKey(key, self.parallelism))
                | f"{label} group" >> beam.GroupByKey()
                | f"{label} sort" >> beam.ParDo(_ClusterShard(key, collection.schema, self.rows_per_call))
            )
        raise EngineError(f"unknown Beam step {kind!r}")

    @staticmethod
    def _par_do(pipeline: beam.Pipeline, dofn: _SideUser, side: Any, label: str) -> beam.ParDo:
        if side is None:
            return beam.ParDo(dofn)
        if isinstance(side, _HeldSide):
            dofn.side_token = side.token
            return beam.ParDo(dofn)
        side_values = pipeline | f"{label} side" >> beam.Create([side], reshuffle=False)
        return beam.ParDo(dofn, side=beam.pvalue.AsSingleton(side_values))
