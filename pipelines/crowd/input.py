"""Read a crowd claims file into the canonical ``(object_id, source_id, value)`` frame, on the
driver: the single-file reference the engine's input pass (``pipelines/crowd/engine_input.py``)
reproduces fragment by fragment (tests and tools; a release never reads its claims here).

Reading is where parse-level problems are caught with their exact position: a missing file, an
unreadable format, a missing mapped column, text in the value column (named by row and column,
never echoed: error lines carry no raw value). Content rules (null ids,
non-finite values, duplicate claims) are the validation gate's (``pipelines.platform.validation``), which
sees the ``row_number`` column this reader adds (1-based data row of the file, header excluded).
The input file is only ever read.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.platform.errors import InputError
from pipelines.platform.input import files_digest, read_input_table
from schemas.crowd.config import CrowdInput
from schemas.tables import ROW_NUMBER

CANONICAL = ("object_id", "source_id", "value")


def private_columns(settings: CrowdInput) -> dict[str, str]:
    """The input columns a crowd release protects, for the input-selection check
    (``pipelines/platform/selection.py``): the column mapped to ``value`` — the claim unit changes
    one claim's value, the source unit a source's values; the ids (claim counts, the source-object
    incidence) are public under both units."""
    return {settings.columns.value: "the claims' value"}


def input_fingerprint(path: Path, mapping: dict[str, str]) -> str:
    """SHA-256 of the input file's bytes and the column mapping."""
    digest = files_digest([path])
    digest.update(repr(sorted(mapping.items())).encode())
    return "sha256:" + digest.hexdigest()


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
        raise InputError(name, "value is not a number", row=position + 1, column=column)
    numbers = numbers.astype(np.float64)
    numbers[literal_nan] = np.nan
    return numbers


def read_crowd_claims(settings: CrowdInput) -> pd.DataFrame:
    """The claims as a frame with columns object_id, source_id, value, row_number.

    Raises InputError with the file, row and column for parse-level problems.
    """
    mapping = settings.columns.model_dump()
    wanted = list(dict.fromkeys(mapping[key] for key in CANONICAL))
    path = Path(str(settings.path))
    file_format = settings.format or ("parquet" if path.suffix.lower() in (".parquet", ".parq", ".pq") else "csv")
    table = read_input_table(SimpleNamespace(path=path, format=file_format, columns=settings.columns),  # type: ignore[arg-type]
                             wanted)
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
