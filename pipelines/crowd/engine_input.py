"""Worker side of the crowd input (issue 15): the claims read, checked, canonicalized and staged
where the engine runs its tasks; only small summaries leave a task.

Two passes, each a ``map_fragments`` job:

1. :func:`read_claims_fragment`, per input fragment (a file, or one data file of an
   Iceberg scan; ``pipelines/platform/sources.py``): reads the mapped columns with the platform's
   ``ROW_ID`` (``pipelines/platform/fragment_tasks.py``); types the ids as the single-file reader always did (``pipelines/crowd/input.py``:
   integers when every non-null id of the fragment is an integer — an integer column, a float
   column of whole numbers, or text of at most 18 digits — else text as written) and parses the
   values (numbers; text through ``pd.to_numeric``, ``nan`` a missing value); flags every bad row
   by problem (:data:`PROBLEMS`: boolean or fractional ids, boolean or non-numeric values, null
   ids, missing or infinite values); writes its good claims hashed by object into buckets (one
   Arrow IPC file per fragment, one record batch per bucket, as ``repeated_keys`` does for keys;
   an object id that reads as an integer is hashed by its integer value, any other by its text, so
   an object lands in one bucket whichever way a fragment typed it) and its distinct source ids to
   a second file (:func:`fragment_sources` reads them back for the driver's distinct sources);
   fingerprints its file (keyed) and sketches its canonical claims (``platform/row_prints.py``:
   the keyed hashes of ``(object, source, value)`` of its good rows). It returns a few rows, collected: metrics (each problem's count
   with its first ``ROW_ID``), the kinds of its ids and its fingerprint. Consecutive fragments
   share a task on engines whose tasks pay a start (:func:`fragments_per_task`).
2. :func:`stage_object_bucket`, one task per run of buckets: those buckets of every fragment's file, the ids
   reconciled to the input's kinds (:class:`GroupSide`: integers only if every fragment's were; a
   fragment's integers are otherwise their decimal text), sorted once into the canonical order with
   ties in input order (``ROW_ID``; ``keep_last`` and ``mean`` first see the rows in input order); the
   duplicates policy (``reject``: the repeats counted with the first repeating row and the row it
   repeats; ``keep_last``: the largest ``ROW_ID``; ``mean``: the mean at the first row's place —
   ``apply_duplicates_policy``, the single-file code, on whole objects); clipping into the public
   value range (counted, with the first row outside); dense source codes (positions in the sorted
   distinct source ids the driver reduced from pass 1); per-object counts (objects, objects with at
   least ``k`` claims, the largest object, the first small object with its claim count). The
   canonical claims ``(object_id, source_id code, value)`` are written as one group file per bucket
   (whole objects, in canonical order: by object, then source code) that every later job reads,
   and, with global weights and no contribution bound, the first global-weights iteration's
   per-source sums of exactly those claims beside it (:attr:`GroupSide.first_losses`).

The synthesis is a third ``map_fragments`` job, :func:`synthesize_group_file`, one task per staged
group file: the objects' synthesis (``pipelines/crowd/blocks.py:synthesis_block``), the released
claims written to the task's outcome file (bucketed by object hash for
``pipelines/platform/release_shards.py``, which cuts the release's files from them), and
:func:`output_block` on the outcome in the same task:
the output gate's metrics, the suppression reasons, the smallest released object ids (the report's
sample objects) and released medians for the evaluation's sampled objects — a few rows per task,
so the driver never reads the released claims, and the outcome is not read back for its checks.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.crowd.blocks import (
    GlobalPassSide,
    SynthesisSide,
    global_pass_block,
    released_rows,
    synthesis_block,
)
from pipelines.crowd.input import apply_duplicates_policy
from pipelines.engines import storage
from pipelines.engines.storage import Where
from pipelines.platform.bucket_files import (
    read_bucket_batches,
    read_bucket_file,
    write_bucket_file,
    write_table_file,
)
from pipelines.platform.fragment_tasks import (
    NumberedFile,
    any_problem,
    decoded,
    located_problems,
    read_mapped_columns,
)
from pipelines.platform.release_shards import write_outcome
from pipelines.platform.repeated_keys import bucket_ids
from pipelines.platform.row_prints import RowPrinting
from pipelines.platform.sources import ROW_ID, Fragment, fragment_fingerprint
from schemas.crowd.tables import (
    claims_schema,
    crowd_group_summary_schema,
    crowd_input_summary_schema,
    crowd_output_summary_schema,
    synthetic_claims_schema,
)
from schemas.tables import ROW_NUMBER

METRIC, FINGERPRINT, STAGED, REASON, SAMPLE, EVALUATION, ROW_SKETCH = 1, 2, 5, 6, 7, 8, 9
"""What a summary row is (its ``entry``)."""

ROWS = 0
OBJECT_BOOLEAN, OBJECT_FRACTIONAL, SOURCE_BOOLEAN, SOURCE_FRACTIONAL, VALUE_BOOLEAN, VALUE_NOT_NUMBER = 1, 2, 3, 4, 5, 6
OBJECT_NULL, SOURCE_NULL, VALUE_MISSING, VALUE_INFINITE, DUPLICATE = 7, 8, 9, 10, 11
OUT_OF_RANGE, SMALL_OBJECT = 12, 13
INTEGER_OBJECT_IDS, TEXT_OBJECT_IDS, INTEGER_SOURCE_IDS, TEXT_SOURCE_IDS = 14, 15, 16, 17
CLAIMS, OBJECTS, RELEASABLE_OBJECTS, LARGEST_OBJECT = 20, 21, 22, 23
"""Metric codes. 1-11 are the input gate's checks in the order the single-file release reported
them (parse problems by column, then nulls, non-finite values, duplicates); 12 and 13 the value range
and small objects (rejected by policy); 14-17 count fragments by the kind of their ids; 20-23 the
per-object figures of pass 2 (``LARGEST_OBJECT`` is a maximum: reduced by ``max``)."""

PROBLEMS: dict[int, tuple[str, str]] = {
    OBJECT_BOOLEAN: ("object_id", "identifiers must be integers or text, not booleans"),
    OBJECT_FRACTIONAL: ("object_id", "identifiers must be integers or text, not fractional numbers"),
    SOURCE_BOOLEAN: ("source_id", "identifiers must be integers or text, not booleans"),
    SOURCE_FRACTIONAL: ("source_id", "identifiers must be integers or text, not fractional numbers"),
    VALUE_BOOLEAN: ("value", "values must be numbers, not booleans"),
    VALUE_NOT_NUMBER: ("value", "value is not a number"),
    OBJECT_NULL: ("object_id", "object id is null"),
    SOURCE_NULL: ("source_id", "source id is null"),
    VALUE_MISSING: ("value", "value is missing or not a number (NaN)"),
    VALUE_INFINITE: ("value", "value is infinite"),
    DUPLICATE: ("object_id", "duplicate claim: the same source claimed this object before (duplicates policy 'reject')"),
}
"""Each row-located problem's canonical column and message (the driver words the located line)."""
METRIC_NAMES = {
    ROWS: "rows", OBJECT_BOOLEAN: "boolean_object_ids", OBJECT_FRACTIONAL: "fractional_object_ids",
    SOURCE_BOOLEAN: "boolean_source_ids", SOURCE_FRACTIONAL: "fractional_source_ids",
    VALUE_BOOLEAN: "boolean_values", VALUE_NOT_NUMBER: "non_numeric_values", OBJECT_NULL: "object_id_nulls",
    SOURCE_NULL: "source_id_nulls", VALUE_MISSING: "missing_values", VALUE_INFINITE: "infinite_values",
    DUPLICATE: "duplicate_claims",
}
"""The input gate's metrics (``schemas/crowd/expectations.py:crowd_input_metric_suites``)."""
INPUT_PASS_PROBLEMS = tuple(code for code in PROBLEMS if code != DUPLICATE)
_INTEGER_TEXT = r"^[+-]?\d{1,18}$"
INTEGER, TEXT = 1, 2
NO_ROW = -1
"""The ``ROW_ID`` of a pass-1 summary row that names no row (ROW_IDs are never negative)."""


@dataclass(frozen=True)
class ClaimsReading:
    """The side value of :func:`read_claims_fragment`: the file's columns for object, source and
    value; where the bucketed claims go and into how many buckets; the fingerprints' key."""

    object_column: str
    source_column: str
    value_column: str
    folder: Where
    buckets: int
    fingerprint_key: bytes | None = None
    """32 bytes: key material, kept out of pickled side values by the engines."""
    row_printing: RowPrinting | None = None
    """How each fragment sketches its canonical claims ``(object, source, value)``
    (``ReleaseContext.row_printing``: the lake's row key, key material); ``None``: no sketch."""
    value_grid: tuple[float, float, float] | None = None
    """``(low, high, precision)``: a claim's value is printed as its grid step
    ``round(clip(value)/precision)`` — what the release can tell apart — so a copy whose values
    differ below the precision (float32 columns, a rounding) prints the same (issue 32 review)."""

    def printed_values(self, values: np.ndarray) -> np.ndarray:
        """The values as the row prints see them (:attr:`value_grid`)."""
        if self.value_grid is None:
            return values
        low, high, precision = self.value_grid
        return np.rint(np.clip(values, low, high) / precision).astype(np.int64)

    def file_for(self, ordinal: int) -> Where:
        return self.folder / f"claims-{ordinal:07d}.arrow"

    def sources_for(self, ordinal: int) -> Where:
        return self.folder / f"sources-{ordinal:07d}.arrow"

    @property
    def roles(self) -> dict[str, str]:
        return {self.object_column: "object_id", self.source_column: "source_id", self.value_column: "value"}


def _series(column: pa.ChunkedArray) -> pd.Series:
    return decoded(column).to_pandas()


def _identifiers(column: pa.ChunkedArray, codes: tuple[int, int, int],
                 problems: dict[int, np.ndarray]) -> tuple[np.ndarray, int | None]:
    """A fragment's ids as the single-file reader typed them (``input.identifier_column``): int64
    when every non-null id is an integer, else text; flags booleans, fractional numbers and nulls
    (``codes``). Flagged rows hold a placeholder."""
    boolean, fractional, null = codes
    series = _series(column)
    rows = len(series)
    nulls = series.isna().to_numpy()
    problems[null] = nulls
    if pd.api.types.is_bool_dtype(series):
        problems[boolean] = ~nulls
        return np.zeros(rows, dtype=np.int64), None
    if pd.api.types.is_float_dtype(series):
        numbers = series.to_numpy(dtype=np.float64, na_value=np.nan)
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(numbers) & (np.floor(numbers) == numbers) & (np.abs(numbers) < 2.0**63)
        problems[fractional] = ~nulls & ~whole
        values = np.zeros(rows, dtype=np.int64)
        values[whole] = numbers[whole].astype(np.int64)
        return values, INTEGER if (~nulls).any() else None
    if pd.api.types.is_integer_dtype(series):
        return series.to_numpy(dtype=np.int64), INTEGER
    present = ~nulls
    text = np.full(rows, "", dtype=object)
    text[present] = series[present].astype(str).to_numpy(dtype=object)
    if not present.any():
        return text, None
    is_integer = pd.Series(text[present]).str.fullmatch(r"[+-]?\d{1,18}")
    if bool(is_integer.all()):
        values = np.zeros(rows, dtype=np.int64)
        values[present] = text[present].astype(np.int64)
        return values, INTEGER
    return text, TEXT


def _values(column: pa.ChunkedArray, problems: dict[int, np.ndarray]) -> np.ndarray:
    """The values as float64 as the single-file reader parsed them (``input._value_column``),
    flagging booleans, non-numbers, missing (null or NaN) and infinite values."""
    series = _series(column)
    rows = len(series)
    unusable = np.zeros(rows, dtype=bool)
    if pd.api.types.is_bool_dtype(series):
        problems[VALUE_BOOLEAN] = np.ones(rows, dtype=bool)
        return np.zeros(rows)
    if pd.api.types.is_numeric_dtype(series):
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        text = series.astype(object)
        numbers = pd.to_numeric(text, errors="coerce")
        not_numeric = text.notna().to_numpy() & numbers.isna().to_numpy()
        literal_nan = text.astype(str).str.strip().str.lower().isin(["nan", "+nan", "-nan"]).to_numpy()
        unusable = not_numeric & ~literal_nan
        problems[VALUE_NOT_NUMBER] = unusable
        values = numbers.to_numpy(dtype=np.float64, na_value=np.nan)
        values[literal_nan] = np.nan
    problems[VALUE_MISSING] = np.isnan(values) & ~unusable
    problems[VALUE_INFINITE] = np.isinf(values)
    return values


def object_buckets(ids: np.ndarray, kind: int, buckets: int) -> np.ndarray:
    """Each object's bucket: by its integer value when it reads as one (an integer id, or text of at
    most 18 digits), else by its text — the same bucket however a fragment typed the object."""
    if kind == INTEGER:
        return bucket_ids(pa.array(ids, pa.int64()), buckets)
    text = pa.array(ids, pa.string())
    integral = pc.fill_null(pc.match_substring_regex(text, _INTEGER_TEXT), False).to_numpy(zero_copy_only=False)
    result = np.zeros(len(ids), dtype=np.int64)
    if integral.any():
        result[integral] = bucket_ids(pa.array(ids[integral].astype(np.int64), pa.int64()), buckets)
    if (~integral).any():
        result[~integral] = bucket_ids(pa.array(ids[~integral], pa.string()), buckets)
    return result


def _id_array(ids: np.ndarray, kind: int | None) -> pa.Array:
    return pa.array(ids, pa.int64() if kind == INTEGER else pa.string())


def read_claims_fragment(fragment: Fragment, side: ClaimsReading) -> pa.Table:
    """Pass 1 for one fragment (module docstring)."""
    table, row_ids = read_mapped_columns(fragment, side.roles)
    problems: dict[int, np.ndarray] = {}
    objects, object_kind = _identifiers(table.column(side.object_column),
                                        (OBJECT_BOOLEAN, OBJECT_FRACTIONAL, OBJECT_NULL), problems)
    sources, source_kind = _identifiers(table.column(side.source_column),
                                        (SOURCE_BOOLEAN, SOURCE_FRACTIONAL, SOURCE_NULL), problems)
    values = _values(table.column(side.value_column), problems)
    good = ~any_problem(problems, len(row_ids))
    rows: list[dict[str, Any]] = [{"entry": METRIC, "code": ROWS, "count": len(row_ids)}]
    for code, _, row_id, count in located_problems(problems, row_ids):
        rows.append({"entry": METRIC, "code": code, ROW_ID: row_id, "count": count})
    for kind, codes in ((object_kind, (INTEGER_OBJECT_IDS, TEXT_OBJECT_IDS)),
                        (source_kind, (INTEGER_SOURCE_IDS, TEXT_SOURCE_IDS))):
        if kind is not None:
            rows.append({"entry": METRIC, "code": codes[0] if kind == INTEGER else codes[1], "count": 1})
    rows.append({"entry": FINGERPRINT, "code": fragment.ordinal, "count": 0,
                 "fingerprint": fragment_fingerprint(fragment, side.fingerprint_key)})
    kept = np.flatnonzero(good)
    object_ids, source_ids = objects[kept], sources[kept]
    if side.row_printing is not None:
        sketch = side.row_printing.sketch([object_ids, source_ids, side.printed_values(values[kept])], fragment.size)
        rows.append({"entry": ROW_SKETCH, "code": fragment.ordinal, "count": sketch.rows, "fingerprint": sketch.to_text()})
    # every row has a ROW_ID (NO_ROW where none): a null column would reach the driver's frame as
    # floats, which round ROW_IDs of fragments past 2^13
    summary = pa.Table.from_pylist([{ROW_ID: NO_ROW, **row} for row in rows], schema=crowd_input_summary_schema())
    claims = pa.table({
        "object_id": _id_array(object_ids, object_kind),
        "source_id": _id_array(source_ids, source_kind),
        "value": pa.array(values[kept], pa.float64()),
        ROW_ID: pa.array(row_ids[kept], pa.int64()),
    })
    buckets = object_buckets(object_ids, object_kind or TEXT, side.buckets) if len(kept) else np.zeros(0, np.int64)
    write_bucket_file(claims, buckets, side.buckets, side.file_for(fragment.ordinal))
    # the fragment's distinct sources, as the fragment typed them (the input's kind is decided
    # across fragments): read back by fragment_sources, not shipped through the engine
    write_table_file(pa.table({"source_id": _id_array(pd.unique(source_ids), source_kind or INTEGER)}),
                     side.sources_for(fragment.ordinal))
    return summary


# ---- the input's distinct sources, from pass 1's files -------------------------------------------

def fragment_sources(task: NumberedFile, integers: bool) -> pa.Table:
    """A fragment's distinct sources as the input's kind (``integers``: every fragment's source ids
    were integers; else text, a fragment's integers as their decimal digits), a count of 1 each."""
    ids = read_bucket_file(task.where).column("source_id").combine_chunks()
    ids = ids.cast(pa.int64()) if integers else ids.cast(pa.string())
    return pa.table({"source_id": ids, "count": pa.array(np.ones(len(ids), dtype=np.int64))})


# ---- pass 2: one task per object bucket -----------------------------------------------------------

BUCKET_INPUT_BYTES = 128 << 10
"""Input bytes (as listed) per bucket of pass 1: fine buckets, grouped into pass-2 tasks once
pass 1 has counted the rows (input bytes say little about rows: a column of sequential ids
compresses to almost nothing), and fine enough that the tasks get near-equal shares."""
MAX_BUCKETS = 4096
TASK_CLAIMS = 1_250_000
"""Claims a pass-2 task holds, at most about (whole buckets: the hash spreads objects evenly); its
group file is one task of every later job. Large: each Python task of an engine costs a fixed
start (about 80 ms on Spark), which at a few hundred thousand claims a task was a fifth of a job
that reads the claims (at 10^7 claims on local[2]: 8 tasks a job instead of 12 at 1,000,000, the
release 44.2 -> 41.2 s in one profile pair; a synthesis worker holds one task's claims, their
kernel and the outcome: docs/PERFORMANCE.md has the executors' peak)."""
DRIVER_TASK_CLAIMS = 250_000
""":data:`TASK_CLAIMS` where the tasks run in the driver process (``Engine.tasks_in_driver``: the
local engine, Beam's in-process runner): no start to pay, and the driver's peak holds one task."""


def task_claims(tasks_in_driver: bool) -> int:
    return DRIVER_TASK_CLAIMS if tasks_in_driver else TASK_CLAIMS


PASS_1_TASKS_PER_PARTITION = 2
"""Pass 1 puts consecutive fragments together in a task (each Python task of an engine costs a
fixed start) while keeping at least this many tasks per unit of the engine's parallelism (its
shuffle partitions: on Spark twice its worker slots), for balance."""
MAX_FRAGMENTS_PER_TASK = 4


def fragments_per_task(fragments: int, parallelism: int, tasks_in_driver: bool) -> int:
    """Pass 1's fragments per task: one where tasks run in the driver (no start to pay, and the
    driver's peak holds one task), else as many as keep :data:`PASS_1_TASKS_PER_PARTITION` tasks per
    unit of ``parallelism``, at most :data:`MAX_FRAGMENTS_PER_TASK`."""
    if tasks_in_driver:
        return 1
    return max(1, min(MAX_FRAGMENTS_PER_TASK, fragments // (PASS_1_TASKS_PER_PARTITION * max(1, parallelism))))


def fine_bucket_count(fragment_sizes: list[int | None], parallelism: int) -> int:
    """Pass 1's buckets: about :data:`BUCKET_INPUT_BYTES` of input each, at least the engine's
    parallelism, at most :data:`MAX_BUCKETS`."""
    total = sum(size or 0 for size in fragment_sizes)
    return int(min(MAX_BUCKETS, max(1, parallelism, -(-total // BUCKET_INPUT_BYTES))))


@dataclass(frozen=True)
class ObjectBucket:
    """A pass-2 task: buckets ``index`` to ``last`` (inclusive) of every fragment's claims file."""

    index: int
    last: int


def bucket_tasks(buckets: int, rows: int, parallelism: int, claims_per_task: int) -> list[ObjectBucket]:
    """The buckets split into runs of consecutive buckets, as even as whole buckets allow: at most
    about ``claims_per_task`` claims each (``rows`` in all; :func:`task_claims`), and a multiple of
    ``parallelism`` runs (no last wave with idle workers), fewer only when there are fewer buckets."""
    parallelism = max(1, parallelism)
    wanted = max(parallelism, -(-rows // max(1, claims_per_task)))
    count = max(1, min(buckets, -(-wanted // parallelism) * parallelism))
    edges = [buckets * index // count for index in range(count + 1)]
    return [ObjectBucket(first, last - 1) for first, last in zip(edges, edges[1:], strict=False)]


@dataclass(frozen=True)
class GroupSide:
    """The side value of :func:`stage_object_bucket`."""

    files: tuple[Where, ...]
    object_integers: bool
    source_integers: bool
    sources: np.ndarray
    """The input's distinct source ids, sorted: a source's code is its position."""
    duplicates: str
    value_range: tuple[float, float]
    k: int
    folder: Where
    first_losses: GlobalPassSide | None = None
    """The first global-weights iteration's side (uniform qualities, the public bandwidth) when the
    task computes that iteration's per-source sums on the claims it stages (``first_losses_for``),
    so that the iteration needs no pass of its own; ``None``: no global weights, or claims staged
    again after a contribution bound."""

    def file_for(self, index: int) -> Where:
        return self.folder / f"part-{index:05d}.parquet"

    def first_losses_for(self, index: int) -> Where:
        return self.folder / f"first-losses-{index:05d}.arrow"


def read_group_file(where: Where) -> pd.DataFrame:
    """A staged group file's claims, whole (a task holds one group file at a time)."""
    return storage.parquet_file(where).read().to_pandas()


def global_pass_file(task: NumberedFile, side: GlobalPassSide) -> pa.Table:
    """A later global-weights iteration's map half over one staged group file (whole objects, in
    canonical order): the file's per-source fixed-point loss sums (``blocks.global_pass_block``),
    one row per source in the file. Run as ``map_fragments`` tasks of many files each, whose rows
    ``sum_by_key`` sums per task before they leave it: an iteration hands on tasks x sources rows
    whatever the claims (issue 15: a ``map_groups`` over the files handed on a row per source per
    250,000-claim call, about 4 x 10^7 rows an iteration at 10^8 claims from 10^5 sources). The
    sums are exact integers, the same whatever the files or the tasks."""
    return pa.Table.from_pandas(global_pass_block(read_group_file(task.where), side), preserve_index=False)


def read_first_losses(task: NumberedFile, side: Any) -> pa.Table:
    """A pass-2 task's first-iteration per-source loss sums (``GroupSide.first_losses``)."""
    return read_bucket_file(task.where)


def _reconciled(column: pa.Array, integers: bool) -> np.ndarray:
    if integers:
        return column.to_numpy(zero_copy_only=False).astype(np.int64)
    if pa.types.is_integer(column.type):
        return np.asarray(column.cast(pa.string()).to_numpy(zero_copy_only=False), dtype=object)
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=object)


def _metric(code: int, count: int, row_id: int | None = None, detail: int | None = None,
            key: int | None = None, entry: int = METRIC) -> dict[str, Any]:
    return {"entry": entry, "code": code, ROW_ID: row_id, "count": count, "detail": detail, "key": key}


def stage_object_bucket(task: ObjectBucket, side: GroupSide) -> pa.Table:
    """Pass 2 for one bucket (module docstring).

    One sort puts the claims in the staged files' canonical order (object, then source code:
    ``claims_block.in_canonical_order``, so no later job sorts a file again) with ties in input
    order; the input checks read the sorted columns: a repeated (object, source) pair is a row
    equal to the one before it, an object's claims are one run."""
    schema = crowd_group_summary_schema()
    # by file, then bucket (the rows are put in ROW_ID order below, whatever the order here)
    parts = [batch for file in side.files for batch in read_bucket_batches(file, task.index, task.last)
             if batch.num_rows]
    if not parts:
        return schema.empty_table()
    objects = np.concatenate([_reconciled(part.column(0), side.object_integers) for part in parts])
    sources = np.concatenate([_reconciled(part.column(1), side.source_integers) for part in parts])
    values = np.concatenate([part.column(2).to_numpy(zero_copy_only=False) for part in parts])
    row_numbers = np.concatenate([part.column(3).to_numpy(zero_copy_only=False) for part in parts])
    if side.duplicates != "reject":
        resolved = apply_duplicates_policy(pd.DataFrame(
            {"object_id": objects, "source_id": sources, "value": values, ROW_NUMBER: row_numbers},
        ).sort_values(ROW_NUMBER, kind="mergesort", ignore_index=True), side.duplicates)
        objects, sources, values, row_numbers = (resolved[name].to_numpy() for name in
                                                 ("object_id", "source_id", "value", ROW_NUMBER))
    codes = pd.Index(side.sources).get_indexer(sources)
    if (codes < 0).any():
        raise RuntimeError("a source id missing from the input's distinct sources")
    object_order = objects if side.object_integers else pd.factorize(objects, sort=True)[0]
    order = np.lexsort((row_numbers, codes, object_order))
    objects, codes, values, row_numbers, object_order = (
        column[order] for column in (objects, codes.astype(np.int64), values, row_numbers, object_order))
    rows: list[dict[str, Any]] = []
    new_object = np.ones(len(order), dtype=bool)
    new_object[1:] = object_order[1:] != object_order[:-1]
    if side.duplicates == "reject":
        repeated = ~new_object
        repeated[1:] &= codes[1:] == codes[:-1]
        if repeated.any():
            positions = np.flatnonzero(repeated)
            first = positions[np.argmin(row_numbers[positions])]  # the earliest repeat in the input
            pair_starts = np.flatnonzero(~repeated)
            pair_start = pair_starts[np.searchsorted(pair_starts, first, side="right") - 1]
            rows.append(_metric(DUPLICATE, len(positions), int(row_numbers[first]), int(row_numbers[pair_start])))
    low, high = side.value_range
    outside = (values < low) | (values > high)
    if outside.any():
        rows.append(_metric(OUT_OF_RANGE, int(outside.sum()), int(row_numbers[outside].min())))
        values = np.clip(values, low, high)
    starts = np.flatnonzero(new_object)
    counts = np.diff(np.append(starts, len(order)))
    rows += [_metric(CLAIMS, len(order)), _metric(OBJECTS, len(counts)),
             _metric(RELEASABLE_OBJECTS, int((counts >= side.k).sum())), _metric(LARGEST_OBJECT, int(counts.max()))]
    small = np.flatnonzero(counts < side.k)
    if len(small):
        first_rows = np.minimum.reduceat(row_numbers, starts)[small]
        chosen = int(np.argmin(first_rows))
        rows.append(_metric(SMALL_OBJECT, len(small), int(first_rows[chosen]), int(counts[small[chosen]])))
    staged = pd.DataFrame({"object_id": objects, "source_id": codes, "value": values})
    id_type = pa.int64() if side.object_integers else pa.string()
    table = pa.Table.from_pandas(staged, schema=claims_schema(id_type, pa.int64()), preserve_index=False)
    storage.write_table(table, side.file_for(task.index), row_group_size=1 << 18)
    if side.first_losses is not None:  # global_pass_block on exactly the file's rows, as iteration 1 reads them
        write_table_file(pa.Table.from_pandas(global_pass_block(staged, side.first_losses), preserve_index=False),
                         side.first_losses_for(task.index))
    rows.append(_metric(task.index, len(staged), entry=STAGED, key=task.index))
    return pa.Table.from_pylist(rows, schema=schema)


# ---- the output gate's metrics and the evaluation's sample (map_groups over the outcome) ---------

OUT_ROWS, OUT_OBJECTS, OUT_RELEASED, OUT_SUPPRESSED = 0, 1, 2, 3
OUT_ATTEMPTS, OUT_FALLBACKS, OUT_CAPPED, OUT_RELEASED_CLAIMS = 4, 5, 6, 7
TOO_MANY_CLAIMS, RELEASED_BELOW_K, SUPPRESSED_WITH_CLAIMS, UNRELEASED_WITH_CLAIMS = 10, 11, 12, 13
RELEASED_AND_SUPPRESSED, UNLISTED_OBJECTS, LISTED_TWICE, NULL_OBJECT_IDS = 14, 15, 16, 17
NON_FINITE_VALUES, CLAIM_INDEX_OUTSIDE = 18, 19
OUTPUT_METRIC_NAMES = {
    OUT_ROWS: "released_claims", OUT_OBJECTS: "objects", OUT_RELEASED: "objects_released",
    OUT_SUPPRESSED: "objects_suppressed", TOO_MANY_CLAIMS: "objects_above_m_claims",
    RELEASED_BELOW_K: "released_objects_below_k", SUPPRESSED_WITH_CLAIMS: "suppressed_objects_with_claims",
    UNRELEASED_WITH_CLAIMS: "unreleased_objects_with_claims", RELEASED_AND_SUPPRESSED: "objects_released_and_suppressed",
    UNLISTED_OBJECTS: "objects_missing_from_the_object_table", LISTED_TWICE: "objects_listed_twice",
    NULL_OBJECT_IDS: "null_object_ids", NON_FINITE_VALUES: "non_finite_values",
    CLAIM_INDEX_OUTSIDE: "claim_indices_outside_m",
}
"""The output gate's metrics (``schemas/crowd/expectations.py:crowd_output_metric_suites``)."""
SAMPLE_OBJECTS = 3
EVALUATION_OBJECTS = 10_000
"""The evaluation's cap: truth errors are taken over at most about this many objects (a keyed
sample of the objects when there are more; all of them otherwise)."""


@dataclass(frozen=True)
class OutputSide:
    claims_per_object: int
    k: int
    sample_fraction: float
    """The evaluation's share of objects (1: all; 0: no evaluation)."""
    sample_key: str


def sampled(object_ids: Any, fraction: float, key: str) -> np.ndarray:
    """The evaluation's keyed sample: objects whose hash under ``key`` (16 characters, from the
    release id) falls below ``fraction`` — the same objects on every engine and split."""
    values = np.asarray(object_ids)
    if fraction >= 1.0:
        return np.ones(len(values), dtype=bool)
    if fraction <= 0.0 or not len(values):
        return np.zeros(len(values), dtype=bool)
    hashes = pd.util.hash_array(values.astype(object) if values.dtype == object else values, hash_key=key)
    return (hashes >> np.uint64(11)).astype(np.float64) / float(1 << 53) < fraction


def sample_key(release_id: str) -> str:
    return hashlib.sha256(b"privlake-crowd-evaluation\0" + release_id.encode()).hexdigest()[:16]


def output_block(frame: pd.DataFrame, side: OutputSide) -> pd.DataFrame:
    """One block of whole objects of the synthesis outcome (claims and the objects' summary rows)
    → metric counts, reasons, sample ids and released medians (``crowd_output_summary_schema``)."""
    summary = frame[frame["claim_index"] == -1]
    claims = frame[frame["claim_index"] >= 0]
    m = side.claims_per_object
    per_object = claims.groupby("object_id", sort=False).size()
    listed = summary.set_index("object_id")
    released_flag = listed["released"] > 0 if len(listed) else pd.Series(dtype=bool)
    suppressed_flag = listed["suppressed"].astype(bool) if len(listed) else pd.Series(dtype=bool)
    released_claims = per_object.reindex(listed.index, fill_value=0) if len(listed) else pd.Series(dtype=np.int64)
    index = claims["claim_index"].to_numpy()
    values = claims["value"].to_numpy(np.float64)
    counts = {
        OUT_ROWS: len(claims), OUT_OBJECTS: len(summary),
        OUT_RELEASED: int((~suppressed_flag).sum()), OUT_SUPPRESSED: int(suppressed_flag.sum()),
        OUT_ATTEMPTS: int(listed.loc[~suppressed_flag, "attempts"].sum()) if len(listed) else 0,
        OUT_FALLBACKS: int(listed.loc[~suppressed_flag, "fallbacks"].sum()) if len(listed) else 0,
        OUT_CAPPED: int(listed.loc[~suppressed_flag, "capped"].sum()) if len(listed) else 0,
        OUT_RELEASED_CLAIMS: int(listed.loc[~suppressed_flag, "released"].sum()) if len(listed) else 0,
        TOO_MANY_CLAIMS: int((per_object > m).sum()),
        RELEASED_BELOW_K: int((released_flag & (listed["claims"] < side.k)).sum()) if len(listed) else 0,
        SUPPRESSED_WITH_CLAIMS: int((suppressed_flag & (released_claims > 0)).sum()) if len(listed) else 0,
        UNRELEASED_WITH_CLAIMS: int((~released_flag & (released_claims > 0)).sum()) if len(listed) else 0,
        RELEASED_AND_SUPPRESSED: int((released_flag & suppressed_flag).sum()) if len(listed) else 0,
        UNLISTED_OBJECTS: int((~per_object.index.isin(listed.index)).sum()),
        LISTED_TWICE: int(listed.index.duplicated().sum()),
        NULL_OBJECT_IDS: int(frame["object_id"].isna().sum()),
        NON_FINITE_VALUES: int((~np.isfinite(values)).sum()),
        CLAIM_INDEX_OUTSIDE: int(((index < 0) | (index >= m)).sum()),
    }
    parts = [pd.DataFrame({"entry": METRIC, "code": list(counts), "count": list(counts.values())})]
    reasons = summary.loc[summary["suppressed"].astype(bool), "reason"].value_counts()
    if len(reasons):
        parts.append(pd.DataFrame({"entry": REASON, "code": 0, "count": reasons.to_numpy(np.int64),
                                   "reason": reasons.index.astype(str)}))
    released_ids = np.sort(summary.loc[~summary["suppressed"].astype(bool), "object_id"].to_numpy())
    if len(released_ids):
        parts.append(pd.DataFrame({"entry": SAMPLE, "code": 0, "count": 0,
                                   "object_id": released_ids[:SAMPLE_OBJECTS]}))
    if side.sample_fraction > 0 and len(claims):
        medians = claims.groupby("object_id", sort=True)["value"].median()
        chosen = sampled(medians.index.to_numpy(), side.sample_fraction, side.sample_key)
        if chosen.any():
            parts.append(pd.DataFrame({"entry": EVALUATION, "code": 0, "count": 0,
                                       "object_id": medians.index.to_numpy()[chosen],
                                       "value": medians.to_numpy(np.float64)[chosen]}))
    result = pd.concat(parts, ignore_index=True)
    for column in ("object_id", "value", "reason"):
        if column not in result.columns:
            result[column] = None
    return result[["entry", "code", "count", "object_id", "value", "reason"]]


@dataclass(frozen=True)
class SynthesisFileSide:
    """The side value of :func:`synthesize_group_file`."""

    synthesis: SynthesisSide
    output: OutputSide
    object_type: pa.DataType
    folder: Where
    buckets: int
    """The outcome files' buckets (``release_shards.outcome_buckets``)."""

    def file_for(self, index: int) -> Where:
        return self.folder / f"part-{index:05d}.arrow"


def synthesize_group_file(task: NumberedFile, side: SynthesisFileSide) -> pa.Table:
    """Synthesis of one staged group file's objects (whole objects, in canonical order; PrisCrowd
    Algorithm 1 per object: weights, weighted KDE, candidates, the plausible-deniability test;
    ``synthesis_block``), the released claims written to ``side.file_for(task.ordinal)`` (an
    outcome file of ``release_shards``: by the top bits of the object's hash, then by object and
    claim index; every task writes its file, empty or not) and the output gate's rows for them
    (:func:`output_block`), all in the task. Each object's draws come from its own keyed streams, so
    which objects share a file changes nothing."""
    outcome = synthesis_block(read_group_file(task.where), side.synthesis)
    released = pa.Table.from_pandas(released_rows(outcome, None), schema=synthetic_claims_schema(side.object_type),
                                    preserve_index=False)
    write_outcome(released, "object_id", side.buckets, side.file_for(task.ordinal))
    return pa.Table.from_pandas(output_block(outcome, side.output), schema=crowd_output_summary_schema(side.object_type),
                                preserve_index=False)


def raw_median_block(frame: pd.DataFrame, side: OutputSide) -> pd.DataFrame:
    """The evaluation's raw medians: per sampled object, the median of its (clipped, deduplicated)
    claims."""
    medians = frame.groupby("object_id", sort=True)["value"].median()
    chosen = sampled(medians.index.to_numpy(), side.sample_fraction, side.sample_key)
    return pd.DataFrame({"object_id": medians.index.to_numpy()[chosen], "value": medians.to_numpy(np.float64)[chosen]})
