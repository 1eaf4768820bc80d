"""Reading input files, shared by every release kind: whole files as Arrow or text tables with
one-line errors (file, row, column), content fingerprints, the common CSV conventions (empty
text is missing, ``recode`` of spellings). Each kind's reader (``pipelines/<kind>/input.py``)
builds its canonical frame on these. Inputs are only ever read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pipelines.platform.errors import ConfigError, InputError
from schemas.base import TableReading


class MappedTableSettings(Protocol):
    """An input whose canonical columns are mapped to the file's: ``columns.model_dump()`` gives
    ``{role: file column}`` (a crowd or ldp input section)."""

    path: Path
    format: Literal["csv", "parquet"]
    columns: Any


def files_digest(paths: list[Path], separator: bytes = b"") -> hashlib._Hash:
    """A SHA-256 over the files' bytes, in order, each followed by ``separator``."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            for chunk in iter(lambda handle=handle: handle.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(separator)
    return digest


def file_fingerprint(*paths: Path) -> str:
    """SHA-256 of the files' bytes, in order."""
    return "sha256:" + files_digest(list(paths), separator=b"\0").hexdigest()


def first_line(error: Exception) -> str:
    """The first line of an error's text (or its type's name): errors are one line."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def read_input_table(
    settings: MappedTableSettings, wanted: list[str], dictionary_columns: tuple[str, ...] = ()
) -> pa.Table:
    """The ``wanted`` columns of a CSV (all read as text) or Parquet input, with one-line errors.
    ``dictionary_columns`` of a Parquet file are read dictionary-encoded (pandas categoricals: a
    column of few distinct labels then costs integers, not millions of Python strings)."""
    path = settings.path
    name = str(path)
    if not path.exists():
        raise InputError(name, "file not found")
    if not path.is_file():
        raise InputError(name, "is not a file")
    try:
        if settings.format == "csv":
            with open(path, "rb") as handle:
                header_line = handle.readline()
            if not header_line.strip():
                raise InputError(name, "empty file: no header and no rows")
            header = pacsv.read_csv(
                path, read_options=pacsv.ReadOptions(block_size=1 << 16), convert_options=pacsv.ConvertOptions(include_columns=[])
            ).column_names
            missing = [column for column in wanted if column not in header]
            if missing:
                raise missing_column(name, settings, missing[0], header)
            return pacsv.read_csv(
                path,
                convert_options=pacsv.ConvertOptions(
                    include_columns=wanted,
                    column_types={column: pa.string() for column in wanted},
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=False,
                ),
            )
        schema = pq.read_schema(path)
        missing = [column for column in wanted if column not in schema.names]
        if missing:
            raise missing_column(name, settings, missing[0], schema.names)
        present = [column for column in dictionary_columns if column in wanted]
        return pq.read_table(path, columns=wanted, read_dictionary=present or None)
    except InputError:
        raise
    except (pa.ArrowInvalid, pa.ArrowException, OSError, UnicodeDecodeError) as error:
        raise InputError(name, f"cannot be read as {settings.format.upper()}: {first_line(error)}") from None


def missing_column(name: str, settings: MappedTableSettings, column: str, present: list[str]) -> InputError:
    role = next(key for key, value in settings.columns.model_dump().items() if value == column)
    shown = ", ".join(present[:12]) + (" ..." if len(present) > 12 else "")
    return InputError(name, f"mapped column '{column}' (for {role}) is missing; the file has: {shown}", column=column)


def read_table(reading: TableReading, names: Sequence[str]) -> pd.DataFrame:
    """The table as text columns (Parquet keeps its types); a CSV without a header row gets
    ``names`` as its column names, in order."""
    name = str(reading.path)
    if not reading.path.exists():
        raise InputError(name, "file not found")
    if not reading.path.is_file():
        raise InputError(name, "is not a file")
    try:
        if reading.format == "parquet":
            frame = pq.read_table(reading.path).to_pandas()
        else:
            if reading.path.stat().st_size == 0:
                raise InputError(name, "empty file: no header and no rows")
            frame = pd.read_csv(
                reading.path,
                header=0 if reading.header else None,
                names=None if reading.header else list(names),
                dtype=str,
                keep_default_na=False,
                skipinitialspace=True,
                index_col=False,
            )
    except InputError:
        raise
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise InputError(name, f"cannot be read as {reading.format.upper()}: {first}") from None
    frame.columns = [str(column).strip() for column in frame.columns]
    return frame


def apply_recode(frame: pd.DataFrame, reading: TableReading) -> pd.DataFrame:
    for column, mapping in reading.recode.items():
        if column not in frame.columns:
            raise ConfigError(f"recode: column {column!r} is not in {reading.path}")
        frame[column] = frame[column].replace(mapping)
    return frame


def as_missing(frame: pd.DataFrame) -> pd.DataFrame:
    """Empty text fields are missing values (CSV has no other way to write a null)."""
    for column in frame.columns:
        if frame[column].dtype == object:
            frame[column] = frame[column].where(frame[column].astype(str).str.strip() != "", None)
    return frame
