"""A release's files cut from hash-ordered outcome files, without an engine shuffle (issue 15).

The layout (docs/PRIVACY.md, "The layout of a release"): a release of ``R`` rows has ``S`` files,
``S`` the largest power of two not above ``ceil(R / rows_per_file)`` (at least 1: on average a file
holds more than half ``rows_per_file`` and at most twice it, fewer in a release of one file; the
hash spreads them about evenly). A row goes to file
``s``, the top ``log2 S`` bits of a fixed 64-bit hash of its key (:func:`key_hashes`), and a file
holds its rows sorted by the key, then by the release's order columns. So the files are a function
of the released rows and ``S`` alone, however the rows were computed, on every engine.

How it is written: each task that computes released rows writes them as a bucket file
(``bucket_files``) of ``B`` buckets, a power of two: bucket ``b`` holds the rows whose hash has top
bits ``b``. ``B`` is at least any ``S`` the release can have (:func:`outcome_buckets`, from a bound
on its rows), so file ``s`` is the buckets ``s * B / S`` to ``(s + 1) * B / S - 1`` of every outcome
file: one task per release file (:func:`write_release_shard`) reads exactly its rows from each
outcome file, sorts them and writes the file. Where the engines' own shuffle (``write_by_key``)
moved every released row through the JVM, this is one Python job with no shuffle.

It imports no engine and no kind.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.engines import arrow
from pipelines.engines.storage import Where
from pipelines.platform.bucket_files import key_hashes, read_bucket_batches, write_bucket_file

MAX_OUTCOME_BUCKETS = 1 << 16
RELEASE_SHARD_SCHEMA = pa.schema([pa.field("path", pa.string(), nullable=False)])
"""What a shard task returns: its file's name, or no row for an empty file."""


def _bits(count: int) -> int:
    if count < 1 or count & (count - 1):
        raise ValueError(f"a shard or bucket count is a power of two, not {count}")
    return count.bit_length() - 1


def top_bits(hashes: np.ndarray, count: int) -> np.ndarray:
    """Each hash's part of ``count`` (a power of two): its top ``log2 count`` bits."""
    bits = _bits(count)
    if not bits:
        return np.zeros(len(hashes), dtype=np.int64)
    return (np.asarray(hashes, dtype=np.uint64) >> np.uint64(64 - bits)).astype(np.int64)


def shard_count(rows: int, rows_per_file: int) -> int:
    """The release's file count: the largest power of two not above ``ceil(rows / rows_per_file)``,
    at least 1 (a function of the released row count alone)."""
    wanted = max(1, -(-int(rows) // int(rows_per_file)))
    return 1 << (wanted.bit_length() - 1)


def outcome_buckets(most_rows: int, rows_per_file: int) -> int:
    """Buckets of each outcome file: the file count of a release of ``most_rows`` rows (a bound
    on the rows it will have, an internal figure: the outcome files are staging), capped at
    :data:`MAX_OUTCOME_BUCKETS` (a larger release's shard tasks filter their bucket's rows)."""
    return min(MAX_OUTCOME_BUCKETS, shard_count(most_rows, rows_per_file))


def write_outcome(table: pa.Table, key: str, buckets: int, where: Where) -> None:
    """A task's released rows as its outcome file: ``buckets`` buckets by the top bits of the
    key's hash (every task writes its file, empty or not)."""
    write_bucket_file(table, top_bits(key_hashes(table.column(key)), buckets), buckets, where)


@dataclass(frozen=True)
class ReleaseShard:
    """A shard task: release file ``shard`` of ``shards``."""

    shard: int
    shards: int


@dataclass(frozen=True)
class ShardSide:
    """The side value of :func:`write_release_shard`."""

    outcome_files: tuple[Where, ...]
    buckets: int
    key: str
    order: tuple[str, ...]
    folder: Where
    schema: pa.Schema


def shard_buckets(shard: int, shards: int, buckets: int) -> tuple[int, int]:
    """The outcome buckets (first, last) that hold release file ``shard`` of ``shards``."""
    if shards <= buckets:
        width = buckets // shards
        return shard * width, (shard + 1) * width - 1
    bucket = shard // (shards // buckets)
    return bucket, bucket


def write_release_shard(task: ReleaseShard, side: ShardSide) -> pa.Table:
    """Release file ``task.shard``: its rows from every outcome file, sorted by key and order,
    written as ``part-NNNNN.parquet`` (no file when it has no row); returns its name."""
    first, last = shard_buckets(task.shard, task.shards, side.buckets)
    batches = [batch for where in side.outcome_files for batch in read_bucket_batches(where, first, last)
               if batch.num_rows]
    if not batches:
        return RELEASE_SHARD_SCHEMA.empty_table()
    rows = pa.Table.from_batches(batches)
    if task.shards > side.buckets:  # the bucket holds several files' rows: keep this file's
        rows = rows.filter(pa.array(top_bits(key_hashes(rows.column(side.key)), task.shards) == task.shard))
    rows = arrow.sort_by_columns(rows, [side.key, *side.order])
    written = arrow.write_parquet_file([rows], side.folder, arrow.part_file_name(task.shard), side.schema,
                                       attempt=uuid.uuid4().hex)  # unique per attempt, on any host
    if written is None:
        return RELEASE_SHARD_SCHEMA.empty_table()
    return pa.table({"path": [written.name]}, schema=RELEASE_SHARD_SCHEMA)


def release_shard_tasks(rows: int, rows_per_file: int) -> list[ReleaseShard]:
    shards = shard_count(rows, rows_per_file)
    return [ReleaseShard(shard, shards) for shard in range(shards)]


def written_files(folder: Where, names: Any) -> list[Where]:
    """The release's files from the shard tasks' names, in name order."""
    return [folder / name for name in sorted(str(name) for name in names)]
