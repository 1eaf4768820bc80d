"""Repeated keys of an input (one report per user, one record per id) found on the engine, with
memory per task bounded by design and nothing but a summary on the driver (issue 15).

A duplicate check needs every row's key beside every other's: a shuffle. The engines' own
shuffles (``map_groups``) hold a whole collection in the local engine's process, which is the
driver there; so this module shuffles through staged files instead, the way Spark's sort shuffle
does, on every engine alike:

1. *Map side*, inside the task that reads an input fragment (``map_fragments``): the fragment's
   keys and ``ROW_ID``s are hashed into ``buckets`` and written as one Arrow IPC file per fragment
   (:func:`write_key_buckets`) holding exactly one record batch per bucket, so that any bucket of
   any fragment can be read alone (reads at offsets: mapping the files into memory would fault whole
   files into the process).
2. *Reduce side*, one task per bucket (:func:`find_repeated_keys`, ``map_fragments`` over
   :class:`KeyBucket` descriptions): the bucket's batch of every fragment's file, sorted by (key,
   row id); a key's second and later rows are repeats. Each task returns one row — how many
   repeats, the first repeating row's id and the row id of that key's first occurrence — and the
   driver collects these rows (one per bucket: few) and takes the smallest.

The number of buckets grows with the input's bytes (:func:`bucket_count`: about
:data:`BUCKET_INPUT_BYTES` of input per bucket), so a reduce task holds a bounded share of the
keys whatever the input's size. Keys compare by value: integer columns as int64, anything else
as its text (a CSV's fields as written); an input whose fragments give integer keys in some and
text in others is refused by the caller before the reduce (``key_type`` tells it which a
fragment had). Retried tasks rewrite the same file names with the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.engines.storage import Where
from pipelines.platform.bucket_files import key_hashes, read_bucket_batches, write_bucket_file

ROW_ID = "ROW_ID"
BUCKET_INPUT_BYTES = 2 << 20
"""Input bytes (as listed: file sizes) per bucket: a reduce task sorts about this much input's keys."""
MAX_BUCKETS = 4096
INTEGER_KEYS, TEXT_KEYS = 1, 2
"""What ``key_type`` returns: the keys of a fragment were integers, or text."""
REPEATS_SCHEMA = pa.schema([
    pa.field("repeats", pa.int64(), nullable=False),
    pa.field(ROW_ID, pa.int64()),
    pa.field("earlier_row_id", pa.int64()),
])
"""One row per bucket: repeated rows (a key's rows after its first), the first repeating row's id and
the id of the first row with the same key (both null without repeats)."""


def bucket_count(fragment_sizes: Sequence[int | None], parallelism: int) -> int:
    """Buckets for an input of these fragment sizes: about :data:`BUCKET_INPUT_BYTES` each, at
    least the engine's parallelism, at most :data:`MAX_BUCKETS`."""
    total = sum(size or 0 for size in fragment_sizes)
    return int(min(MAX_BUCKETS, max(1, parallelism, math.ceil(total / BUCKET_INPUT_BYTES))))


@dataclass(frozen=True)
class KeyBuckets:
    """Where the map side writes its key files, and into how many buckets."""

    folder: Where
    buckets: int

    def file_for(self, ordinal: int) -> Where:
        return self.folder / f"keys-{ordinal:07d}.arrow"


def canonical_keys(values: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, int]:
    """The keys as compared (int64, or text) and which kind they are."""
    array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_integer(array.type):
        return array.cast(pa.int64()), INTEGER_KEYS
    if pa.types.is_large_string(array.type):
        return array.cast(pa.string()), TEXT_KEYS
    return (array if pa.types.is_string(array.type) else array.cast(pa.string())), TEXT_KEYS


def bucket_ids(keys: pa.Array, buckets: int) -> np.ndarray:
    """Each key's bucket (a hash of its value; the same on every worker and engine)."""
    hashes = key_hashes(keys)
    if pa.types.is_integer(keys.type):
        hashes = hashes >> np.uint64(29)  # a Fibonacci product's low bits mix poorly; keep its high ones
    return (hashes % np.uint64(buckets)).astype(np.int64)


def write_key_buckets(keys: pa.Array, row_ids: np.ndarray, target: KeyBuckets, ordinal: int) -> None:
    """The map side: ``keys`` (canonical, no nulls) with their ``row_ids``, bucketed into one IPC
    file of ``target.buckets`` record batches (bucket ``b`` is batch ``b``, possibly empty)."""
    ids = bucket_ids(keys, target.buckets) if len(keys) else np.zeros(0, dtype=np.int64)
    table = pa.table([keys, pa.array(np.asarray(row_ids, dtype=np.int64), pa.int64())],
                     schema=pa.schema([pa.field("key", keys.type), pa.field(ROW_ID, pa.int64())]))
    write_bucket_file(table, ids, target.buckets, target.file_for(ordinal))


@dataclass(frozen=True)
class KeyBucket:
    """A reduce task: bucket ``index`` of every key file."""

    index: int
    files: tuple[Where, ...]


def repeated_key_rows(task: KeyBucket, side: Any) -> pa.Table:
    """The reduce side: one row (:data:`REPEATS_SCHEMA`) for the bucket."""
    batches = [batch for batch in (read_bucket_batches(file, task.index, task.index)[0] for file in task.files) if batch.num_rows]
    none = pa.table({"repeats": [0], ROW_ID: pa.nulls(1, pa.int64()), "earlier_row_id": pa.nulls(1, pa.int64())},
                    schema=REPEATS_SCHEMA)
    if not batches:
        return none
    table = pa.Table.from_batches(batches).combine_chunks()
    order = pc.sort_indices(table, sort_keys=[("key", "ascending"), (ROW_ID, "ascending")])
    keys = table.column("key").take(order)
    rows = table.column(ROW_ID).take(order).to_numpy()
    same = np.zeros(len(rows), dtype=bool)
    if len(rows) > 1:
        same[1:] = pc.equal(keys.slice(1), keys.slice(0, len(rows) - 1)).to_numpy(zero_copy_only=False)
    repeats = np.flatnonzero(same)
    if not len(repeats):
        return none
    first = int(repeats[np.argmin(rows[repeats])])
    starts = np.maximum.accumulate(np.where(same, 0, np.arange(len(rows))))
    return pa.table({"repeats": [len(repeats)], ROW_ID: [int(rows[first])],
                     "earlier_row_id": [int(rows[starts[first]])]}, schema=REPEATS_SCHEMA)


@dataclass(frozen=True)
class RepeatedKeys:
    """What the reduce found: repeated rows in all, and the first repeating row with the row its
    key first appeared in (``None`` without repeats)."""

    repeats: int
    first_row_id: int | None
    earlier_row_id: int | None


def find_repeated_keys(engine: Any, target: KeyBuckets, ordinals: Sequence[int]) -> RepeatedKeys:
    """The reduce over the key files the map side wrote for fragments ``ordinals``: one job, one
    row per bucket to the driver (at most :data:`MAX_BUCKETS`)."""
    files = tuple(target.file_for(ordinal) for ordinal in ordinals)
    tasks = [KeyBucket(index, files) for index in range(target.buckets)]
    found = engine.collect(engine.map_fragments(tasks, repeated_key_rows, REPEATS_SCHEMA))
    repeats = int(found["repeats"].sum())
    located = found[found[ROW_ID].notna()]
    if located.empty:
        return RepeatedKeys(repeats, None, None)
    first = located.sort_values([ROW_ID, "earlier_row_id"]).iloc[0]
    return RepeatedKeys(repeats, int(first[ROW_ID]), int(first["earlier_row_id"]))
