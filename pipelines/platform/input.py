"""Reading input files, shared by every release kind: whole files as Arrow or text tables with
one-line errors (file, row, column), content fingerprints, the common CSV conventions (missing
values, ``recode`` of spellings). Each kind's reader (``pipelines/<kind>/input.py``) builds its
canonical frame on these. Inputs are only ever read.

Error lines never echo raw data (issue 12): a read or validation error names the file, the row,
the column and what is wrong — never a cell's content, never a row's text. Parser messages that
embed the offending row (Arrow's ``Expected 3 columns, got 4: <the row>``) are rewritten from
their numbers; a parser message this module does not know is replaced by a generic one naming
only the exception's type. Reasons raised by the encoders over public domains
(``DomainViolation``) go through :func:`domain_reason`, which keeps the reason and drops the value.

Missing values in CSV (one rule for every kind): a field is missing when it is empty or is exactly
one of :data:`NULL_SPELLINGS` (``NA``, ``N/A``, ``n/a``, ``NULL``, ``null``, ``Null``, ``NaN``,
``nan``, ``NAN``, ``#N/A``); where a value is required, a missing one is an error naming the row and
column ("missing value", "source id is null", ...), never a category or id spelled ``NA``. Tabular
and filter tables drop the spaces around a field first (so ``" NA "`` and ``"  "`` are missing
too); crowd and ldp fields are taken as written. ``recode`` applies before this rule, so a config
can map a null spelling to a category (``recode: {workclass: {"NA": "?"}}``). Parquet has real
nulls: only those are missing there (a Parquet string ``"NA"`` is text).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
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


NULL_SPELLINGS = ("", "NA", "N/A", "n/a", "NULL", "null", "Null", "NaN", "nan", "NAN", "#N/A")
"""What a CSV field may say to be missing (module docstring), in every kind's input."""


def first_line(error: Exception) -> str:
    """The first line of an error's text (or its type's name): errors are one line."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


_DOMAIN_REASONS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.DOTALL), replacement)
    for pattern, replacement in (
        (r"^missing value \(null/NaN\)$", "missing value (blank or a null spelling)"),
        (r"^missing label \(null/NaN\)$", "missing label (blank or a null spelling)"),
        (r"^value .* is not one of the schema's categories$", "value is not one of the schema's categories"),
        (r"^value .* is not a number$", "value is not a number"),
        (r"^value .* is outside the bounds (\[[^\[\]]*\])$", r"value is outside the bounds \1"),
        (r"^not a finite number: .*$", "value is not a finite number"),
        (r"^category .* is not in the feature's category list$", "value is not in the feature's category list"),
        (r"^label .* is not in the label's category list$", "label is not in the label's category list"),
        (r"^value is in none of the label's groups$", "value is in none of the label's groups"),
        (r"^value is not a finite number$", "value is not a finite number"),
    )
)


def domain_reason(message: str) -> str:
    """The reason of a ``DomainViolation`` (``transforms``: e.g. ``value 'x' is not a number``)
    without the offending value: known reasons keep their words and the public domain (bounds),
    anything else becomes a generic reason (the value is never echoed)."""
    for pattern, replacement in _DOMAIN_REASONS:
        if pattern.match(message):
            return pattern.sub(replacement, message)
    return "value is outside its column's public domain"


def _data_row(path: Path, line: int, header: bool) -> int | None:
    """The 1-based data row at physical ``line`` of a text file: blank lines skipped, as the
    readers count rows (``None`` when the file cannot be read again)."""
    try:
        with open(path, "rb") as handle:
            kept = sum(1 for text in itertools.islice(handle, line) if text.strip())
    except OSError:
        return None
    return max(kept - (1 if header else 0), 1)


def csv_problem(path: Path, error: BaseException, *, header: bool = True, arrow: bool = False) -> InputError:
    """One line for a CSV the parser refused, without the row's text: the shape error's row and
    field counts, an encoding error, an unterminated quote; otherwise only the exception's type."""
    name = str(path)
    text = str(error)
    row: int | None = None
    if isinstance(error, UnicodeDecodeError) or re.search(r"invalid UTF-?8", text, re.IGNORECASE):
        reason = "not valid UTF-8 text"
    elif shape := re.search(r"Expected (\d+) (?:columns|fields)(?: in line (\d+))?, (?:got|saw) (\d+)", text):
        expected, line, found = shape.groups()
        if arrow:
            row = arrow_ragged_row(path)
        elif line is not None:
            row = _data_row(path, int(line), header)
        reason = f"a row has {found} fields where the header has {expected}" if header else (
            f"a row has {found} fields where {expected} columns are named")
    elif re.search(r"EOF inside string|unterminated", text, re.IGNORECASE):
        reason = "a quoted field is never closed"
    elif re.search(r"Empty CSV file|No columns to parse", text, re.IGNORECASE):
        reason = "empty file: no header and no rows"
    else:
        reason = f"malformed CSV ({type(error).__name__})"
    return InputError(name, f"cannot be read as CSV: {reason}", row=row)


def arrow_ragged_row(source: Path | Any) -> int | None:
    """The data row of the first row with the wrong number of fields, found by reading the file
    (a path or an open binary file) again on one thread (Arrow numbers rows only then; its
    message also holds the row's text, which stays here)."""
    try:
        pacsv.read_csv(source, read_options=pacsv.ReadOptions(use_threads=False),
                       convert_options=pacsv.ConvertOptions(include_columns=[]))
    except pa.ArrowInvalid as error:
        found = re.search(r"Row #(\d+)", str(error))
        if found:
            return max(int(found.group(1)) - 1, 1)
    except (pa.ArrowException, OSError):
        return None
    return None


def parquet_problem(path: Path, error: BaseException) -> InputError:
    """One line for a Parquet file that cannot be read (no parser text is echoed)."""
    text = str(error)
    if re.search(r"magic bytes not found|not a parquet file", text, re.IGNORECASE):
        reason = "not a Parquet file (no Parquet footer)"
    elif re.search(r"Parquet file size is 0|size is 0 bytes", text, re.IGNORECASE):
        reason = "empty file"
    elif isinstance(error, OSError) and not isinstance(error, pa.ArrowException):
        reason = f"the file cannot be opened ({error.strerror or type(error).__name__})"
    else:
        reason = f"corrupt or unsupported Parquet file ({type(error).__name__})"
    return InputError(str(path), f"cannot be read as PARQUET: {reason}")


def text_convert_options(columns: list[str]) -> pacsv.ConvertOptions:
    """Arrow's CSV options for reading ``columns`` as text, a :data:`NULL_SPELLINGS` field (quoted
    or not) as missing: how every kind's CSV input is read."""
    return pacsv.ConvertOptions(
        include_columns=columns,
        column_types={column: pa.string() for column in columns},
        null_values=list(NULL_SPELLINGS),
        strings_can_be_null=True,
        quoted_strings_can_be_null=True,
    )


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
            return pacsv.read_csv(path, convert_options=text_convert_options(wanted))
        schema = pq.read_schema(path)
        missing = [column for column in wanted if column not in schema.names]
        if missing:
            raise missing_column(name, settings, missing[0], schema.names)
        present = [column for column in dictionary_columns if column in wanted]
        return pq.read_table(path, columns=wanted, read_dictionary=present or None)
    except InputError:
        raise
    except (pa.ArrowInvalid, pa.ArrowException, OSError, UnicodeDecodeError) as error:
        if settings.format == "csv":
            raise csv_problem(path, error, arrow=True) from None
        raise parquet_problem(path, error) from None


def header_names(present: Sequence[object], expected: Sequence[str], limit: int = 12) -> str | None:
    """The file's column names for an error line, or ``None`` when the first row names none of the
    ``expected`` columns: then it is probably a data row of a file without a header, and its
    fields are raw data, which an error line never shows."""
    names = [str(name) for name in present]
    if not set(names) & set(expected):
        return None
    return ", ".join(names[:limit]) + (" ..." if len(names) > limit else "")


NO_HEADER_HINT = "its first row names none of the expected columns (a CSV without a header row?)"


def missing_column(name: str, settings: MappedTableSettings, column: str, present: list[str]) -> InputError:
    """A mapped column missing from the file; a CSV header that names none of the mapped columns
    is not shown (it is probably a data row), a Parquet schema always is."""
    mapping = settings.columns.model_dump()
    role = next(key for key, value in mapping.items() if value == column)
    shown = header_names(present, list(mapping.values()) if settings.format == "csv" else list(present))
    found = f"the file has: {shown}" if shown is not None else NO_HEADER_HINT
    return InputError(name, f"mapped column '{column}' (for {role}) is missing; {found}", column=column)


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
            frame = read_text_csv(reading.path, reading.header, names)
    except InputError:
        raise
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError, pa.ArrowException) as error:
        if reading.format == "parquet":
            raise parquet_problem(reading.path, error) from None
        raise csv_problem(reading.path, error, header=reading.header) from None
    frame.columns = [str(column).strip() for column in frame.columns]
    return frame


def read_text_csv(source: Any, header: bool, names: Sequence[str]) -> pd.DataFrame:
    """A CSV (a path or an open binary file) as tabular and filter tables read it: every field as
    text, nothing turned into a null yet, spaces after a separator dropped; without a ``header`` row
    the columns are ``names`` in order. Parser errors propagate (the caller words them)."""
    return pd.read_csv(
        source,
        header=0 if header else None,
        names=None if header else list(names),
        dtype=str,
        keep_default_na=False,
        skipinitialspace=True,
        index_col=False,
    )


def table_chunks(reading: TableReading, names: Sequence[str], rows: int = 1 << 16) -> Any:
    """:func:`read_table`'s table in chunks of at most ``rows`` rows, in order (CSV through the same
    parser options, Parquet by record batches): a bounded read of a large file. Errors as there."""
    name = str(reading.path)
    if not reading.path.exists():
        raise InputError(name, "file not found")
    if not reading.path.is_file():
        raise InputError(name, "is not a file")
    try:
        if reading.format == "parquet":
            with pq.ParquetFile(reading.path) as parquet:
                for batch in parquet.iter_batches(batch_size=rows):
                    chunk = pa.Table.from_batches([batch]).to_pandas()
                    chunk.columns = [str(column).strip() for column in chunk.columns]  # as read_table names them
                    yield chunk
            return
        if reading.path.stat().st_size == 0:
            raise InputError(name, "empty file: no header and no rows")
        with pd.read_csv(reading.path, header=0 if reading.header else None,
                         names=None if reading.header else list(names), dtype=str, keep_default_na=False,
                         skipinitialspace=True, index_col=False, chunksize=rows) as chunks:
            for chunk in chunks:
                chunk.columns = [str(column).strip() for column in chunk.columns]
                yield chunk
    except InputError:
        raise
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError, pa.ArrowException) as error:
        if reading.format == "parquet":
            raise parquet_problem(reading.path, error) from None
        raise csv_problem(reading.path, error, header=reading.header) from None


def table_rows(reading: TableReading, names: Sequence[str]) -> int:
    """The rows :func:`table_chunks` yields: a Parquet file's from its footer (no row read), a
    CSV's counted chunk by chunk. Errors as there."""
    if reading.format == "parquet" and reading.path.is_file():
        try:
            with pq.ParquetFile(reading.path) as parquet:
                return int(parquet.metadata.num_rows)
        except (ValueError, OSError, pa.ArrowException) as error:
            raise parquet_problem(reading.path, error) from None
    return sum(len(chunk) for chunk in table_chunks(reading, names))


def apply_recode(frame: pd.DataFrame, reading: TableReading) -> pd.DataFrame:
    for column, mapping in reading.recode.items():
        if column not in frame.columns:
            raise ConfigError(f"recode: column {column!r} is not in {reading.path}")
        frame[column] = frame[column].replace(mapping)
    return frame


def read_records_table(reading: TableReading, names: Sequence[str]) -> pd.DataFrame:
    """``read_table``, then ``recode``, then the missing-value rule (CSV only: Parquet has nulls)."""
    frame = apply_recode(read_table(reading, names), reading)
    return as_missing(frame) if reading.format == "csv" else frame


def sampled_records_table(reading: TableReading, names: Sequence[str], cap: int,
                          rng: np.random.Generator) -> tuple[pd.DataFrame, np.ndarray | None]:
    """:func:`read_records_table` of a file the driver reads, with at most ``cap`` rows held: a file
    of no more rows is read whole (``None`` for its rows); a larger one is counted (a Parquet file by
    its footer, a CSV in chunks), then read in chunks keeping the keyed sample of ``cap`` rows (``rng``, kept in file order) — so the driver
    holds a chunk and the sample, never the file. Returns the frame and, for a sample, the 0-based
    file rows of its rows (so that a bad value is still named by its row in the file)."""
    count = table_rows(reading, names)
    if count <= cap:
        return read_records_table(reading, names), None
    chosen = np.sort(rng.choice(count, size=cap, replace=False)).astype(np.int64)
    pieces, start = [], 0
    for chunk in table_chunks(reading, names):
        inside = chosen[(chosen >= start) & (chosen < start + len(chunk))] - start
        if inside.size:
            pieces.append(chunk.iloc[inside])
        start += len(chunk)
    frame = apply_recode(pd.concat(pieces, ignore_index=True), reading)
    return (as_missing(frame) if reading.format == "csv" else frame), chosen


def as_missing(frame: pd.DataFrame) -> pd.DataFrame:
    """Text fields that are blank or a null spelling (:data:`NULL_SPELLINGS`, surrounding spaces
    dropped) are missing values: CSV has no other way to write a null. Run after ``recode``."""
    spellings = set(NULL_SPELLINGS)
    for column in frame.columns:
        if frame[column].dtype == object:
            text = frame[column].astype(str).str.strip()
            frame[column] = frame[column].where(~text.isin(spellings) | frame[column].isna(), None)
    return frame
