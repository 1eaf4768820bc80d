"""Records ↔ the VAE's feature matrix, with public parameters only.

Issue 5, step 1. The feature matrix has one column per numeric feature and one block of columns per
categorical feature (its one-hot code), in the order of ``FeatureSpec.features``; the
``FeatureLayout`` says where each feature lives so that the VAE's likelihood can treat numeric
columns (Gaussian) and categorical blocks (categorical distribution) apart. Scaling uses only the
spec (``schemas/filter/features.py``), never the data, so a record's features do not depend on other
records and decoding is the exact inverse on the spec's domain.

Decoding (what a released record looks like): a numeric column is unscaled, clipped to the bounds
when the spec has bounds, and for ``integer: true`` rounded to the nearest integer and then clipped
to the integers inside the bounds (so a decoded record always satisfies its own spec); a categorical
block becomes the category with the largest score (one-hot codes, probabilities and logits all
work; ties go to the first listed category).

Labels are not features. ``encode_label`` codes a label column over its public category list.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from schemas.filter.features import CategoricalFeature, FeatureSpec, NumericFeature
from transforms.core.domain_violation import DomainViolation, within_bounds

FeatureDomainViolation = DomainViolation


@dataclass(frozen=True)
class FeatureLayout:
    """Where the features live in the matrix: the column of each numeric feature and the
    ``[start, stop)`` column range of each categorical feature, in spec order."""

    width: int
    numeric_columns: tuple[int, ...]
    categorical_blocks: tuple[tuple[int, int], ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "width": self.width,
            "numeric_columns": list(self.numeric_columns),
            "categorical_blocks": [list(block) for block in self.categorical_blocks],
        }

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> FeatureLayout:
        return cls(
            width=int(document["width"]),
            numeric_columns=tuple(int(column) for column in document["numeric_columns"]),
            categorical_blocks=tuple(
                (int(start), int(stop)) for start, stop in document["categorical_blocks"]
            ),
        )


@dataclass(frozen=True)
class EncodedFeatures:
    """``matrix`` is float32 ``(n, width)``; ``clipped`` counts, per numeric feature, the values
    clipped to the bounds (``out_of_bounds: clip``)."""

    matrix: np.ndarray
    clipped: dict[str, int]


def feature_layout(spec: FeatureSpec) -> FeatureLayout:
    """The column layout of ``spec``'s feature matrix."""
    numeric_columns: list[int] = []
    categorical_blocks: list[tuple[int, int]] = []
    column = 0
    for feature in spec.features:
        if isinstance(feature, NumericFeature):
            numeric_columns.append(column)
        else:
            categorical_blocks.append((column, column + feature.width))
        column += feature.width
    return FeatureLayout(column, tuple(numeric_columns), tuple(categorical_blocks))


def _first_row(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _numeric_values(column: pd.Series, feature: NumericFeature) -> tuple[np.ndarray, int]:
    values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
    not_numbers = np.isnan(values) | ~np.isfinite(values)
    if not_numbers.any():
        row = _first_row(not_numbers)
        raise FeatureDomainViolation(row, feature.name, f"not a finite number: {column.iloc[row]!r}")
    if feature.bounds is None:
        return values, 0
    return within_bounds(values, *feature.bounds, feature.out_of_bounds == "clip", feature.name,
                         lambda row: float(values[row]))


def _one_hot(column: pd.Series, feature: CategoricalFeature) -> np.ndarray:
    missing = column.isna().to_numpy()
    if missing.any():
        raise FeatureDomainViolation(_first_row(missing), feature.name, "missing value (null/NaN)")
    text = column if column.dtype == object else column.astype(str)
    codes = np.asarray(pd.Categorical(text, categories=feature.categories).codes)
    unknown = codes < 0
    if unknown.any():
        row = _first_row(unknown)
        raise FeatureDomainViolation(
            row, feature.name, f"category {column.iloc[row]!r} is not in the feature's category list"
        )
    block = np.zeros((len(codes), feature.width), dtype=np.float32)
    block[np.arange(len(codes)), codes] = 1.0
    return block


def encode_features(frame: pd.DataFrame, spec: FeatureSpec) -> EncodedFeatures:
    """The feature matrix of ``frame`` (columns beyond the spec's are ignored; labels stay out).

    Raises ``FeatureDomainViolation`` (row, column) for a missing value, an unknown category, text or
    a non-finite number in a numeric column, or a value outside the bounds (unless clipped), and
    ``KeyError`` naming the first feature column missing from the frame.
    """
    missing_columns = [name for name in spec.names if name not in frame.columns]
    if missing_columns:
        raise KeyError(f"the frame has no column {missing_columns[0]!r} (a feature of the spec)")
    blocks: list[np.ndarray] = []
    clipped: dict[str, int] = {}
    for feature in spec.features:
        column = frame[feature.name].reset_index(drop=True)
        if isinstance(feature, NumericFeature):
            values, clipped[feature.name] = _numeric_values(column, feature)
            offset, width = feature.offset_and_width
            blocks.append(((values - offset) / width).astype(np.float32)[:, None])
        else:
            blocks.append(_one_hot(column, feature))
    return EncodedFeatures(np.concatenate(blocks, axis=1), clipped)


def decode_features(matrix: np.ndarray, spec: FeatureSpec) -> pd.DataFrame:
    """Records with the spec's names and types from a feature-shaped matrix (module docstring)."""
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape[1] != spec.width:
        raise ValueError(f"the matrix must have shape (n, {spec.width}), got {matrix.shape}")
    columns: dict[str, Any] = {}
    column = 0
    for feature in spec.features:
        if isinstance(feature, NumericFeature):
            offset, width = feature.offset_and_width
            values = matrix[:, column].astype(np.float64) * width + offset
            if feature.integer:
                values = np.rint(values)
                if feature.bounds is not None:
                    values = np.clip(values, math.ceil(feature.bounds[0]), math.floor(feature.bounds[1]))
                values = values.astype(np.int64)
            elif feature.bounds is not None:
                values = np.clip(values, *feature.bounds)
            columns[feature.name] = values
        else:
            codes = np.argmax(matrix[:, column : column + feature.width], axis=1)
            columns[feature.name] = np.asarray(feature.categories, dtype=object)[codes]
        column += feature.width
    return pd.DataFrame(columns)


def encode_label(column: pd.Series, categories: list[str], name: str) -> np.ndarray:
    """Integer codes (int64, positions in ``categories``) of a label column, compared as text;
    a missing or unlisted value is a ``FeatureDomainViolation``."""
    column = column.reset_index(drop=True)
    missing = column.isna().to_numpy()
    if missing.any():
        raise FeatureDomainViolation(_first_row(missing), name, "missing label (null/NaN)")
    text = column if column.dtype == object else column.astype(str)
    codes = np.asarray(pd.Categorical(text, categories=categories).codes, dtype=np.int64)
    unknown = codes < 0
    if unknown.any():
        row = _first_row(unknown)
        raise FeatureDomainViolation(
            row, name, f"label {column.iloc[row]!r} is not in the label's category list"
        )
    return codes


def feature_spec_sha256(spec: FeatureSpec) -> str:
    """SHA-256 of the spec's canonical JSON: the key an encoder is found by."""
    spec_json = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(spec_json.encode("utf-8")).hexdigest()


def feature_fingerprint(matrix: np.ndarray, spec: FeatureSpec) -> dict[str, Any]:
    """What a VAE was trained on: SHA-256 of the float32 feature matrix (C order, little endian)
    and of the spec's canonical JSON, and the matrix shape."""
    data = np.ascontiguousarray(np.asarray(matrix, dtype="<f4"))
    return {
        "features_sha256": hashlib.sha256(data.tobytes()).hexdigest(),
        "spec_sha256": feature_spec_sha256(spec),
        "rows": int(data.shape[0]),
        "width": int(data.shape[1]),
    }
