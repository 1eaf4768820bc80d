"""The tabular reader (``pipelines/tabular/input.py``): schema files, records in CSV (with and
without a header) and Parquet encoded over the schema's public domains with hand-computed codes,
the typed frame, and every bad input as one ``InputError`` line naming the file, row and column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.platform.errors import ConfigError, InputError
from pipelines.tabular.input import read_schema, read_tabular_records, typed_frame
from schemas.base import TableReading
from schemas.tabular.schema import TabularSchema
from tests.unit.pipelines.input_errors import assert_input_error

SCHEMA = TabularSchema.model_validate(
    {
        "attributes": [
            {"type": "numeric", "name": "age", "bounds": [0, 100], "bins": 4, "integer": True},
            {"type": "categorical", "name": "work", "categories": ["Private", "State-gov", "?"]},
            {"type": "numeric", "name": "score", "bounds": [0.0, 1.0], "bin_edges": [0.0, 0.5, 0.9, 1.0],
             "out_of_domain": "clip"},
            {"type": "categorical", "name": "income", "categories": ["<=50K", ">50K"]},
        ]
    }
)
SCHEMA_YAML = """attributes:
  - {type: numeric, name: age, bounds: [0, 100], bins: 4, integer: true}
  - {type: categorical, name: work, categories: ["Private", "State-gov", "?"]}
"""


def test_read_schema_loads_a_file_and_refuses_a_missing_or_invalid_one(tmp_path: Path) -> None:
    path = tmp_path / "schema.yaml"
    path.write_text(SCHEMA_YAML)
    schema = read_schema(path)
    assert schema.names == ("age", "work")
    with pytest.raises(ConfigError) as caught:
        read_schema(tmp_path / "absent.yaml")
    assert str(caught.value) == f"{tmp_path / 'absent.yaml'}: schema file not found"
    path.write_text("attributes:\n  - {type: numeric, name: age, bounds: [5, 1], bins: 2}\n")
    with pytest.raises(ConfigError) as caught:
        read_schema(path)
    text = str(caught.value)
    assert "\n" not in text and text.startswith(f"{path}: invalid schema: ") and "low < high" in text


def test_csv_records_are_encoded_with_hand_computed_codes(tmp_path: Path) -> None:
    path = tmp_path / "adult.csv"
    path.write_text(
        "age, work, score, income\n"
        "0, Private, 0.0, <=50K\n"
        "25, State-gov, 0.5, >50K.\n"
        "99, ?, 0.95, <=50K\n"
        "100, Private, 1.7, >50K\n"
        "74.5, State-gov, -0.2, <=50K.\n"
    )
    records = read_tabular_records(TableReading(path=path, recode={"income": {">50K.": ">50K", "<=50K.": "<=50K"}}),
                                   SCHEMA)
    # age bins [0,25) [25,50) [50,75) [75,100]; score bins [0,0.5) [0.5,0.9) [0.9,1.0] after clipping.
    expected = np.array([[0, 0, 0, 0], [1, 1, 1, 1], [3, 2, 2, 0], [3, 0, 2, 1], [2, 1, 0, 0]], dtype=np.int32)
    assert records.encoded.codes.dtype == np.int32
    np.testing.assert_array_equal(records.encoded.codes, expected)
    assert records.encoded.clipped == {"age": 0, "score": 2}
    frame = records.frame
    assert list(frame.columns) == ["age", "work", "score", "income"]
    assert frame["age"].dtype == np.int64 and frame["age"].tolist() == [0, 25, 99, 100, 74]
    assert frame["score"].dtype == np.float64 and frame["score"].tolist() == [0.0, 0.5, 0.95, 1.0, 0.0]
    assert frame["work"].tolist() == ["Private", "State-gov", "?", "Private", "State-gov"]
    assert frame["income"].tolist() == ["<=50K", ">50K", "<=50K", ">50K", "<=50K"]


def test_a_headerless_csv_takes_the_schema_names_in_order(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("30,Private,0.2,>50K\n60,?,0.6,<=50K\n")
    records = read_tabular_records(TableReading(path=path, header=False), SCHEMA)
    np.testing.assert_array_equal(records.encoded.codes, [[1, 0, 0, 1], [2, 2, 1, 0]])
    assert records.frame["age"].tolist() == [30, 60]


def test_parquet_records_keep_their_numbers(tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    pq.write_table(
        pa.table({"income": [">50K", "<=50K"], "score": [0.49, 0.9], "work": ["?", "Private"],
                  "age": pa.array([24, 50], pa.int64())}),
        path,
    )
    records = read_tabular_records(TableReading(path=path, format="parquet"), SCHEMA)
    np.testing.assert_array_equal(records.encoded.codes, [[0, 2, 0, 1], [2, 0, 2, 0]])
    assert records.frame["age"].tolist() == [24, 50] and records.frame["score"].tolist() == [0.49, 0.9]


def test_typed_frame_rounds_integer_attributes_and_clips_to_the_bounds() -> None:
    frame = pd.DataFrame({"age": ["2.5", "3.5", "-4", "101"], "work": ["?", "?", "?", "?"],
                          "score": ["0.25", "2", "-1", "1"], "income": ["<=50K"] * 4, "extra": ["x"] * 4})
    typed = typed_frame(frame, SCHEMA)
    assert list(typed.columns) == ["age", "work", "score", "income"]
    assert typed["age"].tolist() == [2, 4, 0, 100]
    assert typed["score"].tolist() == [0.25, 1.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("body", "row", "column", "says", "raw"),
    [
        ("age,work,score,income\n1,Private,0.1,>50K\n2,Federal,0.1,>50K\n", 2, "work",
         "value is not one of the schema's categories", "Federal"),
        ("age,work,score,income\n1,Private,0.1,>50K\n2,?,0.1,>50K\nold,?,0.1,>50K\n", 3, "age",
         "value is not a number", "old"),
        ("age,work,score,income\n101,Private,0.1,>50K\n", 1, "age", "value is outside the bounds [0.0, 100.0]",
         "101"),
        ("age,work,score,income\n1,Private,0.1,>50K\n2, ,0.1,>50K\n", 2, "work", "missing value", "?"),
        ("age,work,score,income\n1,Private,0.1,>50K\n2,Private,0.1,\n", 2, "income", "missing value", "?"),
    ],
)
def test_bad_values_name_the_file_row_and_column_not_the_value(
    tmp_path: Path, body: str, row: int, column: str, says: str, raw: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(InputError) as caught:
        read_tabular_records(TableReading(path=path), SCHEMA)
    assert_input_error(caught.value, path, says, row=row, column=column, hides=(raw,))


@pytest.mark.parametrize("spelling", ["NA", "N/A", "n/a", "NULL", "null", "Null", "NaN", "nan", "#N/A", "", " NA "])
def test_null_spellings_in_a_csv_are_missing_values_not_categories(tmp_path: Path, spelling: str) -> None:
    """The CSV missing-value rule (``pipelines.platform.input.NULL_SPELLINGS``): a null spelling is
    a missing value — an error naming the row and column — even where the schema lists it."""
    schema = TabularSchema.model_validate({"attributes": [
        {"type": "categorical", "name": "work", "categories": ["Private", "NA", "null", "nan"]},
        {"type": "numeric", "name": "age", "bounds": [0, 100], "bins": 4},
    ]})
    path = tmp_path / "nulls.csv"
    path.write_text(f"work,age\nPrivate,1\nPrivate,{spelling}\n")
    with pytest.raises(InputError) as caught:
        read_tabular_records(TableReading(path=path), schema)
    assert_input_error(caught.value, path, "missing value", row=2, column="age")
    path.write_text(f"work,age\n{spelling},1\n")
    with pytest.raises(InputError) as caught:
        read_tabular_records(TableReading(path=path), schema)
    assert_input_error(caught.value, path, "missing value", row=1, column="work")


def test_a_recode_maps_a_null_spelling_before_the_missing_value_rule(tmp_path: Path) -> None:
    path = tmp_path / "recoded.csv"
    path.write_text("age,work,score,income\n1,NA,0.1,>50K\n")
    records = read_tabular_records(TableReading(path=path, recode={"work": {"NA": "?"}}), SCHEMA)
    assert records.frame["work"].tolist() == ["?"]


def test_file_level_errors_name_the_file(tmp_path: Path) -> None:
    header_only = tmp_path / "header.csv"
    header_only.write_text("age,work,score,income\n")
    with pytest.raises(InputError) as caught:
        read_tabular_records(TableReading(path=header_only), SCHEMA)
    assert_input_error(caught.value, header_only, "no rows (empty table)")

    wrong_columns = tmp_path / "columns.csv"
    wrong_columns.write_text("age,work,score,salary\n1,?,0.1,>50K\n")
    with pytest.raises(InputError) as caught:
        read_tabular_records(TableReading(path=wrong_columns), SCHEMA)
    assert_input_error(caught.value, wrong_columns, "columns in the schema but not in the data: income; "
                       "columns in the data but not in the schema: salary")

    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    with pytest.raises(InputError) as caught:
        read_tabular_records(TableReading(path=empty, header=False), SCHEMA)
    assert_input_error(caught.value, empty, "empty file")


def test_recode_of_a_column_not_in_the_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("age,work,score,income\n1,?,0.1,>50K\n")
    with pytest.raises(ConfigError, match="recode: column 'salary'"):
        read_tabular_records(TableReading(path=path, recode={"salary": {"a": "b"}}), SCHEMA)


def test_a_parquet_value_outside_its_domain_is_not_shown_in_any_form(tmp_path: Path) -> None:
    """Once a strict xfail (the line showed ``value np.float64(101.0)``): an error line never
    carries the value, neither as a NumPy repr nor as a plain number; the public bounds stay."""
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"age": [1.0, 101.0], "work": ["?", "?"], "score": [0.1, 0.1],
                             "income": [">50K", ">50K"]}), path)
    with pytest.raises(InputError) as caught:
        read_tabular_records(TableReading(path=path, format="parquet"), SCHEMA)
    assert_input_error(caught.value, path, "value is outside the bounds [0.0, 100.0]", row=2, column="age",
                       hides=("101", "np.float64"))


def test_a_csv_without_a_header_row_is_refused_without_showing_its_first_row(tmp_path: Path) -> None:
    path = tmp_path / "headerless.csv"
    path.write_text("41,Private,0.5,>50K\n42,Private,0.5,>50K\n")
    with pytest.raises(InputError) as caught:
        read_tabular_records(TableReading(path=path), SCHEMA)
    assert_input_error(caught.value, path, "a CSV without a header row", "input.header: false",
                       hides=("41", "Private", ">50K"))
    records = read_tabular_records(TableReading(path=path, header=False), SCHEMA)
    assert records.frame["age"].tolist() == [41, 42]


def test_a_capped_read_holds_the_keyed_sample_and_names_a_bad_value_by_its_row_in_the_file(tmp_path: Path) -> None:
    """Issue 15's cap on driver-side samples (the evaluation's held-out file): a file of more than
    ``cap`` rows is read in chunks as the sample of ``cap`` rows the generator draws, in file
    order; a bad value in it is named by its row in the file, not its place in the sample. Rows 40
    onwards hold an age outside the bounds, so the error names the first sampled row ≥ 40 —
    a mutant that names the sample's own position names a smaller row."""
    path = tmp_path / "rows.csv"
    ages = np.where(np.arange(100) < 39, np.arange(100) % 90, 150)
    pd.DataFrame({"age": ages, "work": "?", "score": 0.5, "income": ">50K"}).to_csv(path, index=False)
    good = tmp_path / "good.csv"
    pd.DataFrame({"age": np.arange(100) % 90, "work": "?", "score": 0.5, "income": ">50K"}).to_csv(good, index=False)

    sample = read_tabular_records(TableReading(path=good), SCHEMA, 30, np.random.default_rng(7))
    chosen = np.sort(np.random.default_rng(7).choice(100, size=30, replace=False))
    assert sample.frame["age"].tolist() == (chosen % 90).tolist()
    assert len(read_tabular_records(TableReading(path=good), SCHEMA, 100, np.random.default_rng(7)).frame) == 100

    chosen = np.sort(np.random.default_rng(3).choice(100, size=60, replace=False))
    first_bad = int(chosen[chosen >= 39][0]) + 1
    assert first_bad != int(np.flatnonzero(chosen >= 39)[0]) + 1
    with pytest.raises(InputError) as caught:
        read_tabular_records(TableReading(path=path), SCHEMA, 60, np.random.default_rng(3))
    assert_input_error(caught.value, path, "value is outside the bounds", row=first_bad, column="age", hides=("150",))
