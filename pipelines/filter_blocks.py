"""Worker-side function of the filter release: privatize a batch of staged records.

The staged records carry the input position (``record``), the owner's choice (``choice``, a code),
the codes of the choice's private and utility labels, and the feature matrix (``f0``, ``f1``, …).
The VAE artifact's bytes and the filters travel in the side value (shipped once per worker); the
decoded model is cached per worker process by artifact id, so a worker rebuilds it once, not once
per batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd
import pyarrow as pa

from schemas.expectations import FILTER_CHOICE_COLUMN, FILTER_RECORD_COLUMN
from schemas.filter_schema import FeatureSpec
from transforms.filter.features import decode_features
from transforms.filter.latent_filter import LinearLatentFilter
from transforms.filter.privatization import privatize_features
from transforms.filter.vae import VaeArtifact, VariationalAutoencoder, configure_deterministic_torch

PRIVATE_COLUMN = "private"
UTILITY_COLUMN = "utility"


def feature_columns(width: int) -> list[str]:
    return [f"f{index}" for index in range(width)]


def staged_schema(width: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field(FILTER_RECORD_COLUMN, pa.int64(), nullable=False),
            pa.field(FILTER_CHOICE_COLUMN, pa.int32(), nullable=False),
            pa.field(PRIVATE_COLUMN, pa.int32(), nullable=False),
            pa.field(UTILITY_COLUMN, pa.int32(), nullable=False),
        ]
        + [pa.field(name, pa.float32(), nullable=False) for name in feature_columns(width)]
    )


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
def _model(artifact_id: str, artifact: bytes) -> tuple[VariationalAutoencoder, FeatureSpec]:
    configure_deterministic_torch(1)
    loaded = VaeArtifact.from_bytes(artifact)
    return loaded.model, loaded.feature_spec


def privatized_rows(frame: pd.DataFrame, side: PrivatizationSide) -> pd.DataFrame:
    """The batch's records privatized with their choices' filters, decoded, with the utility label
    of each record's choice in that label's column (other label columns empty)."""
    model, spec = _model(side.artifact_id, side.artifact)
    width = model.architecture.layout.width
    positions = frame[FILTER_RECORD_COLUMN].to_numpy(np.int64)
    choices = frame[FILTER_CHOICE_COLUMN].to_numpy(np.int64)
    decoded = privatize_features(
        model,
        frame[feature_columns(width)].to_numpy(np.float32),
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
