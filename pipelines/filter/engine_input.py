"""Worker side of the filter input (issue 15): each fragment of the records to privatize read,
checked, encoded and staged where the engine runs its tasks; only a fragment's summary leaves the
task.

:func:`read_filter_fragment` is the ``map_fragments`` function. For one fragment (a file, or one
data file of an Iceberg scan; ``pipelines/platform/sources.py``) it reads the records as a file is
read (``sources.read_text_fragment``: CSV text, header or ``input.columns``, spaces after separators
dropped, ``recode``, the null spellings) with the platform's ``ROW_ID``; checks the columns; encodes
the features over the spec (``transforms.filter.features``), the labels the choices use and each
record's choice, stopping at the fragment's first bad value as a read of that file would
(features, then labels, then choices); stages the compact records (``pipelines/filter/blocks.py``'s
staged schema, ``record`` holding the ``ROW_ID`` until the privatization turns it into the
record's position); and fingerprints its file (keyed).

It returns rows of :data:`SUMMARY_SCHEMA`: the fragment's row count, records per choice and values
clipped per feature (``entry`` :data:`COUNTS`, the figures as JSON), its first bad value
(:data:`PROBLEM`: ``ROW_ID``, column and the reason — never the value), its fingerprint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.engines import storage
from pipelines.engines.storage import Where
from pipelines.filter.blocks import compact_features, feature_columns, privatized_rows, staged_schema
from pipelines.filter.input import label_codes
from pipelines.platform.errors import InputError
from pipelines.platform.fragment_tasks import NumberedFile
from pipelines.platform.input import NO_HEADER_HINT, domain_reason, header_names
from pipelines.platform.row_prints import RowPrinting
from pipelines.platform.sources import (
    ROW_ID,
    Fragment,
    TextReading,
    fragment_fingerprint,
    read_text_fragment,
    row_positions,
)
from schemas.filter.config import LabelDefinition
from schemas.filter.expectations import FILTER_RECORD_COLUMN
from schemas.filter.features import FeatureSpec
from transforms.core.domain_violation import DomainViolation
from transforms.filter.features import encode_features

COUNTS, PROBLEM, FINGERPRINT, ROW_SKETCH = 1, 2, 3, 4
SUMMARY_SCHEMA = pa.schema([
    pa.field("entry", pa.int32(), nullable=False),
    pa.field("ordinal", pa.int64(), nullable=False),
    pa.field(ROW_ID, pa.int64()),
    pa.field("rows", pa.int64(), nullable=False),
    pa.field("column", pa.string()),
    pa.field("text", pa.string()),
])
"""A fragment's summary rows; ``text`` holds the counts' JSON, a problem's reason or the fingerprint."""
STAGED_ROWS_PER_FILE = 262_144


@dataclass(frozen=True)
class FilterReading:
    """The side value of :func:`read_filter_fragment`."""

    spec: FeatureSpec
    text: TextReading
    labels: tuple[tuple[str, LabelDefinition], ...]
    choice_column: str | None
    choice_names: tuple[str, ...]
    default_choice: str | None
    fallback_choice: str | None
    choice_labels: tuple[tuple[str, str], ...]
    """Each choice's (private, utility) label names, in the config's order."""
    staging: Where
    files_per_fragment: int
    fingerprint_key: bytes | None = None
    row_printing: RowPrinting | None = None
    """How each fragment sketches its canonical records (the features, the labels' columns and the
    choice column as read, by name; ``platform/row_prints.py``; the lake's row key, key material);
    ``None``: no sketch."""


def staged_files(folder: Where, ordinal: int, count: int) -> list[Where]:
    return [folder / f"records-{ordinal:07d}-{number:05d}.parquet" for number in range(count)]


def _choices(frame: pd.DataFrame, side: FilterReading, name: str) -> np.ndarray:
    """``pipelines.filter.input.choice_codes`` for a fragment (the same words)."""
    names = list(side.choice_names)
    if side.choice_column is None:
        return np.full(len(frame), names.index(side.fallback_choice or names[0]), dtype=np.int64)
    column = frame[side.choice_column].reset_index(drop=True)
    if side.default_choice is not None:
        column = column.where(column.notna(), side.default_choice)
    missing = column.isna().to_numpy()
    if missing.any():
        raise DomainViolation(int(np.flatnonzero(missing)[0]), side.choice_column,
                              "no choice (and no default_choice in the config)")
    codes = np.asarray(pd.Categorical(column.astype(str), categories=names).codes, dtype=np.int64)
    unknown = codes < 0
    if unknown.any():
        raise DomainViolation(int(np.flatnonzero(unknown)[0]), side.choice_column,
                              f"unknown choice (choices: {', '.join(names)})")
    return codes


def read_filter_fragment(fragment: Fragment, side: FilterReading) -> pa.Table:
    """One fragment's summary (module docstring)."""
    frame, row_ids = read_text_fragment(fragment, side.text)
    rows: list[dict[str, Any]] = []
    if len(row_ids):
        needed = [*side.spec.names, *(definition.column for _, definition in side.labels)]
        if side.choice_column:
            needed.append(side.choice_column)
        for column in needed:
            if column not in frame.columns:
                csv_header = fragment.format == "csv" and side.text.header
                shown = header_names(frame.columns, needed if csv_header else list(frame.columns))
                raise InputError(fragment.name, f"no column {column!r} "
                                 f"({'columns: ' + shown if shown is not None else NO_HEADER_HINT})")
        if side.row_printing is not None:
            sketch = side.row_printing.sketch([frame[column] for column in sorted(set(needed))], fragment.size)
            rows.append({"entry": ROW_SKETCH, "ordinal": fragment.ordinal, "rows": sketch.rows,
                         "text": sketch.to_text()})
        try:
            encoded = encode_features(frame, side.spec)
            codes = {label: label_codes(frame[definition.column], definition, definition.column)
                     for label, definition in side.labels}
            choices = _choices(frame, side, fragment.name)
        except DomainViolation as error:
            reason = error.message if error.column == side.choice_column and error.message.startswith(
                ("no choice", "unknown choice")) else domain_reason(error.message)
            rows.append({"entry": PROBLEM, "ordinal": fragment.ordinal, ROW_ID: int(row_ids[error.row]), "rows": 1,
                         "column": error.column, "text": reason})
        else:
            private = np.empty(len(row_ids), dtype=np.int32)
            utility = np.empty(len(row_ids), dtype=np.int32)
            for code, (private_label, utility_label) in enumerate(side.choice_labels):
                members = choices == code
                private[members] = codes[private_label][members]
                utility[members] = codes[utility_label][members]
            columns: dict[str, Any] = {FILTER_RECORD_COLUMN: row_ids, "choice": choices.astype(np.int32),
                                       "private": private, "utility": utility}
            columns.update(zip(feature_columns(side.spec), compact_features(encoded.matrix, side.spec), strict=True))
            table = pa.table(columns, schema=staged_schema(side.spec))
            bounds = np.linspace(0, len(row_ids), side.files_per_fragment + 1).astype(np.int64)
            for where, start, stop in zip(staged_files(side.staging, fragment.ordinal, side.files_per_fragment),
                                          bounds[:-1], bounds[1:], strict=True):
                storage.write_table(table.slice(int(start), int(stop - start)), where, row_group_size=1 << 16)
            counts = np.bincount(choices, minlength=len(side.choice_names)).tolist()
            rows.append({"entry": COUNTS, "ordinal": fragment.ordinal, "rows": len(row_ids),
                         "text": json.dumps({"choices": counts, "clipped": encoded.clipped})})
    if not rows:
        rows.append({"entry": COUNTS, "ordinal": fragment.ordinal, "rows": 0, "text": json.dumps({})})
    rows.append({"entry": FINGERPRINT, "ordinal": fragment.ordinal, "rows": len(row_ids),
                 "text": fragment_fingerprint(fragment, side.fingerprint_key)})
    return pa.Table.from_pylist(rows, schema=SUMMARY_SCHEMA)


def problem_rows(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
    chosen = frame[frame["entry"] == PROBLEM]
    return chosen[[ROW_ID, "column", "text"]].reset_index(drop=True)


def count_rows(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
    chosen = frame[frame["entry"].isin((COUNTS, FINGERPRINT, PROBLEM, ROW_SKETCH))]
    return chosen[["entry", "ordinal", "rows", "text"]].reset_index(drop=True)


@dataclass(frozen=True)
class PositionedPrivatization:
    """The privatization's side with each fragment's first position (``offsets[ordinal]``)."""

    side: Any
    offsets: tuple[int, ...]


def privatized_at_positions(frame: pd.DataFrame, side: PositionedPrivatization) -> pd.DataFrame:
    """``blocks.privatized_rows`` with ``record`` turned from the ``ROW_ID`` staged into the record's
    position (its place in ``ROW_ID`` order: for one file, its row), which keys its randomness."""
    return privatized_rows(positioned_records(frame, side.offsets), side.side)


def positioned_records(frame: pd.DataFrame, side: tuple[int, ...]) -> pd.DataFrame:
    """The staged records with ``record`` as the position (for the evaluation, on the driver)."""
    positions = row_positions(frame[FILTER_RECORD_COLUMN].to_numpy(np.int64), side)
    frame = frame.copy()
    frame[FILTER_RECORD_COLUMN] = positions
    return frame


# ---- the privatized records, checked where they were written ------------------------------------

OUTPUT_METRICS_SCHEMA = pa.schema([pa.field("metric", pa.string(), nullable=False),
                                   pa.field("count", pa.int64(), nullable=False)])


ReleasedFile = NumberedFile
"""One file of privatized records (the engine's ``write_parquet`` output) and its number."""


@dataclass(frozen=True)
class FilterOutputCheck:
    """The side value of :func:`released_filter_summary`: what the output gate checks (as
    ``schemas.filter.expectations.filter_output_suites`` does on the rows) and where the records'
    numbers go for the duplicate check (``pipelines/platform/repeated_keys.py``)."""

    features: tuple[str, ...]
    categories: tuple[tuple[str, tuple[str, ...]], ...]
    bounds: tuple[tuple[str, tuple[float, float] | None], ...]
    integer_columns: tuple[str, ...]
    utility_classes: tuple[tuple[str, tuple[str, ...]], ...]
    kept: tuple[tuple[str, str], ...]
    withheld: tuple[tuple[str, tuple[str, ...]], ...]
    keys: Any


def output_metric_names(side: FilterOutputCheck) -> list[str]:
    names = ["rows", "record: nulls", "record: repeats", "choice: unknown"]
    categories, bounds = dict(side.categories), dict(side.bounds)
    for column in side.features:
        names += [f"{column}: nulls", f"{column}: outside"]
        if column not in categories and bounds.get(column) is None:
            names.append(f"{column}: infinite")
        if column in side.integer_columns:
            names.append(f"{column}: non-integers")
    names += [f"{column}: outside classes" for column, _ in side.utility_classes]
    names += [f"choice {choice!r}: {column} missing" for choice, column in side.kept]
    names += [f"choice {choice!r}: {column} released" for choice, hidden in side.withheld for column in hidden]
    return names


def released_filter_summary(fragment: ReleasedFile, side: FilterOutputCheck) -> pd.DataFrame:
    """One privatized file's metrics (:func:`output_metric_names`); its record numbers bucketed for
    the duplicate check."""
    from pipelines.platform.repeated_keys import write_key_buckets

    frame = storage.parquet_file(fragment.where).read().to_pandas()
    found: dict[str, int] = {"rows": len(frame)}
    records = frame[FILTER_RECORD_COLUMN]
    present = records.notna().to_numpy()
    found["record: nulls"] = int((~present).sum())
    numbers = records[present].to_numpy(np.int64)
    write_key_buckets(pa.array(numbers, pa.int64()), numbers, side.keys, fragment.ordinal)
    choices = frame["choice"]
    names = [choice for choice, _ in side.kept]
    found["choice: unknown"] = int((~choices.isin(names)).sum())
    categories, bounds = dict(side.categories), dict(side.bounds)
    for column in side.features:
        values = frame[column]
        nulls = values.isna().to_numpy()
        found[f"{column}: nulls"] = int(nulls.sum())
        if column in categories:
            found[f"{column}: outside"] = int((~values.isin(list(categories[column])) & ~values.isna()).sum())
            continue
        numbers = values.to_numpy(dtype=np.float64, na_value=np.nan)
        limits = bounds.get(column)
        with np.errstate(invalid="ignore"):
            if limits is not None:
                found[f"{column}: outside"] = int((~((numbers >= limits[0]) & (numbers <= limits[1])) & ~nulls).sum())
            else:
                found[f"{column}: outside"] = 0
                found[f"{column}: infinite"] = int((np.isinf(numbers)).sum())
            if column in side.integer_columns:
                found[f"{column}: non-integers"] = int(((numbers != np.floor(numbers)) & ~nulls).sum())
    for column, classes in side.utility_classes:
        labels = frame[column]
        found[f"{column}: outside classes"] = int((~labels.isin(list(classes)) & labels.notna()).sum())
    for choice, column in side.kept:
        found[f"choice {choice!r}: {column} missing"] = int((frame[column].isna() & (choices == choice)).sum())
    for choice, hidden in side.withheld:
        for column in hidden:
            found[f"choice {choice!r}: {column} released"] = int((frame[column].notna() & (choices == choice)).sum())
    return pd.DataFrame({"metric": list(found), "count": np.asarray(list(found.values()), dtype=np.int64)})


# ---- privatization, one task per staged file ----------------------------------------------------

PRIVATIZED_FILES_SCHEMA = pa.schema([pa.field("ordinal", pa.int64(), nullable=False),
                                     pa.field("rows", pa.int64(), nullable=False)])


@dataclass(frozen=True)
class PrivatizeFile:
    """One staged file to privatize and the file its privatized records go to."""

    staged: Where
    output: Where
    ordinal: int


@dataclass(frozen=True)
class PrivatizeFiles:
    """The side value of :func:`privatize_file`: the privatization and the release's schema."""

    privatization: PositionedPrivatization
    schema: pa.Schema


def privatize_file(task: PrivatizeFile, side: PrivatizeFiles) -> pd.DataFrame:
    """Read one staged file, privatize its records (:func:`privatized_at_positions`: the VAE runs on
    fixed-size blocks and every record's noise is keyed by its position, so a file gives the rows
    any batching gives) and write them as one file of the release: the task holds one staged file,
    on every engine (the local engine's tasks run in the driver process)."""
    from pipelines.engines.arrow import frame_to_table

    frame = storage.parquet_file(task.staged).read().to_pandas()
    table = frame_to_table(privatized_at_positions(frame, side.privatization), side.schema)
    storage.write_table(table, task.output)
    return pd.DataFrame({"ordinal": [task.ordinal], "rows": [table.num_rows]})


@dataclass(frozen=True)
class PrivatizeRange:
    """One file of the release: a range of positions (``blocks.release_file_pieces``) taken from
    the staged files that hold it — (staged file, its row count, first row, stop row) each — and
    the file its privatized records go to."""

    pieces: tuple[tuple[Where, int, int, int], ...]
    output: Where
    ordinal: int


def staged_slice(where: Where, rows: int, first: int, stop: int) -> pa.Table:
    """Rows ``[first, stop)`` of a staged file, reading only the row groups that hold them."""
    opened = storage.parquet_file(where)
    if opened.metadata.num_rows != rows:
        raise RuntimeError(f"{where}: a staged file holds {opened.metadata.num_rows} records, {rows} expected")
    groups, chosen, start = [], [], 0
    for group in range(opened.metadata.num_row_groups):
        size = opened.metadata.row_group(group).num_rows
        if start < stop and start + size > first:
            chosen.append(group)
            groups.append(start)
        start += size
    if not chosen:
        return opened.schema_arrow.empty_table()
    table = opened.read_row_groups(chosen)
    return table.slice(first - groups[0], stop - first)


def privatize_range(task: PrivatizeRange, side: PrivatizeFiles) -> pd.DataFrame:
    """:func:`privatize_file` for a release file cut by record ranges: its pieces read (only the
    row groups holding them), privatized (each record's noise keyed by its position, so any cut
    gives the same rows) and written as one file of the release."""
    from pipelines.engines.arrow import frame_to_table

    tables = [staged_slice(where, rows, first, stop) for where, rows, first, stop in task.pieces]
    frame = pa.concat_tables(tables).to_pandas()
    table = frame_to_table(privatized_at_positions(frame, side.privatization), side.schema)
    storage.write_table(table, task.output)
    return pd.DataFrame({"ordinal": [task.ordinal], "rows": [table.num_rows]})


# ---- the evaluation's bounded sample ------------------------------------------------------------

@dataclass(frozen=True)
class SampleTask:
    """One fragment's staged files (in order), its first position, and per choice how many of the
    choice's records come before it (their ranks start there)."""

    files: tuple[Where, ...]
    start: int
    choice_offsets: tuple[int, ...]


def sampled_staged(task: SampleTask, side: tuple[np.ndarray, ...]) -> pd.DataFrame:
    """The staged records of the fragment whose rank within their choice is in ``side[choice]``
    (sorted ranks), with ``record`` as their position."""
    frame = pd.concat([storage.parquet_file(where).read().to_pandas() for where in task.files], ignore_index=True)
    choices = frame["choice"].to_numpy(np.int64)
    keep = np.zeros(len(frame), dtype=bool)
    for code, ranks in enumerate(side):
        members = np.flatnonzero(choices == code)
        local = task.choice_offsets[code] + np.arange(members.size, dtype=np.int64)
        keep[members[np.isin(local, ranks, assume_unique=True)]] = True
    chosen = frame.loc[keep].copy()
    chosen[FILTER_RECORD_COLUMN] = task.start + np.flatnonzero(keep).astype(np.int64)
    return chosen.reset_index(drop=True)


def sampled_released(task: ReleasedFile, side: np.ndarray) -> pd.DataFrame:
    """The privatized records of one release file at the positions ``side`` (sorted)."""
    frame = storage.parquet_file(task.where).read().to_pandas()
    return frame.loc[np.isin(frame[FILTER_RECORD_COLUMN].to_numpy(np.int64), side)].reset_index(drop=True)
