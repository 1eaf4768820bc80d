"""Read a crowd claims file into the canonical ``(object_id, source_id, value)`` frame.

Reading is where parse-level problems are caught with their exact position: a missing file, an
unreadable format, a missing mapped column, text in the value column. Content rules (null ids,
non-finite values, duplicate claims) are the validation gate's (``pipelines.validation``), which
sees the ``row_number`` column this reader adds (1-based data row of the file, header excluded).
The input file is only ever read.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pipelines.errors import InputError
from schemas.crowd_config import CrowdInput
from schemas.ldp_config import LdpInput
from schemas.tables import ROW_NUMBER

CANONICAL = ("object_id", "source_id", "value")


def files_digest(paths: list[Path], separator: bytes = b"") -> hashlib._Hash:
    """A SHA-256 over the files' bytes, in order, each followed by ``separator``."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            for chunk in iter(lambda handle=handle: handle.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(separator)
    return digest


def input_fingerprint(path: Path, mapping: dict[str, str]) -> str:
    """SHA-256 of the input file's bytes and the column mapping."""
    digest = files_digest([path])
    digest.update(repr(sorted(mapping.items())).encode())
    return "sha256:" + digest.hexdigest()


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def read_input_table(
    settings: CrowdInput | LdpInput, wanted: list[str], dictionary_columns: tuple[str, ...] = ()
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
                raise _missing_column(name, settings, missing[0], header)
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
            raise _missing_column(name, settings, missing[0], schema.names)
        present = [column for column in dictionary_columns if column in wanted]
        return pq.read_table(path, columns=wanted, read_dictionary=present or None)
    except InputError:
        raise
    except (pa.ArrowInvalid, pa.ArrowException, OSError, UnicodeDecodeError) as error:
        raise InputError(name, f"cannot be read as {settings.format.upper()}: {_first_line(error)}") from None


def _missing_column(name: str, settings: CrowdInput | LdpInput, column: str, present: list[str]) -> InputError:
    role = next(key for key, value in settings.columns.model_dump().items() if value == column)
    shown = ", ".join(present[:12]) + (" ..." if len(present) > 12 else "")
    return InputError(name, f"mapped column '{column}' (for {role}) is missing; the file has: {shown}", column=column)


def identifier_column(series: pd.Series, name: str, column: str) -> pd.Series:
    """Ids are kept as int64 when every non-null id is an integer, otherwise as strings."""
    if pd.api.types.is_bool_dtype(series):
        raise InputError(name, "identifiers must be integers or text, not booleans", column=column)
    if pd.api.types.is_float_dtype(series):
        finite = series.dropna()
        if len(finite) and not np.all(np.equal(np.floor(finite), finite)):
            row = int(np.flatnonzero(series.notna().to_numpy() & (np.floor(series) != series).to_numpy())[0]) + 1
            raise InputError(name, "identifiers must be integers or text, not fractional numbers", row=row, column=column)
        return series.astype("Int64") if series.isna().any() else series.astype(np.int64)
    if pd.api.types.is_integer_dtype(series):
        return series.astype(np.int64)
    as_text = series.astype(object)
    present = as_text.dropna()
    if len(present):
        stripped = present.astype(str)
        is_integer = stripped.str.fullmatch(r"[+-]?\d{1,18}")
        if bool(is_integer.all()):
            converted = pd.Series(pd.array([None] * len(series), dtype="Int64"), index=series.index)
            converted[present.index] = stripped.astype(np.int64)
            return converted.astype(np.int64) if not converted.isna().any() else converted
    return as_text


def _value_column(series: pd.Series, name: str, column: str) -> pd.Series:
    if pd.api.types.is_bool_dtype(series):
        raise InputError(name, "values must be numbers, not booleans", column=column)
    if pd.api.types.is_numeric_dtype(series):
        return series.astype(np.float64)
    text = series.astype(object)
    numbers = pd.to_numeric(text, errors="coerce")
    not_numeric = text.notna().to_numpy() & numbers.isna().to_numpy()
    literal_nan = text.astype(str).str.strip().str.lower().isin(["nan", "+nan", "-nan"]).to_numpy()
    bad = not_numeric & ~literal_nan
    if bad.any():
        position = int(np.flatnonzero(bad)[0])
        raise InputError(name, f"{text.iloc[position]!r} is not a number", row=position + 1, column=column)
    numbers = numbers.astype(np.float64)
    numbers[literal_nan] = np.nan
    return numbers


def read_crowd_claims(settings: CrowdInput) -> pd.DataFrame:
    """The claims as a frame with columns object_id, source_id, value, row_number.

    Raises InputError with the file, row and column for parse-level problems.
    """
    mapping = settings.columns.model_dump()
    wanted = list(dict.fromkeys(mapping[key] for key in CANONICAL))
    table = read_input_table(settings, wanted)
    name = str(settings.path)
    if table.num_rows == 0:
        raise InputError(name, "no rows (empty input)")
    frame = table.to_pandas()
    claims = pd.DataFrame(
        {
            "object_id": identifier_column(frame[mapping["object_id"]], name, mapping["object_id"]),
            "source_id": identifier_column(frame[mapping["source_id"]], name, mapping["source_id"]),
            "value": _value_column(frame[mapping["value"]], name, mapping["value"]),
        }
    )
    claims[ROW_NUMBER] = np.arange(1, len(claims) + 1, dtype=np.int64)
    return claims


def apply_duplicates_policy(claims: pd.DataFrame, policy: str) -> pd.DataFrame:
    """Resolve several claims of one source on one object (after validation allowed them).

    ``keep_last`` keeps the last in file order; ``mean`` replaces them by their mean (at the
    position of the first). ``reject`` never reaches here with duplicates (validation refuses).
    """
    keys = ["object_id", "source_id"]
    if policy == "keep_last":
        return claims.drop_duplicates(keys, keep="last").sort_values(ROW_NUMBER, ignore_index=True)
    if policy == "mean":
        grouped = claims.groupby(keys, sort=False, as_index=False).agg(value=("value", "mean"), row_number=(ROW_NUMBER, "min"))
        return grouped.sort_values(ROW_NUMBER, ignore_index=True)
    return claims


def arrow_id_type(series: pd.Series) -> pa.DataType:
    return pa.int64() if pd.api.types.is_integer_dtype(series) else pa.string()
