"""Encoding to codes over public domains, its validation errors, and the decoding rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from schemas.tabular.schema import TabularSchema, load_tabular_schema
from transforms.tabular.encoding import (
    ColumnMismatch,
    DomainViolation,
    bin_edges,
    decode_records,
    domain_sizes,
    encode_records,
)

REPOSITORY = Path(__file__).resolve().parents[4]
DATASETS = REPOSITORY.parent / "shared" / "datasets"


def make_schema(*attributes: dict) -> TabularSchema:
    return TabularSchema.model_validate({"attributes": list(attributes)})


COLOUR = {"type": "categorical", "name": "colour", "categories": ["red", "green", "blue"]}
SIZE = {"type": "numeric", "name": "size", "bounds": [0, 3], "bin_edges": [0, 1, 2, 3]}


def test_codes_are_category_positions_and_half_open_bins_with_a_closed_last_bin() -> None:
    schema = make_schema(COLOUR, SIZE)
    frame = pd.DataFrame(
        {"colour": ["blue", "red", "green", "red", "blue"], "size": [0.0, 0.999, 1.0, 2.5, 3.0]}
    )
    encoded = encode_records(frame, schema)
    assert encoded.codes.dtype == np.int32
    np.testing.assert_array_equal(encoded.codes, [[2, 0], [0, 0], [1, 1], [0, 2], [2, 2]])
    assert encoded.clipped == {"size": 0}
    assert domain_sizes(schema) == (3, 3)


def test_equal_width_bins_match_a_direct_computation() -> None:
    attribute = {"type": "numeric", "name": "x", "bounds": [-2.0, 5.0], "bins": 7}
    schema = make_schema(attribute)
    values = np.random.default_rng(3).uniform(-2.0, 5.0, 2000)
    values[:3] = [-2.0, 5.0, 0.0]
    codes = encode_records(pd.DataFrame({"x": values}), schema).codes[:, 0]
    width = 1.0
    expected = [min(int((value + 2.0) // width), 6) for value in values]
    np.testing.assert_array_equal(codes, expected)
    np.testing.assert_allclose(bin_edges(schema.attributes[0]), np.arange(-2.0, 5.5, 1.0))  # type: ignore[arg-type]


def test_numeric_text_values_are_parsed_and_categorical_numbers_compared_as_text() -> None:
    schema = make_schema(
        {"type": "categorical", "name": "grade", "categories": ["1", "2"]},
        {"type": "numeric", "name": "score", "bounds": [0, 10], "bins": 2},
    )
    frame = pd.DataFrame({"grade": [2, 1], "score": ["7.5", " 2"]})
    np.testing.assert_array_equal(encode_records(frame, schema).codes, [[1, 1], [0, 0]])


@pytest.mark.parametrize(
    ("frame", "row", "column", "message"),
    [
        (pd.DataFrame({"colour": ["red", "purple"], "size": [1, 1]}), 1, "colour", "not one of the schema"),
        (pd.DataFrame({"colour": ["red", None], "size": [1, 1]}), 1, "colour", "missing value"),
        (pd.DataFrame({"colour": ["red", "red", "red"], "size": [1, np.nan, 2]}), 1, "size", "missing value"),
        (pd.DataFrame({"colour": ["red", "red"], "size": ["1", "big"]}), 1, "size", "not a number"),
        (pd.DataFrame({"colour": ["red", "red"], "size": [True, False]}), 0, "size", "not a number"),
        (
            pd.DataFrame({"colour": ["red", "red", "red"], "size": [1, 2, 3.5]}),
            2,
            "size",
            "outside the bounds",
        ),
        (pd.DataFrame({"colour": ["red", "red"], "size": [-0.1, 1]}), 0, "size", "outside the bounds"),
        (pd.DataFrame({"colour": ["red", "red"], "size": [1, np.inf]}), 1, "size", "outside the bounds"),
    ],
)
def test_domain_violations_name_the_row_and_column(
    frame: pd.DataFrame, row: int, column: str, message: str
) -> None:
    frame.index = [100 + i for i in range(len(frame))]
    with pytest.raises(DomainViolation, match=message) as caught:
        encode_records(frame, make_schema(COLOUR, SIZE))
    assert caught.value.row == row and caught.value.column == column
    assert f"row {row}, column {column!r}" in str(caught.value)


def test_clip_counts_and_clips_values_outside_bounds() -> None:
    schema = make_schema({**SIZE, "out_of_domain": "clip"})
    encoded = encode_records(pd.DataFrame({"size": [-5.0, 0.5, 9.0, 3.0, 4.0]}), schema)
    np.testing.assert_array_equal(encoded.codes[:, 0], [0, 0, 2, 2, 2])
    assert encoded.clipped == {"size": 3}


def test_columns_must_match_the_schema() -> None:
    schema = make_schema(COLOUR, SIZE)
    with pytest.raises(ColumnMismatch, match="in the schema but not in the data: size"):
        encode_records(pd.DataFrame({"colour": ["red"]}), schema)
    with pytest.raises(ColumnMismatch, match="in the data but not in the schema: extra"):
        encode_records(pd.DataFrame({"colour": ["red"], "size": [1], "extra": [0]}), schema)
    reordered = encode_records(pd.DataFrame({"size": [2.5], "colour": ["green"]}), schema)
    np.testing.assert_array_equal(reordered.codes, [[1, 2]])


def test_decoding_reencodes_to_the_same_codes() -> None:
    schema = make_schema(
        COLOUR,
        {"type": "numeric", "name": "width", "bounds": [-1, 1], "bins": 8},
        {
            "type": "numeric",
            "name": "count",
            "bounds": [0.5, 20.5],
            "bin_edges": [0.5, 1.5, 4.5, 20.5],
            "integer": True,
        },
        {
            "type": "numeric",
            "name": "age",
            "bounds": [17, 90],
            "bin_edges": [17, 20, 25.5, 90],
            "integer": True,
        },
    )
    rng = np.random.default_rng(5)
    codes = np.stack([rng.integers(0, size, 20000) for size in domain_sizes(schema)], axis=1).astype(np.int32)
    frame = decode_records(codes, schema, rng)
    assert list(frame.columns) == ["colour", "width", "count", "age"]
    assert frame["colour"].dtype == object and frame["width"].dtype == np.float64
    assert frame["count"].dtype == np.int64 and frame["age"].dtype == np.int64
    np.testing.assert_array_equal(encode_records(frame, schema).codes, codes)


def test_integer_values_are_uniform_over_the_integers_of_their_bin() -> None:
    schema = make_schema(
        {"type": "numeric", "name": "n", "bounds": [0, 100], "bin_edges": [0, 9.5, 100], "integer": True}
    )
    rng = np.random.default_rng(8)
    values = decode_records(np.zeros((50000, 1), dtype=np.int32), schema, rng)["n"].to_numpy()
    observed = np.bincount(values, minlength=10)
    assert observed.size == 10
    assert stats.chisquare(observed).pvalue > 1e-3
    last = decode_records(np.ones((50000, 1), dtype=np.int32), schema, rng)["n"].to_numpy()
    assert last.min() == 10 and last.max() == 100
    last_counts = np.bincount(last - 10, minlength=91)
    assert stats.chisquare(last_counts).pvalue > 1e-3
    skewed = np.where(np.arange(last_counts.size) < 45, last_counts * 1.2, last_counts * 0.8)
    assert stats.chisquare(skewed, f_exp=np.full(91, skewed.sum() / 91)).pvalue < 1e-6


def test_continuous_values_are_uniform_within_their_bin() -> None:
    schema = make_schema({"type": "numeric", "name": "x", "bounds": [0, 10], "bin_edges": [0, 2, 10]})
    values = decode_records(np.ones((20000, 1), dtype=np.int32), schema, np.random.default_rng(9))[
        "x"
    ].to_numpy()
    assert values.min() >= 2.0 and values.max() <= 10.0
    assert stats.kstest(values, stats.uniform(loc=2, scale=8).cdf).pvalue > 1e-3
    assert stats.kstest(values, stats.uniform(loc=2, scale=9).cdf).pvalue < 1e-6


def test_a_bin_without_integers_releases_the_nearest_integer_within_bounds() -> None:
    schema = make_schema(
        {"type": "numeric", "name": "a", "bounds": [0.2, 1.7], "bin_edges": [0.2, 0.4, 1.7], "integer": True},
        {"type": "numeric", "name": "b", "bounds": [0, 3], "bin_edges": [0, 1.2, 1.6, 3], "integer": True},
    )
    codes = np.array([[0, 1], [1, 0], [1, 2]], dtype=np.int32)
    frame = decode_records(codes, schema, np.random.default_rng(1))
    assert frame["a"].iloc[0] == 1  # midpoint 0.3 rounds to 0, clamped up to ceil(0.2) = 1
    assert frame["a"].iloc[1] == 1  # [0.4, 1.7] holds only 1
    assert frame["b"].iloc[0] == 1  # midpoint 1.4 of [1.2, 1.6)
    assert frame["b"].iloc[1] in (0, 1) and frame["b"].iloc[2] in (2, 3)


def test_decode_refuses_codes_outside_the_domain() -> None:
    schema = make_schema(COLOUR)
    with pytest.raises(ValueError, match="outside 0..2"):
        decode_records(np.array([[3]]), schema, np.random.default_rng(0))


def read_adult(path: Path, schema: TabularSchema) -> pd.DataFrame:
    frame = pd.read_csv(path, header=None, names=list(schema.names), skipinitialspace=True, dtype=str)
    frame["income"] = frame["income"].str.rstrip(".")
    return frame


def test_example_schemas_encode_the_real_adult_and_abalone_files() -> None:
    assert DATASETS.is_dir(), f"the shared datasets folder is missing: {DATASETS}"
    adult = load_tabular_schema(REPOSITORY / "examples" / "tabular_adult_schema.yaml")
    train = encode_records(read_adult(DATASETS / "adult" / "adult-train.csv", adult), adult)
    assert train.codes.shape == (32561, 15)
    names = list(adult.names)
    sex = np.bincount(train.codes[:, names.index("sex")], minlength=2)
    income = np.bincount(train.codes[:, names.index("income")], minlength=2)
    assert sex.tolist() == [10771, 21790]  # PROVENANCE.txt: Male 21790 / Female 10771
    assert income.tolist() == [24720, 7841]  # PROVENANCE.txt: <=50K 24720 / >50K 7841
    test = encode_records(read_adult(DATASETS / "adult" / "adult-test.csv", adult), adult)
    assert np.bincount(test.codes[:, names.index("income")]).tolist() == [12435, 3846]

    abalone = load_tabular_schema(REPOSITORY / "examples" / "tabular_abalone_schema.yaml")
    frame = pd.read_csv(
        DATASETS / "abalone" / "abalone.csv", header=None, names=list(abalone.names), dtype={"sex": str}
    )
    encoded = encode_records(frame, abalone)
    assert encoded.codes.shape == (4177, 9)
    assert np.bincount(encoded.codes[:, 0]).tolist() == [1528, 1307, 1342]  # PROVENANCE.txt: M, F, I
    rings_edges = bin_edges(abalone.attributes[-1])  # type: ignore[arg-type]
    above_ten = int(np.sum(rings_edges[encoded.codes[:, -1]] >= 10.5))
    assert above_ten == 1447  # PROVENANCE.txt: Rings > 10 in 1447 of 4177


def test_flag_records_makes_encode_records_decisions_without_stopping() -> None:
    """Random corruptions: the codes of good records equal ``encode_records``', and the first flagged
    (attribute, problem) in check order is at the row ``encode_records`` raises for, with its words."""
    from pipelines.platform.input import domain_reason
    from transforms.tabular.encoding import flag_records, problem_reason

    schema = TabularSchema.model_validate({"attributes": [
        {"type": "numeric", "name": "age", "bounds": [0, 100], "bins": 4, "integer": True},
        {"type": "categorical", "name": "work", "categories": ["a", "b", "?"]},
        {"type": "numeric", "name": "score", "bounds": [0.0, 1.0], "bins": 3, "out_of_domain": "clip"},
        {"type": "numeric", "name": "hours", "bounds": [1, 99], "bins": 5},
    ]})
    rng = np.random.default_rng(2)
    for trial in range(60):
        size = 40
        frame = pd.DataFrame({
            "age": rng.integers(0, 101, size).astype(str), "work": rng.choice(["a", "b", "?"], size),
            "score": rng.uniform(-0.5, 1.5, size).astype(str), "hours": rng.integers(1, 100, size).astype(float),
        }).astype(object)
        for _ in range(trial % 4):
            row, column = int(rng.integers(size)), str(rng.choice(frame.columns))
            frame.loc[row, column] = rng.choice([None, "x", "500", "-3"])
        flagged = flag_records(frame, schema)
        try:
            encoded = encode_records(frame, schema)
        except DomainViolation as violation:
            position, problem = min(flagged.problems)
            attribute = schema.attributes[position]
            assert attribute.name == violation.column
            assert int(np.flatnonzero(flagged.problems[(position, problem)])[0]) == violation.row
            assert problem_reason(attribute, problem) == domain_reason(violation.message)
        else:
            assert flagged.problems == {}
            np.testing.assert_array_equal(flagged.codes, encoded.codes)
            assert flagged.clipped == encoded.clipped
