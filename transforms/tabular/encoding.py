"""Encoding records into codes over the schema's public domains, and decoding synthetic codes back.

Issue 3, steps 1–2. Each attribute becomes one integer column of an ``(n, m)`` code matrix in the
schema's attribute order: a category's code is its position in the schema's list; a numeric
value's code is its bin, bins being ``[e_i, e_{i+1})`` with the last one closed at ``high``
(equal-width edges are ``numpy.linspace(low, high, bins + 1)``). Everything is decided by the
schema, so the code of a record never depends on the other records.

Validation (a ``DomainViolation`` naming the 0-based row position and the column): a category not
in the list, a null/NaN, text in a numeric column, a numeric value outside ``[low, high]`` (unless
the attribute says ``out_of_domain: clip``, then it is clipped to the nearer bound and counted).
Categorical columns are compared as text: read such columns as strings (``dtype=str``).

Decoding (the documented rule for released numeric values): a category code becomes its string;
a bin becomes a value drawn uniformly within the bin — ``e_i + u·(e_{i+1} − e_i)`` with ``u``
uniform in [0, 1), kept strictly below ``e_{i+1}`` for every bin but the last so the value
re-encodes to the same bin. For ``integer: true`` the value is drawn uniformly among the
integers the bin holds (``ceil(e_i) … ceil(e_{i+1}) − 1``; the last bin up to ``floor(high)``);
a bin that holds no integer releases the integer nearest to its midpoint, clamped to
``[ceil(low), floor(high)]`` (such a value re-encodes to a neighbouring bin; choose integer-aligned
edges such as ``k + 0.5`` to avoid it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from schemas.tabular.schema import CategoricalAttribute, NumericAttribute, TabularSchema
from transforms.core.domain_violation import DomainViolation, within_bounds


class ColumnMismatch(ValueError):
    """The frame's columns do not match the schema's attribute names."""


@dataclass(frozen=True)
class EncodedRecords:
    """``codes`` is int32 ``(n, m)`` in schema attribute order; ``clipped`` counts, per numeric
    attribute, the values clipped to the bounds (``out_of_domain: clip``)."""

    codes: np.ndarray
    clipped: dict[str, int]


def domain_sizes(schema: TabularSchema) -> tuple[int, ...]:
    """The number of codes of every attribute: categories, or numeric bins."""
    return tuple(attribute.domain_size for attribute in schema.attributes)


def bin_edges(attribute: NumericAttribute) -> np.ndarray:
    """The bin edges ``low = e_0 < … < e_B = high`` of a numeric attribute (float64)."""
    if attribute.bin_edges is not None:
        return np.asarray(attribute.bin_edges, dtype=np.float64)
    low, high = attribute.bounds
    return np.linspace(low, high, int(attribute.bins) + 1)  # type: ignore[arg-type]


def _first_row(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _encode_categorical(column: pd.Series, attribute: CategoricalAttribute) -> np.ndarray:
    missing = column.isna().to_numpy()
    if missing.any():
        raise DomainViolation(_first_row(missing), attribute.name, "missing value (null/NaN)")
    text = column if column.dtype == object else column.astype(str)
    codes = pd.Categorical(text, categories=attribute.categories).codes
    unknown = codes < 0
    if unknown.any():
        row = _first_row(unknown)
        raise DomainViolation(
            row, attribute.name, f"value {column.iloc[row]!r} is not one of the schema's categories"
        )
    return codes.astype(np.int32)


def _encode_numeric(column: pd.Series, attribute: NumericAttribute) -> tuple[np.ndarray, int]:
    missing = column.isna().to_numpy()
    if missing.any():
        raise DomainViolation(_first_row(missing), attribute.name, "missing value (null/NaN)")
    if pd.api.types.is_bool_dtype(column.dtype) or not pd.api.types.is_numeric_dtype(column.dtype):
        numbers = pd.to_numeric(column.astype(object).where(~column.map(_is_boolean), None), errors="coerce")
        not_numbers = numbers.isna().to_numpy()
        if not_numbers.any():
            row = _first_row(not_numbers)
            raise DomainViolation(row, attribute.name, f"value {column.iloc[row]!r} is not a number")
        values = numbers.to_numpy(dtype=np.float64)
    else:
        values = column.to_numpy(dtype=np.float64)
    values, clipped = within_bounds(values, *attribute.bounds, attribute.out_of_domain == "clip", attribute.name,
                                    lambda row: column.iloc[row])
    edges = bin_edges(attribute)
    codes = np.searchsorted(edges, values, side="right") - 1
    codes = np.minimum(codes, len(edges) - 2)
    return codes.astype(np.int32), clipped


def _is_boolean(value: object) -> bool:
    return isinstance(value, bool | np.bool_)


def encode_records(frame: pd.DataFrame, schema: TabularSchema) -> EncodedRecords:
    """Codes of every record over the schema's public domains (see the module docstring).

    The frame must have exactly the schema's columns (any order); otherwise ``ColumnMismatch``.
    Columns are validated in schema order, and the first violation found is raised.
    """
    names = list(schema.names)
    missing_columns = [name for name in names if name not in frame.columns]
    unknown_columns = [str(column) for column in frame.columns if column not in set(names)]
    if missing_columns or unknown_columns:
        problems = []
        if missing_columns:
            problems.append(f"columns in the schema but not in the data: {', '.join(missing_columns)}")
        if unknown_columns:
            problems.append(f"columns in the data but not in the schema: {', '.join(unknown_columns)}")
        raise ColumnMismatch("; ".join(problems))
    codes = np.empty((len(frame), len(names)), dtype=np.int32)
    clipped: dict[str, int] = {}
    for position, attribute in enumerate(schema.attributes):
        column = frame[attribute.name].reset_index(drop=True)
        if isinstance(attribute, CategoricalAttribute):
            codes[:, position] = _encode_categorical(column, attribute)
        else:
            codes[:, position], clipped[attribute.name] = _encode_numeric(column, attribute)
    return EncodedRecords(codes=codes, clipped=clipped)


def _integer_range_of_bins(edges: np.ndarray, low: float, high: float) -> tuple[np.ndarray, np.ndarray]:
    """For every bin, the smallest and largest integer it holds (the fallback integer for an empty bin)."""
    smallest = np.ceil(edges[:-1])
    largest = np.ceil(edges[1:]) - 1.0
    largest[-1] = np.floor(edges[-1])
    empty = largest < smallest
    if empty.any():
        fallback = np.clip(np.floor(0.5 * (edges[:-1] + edges[1:]) + 0.5), math.ceil(low), math.floor(high))
        smallest = np.where(empty, fallback, smallest)
        largest = np.where(empty, fallback, largest)
    return smallest.astype(np.int64), largest.astype(np.int64)


def _decode_numeric(codes: np.ndarray, attribute: NumericAttribute, rng: np.random.Generator) -> np.ndarray:
    edges = bin_edges(attribute)
    bin_count = len(edges) - 1
    if attribute.integer:
        smallest, largest = _integer_range_of_bins(edges, *attribute.bounds)
        return rng.integers(smallest[codes], largest[codes], endpoint=True, dtype=np.int64)
    lower = edges[codes]
    upper = edges[codes + 1]
    values = lower + rng.random(codes.shape[0]) * (upper - lower)
    below_upper_edge = np.nextafter(upper, -np.inf)
    return np.where(codes < bin_count - 1, np.minimum(values, below_upper_edge), np.minimum(values, upper))


def decode_records(codes: np.ndarray, schema: TabularSchema, rng: np.random.Generator) -> pd.DataFrame:
    """Records with the schema's column names from an ``(n, m)`` code matrix (rule in the module docstring).

    Categorical columns are strings (object dtype), integer numeric columns int64, other numeric
    columns float64. Draws: one array per numeric attribute, in schema order, from ``rng``.
    """
    codes = np.asarray(codes)
    sizes = domain_sizes(schema)
    if codes.ndim != 2 or codes.shape[1] != len(sizes):
        raise ValueError(f"codes must be an (n, {len(sizes)}) matrix")
    columns: dict[str, np.ndarray] = {}
    for position, attribute in enumerate(schema.attributes):
        column_codes = codes[:, position].astype(np.int64)
        if column_codes.size and (column_codes.min() < 0 or column_codes.max() >= sizes[position]):
            raise ValueError(f"codes of column {attribute.name!r} are outside 0..{sizes[position] - 1}")
        if isinstance(attribute, CategoricalAttribute):
            columns[attribute.name] = np.asarray(attribute.categories, dtype=object)[column_codes]
        else:
            columns[attribute.name] = _decode_numeric(column_codes, attribute, rng)
    return pd.DataFrame(columns, copy=False)


MISSING, NOT_IN_DOMAIN_TYPE, OUTSIDE_BOUNDS = 1, 2, 3
"""Problems :func:`flag_records` flags, in the order :func:`encode_records` checks a column: a
missing value; a category not in the list or text that is not a number; a number outside the
bounds (an attribute that clips has none)."""


@dataclass(frozen=True)
class FlaggedRecords:
    """:func:`encode_records` without stopping: ``codes`` int32 ``(n, m)`` (0 where a value is bad),
    ``problems[(attribute position, problem)]`` a boolean mask of the rows with that problem (only
    problems that occur), ``clipped`` as in :class:`EncodedRecords`."""

    codes: np.ndarray
    problems: dict[tuple[int, int], np.ndarray]
    clipped: dict[str, int]


def flag_records(frame: pd.DataFrame, schema: TabularSchema) -> FlaggedRecords:
    """Every record's codes and every bad value flagged by attribute and problem, never raising for
    a value: the same decisions as :func:`encode_records`, which raises for the first of them
    (columns in schema order; in a column, its first missing value, else its first value of the
    wrong kind, else its first value outside the bounds). The frame must have the schema's columns
    (``ColumnMismatch`` otherwise, as there)."""
    names = list(schema.names)
    if [name for name in names if name not in frame.columns] or [c for c in frame.columns if c not in set(names)]:
        encode_records(frame.iloc[:0], schema)  # raises the same ColumnMismatch
    count = len(frame)
    codes = np.zeros((count, len(names)), dtype=np.int32)
    problems: dict[tuple[int, int], np.ndarray] = {}
    clipped: dict[str, int] = {}

    def flag(position: int, problem: int, mask: np.ndarray) -> None:
        if mask.any():
            problems[(position, problem)] = mask

    for position, attribute in enumerate(schema.attributes):
        column = frame[attribute.name].reset_index(drop=True)
        missing = column.isna().to_numpy()
        flag(position, MISSING, missing)
        if isinstance(attribute, CategoricalAttribute):
            text = column if column.dtype == object else column.astype(str)
            found = np.asarray(pd.Categorical(text, categories=attribute.categories).codes)
            flag(position, NOT_IN_DOMAIN_TYPE, (found < 0) & ~missing)
            codes[:, position] = np.where(found < 0, 0, found).astype(np.int32)
            continue
        if pd.api.types.is_bool_dtype(column.dtype) or not pd.api.types.is_numeric_dtype(column.dtype):
            numbers = pd.to_numeric(column.astype(object).where(~column.map(_is_boolean), None), errors="coerce")
            not_numbers = numbers.isna().to_numpy() & ~missing
            values = numbers.to_numpy(dtype=np.float64)
        else:
            not_numbers = np.zeros(count, dtype=bool)
            values = column.to_numpy(dtype=np.float64)
        flag(position, NOT_IN_DOMAIN_TYPE, not_numbers)
        good = ~missing & ~not_numbers
        low, high = attribute.bounds
        outside = good & ~((values >= low) & (values <= high))
        if attribute.out_of_domain == "clip":
            values = np.where(good, np.clip(values, low, high), low)
            clipped[attribute.name] = int(outside.sum())
        else:
            flag(position, OUTSIDE_BOUNDS, outside)
            clipped[attribute.name] = 0
            values = np.where(good & ~outside, values, low)
        edges = bin_edges(attribute)
        numeric_codes = np.minimum(np.searchsorted(edges, values, side="right") - 1, len(edges) - 2)
        codes[:, position] = numeric_codes.astype(np.int32)
    return FlaggedRecords(codes, problems, clipped)


def problem_reason(attribute: CategoricalAttribute | NumericAttribute, problem: int) -> str:
    """The words of :func:`encode_records`' violation for ``problem``, without the value (the reason
    ``pipelines.platform.input.domain_reason`` makes of it)."""
    if problem == MISSING:
        return "missing value (blank or a null spelling)"
    if isinstance(attribute, CategoricalAttribute):
        return "value is not one of the schema's categories"
    if problem == NOT_IN_DOMAIN_TYPE:
        return "value is not a number"
    low, high = attribute.bounds
    return f"value is outside the bounds [{low}, {high}]"
