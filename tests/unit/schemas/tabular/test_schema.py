"""The tabular schema file: valid documents parse, every malformed one is refused with a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from schemas.tabular.schema import (
    CategoricalAttribute,
    NumericAttribute,
    TabularSchema,
    load_tabular_schema,
)

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


def numeric(**fields) -> dict:
    return {"type": "numeric", "name": "x", "bounds": [0, 10], **fields}


def test_valid_schema_parses_with_discriminated_types_and_domain_sizes() -> None:
    schema = TabularSchema.model_validate(
        {
            "attributes": [
                {"type": "categorical", "name": "colour", "categories": ["red", "green", "blue"]},
                numeric(name="width", bins=4),
                numeric(name="height", bin_edges=[0, 1, 5, 10], integer=True, out_of_domain="clip"),
            ]
        }
    )
    colour, width, height = schema.attributes
    assert isinstance(colour, CategoricalAttribute) and colour.domain_size == 3
    assert isinstance(width, NumericAttribute) and width.domain_size == 4 and width.out_of_domain == "error"
    assert isinstance(height, NumericAttribute) and height.domain_size == 3 and height.integer
    assert schema.names == ("colour", "width", "height")


@pytest.mark.parametrize(
    ("attribute", "message"),
    [
        ({"type": "categorical", "name": "c", "categories": []}, "at least 1"),
        ({"type": "categorical", "name": "c", "categories": ["a", "b", "a"]}, "listed twice"),
        ({"type": "categorical", "name": "", "categories": ["a"]}, "at least 1"),
        ({"type": "ordinal", "name": "c", "categories": ["a"]}, "tag"),
        ({"type": "categorical", "name": "c", "categories": ["a"], "colour": "red"}, "Extra inputs"),
        (numeric(bounds=[5, 5], bins=2), "low < high"),
        (numeric(bounds=[6, 5], bins=2), "low < high"),
        (numeric(bounds=[0, float("inf")], bins=2), "finite"),
        (numeric(bins=0), "greater than or equal to 1"),
        (numeric(), "exactly one of bins"),
        (numeric(bins=3, bin_edges=[0, 5, 10]), "exactly one of bins"),
        (numeric(bin_edges=[0, 5, 5, 10]), "strictly increasing"),
        (numeric(bin_edges=[0, 6, 5, 10]), "strictly increasing"),
        (numeric(bin_edges=[1, 5, 10]), "start at the lower bound"),
        (numeric(bin_edges=[0, 5, 9]), "end at the upper bound"),
        (numeric(bin_edges=[0]), "at least two edges"),
        (numeric(bounds=[0.2, 0.8], bins=2, integer=True), "contain no integer"),
        (numeric(bins=2, out_of_domain="wrap"), "'error' or 'clip'"),
    ],
)
def test_malformed_attributes_are_refused(attribute: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        TabularSchema.model_validate({"attributes": [attribute]})


def test_names_must_be_unique_and_attributes_non_empty() -> None:
    with pytest.raises(ValidationError, match="used twice"):
        TabularSchema.model_validate({"attributes": [numeric(bins=2), numeric(bins=3)]})
    with pytest.raises(ValidationError, match="at least 1"):
        TabularSchema.model_validate({"attributes": []})
    with pytest.raises(ValidationError, match="Extra inputs"):
        TabularSchema.model_validate({"attributes": [numeric(bins=2)], "version": 2})


def test_load_reports_the_file_and_the_location(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ValueError, match="absent.yaml: cannot read"):
        load_tabular_schema(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("attributes: [unclosed\n")
    with pytest.raises(ValueError, match="broken.yaml: not valid YAML"):
        load_tabular_schema(broken)
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(ValueError, match="must be a mapping"):
        load_tabular_schema(listing)
    bad = tmp_path / "bad.yaml"
    bad.write_text("attributes:\n  - {type: numeric, name: x, bounds: [3, 1], bins: 2}\n")
    with pytest.raises(ValueError, match=r"bad.yaml: invalid schema: attributes\.0\.numeric.*low < high"):
        load_tabular_schema(bad)


def test_yaml_booleans_as_categories_get_a_quoting_hint(tmp_path: Path) -> None:
    path = tmp_path / "answers.yaml"
    path.write_text("attributes:\n  - {type: categorical, name: answer, categories: [yes, no]}\n")
    with pytest.raises(ValueError, match="quote values"):
        load_tabular_schema(path)
    path.write_text("attributes:\n  - {type: categorical, name: answer, categories: ['yes', 'no']}\n")
    assert load_tabular_schema(path).attributes[0].categories == ["yes", "no"]  # type: ignore[union-attr]


def test_example_schemas_load_with_the_documented_columns() -> None:
    adult = load_tabular_schema(EXAMPLES / "tabular_adult_schema.yaml")
    assert adult.names == (
        "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
        "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
        "income",
    )  # fmt: skip
    by_name = {attribute.name: attribute for attribute in adult.attributes}
    assert len(by_name["education"].categories) == 16  # type: ignore[union-attr]
    assert len(by_name["native-country"].categories) == 41 + 1  # type: ignore[union-attr]
    assert by_name["age"].bounds == (17.0, 90.0)  # type: ignore[union-attr]
    abalone = load_tabular_schema(EXAMPLES / "tabular_abalone_schema.yaml")
    assert abalone.names[0] == "sex" and abalone.names[-1] == "rings" and len(abalone.names) == 9
