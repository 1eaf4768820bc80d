"""Worker side of the tabular input (issue 15): each input fragment read, checked, encoded and
staged where the engine runs its tasks; only a fragment's summary leaves the task.

:func:`read_record_fragment` is the ``map_fragments`` function. For one fragment (a file, or one
data file of an Iceberg scan; ``pipelines/platform/sources.py``) it

* reads the records as ``TableReading`` reads a file (``sources.read_text_fragment``: a CSV as
  text, with or without a header row, spaces after separators dropped, ``recode``, the null
  spellings), with the platform's ``ROW_ID``; a hive partition column the schema does not name is
  left out;
* encodes them over the schema's public domains, flagging every bad value by attribute and problem
  (``transforms.tabular.encoding.flag_records``: missing, not in the domain's kind — an unknown
  category or text in a numeric column — or outside the bounds);
* stages the codes of a fragment without a bad value (``a0``, ``a1``, ... int32 and ``ROW_ID``:
  the record's identity, from which the driver's split and the synthesis take its position);
* fingerprints its file (``sources.fragment_fingerprint``, keyed by a key derived from the lake's
  fingerprint key) and sketches its canonical records (``platform/row_prints.py``: the keyed
  hashes of the schema's attributes as read, ordered by name).

It returns rows of ``schemas.tabular.tables.tabular_input_summary_schema``: metrics (:data:`METRIC`:
rows read, values clipped per attribute), problems (:data:`PROBLEM`: ``code`` =
``attribute position * 4 + problem``, the count and the first row's ``ROW_ID``) and the fragment's
row count with its fingerprint (:data:`FRAGMENT`). Never a value.

The evaluation's bounded sample (:func:`sample_rows`) reads a fragment again and keeps the records
at the sampled positions, typed as the evaluation's classifiers take them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.engines import storage
from pipelines.engines.storage import Where
from pipelines.platform.errors import InputError
from pipelines.platform.fragment_tasks import NumberedFile, code_counts, located_problems
from pipelines.platform.input import NO_HEADER_HINT, header_names
from pipelines.platform.row_prints import RowPrinting
from pipelines.platform.sources import (
    ROW_ID,
    Fragment,
    TextReading,
    fragment_fingerprint,
    read_text_fragment,
    row_positions,
)
from schemas.tabular.schema import TabularSchema
from schemas.tabular.tables import staged_codes_schema, tabular_input_summary_schema
from transforms.tabular.encoding import ColumnMismatch, flag_records

METRIC, PROBLEM, FRAGMENT, ROW_SKETCH = 1, 2, 3, 4
"""What a summary row is (its ``entry``)."""
ROWS = 0
CLIPPED = 1 << 32
"""Metric codes: rows read; ``CLIPPED + position``: values of that attribute clipped to its bounds."""
PROBLEMS_PER_ATTRIBUTE = 4


def problem_code(position: int, problem: int) -> int:
    return position * PROBLEMS_PER_ATTRIBUTE + problem


@dataclass(frozen=True)
class RecordReading:
    """The side value of :func:`read_record_fragment`: the schema, how the records are read, the
    folder that receives each fragment's codes, and the key of the files' fingerprints."""

    schema: TabularSchema
    text: TextReading
    codes_folder: Where
    fingerprint_key: bytes | None = None
    """32 bytes: key material, kept out of pickled side values by the engines."""
    row_printing: RowPrinting | None = None
    """How each fragment sketches its canonical records (the schema's attributes, by name;
    ``platform/row_prints.py``; the lake's row key, key material); ``None``: no sketch."""


def codes_file(folder: Where, ordinal: int) -> Where:
    return folder / f"fragment-{ordinal:07d}.parquet"


def _records(fragment: Fragment, schema: TabularSchema, text: TextReading) -> tuple[pd.DataFrame, np.ndarray]:
    """The fragment's records (its partition columns the schema does not name left out, and the
    columns an Iceberg row filter selects by: public ones, ``pipelines/platform/selection.py``)."""
    frame, row_ids = read_text_fragment(fragment, text)
    names = set(schema.names)
    extra = [column for column in fragment.partition_values if column not in names]
    if fragment.iceberg is not None and fragment.iceberg.row_filter is not None:
        from pipelines.platform.selection import row_filter_columns

        extra += [column for column in row_filter_columns(fragment.iceberg.row_filter)
                  if column not in names and column in frame.columns and column not in extra]
    if extra:
        frame = frame.drop(columns=extra)
    if fragment.format == "csv" and text.header and header_names(frame.columns, schema.names) is None:
        raise InputError(fragment.name, f"{NO_HEADER_HINT}; set input.header: false for a file without one")
    return frame, row_ids


def read_record_fragment(fragment: Fragment, side: RecordReading) -> pa.Table:
    """One fragment's summary (module docstring)."""
    schema = side.schema
    frame, row_ids = _records(fragment, schema, side.text)
    rows: list[dict[str, Any]] = [{"entry": METRIC, "code": ROWS, "count": len(row_ids)}]
    if side.row_printing is not None and len(row_ids):
        sketch = side.row_printing.sketch([frame[name] for name in sorted(schema.names) if name in frame.columns],
                                          fragment.size)
        rows.append({"entry": ROW_SKETCH, "code": fragment.ordinal, "count": sketch.rows,
                     "fingerprint": sketch.to_text()})
    if len(row_ids):
        try:
            flagged = flag_records(frame, schema)
        except ColumnMismatch as error:
            raise InputError(fragment.name, str(error)) from None
        del frame
        for (position, problem), _, row_id, count in located_problems(flagged.problems, row_ids):
            rows.append({"entry": PROBLEM, "code": problem_code(position, problem), ROW_ID: row_id, "count": count})
        for position, attribute in enumerate(schema.attributes):
            if attribute.name in flagged.clipped:
                rows.append({"entry": METRIC, "code": CLIPPED + position, "count": flagged.clipped[attribute.name]})
        if not flagged.problems:
            codes = flagged.codes
            table = pa.table([*(pa.array(codes[:, index]) for index in range(codes.shape[1])), pa.array(row_ids)],
                             schema=staged_codes_schema(codes.shape[1]))
            storage.write_table(table, codes_file(side.codes_folder, fragment.ordinal), row_group_size=1 << 18)
    rows.append({"entry": FRAGMENT, "code": fragment.ordinal, "count": len(row_ids),
                 "fingerprint": fragment_fingerprint(fragment, side.fingerprint_key)})
    return pa.Table.from_pylist(rows, schema=tabular_input_summary_schema())


# ---- driver-side helpers over the summaries (batch functions, shipped like the blocks) ----------

def metric_entries(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
    return code_counts(frame, (METRIC, PROBLEM))


def problem_entries(frame: pd.DataFrame, side: int) -> pd.DataFrame:
    """The problem rows of code ``side`` (to find its first row by ``first_row``)."""
    chosen = frame[(frame["entry"] == PROBLEM) & (frame["code"] == side)]
    return pd.DataFrame({ROW_ID: chosen[ROW_ID].to_numpy(np.int64), "code": chosen["code"].to_numpy(np.int64)})


def fragment_entries(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
    chosen = frame[frame["entry"] == FRAGMENT]
    return pd.DataFrame({"code": chosen["code"].to_numpy(np.int64), "count": chosen["count"].to_numpy(np.int64),
                         "fingerprint": chosen["fingerprint"].to_numpy()})


# ---- the split's parts, joined to the staged codes on the engine --------------------------------

@dataclass(frozen=True)
class PartLookup:
    """Where the part of every record position is (one byte per position, ``parts_file``) and the
    first position of each fragment (``offsets[ordinal]``): a record's position is its fragment's
    offset plus its row index within the fragment, i.e. its place in ``ROW_ID`` order."""

    parts_file: Where
    offsets: tuple[int, ...]


@functools.lru_cache(maxsize=4)
def _parts(parts_file: Where) -> np.ndarray:
    if isinstance(parts_file, Path):
        return np.memmap(parts_file, dtype=np.int8, mode="r")
    return np.frombuffer(storage.read_bytes(parts_file), dtype=np.int8)


def with_parts(frame: pd.DataFrame, side: PartLookup) -> pd.DataFrame:
    """The staged codes with each record's ``part`` of the split."""
    positions = row_positions(frame[ROW_ID].to_numpy(np.int64), side.offsets)
    result = frame.drop(columns=[ROW_ID])
    result["part"] = np.asarray(_parts(side.parts_file)[positions], dtype=np.int8)
    result[ROW_ID] = frame[ROW_ID].to_numpy(np.int64)
    return result


@dataclass(frozen=True)
class SplitJob:
    """The split of the record positions (``transforms.tabular.data_split.split_parts``), computed
    in one task and written as one byte per position."""

    record_count: int
    fractions: tuple[float, float, float]
    secret: bytes
    release_id: str
    parts_file: Where


def write_split(frame: pd.DataFrame, side: SplitJob) -> pd.DataFrame:
    from transforms.core.keyed_randomness import keyed_generator
    from transforms.tabular.data_split import split_parts
    from transforms.tabular.release import PURPOSE_SPLIT

    parts = split_parts(side.record_count, *side.fractions,
                        keyed_generator(side.secret, side.release_id, PURPOSE_SPLIT, 0))
    counts = np.bincount(parts, minlength=4).astype(np.int64)
    if isinstance(side.parts_file, Path):
        side.parts_file.parent.mkdir(parents=True, exist_ok=True)
        parts.tofile(side.parts_file)
    else:
        storage.write_bytes(side.parts_file, parts.tobytes())
    return pd.DataFrame({"part": np.arange(4, dtype=np.int64), "records": counts})


StagedFragment = NumberedFile
"""One fragment's staged codes (``codes_file``) and its ordinal."""


@dataclass(frozen=True)
class StagedPass:
    """A batch function ``fn(frame, side)`` run over every staged fragment's records, each with its
    ``part`` (:func:`with_parts`): one pass of the release over its records, reading each staged
    file where the engine runs its tasks (nothing is held between passes)."""

    fn: Any
    side: Any
    lookup: PartLookup


def staged_rows(fragment: StagedFragment, side: StagedPass) -> pd.DataFrame:
    frame = storage.parquet_file(fragment.where).read().to_pandas()
    return side.fn(with_parts(frame, side.lookup), side.side)


def part_rows(frame: pd.DataFrame, side: int) -> pd.DataFrame:
    """The records of part ``side`` (codes and ``ROW_ID``)."""
    return frame.loc[frame["part"].to_numpy() == side].drop(columns=["part"])


# ---- the evaluation's bounded sample ------------------------------------------------------------

@dataclass(frozen=True)
class SampleReading:
    """Read the records at ``positions`` (sorted, at most the configured cap) again, typed."""

    schema: TabularSchema
    text: TextReading
    offsets: tuple[int, ...]
    positions: np.ndarray
    parts: PartLookup


def sample_rows(fragment: Fragment, side: SampleReading) -> pd.DataFrame:
    from pipelines.tabular.input import typed_frame

    start = side.offsets[fragment.ordinal]
    end = side.offsets[fragment.ordinal + 1] if fragment.ordinal + 1 < len(side.offsets) else None
    chosen = side.positions[(side.positions >= start) & ((side.positions < end) if end is not None else True)]
    frame, row_ids = _records(fragment, side.schema, side.text)
    index = chosen - start
    frame = frame.iloc[index].reset_index(drop=True)
    flagged = flag_records(frame, side.schema)
    typed = typed_frame(frame, side.schema)
    for position in range(flagged.codes.shape[1]):
        typed[f"a{position}"] = flagged.codes[:, position]
    typed["part"] = np.asarray(_parts(side.parts.parts_file)[chosen], dtype=np.int8)
    typed[ROW_ID] = row_ids[index]
    return typed


# ---- the released records, checked where they were written --------------------------------------

RELEASED_METRIC, RELEASED_CELL = 1, 2
RELEASED_SUMMARY_SCHEMA = pa.schema([pa.field("entry", pa.int32(), nullable=False),
                                     pa.field("key", pa.int64(), nullable=False),
                                     pa.field("count", pa.int64(), nullable=False)])
NULLS, OUTSIDE, NOT_INTEGERS = 1, 2, 3
"""Released metric codes: ``0`` rows; ``1 + 3 * position + kind - 1`` per attribute and kind."""


ReleasedFile = NumberedFile
"""One file of released records (the engine's ``write_parquet`` output) and its number."""


@dataclass(frozen=True)
class OutputCheck:
    """The side value of :func:`released_summary`: the schema and the tables to count over the
    released records' codes (their one-way and pairwise marginals, for the report)."""

    schema: TabularSchema
    tables: Any


def released_metric(position: int, kind: int) -> int:
    return 1 + 3 * position + kind - 1


def released_summary(fragment: ReleasedFile, side: OutputCheck) -> pd.DataFrame:
    """One released file's metrics (rows; per attribute its nulls, values outside its public domain
    and, for an integer attribute, non-integers) and, when it has no bad value, the partial counts
    of the report's tables over its records' codes."""
    from pipelines.tabular.blocks import code_columns, table_count_rows
    from schemas.tabular.schema import CategoricalAttribute
    from transforms.tabular.encoding import encode_records

    frame = storage.parquet_file(fragment.where).read().to_pandas()
    keys, counts = [0], [len(frame)]
    bad = 0
    for position, attribute in enumerate(side.schema.attributes):
        column = frame[attribute.name]
        nulls = column.isna().to_numpy()
        if isinstance(attribute, CategoricalAttribute):
            outside = ~column.isin(list(attribute.categories)).to_numpy() & ~nulls
            not_integers = np.zeros(len(frame), dtype=bool)
        else:
            values = column.to_numpy(dtype=np.float64, na_value=np.nan)
            low, high = attribute.bounds
            with np.errstate(invalid="ignore"):
                outside = ~((values >= low) & (values <= high)) & ~nulls
                not_integers = (values != np.floor(values)) & ~nulls if attribute.integer else np.zeros(len(frame), bool)
        for kind, mask in ((NULLS, nulls), (OUTSIDE, outside), (NOT_INTEGERS, not_integers)):
            keys.append(released_metric(position, kind))
            counts.append(int(mask.sum()))
            bad += int(mask.sum())
    rows = pd.DataFrame({"entry": np.full(len(keys), RELEASED_METRIC, dtype=np.int32),
                         "key": np.asarray(keys, dtype=np.int64), "count": np.asarray(counts, dtype=np.int64)})
    if bad or not len(frame) or side.tables is None:
        return rows
    codes = encode_records(frame[list(side.schema.names)], side.schema).codes
    coded = pd.DataFrame({name: codes[:, index] for index, name in enumerate(code_columns(codes.shape[1]))})
    cells = table_count_rows(coded, side.tables)
    return pd.concat([rows, pd.DataFrame({"entry": np.full(len(cells), RELEASED_CELL, dtype=np.int32),
                                          "key": cells["cell"].to_numpy(np.int64),
                                          "count": cells["records"].to_numpy(np.int64)})], ignore_index=True)


def released_entries(frame: pd.DataFrame, side: int) -> pd.DataFrame:
    chosen = frame[frame["entry"] == side]
    return pd.DataFrame({"key": chosen["key"].to_numpy(np.int64), "count": chosen["count"].to_numpy(np.int64)})
