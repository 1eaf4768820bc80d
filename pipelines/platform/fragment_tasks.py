"""What the kinds' fragment tasks share (issue 15): the worker side of an input read on the engine
(``pipelines/<kind>/engine_input.py``) and the driver's batch functions over the summaries those
tasks return.

* :func:`read_mapped_columns`: a fragment's mapped columns with the platform's ``ROW_ID``
  (``sources.read_fragment``); a missing one is one line naming the file, the column and what it
  was mapped for (:func:`mapped_column_missing`).
* :func:`decoded`: a column as one array, dictionary-decoded.
* Problems are boolean masks over a fragment's rows, keyed by a problem code:
  :func:`any_problem` is their union, :func:`located_problems` each problem that occurs with its
  first row (its index and ``ROW_ID``) and its count, in code order — the summary's metric rows,
  from which the driver finds the input's first bad row with ``first_row``.
* A summary is a table whose ``entry`` column says what a row is: :func:`entry_rows` builds many
  rows of one entry (the other columns null), :func:`code_counts`, :func:`fingerprints` and
  :func:`row_sketch_entries` select the metric, fingerprint and row-sketch rows for the driver's
  reductions.
* :class:`NumberedFile`: a task over one numbered file (a staged or released file).

It imports no engine and no kind.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.engines.storage import Where
from pipelines.platform.errors import InputError
from pipelines.platform.sources import ROW_ID, Fragment, read_fragment


def mapped_column_missing(error: InputError, roles: Mapping[str, str]) -> InputError:
    """The platform reader's "no such column" in the words of a mapped input (``roles``: file
    column → what it is read as)."""
    if error.column in roles and error.message.startswith("the file has no such column"):
        found = error.message.removeprefix("the file has no such column").strip().strip("()")
        found = found.replace("it has:", "the file has:", 1)
        return InputError(error.file, f"mapped column '{error.column}' (for {roles[error.column]}) is missing; "
                                      f"{found}", column=error.column)
    return error


def read_mapped_columns(fragment: Fragment, roles: Mapping[str, str]) -> tuple[pa.Table, np.ndarray]:
    """The fragment's columns ``roles`` names (file column → what it is read as, in reading order)
    with ``ROW_ID``, and the row ids."""
    try:
        table = read_fragment(fragment, list(roles))
    except InputError as error:
        raise mapped_column_missing(error, roles) from None
    return table, table.column(ROW_ID).to_numpy()


def decoded(column: pa.ChunkedArray) -> pa.Array:
    """The column's chunks as one array, a dictionary column decoded to its values."""
    combined = column.combine_chunks()
    if pa.types.is_dictionary(combined.type):
        combined = combined.dictionary_decode()
    return combined


def any_problem(problems: Mapping[Any, np.ndarray], rows: int) -> np.ndarray:
    """The rows with at least one of the ``problems`` (masks over ``rows`` rows)."""
    bad = np.zeros(rows, dtype=bool)
    for mask in problems.values():
        bad |= mask
    return bad


def located_problems(problems: Mapping[Any, np.ndarray], row_ids: np.ndarray) -> Iterator[tuple[Any, int, int, int]]:
    """``(code, first index, its ROW_ID, count)`` for each problem that occurs, in code order."""
    for code, mask in sorted(problems.items()):
        if mask.any():
            first = int(np.flatnonzero(mask)[0])
            yield code, first, int(row_ids[first]), int(mask.sum())


def entry_rows(schema: pa.Schema, entry: int, length: int, **columns: Any) -> pa.Table:
    """``length`` summary rows of ``entry`` (``schema``'s ``entry`` column): the ``columns`` given
    (values or arrays; ``None`` is null), ``code`` 0 unless given, every other column null."""
    arrays = []
    for field in schema:
        value = columns.get(field.name)
        if field.name == "entry":
            arrays.append(pa.array(np.full(length, entry, dtype=np.int32), field.type))
        elif isinstance(value, pa.Array):
            arrays.append(value if value.type == field.type else value.cast(field.type))
        elif value is not None:
            arrays.append(pa.array(value, field.type))
        elif field.name == "code":
            arrays.append(pa.array(np.zeros(length, dtype=np.int32), field.type))
        else:
            arrays.append(pa.nulls(length, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def code_counts(frame: pd.DataFrame, entries: int | Collection[int], count: str = "count") -> pd.DataFrame:
    """The summary rows of ``entries`` as ``code`` and ``count`` (int64: to sum by code)."""
    chosen = frame[frame["entry"].isin(entries if isinstance(entries, Collection) else (entries,))]
    return pd.DataFrame({"code": chosen["code"].to_numpy(np.int64), count: chosen[count].to_numpy(np.int64)})


ROW_SKETCHES_SCHEMA = pa.schema([pa.field("code", pa.int64(), nullable=False), pa.field("sketch", pa.string())])
"""The fragments' row sketches (``row_prints.RowSketch.to_text``) picked out of a summary."""


def row_sketch_entries(frame: pd.DataFrame, side: tuple[int, str]) -> pd.DataFrame:
    """The summary rows of entry ``side[0]`` (the fragments' row sketches) as ``code`` and
    ``sketch`` (the text in column ``side[1]``): a batch function, for a summary kept on the engine."""
    entry, column = side
    chosen = frame[frame["entry"] == entry]
    return pd.DataFrame({"code": chosen["code"].to_numpy(np.int64), "sketch": chosen[column].to_numpy()})


def fingerprints(frame: pd.DataFrame, entry: int) -> pd.DataFrame:
    """The summary rows of ``entry`` (the fragments' fingerprints) as ``code`` and ``fingerprint``."""
    chosen = frame[frame["entry"] == entry]
    return pd.DataFrame({"code": chosen["code"].to_numpy(np.int64), "fingerprint": chosen["fingerprint"].to_numpy()})


@dataclass(frozen=True)
class NumberedFile:
    """A task over one file (a staged file, a file of released records) and its number."""

    where: Where
    ordinal: int
