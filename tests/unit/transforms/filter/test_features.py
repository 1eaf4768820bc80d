"""The feature matrix: public scaling and one-hot codes, validation errors, and the decoding rule."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from schemas.filter.features import FeatureSpec
from transforms.filter.features import (
    FeatureDomainViolation,
    FeatureLayout,
    decode_features,
    encode_features,
    encode_label,
    feature_fingerprint,
    feature_layout,
)

AGE = {"type": "numeric", "name": "age", "bounds": [17, 90], "integer": True}
COLOUR = {"type": "categorical", "name": "colour", "categories": ["red", "green", "blue"]}
WEIGHT = {"type": "numeric", "name": "weight", "center": 70.0, "scale": 15.0}
GRADE = {"type": "categorical", "name": "grade", "categories": ["1", "2", "3", "4"]}


def make_spec(*features: dict) -> FeatureSpec:
    return FeatureSpec.model_validate({"features": list(features)})


def test_layout_places_numeric_columns_and_categorical_blocks_in_spec_order() -> None:
    layout = feature_layout(make_spec(AGE, COLOUR, WEIGHT, GRADE))
    assert layout == FeatureLayout(width=9, numeric_columns=(0, 4), categorical_blocks=((1, 4), (5, 9)))
    assert FeatureLayout.from_dict(layout.to_dict()) == layout


def test_encoding_matches_a_hand_computation() -> None:
    spec = make_spec(AGE, COLOUR, WEIGHT)
    frame = pd.DataFrame(
        {"weight": [85.0, 40.0], "colour": ["blue", "red"], "age": [17, 53], "label": [1, 0]}
    )
    encoded = encode_features(frame, spec)
    expected = np.array(
        [[0.0, 0, 0, 1, (85 - 70) / 15], [(53 - 17) / 73, 1, 0, 0, (40 - 70) / 15]], dtype=np.float32
    )
    assert encoded.matrix.dtype == np.float32
    np.testing.assert_allclose(encoded.matrix, expected, rtol=1e-6)
    assert encoded.clipped == {"age": 0, "weight": 0}


def test_round_trip_reproduces_records_within_the_domain() -> None:
    rng = np.random.default_rng(11)
    spec = make_spec(AGE, COLOUR, WEIGHT, GRADE)
    rows = 500
    frame = pd.DataFrame(
        {
            "age": rng.integers(17, 91, rows),
            "colour": rng.choice(["red", "green", "blue"], rows).astype(object),
            "weight": rng.normal(70, 20, rows),
            "grade": rng.choice(["1", "2", "3", "4"], rows).astype(object),
        }
    )
    decoded = decode_features(encode_features(frame, spec).matrix, spec)
    assert list(decoded.columns) == ["age", "colour", "weight", "grade"]
    assert decoded["age"].dtype == np.int64
    np.testing.assert_array_equal(decoded["age"], frame["age"])
    np.testing.assert_array_equal(decoded["colour"], frame["colour"])
    np.testing.assert_array_equal(decoded["grade"], frame["grade"])
    np.testing.assert_allclose(decoded["weight"], frame["weight"], rtol=1e-5, atol=1e-4)


def test_decoding_clips_to_bounds_rounds_integers_and_takes_the_largest_category_score() -> None:
    spec = make_spec(AGE, COLOUR)
    matrix = np.array(
        [
            [-0.3, 0.2, 0.5, 0.3],
            [1.7, 2.0, -1.0, 0.0],
            [0.5, 0.3, 0.3, 0.1],
            [(40.4 - 17) / 73, -5.0, -4.0, -3.5],
        ]
    )
    decoded = decode_features(matrix, spec)
    assert decoded["age"].tolist() == [17, 90, 54, 40]
    assert decoded["colour"].tolist() == ["green", "red", "red", "blue"]
    with pytest.raises(ValueError, match="shape"):
        decode_features(matrix[:, :3], spec)


def test_invalid_values_name_the_row_and_column() -> None:
    spec = make_spec(AGE, COLOUR)
    cases = [
        (
            {"age": [20, 30, 40], "colour": ["red", "purple", "blue"]},
            1,
            "colour",
            "not in the feature's category",
        ),
        ({"age": [20, None, 40], "colour": ["red", "red", "blue"]}, 1, "age", "not a finite number"),
        ({"age": [20, 30, "old"], "colour": ["red", "red", "blue"]}, 2, "age", "not a finite number"),
        ({"age": [20, 30, 140], "colour": ["red", "red", "blue"]}, 2, "age", "outside the bounds"),
        ({"age": [20, 30, 40], "colour": ["red", None, "blue"]}, 1, "colour", "missing value"),
    ]
    for columns, row, column, message in cases:
        with pytest.raises(FeatureDomainViolation, match=message) as caught:
            encode_features(pd.DataFrame(columns), spec)
        assert (caught.value.row, caught.value.column) == (row, column)
    with pytest.raises(KeyError, match="colour"):
        encode_features(pd.DataFrame({"age": [20]}), spec)


def test_out_of_bounds_clip_clips_and_counts() -> None:
    spec = make_spec({**AGE, "out_of_bounds": "clip"})
    encoded = encode_features(pd.DataFrame({"age": [5, 50, 120, 90]}), spec)
    assert encoded.clipped == {"age": 2}
    np.testing.assert_allclose(encoded.matrix[:, 0], [0.0, 33 / 73, 1.0, 1.0], rtol=1e-6)


def test_labels_are_coded_over_their_public_categories() -> None:
    codes = encode_label(pd.Series(["<=50K", ">50K", ">50K"]), ["<=50K", ">50K"], "income")
    np.testing.assert_array_equal(codes, [0, 1, 1])
    with pytest.raises(FeatureDomainViolation, match="row 1, column 'income'"):
        encode_label(pd.Series(["<=50K", ">50K.", ">50K"]), ["<=50K", ">50K"], "income")


def test_fingerprint_changes_with_the_data_and_the_spec() -> None:
    spec = make_spec(AGE, COLOUR)
    matrix = encode_features(pd.DataFrame({"age": [20, 30], "colour": ["red", "blue"]}), spec).matrix
    first = feature_fingerprint(matrix, spec)
    assert first == feature_fingerprint(matrix.copy(), spec)
    changed = matrix.copy()
    changed[0, 0] += 0.01
    assert feature_fingerprint(changed, spec)["features_sha256"] != first["features_sha256"]
    assert (
        feature_fingerprint(matrix, make_spec({**AGE, "bounds": [0, 100]}, COLOUR))["spec_sha256"]
        != first["spec_sha256"]
    )
    assert (first["rows"], first["width"]) == (2, 4)


def test_decoded_integers_stay_inside_half_integer_bounds() -> None:
    """Bounds like ``[0.5, 16.5]`` (a rank): rounding after clipping would give 0 or 17, outside the
    spec; the decoded record must satisfy its own spec and encode again without error."""
    spec = make_spec({"type": "numeric", "name": "rank", "bounds": [0.5, 16.5], "integer": True})
    decoded = decode_features(np.array([[-0.2], [0.0], [0.55], [1.0], [1.3]]), spec)
    assert decoded["rank"].tolist() == [1, 1, 9, 16, 16]
    encode_features(decoded, spec)
