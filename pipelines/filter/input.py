"""Read a filter release's feature spec and records: features, label codes and owners' choices,
with one-line errors naming the file, row (1-based data row) and column.

The files are read as text (``tabular_input.read_table``: leading spaces after separators dropped,
``recode`` applied, empty fields missing), features are encoded over the spec's public parameters
(``transforms.filter.features``), labels over their public domains (``schemas.filter.config``) and
choices by name. Error lines name the row and column and never echo the value
(``pipelines.platform.input.domain_reason``); blank CSV fields and the null spellings (``NA``,
``null``, ...) are missing values. The input is only ever read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipelines.platform.config import read_yaml, validate_document
from pipelines.platform.errors import ConfigError, InputError
from pipelines.platform.input import (
    NO_HEADER_HINT,
    domain_reason,
    header_names,
    read_records_table,
    sampled_records_table,
)
from schemas.filter.config import FilterConfig, FilterInput, FilterTableReading, LabelDefinition
from schemas.filter.features import FeatureSpec
from transforms.core.domain_violation import DomainViolation
from transforms.filter.features import encode_features, encode_label


@dataclass(frozen=True)
class FilterRecords:
    """Records read for a filter release: the text frame, the feature matrix, each label's codes
    (only the labels asked for) and the features clipped to their bounds."""

    frame: pd.DataFrame
    features: np.ndarray
    labels: dict[str, np.ndarray]
    clipped: dict[str, int]


def read_feature_spec(path: Path) -> FeatureSpec:
    document = read_yaml(path, "feature spec")
    if not isinstance(document, dict):
        raise ConfigError(f"{path}: a feature spec must be a mapping with the key 'features'")
    return validate_document(FeatureSpec, document, str(path))


def private_columns(config: FilterConfig) -> dict[str, str]:
    """The input columns a filter release protects, for the input-selection check
    (``pipelines/platform/selection.py``): every choice's private label column. The features are
    held fixed by the guarantee (a label change keeps them), and the choice column is released, so
    selecting by them selects the same records in neighbouring inputs."""
    private: dict[str, str] = {}
    for choice in config.choices:
        column = config.labels[choice.private].column
        private.setdefault(column, f"the private label {choice.private!r} of choice {choice.name!r}")
    return private


def check_label_columns(config: FilterConfig, spec: FeatureSpec) -> None:
    """A private label's column must not be a feature (the release would carry it in clear)."""
    features = set(spec.names)
    for choice in config.choices:
        column = config.labels[choice.private].column
        if column in features:
            raise ConfigError(
                f"choice {choice.name!r}: the private label {choice.private!r} is read from column "
                f"{column!r}, which is also a feature; remove it from the feature spec"
            )


def label_codes(column: pd.Series, definition: LabelDefinition, name: str) -> np.ndarray:
    """Codes (positions in ``definition.classes``) of a label column; ``DomainViolation`` for a missing
    value, a value outside the categories or groups, or a non-number under ``above``."""
    if definition.categories is not None:
        return encode_label(column, definition.categories, name)
    column = column.reset_index(drop=True)
    missing = column.isna().to_numpy()
    if missing.any():
        raise DomainViolation(int(np.flatnonzero(missing)[0]), name, "missing label (null/NaN)")
    if definition.groups is not None:
        lookup = {value: code for code, members in enumerate(definition.groups.values()) for value in members}
        text = column.astype(str)
        codes = text.map(lookup)
        unknown = codes.isna().to_numpy()
        if unknown.any():
            row = int(np.flatnonzero(unknown)[0])
            raise DomainViolation(row, name, "value is in none of the label's groups")
        return codes.to_numpy(dtype=np.int64)
    numbers = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(numbers)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DomainViolation(row, name, "value is not a finite number")
    return (numbers > float(definition.above)).astype(np.int64)  # type: ignore[arg-type]


def read_records(reading: FilterTableReading, spec: FeatureSpec, labels: dict[str, LabelDefinition],
                 extra_columns: tuple[str, ...] = ()) -> FilterRecords:
    """Read, recode, encode features and ``labels``; ``InputError`` naming file, row and column."""
    return _encoded(read_records_table(reading, reading.columns or ()), reading, spec, labels, extra_columns)


def _encoded(frame: pd.DataFrame, reading: FilterTableReading, spec: FeatureSpec, labels: dict[str, LabelDefinition],
             extra_columns: tuple[str, ...] = (), rows: np.ndarray | None = None) -> FilterRecords:
    """The records of ``frame`` encoded; ``rows`` (0-based file rows of the frame's rows, when it
    holds a sample) names a bad value's row in the file."""
    name = str(reading.path)

    def locate(row: int, message: str, column: str | None) -> InputError:
        row = row if rows is None else int(rows[row])
        return InputError(name, message, row=row + 1, column=column)

    return encoded_records(frame, name, reading.format, reading.header, spec, labels, extra_columns, locate)


def encoded_records(frame: pd.DataFrame, name: str, file_format: str, header: bool, spec: FeatureSpec,
                    labels: dict[str, LabelDefinition], extra_columns: tuple[str, ...] = (),
                    locate: Callable[[int, str, str | None], InputError] | None = None) -> FilterRecords:
    """The records of ``frame`` (read from ``name``) encoded: features over the spec, ``labels``
    over their public domains; a bad value is ``locate(row of the frame, reason, column)``, one
    line naming where it is (by default the frame's row in ``name``)."""
    if len(frame) == 0:
        raise InputError(name, "no rows (empty table)")
    needed = [*spec.names, *(definition.column for definition in labels.values()), *extra_columns]
    for column in needed:
        if column not in frame.columns:
            shown = header_names(frame.columns, needed if file_format == "csv" and header else list(frame.columns))
            raise InputError(name, f"no column {column!r} ({'columns: ' + shown if shown is not None else NO_HEADER_HINT})")
    try:
        encoded = encode_features(frame, spec)
        codes = {label: label_codes(frame[definition.column], definition, definition.column)
                 for label, definition in labels.items()}
    except DomainViolation as error:
        if locate is None:
            raise InputError(name, domain_reason(error.message), row=error.row + 1, column=error.column) from None
        raise locate(error.row, domain_reason(error.message), error.column) from None
    return FilterRecords(frame, encoded.matrix, codes, encoded.clipped)


def read_training_records(reading: FilterTableReading, spec: FeatureSpec, labels: dict[str, LabelDefinition],
                          rng: np.random.Generator) -> FilterRecords:
    """The training records the driver reads, at most ``reading.max_records`` of them, the keyed
    sample of a larger file (``rng``; :func:`pipelines.platform.input.sampled_records_table`)."""
    frame, rows = sampled_records_table(reading, reading.columns or (), reading.max_records, rng)
    return _encoded(frame, reading, spec, labels, rows=rows)


def choice_codes(frame: pd.DataFrame, reading: FilterInput, config: FilterConfig) -> np.ndarray:
    """Each record's choice as a position in ``config.choices``: from the choice column (an empty
    value takes ``default_choice`` when there is one), or ``config.fallback_choice`` for all."""
    names = config.choice_names
    if reading.choice_column is None:
        return np.full(len(frame), names.index(config.fallback_choice or names[0]), dtype=np.int64)
    column = frame[reading.choice_column].reset_index(drop=True)
    if config.default_choice is not None:
        column = column.where(column.notna(), config.default_choice)
    missing = column.isna().to_numpy()
    if missing.any():
        raise InputError(str(reading.path), "no choice (and no default_choice in the config)",
                         row=int(np.flatnonzero(missing)[0]) + 1, column=reading.choice_column)
    codes = np.asarray(pd.Categorical(column.astype(str), categories=names).codes, dtype=np.int64)
    unknown = codes < 0
    if unknown.any():
        row = int(np.flatnonzero(unknown)[0])
        raise InputError(str(reading.path), f"unknown choice (choices: {', '.join(names)})",
                         row=row + 1, column=reading.choice_column)
    return codes
