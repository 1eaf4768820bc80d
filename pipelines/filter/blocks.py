"""Worker-side function of the filter release: privatize a batch of staged records.

The staged records carry the input position (``record``), the owner's choice (``choice``, a code),
the codes of the choice's private and utility labels, and one column per feature (``f0``, ``f1``, …,
in spec order): a numeric feature's scaled value (float32, as in the feature matrix) or a
categorical feature's category code (int16), from which the worker rebuilds the one-hot blocks.
Compact staging matters: one-hot columns made Adult's staged rows six times wider, and moving them
through the engine cost more than the VAE.
The VAE artifact's bytes and the filters travel in the side value (shipped once per worker); the
parsed weights are cached per worker process by artifact id, so a worker parses them once, not once
per batch. Inference is NumPy (``transforms.filter.inference``): no worker imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd
import pyarrow as pa

from schemas.filter.expectations import FILTER_CHOICE_COLUMN, FILTER_RECORD_COLUMN
from schemas.filter.features import FeatureSpec
from transforms.filter.features import decode_features
from transforms.filter.inference import VaeWeights, parse_artifact
from transforms.filter.latent_filter import LinearLatentFilter
from transforms.filter.privatization import privatize_features

PRIVATE_COLUMN = "private"
UTILITY_COLUMN = "utility"


def feature_columns(spec: FeatureSpec) -> list[str]:
    return [f"f{index}" for index in range(len(spec.features))]


def staged_schema(spec: FeatureSpec) -> pa.Schema:
    return pa.schema(
        [
            pa.field(FILTER_RECORD_COLUMN, pa.int64(), nullable=False),
            pa.field(FILTER_CHOICE_COLUMN, pa.int32(), nullable=False),
            pa.field(PRIVATE_COLUMN, pa.int32(), nullable=False),
            pa.field(UTILITY_COLUMN, pa.int32(), nullable=False),
        ]
        + [
            pa.field(name, pa.int16() if feature.type == "categorical" else pa.float32(), nullable=False)
            for name, feature in zip(feature_columns(spec), spec.features, strict=True)
        ]
    )


def compact_features(matrix: np.ndarray, spec: FeatureSpec) -> list[np.ndarray]:
    """One array per feature: the numeric column as is, a categorical block as its category codes."""
    columns, start = [], 0
    for feature in spec.features:
        if feature.type == "categorical":
            columns.append(np.argmax(matrix[:, start : start + feature.width], axis=1).astype(np.int16))
        else:
            columns.append(matrix[:, start].astype(np.float32))
        start += feature.width
    return columns


def expand_features(frame: pd.DataFrame, spec: FeatureSpec) -> np.ndarray:
    """The float32 feature matrix from the compact columns (the exact inverse of ``compact_features``
    on a one-hot matrix)."""
    matrix = np.zeros((len(frame), spec.width), dtype=np.float32)
    start = 0
    for name, feature in zip(feature_columns(spec), spec.features, strict=True):
        values = frame[name].to_numpy()
        if feature.type == "categorical":
            matrix[np.arange(len(frame)), start + values.astype(np.int64)] = 1.0
        else:
            matrix[:, start] = values.astype(np.float32)
        start += feature.width
    return matrix


def output_schema(spec: FeatureSpec, utility_labels: list[str]) -> pa.Schema:
    """``record``, ``choice``, the features under the input's names (categories as text, integer
    features as int64, other numbers as float64) and one nullable text column per utility label."""
    fields = [
        pa.field(FILTER_RECORD_COLUMN, pa.int64(), nullable=False),
        pa.field(FILTER_CHOICE_COLUMN, pa.string(), nullable=False),
    ]
    for feature in spec.features:
        if feature.type == "categorical":
            kind = pa.string()
        else:
            kind = pa.int64() if feature.integer else pa.float64()
        fields.append(pa.field(feature.name, kind, nullable=False))
    fields += [pa.field(label, pa.string(), nullable=True) for label in utility_labels]
    return pa.schema(fields)


@dataclass(frozen=True)
class PrivatizationSide:
    """What a privatization batch needs: the VAE artifact, each choice's filter, its name and
    utility label (and the label's class names), the secret and the release id."""

    artifact: bytes
    artifact_id: str
    filters: tuple[LinearLatentFilter, ...]
    choice_names: tuple[str, ...]
    choice_utility_labels: tuple[str, ...]
    utility_classes: dict[str, list[str]]
    secret: bytes
    release_id: str


@lru_cache(maxsize=4)
def _model(artifact_id: str, artifact: bytes) -> tuple[VaeWeights, FeatureSpec]:
    parsed = parse_artifact(artifact)
    return parsed.weights(), parsed.feature_spec


def privatized_rows(frame: pd.DataFrame, side: PrivatizationSide) -> pd.DataFrame:
    """The batch's records privatized with their choices' filters, decoded, with the utility label
    of each record's choice in that label's column (other label columns empty)."""
    model, spec = _model(side.artifact_id, side.artifact)
    positions = frame[FILTER_RECORD_COLUMN].to_numpy(np.int64)
    choices = frame[FILTER_CHOICE_COLUMN].to_numpy(np.int64)
    decoded = privatize_features(
        model,
        expand_features(frame, spec),
        positions,
        choices,
        frame[PRIVATE_COLUMN].to_numpy(np.int64),
        side.filters,
        side.secret,
        side.release_id,
    )
    records = decode_features(decoded, spec)
    records.insert(0, FILTER_CHOICE_COLUMN, np.asarray(side.choice_names, dtype=object)[choices])
    records.insert(0, FILTER_RECORD_COLUMN, positions)
    utility_codes = frame[UTILITY_COLUMN].to_numpy(np.int64)
    labels_of_rows = np.asarray(side.choice_utility_labels, dtype=object)[choices]
    for label, classes in side.utility_classes.items():
        column = np.full(len(frame), None, dtype=object)
        rows = labels_of_rows == label
        column[rows] = np.asarray(classes, dtype=object)[utility_codes[rows]]
        records[label] = column
    return records


# ---- the release's files: record ranges of a size set by public quantities ----------------------


def contiguous_bounds(rows: int, parts: int) -> np.ndarray:
    """``parts`` contiguous ranges of ``rows`` records as ``parts + 1`` bounds (the engine's input
    pass cuts a fragment's staged files so, and the release's files are cut so)."""
    return np.linspace(0, rows, parts + 1).astype(np.int64)


def release_file_pieces(staged_rows: list[int], file_count: int) -> list[list[tuple[int, int, int]]]:
    """The release's files as record ranges (issue 15 review, F1): ``file_count`` files of
    contiguous positions, bounds ``contiguous_bounds(n, file_count)`` with ``n = sum(staged_rows)``
    — a function of ``n`` and ``file_count`` alone (the pipeline sets ``file_count`` from ``n`` and
    the engine's configured parallelism), never of the input's fragments. ``staged_rows``: the
    staged files' row counts, in position order. For each release file, the pieces it takes, in
    position order: (staged file index, first row within it, stop row)."""
    starts = np.concatenate([[0], np.cumsum(np.asarray(staged_rows, dtype=np.int64))]).astype(np.int64)
    bounds = contiguous_bounds(int(starts[-1]), file_count)
    files = []
    for low, high in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        pieces = []
        index = int(np.searchsorted(starts, low, side="right")) - 1
        while index < len(staged_rows) and starts[index] < high:
            first, stop = max(low, int(starts[index])), min(high, int(starts[index + 1]))
            if stop > first:
                pieces.append((index, first - int(starts[index]), stop - int(starts[index])))
            index += 1
        files.append(pieces)
    return files
