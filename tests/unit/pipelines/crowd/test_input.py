"""The crowd claims reader (``pipelines/crowd/input.py``): CSV and Parquet files read into the
canonical ``(object_id, source_id, value, row_number)`` frame with exact values and dtypes, every
parse-level problem as one ``InputError`` line naming the file, row and column, and the duplicates
policies against hand-computed frames."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.crowd.input import (
    apply_duplicates_policy,
    arrow_id_type,
    identifier_column,
    input_fingerprint,
    read_crowd_claims,
)
from pipelines.platform.errors import InputError
from schemas.crowd.config import CrowdInput
from tests.unit.pipelines.input_errors import assert_input_error

MAPPING = {"object_id": "item", "source_id": "worker", "value": "answer"}


def settings(path: Path, file_format: str = "csv", columns: dict[str, str] | None = None) -> CrowdInput:
    return CrowdInput.model_validate({"path": path, "format": file_format, "columns": columns or MAPPING})


def test_fingerprint_covers_the_bytes_and_the_mapping(tmp_path: Path) -> None:
    path = tmp_path / "claims.csv"
    path.write_bytes(b"item,worker,answer\n1,2,3\n")
    expected = hashlib.sha256(
        b"item,worker,answer\n1,2,3\n"
        + b"[('object_id', 'item'), ('source_id', 'worker'), ('value', 'answer')]"
    ).hexdigest()
    assert input_fingerprint(path, {"value": "answer", "object_id": "item", "source_id": "worker"}) == "sha256:" + expected
    assert input_fingerprint(path, {**MAPPING, "value": "other"}) != "sha256:" + expected


def test_a_csv_file_reads_into_the_canonical_frame(tmp_path: Path) -> None:
    path = tmp_path / "claims.csv"
    path.write_text(
        "answer,worker,note,item\n"
        "1.5,w1,x,10\n"
        "-2,w2,y,10\n"
        " 3e2 ,w1,z,-7\n"
        ",w3,,11\n"
        "nan,w2,,11\n"
    )
    claims = read_crowd_claims(settings(path))
    assert list(claims.columns) == ["object_id", "source_id", "value", "row_number"]
    assert claims["object_id"].dtype == np.int64 and claims["object_id"].tolist() == [10, 10, -7, 11, 11]
    assert claims["source_id"].dtype == object and claims["source_id"].tolist() == ["w1", "w2", "w1", "w3", "w2"]
    assert claims["value"].dtype == np.float64
    assert claims["value"].tolist()[:3] == [1.5, -2.0, 300.0]
    assert math.isnan(claims["value"].iloc[3]) and math.isnan(claims["value"].iloc[4])
    assert claims["row_number"].dtype == np.int64 and claims["row_number"].tolist() == [1, 2, 3, 4, 5]


def test_a_parquet_file_reads_into_the_canonical_frame(tmp_path: Path) -> None:
    path = tmp_path / "claims.parquet"
    pq.write_table(
        pa.table(
            {
                "object_id": pa.array([5, 5, 6], pa.int32()),
                "source_id": pa.array([1.0, 2.0, None], pa.float64()),
                "value": pa.array([1, 2, 3], pa.int16()),
            }
        ),
        path,
    )
    claims = read_crowd_claims(settings(path, "parquet", {"object_id": "object_id", "source_id": "source_id",
                                                         "value": "value"}))
    assert claims["object_id"].dtype == np.int64 and claims["object_id"].tolist() == [5, 5, 6]
    assert claims["source_id"].dtype == "Int64" and claims["source_id"].tolist() == [1, 2, pd.NA]
    assert claims["value"].dtype == np.float64 and claims["value"].tolist() == [1.0, 2.0, 3.0]
    assert claims["row_number"].tolist() == [1, 2, 3]


def test_identifiers_are_int64_when_every_id_is_an_integer_and_text_otherwise() -> None:
    def column(values: list, dtype: str | None = None) -> pd.Series:
        return identifier_column(pd.Series(values, dtype=dtype), "f.csv", "id")

    integers = column(["12", "-3", "+4", "0"], "object")
    assert integers.dtype == np.int64 and integers.tolist() == [12, -3, 4, 0]
    with_null = column(["12", None, "5"], "object")
    assert with_null.dtype == "Int64" and with_null.tolist() == [12, pd.NA, 5]
    mixed = column(["12", "a7", None], "object")
    assert mixed.dtype == object and mixed.tolist() == ["12", "a7", None]
    too_long = column(["1234567890123456789", "1"], "object")
    assert too_long.dtype == object and too_long.tolist() == ["1234567890123456789", "1"]
    floats = column([3.0, -1.0, 2.0**40])
    assert floats.dtype == np.int64 and floats.tolist() == [3, -1, 2**40]
    floats_with_nan = column([3.0, float("nan")])
    assert floats_with_nan.dtype == "Int64" and floats_with_nan.tolist() == [3, pd.NA]
    small = column([1, 2], "int8")
    assert small.dtype == np.int64 and small.tolist() == [1, 2]


def test_bad_identifiers_name_the_row_and_column() -> None:
    with pytest.raises(InputError) as caught:
        identifier_column(pd.Series([1.0, float("nan"), 2.5, 3.5]), "f.csv", "item")
    assert_input_error(caught.value, "f.csv", "not fractional numbers", row=3, column="item")
    with pytest.raises(InputError) as caught:
        identifier_column(pd.Series([True, False]), "f.csv", "item")
    assert_input_error(caught.value, "f.csv", "not booleans", column="item")


@pytest.mark.parametrize(
    ("body", "row", "raw"),
    [
        ("item,worker,answer\n1,a,2\n1,b,two\n", 2, "two"),
        ("item,worker,answer\n1,a,2\n1,b,3\n2,a,0x10\n", 3, "0x10"),
    ],
)
def test_text_in_the_value_column_names_the_row_and_column_not_the_value(tmp_path: Path, body: str, row: int,
                                                                         raw: str) -> None:
    path = tmp_path / "claims.csv"
    path.write_text(body)
    with pytest.raises(InputError) as caught:
        read_crowd_claims(settings(path))
    assert_input_error(caught.value, path, "value is not a number", row=row, column="answer", hides=(raw,))


def test_parquet_type_errors_name_the_row_and_column(tmp_path: Path) -> None:
    booleans = tmp_path / "booleans.parquet"
    pq.write_table(pa.table({"item": [1, 2], "worker": [1, 2], "answer": [True, False]}), booleans)
    with pytest.raises(InputError) as caught:
        read_crowd_claims(settings(booleans, "parquet"))
    assert_input_error(caught.value, booleans, "values must be numbers, not booleans", column="answer")

    fractional = tmp_path / "fractional.parquet"
    pq.write_table(pa.table({"item": [1.0, 2.0, 2.25], "worker": [1, 2, 3], "answer": [0.0, 1.0, 2.0]}), fractional)
    with pytest.raises(InputError) as caught:
        read_crowd_claims(settings(fractional, "parquet"))
    assert_input_error(caught.value, fractional, "fractional numbers", row=3, column="item")


def test_file_level_errors_name_the_file(tmp_path: Path) -> None:
    header_only = tmp_path / "header.csv"
    header_only.write_text("item,worker,answer\n")
    with pytest.raises(InputError) as caught:
        read_crowd_claims(settings(header_only))
    assert_input_error(caught.value, header_only, "no rows (empty input)")

    unmapped = tmp_path / "unmapped.csv"
    unmapped.write_text("object_id,source_id,value\n1,2,3\n")
    with pytest.raises(InputError) as caught:
        read_crowd_claims(settings(unmapped))
    assert_input_error(caught.value, unmapped, "mapped column 'item' (for object_id) is missing", column="item")

    absent = tmp_path / "absent.parquet"
    with pytest.raises(InputError) as caught:
        read_crowd_claims(settings(absent, "parquet"))
    assert_input_error(caught.value, absent, "file not found")


def test_duplicates_policies_against_hand_computed_frames() -> None:
    claims = pd.DataFrame(
        {
            "object_id": [1, 1, 2, 1, 2],
            "source_id": [7, 8, 7, 7, 9],
            "value": [1.0, 5.0, 2.0, 3.0, 4.0],
            "row_number": np.arange(1, 6, dtype=np.int64),
        }
    )
    kept = apply_duplicates_policy(claims, "keep_last")
    assert kept[["object_id", "source_id", "value", "row_number"]].values.tolist() == [
        [1, 8, 5.0, 2], [2, 7, 2.0, 3], [1, 7, 3.0, 4], [2, 9, 4.0, 5],
    ]
    averaged = apply_duplicates_policy(claims, "mean")
    assert averaged[["object_id", "source_id", "value", "row_number"]].values.tolist() == [
        [1, 7, 2.0, 1], [1, 8, 5.0, 2], [2, 7, 2.0, 3], [2, 9, 4.0, 5],
    ]
    assert apply_duplicates_policy(claims, "reject") is claims


def test_arrow_id_type_follows_the_canonical_dtype() -> None:
    assert arrow_id_type(pd.Series([1, 2], dtype=np.int64)) == pa.int64()
    assert arrow_id_type(pd.Series([1, None], dtype="Int64")) == pa.int64()
    assert arrow_id_type(pd.Series(["a", "b"], dtype=object)) == pa.string()
