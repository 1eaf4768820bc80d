"""Read a tabular release's schema and records, encode them over the schema's public domains, with
one-line errors naming the file, row (1-based data row) and column.

The file is read as text (so a numeric column holding text is caught with its row), leading spaces
after separators are dropped (Adult writes ``", "``), ``recode`` maps spellings to the schema's
categories, and ``transforms.tabular.encoding`` turns each value into its code — categories by
the schema's list, numbers by the schema's bins — raising for a value outside its public domain
(or clipping it, when the schema says so). Error lines name the row and column and never echo the
value (``pipelines.platform.input.domain_reason``); blank fields and the null spellings
(``pipelines.platform.input.NULL_SPELLINGS``: ``NA``, ``null``, ...) of a CSV are missing values,
an error wherever they appear. The input is only ever read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipelines.platform.config import read_yaml
from pipelines.platform.errors import ConfigError, InputError, one_line
from pipelines.platform.input import (
    NO_HEADER_HINT,
    domain_reason,
    header_names,
    read_records_table,
    sampled_records_table,
)
from schemas.base import TableReading
from schemas.tabular.config import MAX_DOMAIN_SIZE
from schemas.tabular.schema import CategoricalAttribute, NumericAttribute, TabularSchema, load_tabular_schema
from transforms.tabular.encoding import ColumnMismatch, DomainViolation, EncodedRecords, encode_records


@dataclass(frozen=True)
class TabularRecords:
    frame: pd.DataFrame
    encoded: EncodedRecords


def private_columns(schema: TabularSchema) -> dict[str, str]:
    """The input columns a tabular release protects, for the input-selection check
    (``pipelines/platform/selection.py``): every attribute of the schema — one record is
    substituted and ``n`` is public, so no attribute may decide which records are read."""
    return {name: "an attribute of the schema" for name in schema.names}


def read_schema(path: Path) -> TabularSchema:
    """The schema file, validated; refused before any work when it is a hostile YAML document
    (``pipelines.platform.config.read_yaml``: size, alias expansion) or an attribute has more than
    ``MAX_DOMAIN_SIZE`` codes (one line naming the attribute)."""
    read_yaml(path, "schema")
    try:
        schema = load_tabular_schema(path)
    except ValueError as error:
        raise ConfigError(one_line(str(error).splitlines()[0])) from None
    for position, attribute in enumerate(schema.attributes):
        if attribute.domain_size > MAX_DOMAIN_SIZE:
            key = "categories" if isinstance(attribute, CategoricalAttribute) else "bins"
            raise ConfigError(
                f"{path}: attributes.{position}.{key}: attribute {attribute.name!r} has {attribute.domain_size} codes; "
                f"at most {MAX_DOMAIN_SIZE}"
            )
    return schema


def read_tabular_records(reading: TableReading, schema: TabularSchema, cap: int | None = None,
                         rng: np.random.Generator | None = None) -> TabularRecords:
    """Read, recode and encode; ``InputError`` for an unknown or missing column, an empty table, a
    value outside its public domain, text in a numeric column or a missing value. With ``cap`` (and
    ``rng``), a file of more rows is read as its keyed sample of ``cap`` rows
    (:func:`pipelines.platform.input.sampled_records_table`): the driver never holds the file; a
    bad value in the sample is still named by its row in the file."""
    name = str(reading.path)
    rows = None
    if cap is None:
        frame = read_records_table(reading, schema.names)
    else:
        assert rng is not None
        frame, rows = sampled_records_table(reading, schema.names, cap, rng)
    if reading.format == "csv" and reading.header and header_names(frame.columns, schema.names) is None:
        raise InputError(name, f"{NO_HEADER_HINT}; set input.header: false for a file without one")
    if len(frame) == 0:
        raise InputError(name, "no rows (empty table)")
    try:
        encoded = encode_records(frame, schema)
    except ColumnMismatch as error:
        raise InputError(name, str(error)) from None
    except DomainViolation as error:
        row = error.row if rows is None else int(rows[error.row])
        raise InputError(name, domain_reason(error.message), row=row + 1, column=error.column) from None
    return TabularRecords(typed_frame(frame, schema), encoded)


def typed_frame(frame: pd.DataFrame, schema: TabularSchema) -> pd.DataFrame:
    """The schema's columns with the release's types: categories as text, numbers as numbers
    (clipped to the bounds where the schema clips), for the evaluation's classifiers."""
    columns = {}
    for attribute in schema.attributes:
        column = frame[attribute.name]
        if isinstance(attribute, NumericAttribute):
            numbers = pd.to_numeric(column).astype(np.float64).clip(*attribute.bounds)
            columns[attribute.name] = numbers.round().astype(np.int64) if attribute.integer else numbers
        else:
            columns[attribute.name] = column.astype(str)
    return pd.DataFrame(columns)
