"""The filter reader (``pipelines/filter/input.py``): the feature spec file, records in CSV (with and
without a header) and Parquet turned into hand-computed feature matrices and label codes, owners'
choices, and every bad input as one ``InputError`` line naming the file, row and column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.filter.input import (
    check_label_columns,
    choice_codes,
    label_codes,
    read_feature_spec,
    read_records,
)
from pipelines.platform.errors import ConfigError, InputError
from schemas.filter.config import FilterConfig, FilterTableReading, LabelDefinition
from schemas.filter.features import FeatureSpec
from tests.unit.pipelines.input_errors import assert_input_error
from transforms.core.domain_violation import DomainViolation

SPEC = FeatureSpec.model_validate(
    {
        "features": [
            {"type": "numeric", "name": "age", "bounds": [17, 90], "integer": True},
            {"type": "categorical", "name": "colour", "categories": ["red", "green", "blue"]},
            {"type": "numeric", "name": "weight", "center": 70.0, "scale": 15.0, "bounds": [40, 130],
             "out_of_bounds": "clip"},
        ]
    }
)
LABELS = {
    "sex": LabelDefinition(column="sex", categories=["F", "M"]),
    "income": LabelDefinition(column="income", groups={"low": ["<=50K", "<=50K."], "high": [">50K", ">50K."]}),
    "rich": LabelDefinition(column="capital", above=1000),
}
SPEC_YAML = """features:
  - {type: numeric, name: age, bounds: [17, 90], integer: true}
  - {type: categorical, name: colour, categories: [red, green, blue]}
"""


def config(tmp_path: Path, **changes: object) -> FilterConfig:
    document = {
        "kind": "filter",
        "dataset": "people",
        "lake": str(tmp_path / "lake"),
        "training": {"path": str(tmp_path / "training.csv")},
        "input": {"path": str(tmp_path / "input.csv"), "choice_column": "choice"},
        "feature_spec": str(tmp_path / "spec.yaml"),
        "labels": {name: label.model_dump(exclude_none=True) for name, label in LABELS.items()},
        "choices": [
            {"name": "hide-sex", "private": "sex", "utility": "income", "budget": 1.0},
            {"name": "hide-income", "private": "income", "utility": "sex", "budget": 2.0},
        ],
    }
    document.update(changes)
    return FilterConfig.model_validate(document)


def test_read_feature_spec_loads_a_file_and_refuses_a_bad_one(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC_YAML)
    assert read_feature_spec(path).names == ("age", "colour")
    with pytest.raises(ConfigError, match="feature spec file not found"):
        read_feature_spec(tmp_path / "absent.yaml")
    path.write_text("- age\n- colour\n")
    with pytest.raises(ConfigError) as caught:
        read_feature_spec(path)
    assert str(caught.value) == f"{path}: a feature spec must be a mapping with the key 'features'"
    path.write_text("features:\n  - {type: numeric, name: age}\n")
    with pytest.raises(ConfigError) as caught:
        read_feature_spec(path)
    assert str(caught.value).startswith(f"{path}: features.0") and "\n" not in str(caught.value)


def test_a_private_label_read_from_a_feature_column_is_refused(tmp_path: Path) -> None:
    check_label_columns(config(tmp_path), SPEC)
    leaking = config(tmp_path, labels={**{n: d.model_dump(exclude_none=True) for n, d in LABELS.items()},
                                       "sex": {"column": "colour", "categories": ["red", "blue"]}})
    with pytest.raises(ConfigError, match="choice 'hide-sex': the private label 'sex' is read from column 'colour'"):
        check_label_columns(leaking, SPEC)


def test_label_codes_of_each_form() -> None:
    sex = label_codes(pd.Series(["M", "F", "M"]), LABELS["sex"], "sex")
    assert sex.dtype == np.int64 and sex.tolist() == [1, 0, 1]
    income = label_codes(pd.Series([">50K.", "<=50K", ">50K", "<=50K."], index=[9, 8, 7, 6]), LABELS["income"], "income")
    assert income.tolist() == [1, 0, 1, 0]
    rich = label_codes(pd.Series(["1000", "1000.5", "-3", "2e3"]), LABELS["rich"], "capital")
    assert rich.tolist() == [0, 1, 0, 1]


@pytest.mark.parametrize(
    ("values", "label", "row", "says"),
    [
        (["F", None], "sex", 1, "missing label"),
        (["F", "X"], "sex", 1, "label 'X' is not in the label's category list"),
        ([">50K", None], "income", 1, "missing label"),
        ([">50K", "50K"], "income", 1, "value is in none of the label's groups"),
        (["10", None], "rich", 1, "missing label"),
        (["10", "20", "lots"], "rich", 2, "value is not a finite number"),
        (["10", "inf"], "rich", 1, "value is not a finite number"),
    ],
)
def test_bad_labels_name_the_position_and_column(values: list, label: str, row: int, says: str) -> None:
    with pytest.raises(DomainViolation) as caught:
        label_codes(pd.Series(values, dtype=object), LABELS[label], LABELS[label].column)
    assert (caught.value.row, caught.value.column) == (row, LABELS[label].column)
    assert says in caught.value.message
    if label != "sex":  # the label's own messages carry no value (the categories' come from transforms)
        assert str(values[row]) not in caught.value.message


def test_csv_records_give_hand_computed_features_and_labels(tmp_path: Path) -> None:
    path = tmp_path / "input.csv"
    path.write_text(
        "age, colour, weight, sex, income, capital, choice\n"
        "17, red, 70, F, <=50K, 0, hide-sex\n"
        "90, blue, 145, M, >50K., 5000, hide-income\n"
        "53.5, green, 25, M, <=50K., 1000,\n"
    )
    records = read_records(FilterTableReading(path=path), SPEC, {"sex": LABELS["sex"], "income": LABELS["income"]},
                           extra_columns=("choice",))
    expected = np.array(
        [
            [0.0, 1, 0, 0, 0.0],
            [1.0, 0, 0, 1, (130 - 70) / 15],
            [(53.5 - 17) / 73, 0, 1, 0, (40 - 70) / 15],
        ],
        dtype=np.float32,
    )
    assert records.features.dtype == np.float32
    np.testing.assert_array_equal(records.features, expected)
    assert set(records.labels) == {"sex", "income"}
    assert records.labels["sex"].tolist() == [0, 1, 1] and records.labels["income"].tolist() == [0, 1, 0]
    assert records.clipped == {"age": 0, "weight": 2}
    assert records.frame["choice"].tolist() == ["hide-sex", "hide-income", None]
    assert records.frame["colour"].tolist() == ["red", "blue", "green"]


def test_a_headerless_csv_and_a_parquet_file_give_the_same_records(tmp_path: Path) -> None:
    headerless = tmp_path / "rows.csv"
    headerless.write_text("M,30,green,65.5\nF,45,red,80\n")
    reading = FilterTableReading(path=headerless, header=False, columns=["sex", "age", "colour", "weight"])
    from_csv = read_records(reading, SPEC, {"sex": LABELS["sex"]})
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"sex": ["M", "F"], "age": pa.array([30, 45], pa.int64()), "colour": ["green", "red"],
                             "weight": [65.5, 80.0]}), parquet)
    from_parquet = read_records(FilterTableReading(path=parquet, format="parquet"), SPEC, {"sex": LABELS["sex"]})
    expected = np.array([[13 / 73, 0, 1, 0, -4.5 / 15], [28 / 73, 1, 0, 0, 10 / 15]], dtype=np.float32)
    np.testing.assert_array_equal(from_csv.features, expected)
    np.testing.assert_array_equal(from_parquet.features, expected)
    assert from_csv.labels["sex"].tolist() == from_parquet.labels["sex"].tolist() == [1, 0]


@pytest.mark.parametrize(
    ("body", "row", "column", "says", "raw"),
    [
        ("age,colour,weight,sex\n20,red,70,F\n91,red,70,F\n", 2, "age",
         "value is outside the bounds [17.0, 90.0]", "91"),
        ("age,colour,weight,sex\n20,red,70,F\n20,pink,70,F\n", 2, "colour",
         "value is not in the feature's category list", "pink"),
        ("age,colour,weight,sex\n20,red,70,F\n20,red,heavy,F\n", 2, "weight", "value is not a finite number", "heavy"),
        ("age,colour,weight,sex\n20,red,70,F\n20,,70,F\n", 2, "colour", "missing value", "?"),
        ("age,colour,weight,sex\n20,red,70,F\n20,NA,70,F\n", 2, "colour", "missing value", "NA"),
        ("age,colour,weight,sex\n20,red,70,F\n20,red,70,X\n", 2, "sex", "label is not in the label's category list",
         "X"),
    ],
)
def test_bad_values_name_the_file_row_and_column_not_the_value(tmp_path: Path, body: str, row: int, column: str,
                                                               says: str, raw: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(InputError) as caught:
        read_records(FilterTableReading(path=path), SPEC, {"sex": LABELS["sex"]})
    assert_input_error(caught.value, path, says, row=row, column=column, hides=(raw,))


def test_file_level_errors_name_the_file(tmp_path: Path) -> None:
    no_sex = tmp_path / "no_sex.csv"
    no_sex.write_text("age,colour,weight\n20,red,70\n")
    with pytest.raises(InputError) as caught:
        read_records(FilterTableReading(path=no_sex), SPEC, {"sex": LABELS["sex"]})
    assert_input_error(caught.value, no_sex, "no column 'sex' (columns: age, colour, weight)")
    with pytest.raises(InputError) as caught:
        read_records(FilterTableReading(path=no_sex), SPEC, {}, extra_columns=("choice",))
    assert_input_error(caught.value, no_sex, "no column 'choice'")
    header_only = tmp_path / "header.csv"
    header_only.write_text("age,colour,weight,sex\n")
    with pytest.raises(InputError) as caught:
        read_records(FilterTableReading(path=header_only), SPEC, {})
    assert_input_error(caught.value, header_only, "no rows (empty table)")


def test_choices_by_name_with_a_default_or_a_fallback(tmp_path: Path) -> None:
    frame = pd.DataFrame({"choice": ["hide-income", None, "hide-sex"]}, index=[5, 6, 7])
    with_default = config(tmp_path, default_choice="hide-income")
    assert choice_codes(frame, with_default.input, with_default).tolist() == [1, 1, 0]
    no_column = config(tmp_path, input={"path": str(tmp_path / "input.csv")}, default_choice="hide-income")
    codes = choice_codes(frame, no_column.input, no_column)
    assert codes.dtype == np.int64 and codes.tolist() == [1, 1, 1]
    single = config(tmp_path, input={"path": str(tmp_path / "input.csv")},
                    choices=[{"name": "only", "private": "sex", "utility": "income", "budget": 1.0}])
    assert choice_codes(frame, single.input, single).tolist() == [0, 0, 0]


def test_a_missing_or_unknown_choice_names_the_row_and_column(tmp_path: Path) -> None:
    settings = config(tmp_path)
    path = tmp_path / "input.csv"
    with pytest.raises(InputError) as caught:
        choice_codes(pd.DataFrame({"choice": ["hide-sex", "hide-sex", None]}), settings.input, settings)
    assert_input_error(caught.value, path, "no choice (and no default_choice in the config)", row=3, column="choice")
    with pytest.raises(InputError) as caught:
        choice_codes(pd.DataFrame({"choice": ["hide-sex", "hide-all"]}), settings.input, settings)
    assert_input_error(caught.value, path, "unknown choice (choices: hide-sex, hide-income)",
                       row=2, column="choice", hides=("hide-all",))


def test_a_parquet_label_outside_its_categories_is_not_shown_in_any_form(tmp_path: Path) -> None:
    """Once a strict xfail (the line showed ``label np.int64(3)``): an error line never carries
    the label, neither as a NumPy repr nor as a plain value."""
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"age": [20, 20], "colour": ["red", "red"], "weight": [70.0, 70.0], "grade": [1, 3]}), path)
    grade = LabelDefinition(column="grade", categories=["1", "2"])
    with pytest.raises(InputError) as caught:
        read_records(FilterTableReading(path=path, format="parquet"), SPEC, {"grade": grade})
    assert_input_error(caught.value, path, "label is not in the label's category list", row=2, column="grade",
                       hides=("3", "np.int64"))
