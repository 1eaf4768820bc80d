"""The filter release's worker-side functions (``pipelines/filter/blocks.py``): the compact staging of
feature matrices against hand-built one-hot matrices, the schemas, and a privatized batch against
``privatize_features`` and ``decode_features`` called directly on the same VAE."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from pipelines.filter.blocks import (
    PRIVATE_COLUMN,
    UTILITY_COLUMN,
    PrivatizationSide,
    compact_features,
    expand_features,
    feature_columns,
    output_schema,
    privatized_rows,
    staged_schema,
)
from schemas.filter.expectations import FILTER_CHOICE_COLUMN, FILTER_RECORD_COLUMN
from schemas.filter.features import FeatureSpec
from transforms.filter.features import decode_features, encode_features, feature_layout
from transforms.filter.latent_filter import LinearLatentFilter
from transforms.filter.privatization import privatize_features
from transforms.filter.vae import VaeArchitecture, VaeArtifact, VariationalAutoencoder

SECRET = bytes(range(32))
SPEC = FeatureSpec.model_validate(
    {
        "features": [
            {"type": "numeric", "name": "age", "bounds": [17, 90], "integer": True},
            {"type": "categorical", "name": "colour", "categories": ["red", "green", "blue"]},
            {"type": "numeric", "name": "weight", "center": 70.0, "scale": 15.0},
            {"type": "categorical", "name": "grade", "categories": ["1", "2"]},
        ]
    }
)


def test_staged_schema_holds_compact_feature_columns() -> None:
    assert feature_columns(SPEC) == ["f0", "f1", "f2", "f3"]
    schema = staged_schema(SPEC)
    assert schema.names == [FILTER_RECORD_COLUMN, FILTER_CHOICE_COLUMN, PRIVATE_COLUMN, UTILITY_COLUMN,
                            "f0", "f1", "f2", "f3"]
    assert [field.type for field in schema] == [pa.int64(), pa.int32(), pa.int32(), pa.int32(),
                                                pa.float32(), pa.int16(), pa.float32(), pa.int16()]
    assert not any(field.nullable for field in schema)


def test_compact_columns_expand_back_to_the_exact_one_hot_matrix() -> None:
    matrix = np.array(
        [
            [0.25, 0, 0, 1, -1.5, 0, 1],
            [1.0, 1, 0, 0, 0.125, 1, 0],
            [0.0, 0, 1, 0, 3.0, 0, 1],
        ],
        dtype=np.float32,
    )
    columns = compact_features(matrix, SPEC)
    assert [column.dtype for column in columns] == [np.float32, np.int16, np.float32, np.int16]
    assert columns[1].tolist() == [2, 0, 1] and columns[3].tolist() == [1, 0, 1]
    assert columns[0].tolist() == [0.25, 1.0, 0.0] and columns[2].tolist() == [-1.5, 0.125, 3.0]
    frame = pd.DataFrame(dict(zip(feature_columns(SPEC), columns, strict=True)))
    expanded = expand_features(frame, SPEC)
    assert expanded.dtype == np.float32
    np.testing.assert_array_equal(expanded, matrix)
    records = pd.DataFrame({"age": [17, 90], "colour": ["blue", "green"], "weight": [55.0, 100.0],
                            "grade": ["2", "1"]})
    encoded = encode_features(records, SPEC).matrix
    np.testing.assert_array_equal(
        expand_features(pd.DataFrame(dict(zip(feature_columns(SPEC), compact_features(encoded, SPEC), strict=True))),
                        SPEC),
        encoded,
    )


def test_output_schema_types() -> None:
    schema = output_schema(SPEC, ["income", "sex"])
    assert schema.names == [FILTER_RECORD_COLUMN, FILTER_CHOICE_COLUMN, "age", "colour", "weight", "grade",
                            "income", "sex"]
    assert [field.type for field in schema] == [pa.int64(), pa.string(), pa.int64(), pa.string(), pa.float64(),
                                                pa.string(), pa.string(), pa.string()]
    assert [field.nullable for field in schema] == [False] * 6 + [True, True]


def artifact_bytes() -> bytes:
    model = VariationalAutoencoder(VaeArchitecture(feature_layout(SPEC), 3, (8,)), torch.Generator().manual_seed(4))
    model.eval()
    return VaeArtifact(model, SPEC, {}, {}).to_bytes()


def test_a_privatized_batch_is_privatize_features_decoded_with_its_choices_and_utility_labels() -> None:
    rng = np.random.default_rng(6)
    rows = 40
    records = pd.DataFrame({"age": rng.integers(17, 91, rows), "colour": rng.choice(["red", "green", "blue"], rows),
                            "weight": rng.normal(70, 15, rows), "grade": rng.choice(["1", "2"], rows)})
    features = encode_features(records, SPEC).matrix
    positions = np.arange(100, 100 + rows, dtype=np.int64)
    choices = rng.integers(0, 2, rows)
    private = rng.integers(0, 2, rows)
    utility = np.where(choices == 0, rng.integers(0, 2, rows), rng.integers(0, 3, rows))
    staged = pd.DataFrame({FILTER_RECORD_COLUMN: positions, FILTER_CHOICE_COLUMN: choices.astype(np.int32),
                           PRIVATE_COLUMN: private.astype(np.int32), UTILITY_COLUMN: utility.astype(np.int32),
                           **dict(zip(feature_columns(SPEC), compact_features(features, SPEC), strict=True))})
    filters = (LinearLatentFilter(0.3 * np.eye(3), np.array([[0.5, -0.5], [0.0, 0.2], [0.1, 0.0]])),
               LinearLatentFilter(np.array([[1.0], [0.0], [0.5]]), np.zeros((3, 2))))
    data = artifact_bytes()
    side = PrivatizationSide(artifact=data, artifact_id="test-artifact", filters=filters,
                             choice_names=("hide-sex", "hide-income"), choice_utility_labels=("income", "sex"),
                             utility_classes={"income": ["low", "high"], "sex": ["F", "M", "X"]}, secret=SECRET,
                             release_id="filter-blocks")
    result = privatized_rows(staged, side)
    assert list(result.columns) == [FILTER_RECORD_COLUMN, FILTER_CHOICE_COLUMN, "age", "colour", "weight", "grade",
                                    "income", "sex"]
    model = VaeArtifact.from_bytes(data).model
    direct = decode_features(privatize_features(model, features, positions, choices, private, filters, SECRET,
                                                "filter-blocks"), SPEC)
    pd.testing.assert_frame_equal(result[["age", "colour", "weight", "grade"]], direct)
    assert result[FILTER_RECORD_COLUMN].tolist() == positions.tolist()
    assert result[FILTER_CHOICE_COLUMN].tolist() == [("hide-sex", "hide-income")[c] for c in choices]
    for row in range(rows):
        if choices[row] == 0:
            assert result["income"].iloc[row] == ["low", "high"][utility[row]] and result["sex"].iloc[row] is None
        else:
            assert result["sex"].iloc[row] == ["F", "M", "X"][utility[row]] and result["income"].iloc[row] is None
    halves = pd.concat([privatized_rows(staged.iloc[part].reset_index(drop=True), side)
                        for part in (slice(25, None), slice(0, 25))], ignore_index=True)
    pd.testing.assert_frame_equal(halves.sort_values(FILTER_RECORD_COLUMN, ignore_index=True), result)
    other = privatized_rows(staged, PrivatizationSide(**{**side.__dict__, "release_id": "another"}))
    assert not np.array_equal(other["weight"].to_numpy(), result["weight"].to_numpy())
