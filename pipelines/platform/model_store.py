"""Versioned model artifacts in the lake, next to the releases: the filter kind's shared VAEs and
its stored filter sets (``pipelines/filter/filter_set.py``).

Issue 5, phase 1: the VAE is trained once (``privlake train-encoder``) and reused by every filter
release. An artifact is the byte string of ``transforms.filter.vae.VaeArtifact.to_bytes`` (no
pickle: a JSON header and float32 tensors); its id is the SHA-256 of those bytes, so the same
weights always have the same id and a manifest that names the id pins the exact model.

Storage: the Iceberg table ``privlake.models``, one row per artifact, the bytes in a binary
column, with the dataset, the kind, the training time, the data fingerprint and the training
settings as JSON. Appending is one Iceberg commit, so an artifact is wholly stored or not at all,
and it lives in whatever catalog and file system hold the releases. Storing an id that is already
there changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.platform.errors import PrivlakeError
from pipelines.platform.lake import Lake

MODELS_NAMESPACE = "privlake"
MODELS_TABLE = "models"
MODEL_KIND_FILTER_VAE = "filter-vae"
MODEL_KIND_FILTER_SET = "filter-set"

MODELS_SCHEMA = pa.schema(
    [
        pa.field("artifact_id", pa.string(), nullable=False),
        pa.field("model_kind", pa.string(), nullable=False),
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("feature_spec_sha256", pa.string(), nullable=False),
        pa.field("trained_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("description", pa.string(), nullable=False),
        pa.field("artifact", pa.large_binary(), nullable=False),
    ]
)


@dataclass(frozen=True)
class StoredModel:
    artifact_id: str
    model_kind: str
    dataset: str
    feature_spec_sha256: str
    trained_at: datetime
    description: dict[str, Any]
    size_bytes: int

    def summary(self) -> dict[str, Any]:
        return {
            "artifact_id": self.artifact_id,
            "model_kind": self.model_kind,
            "dataset": self.dataset,
            "feature_spec_sha256": self.feature_spec_sha256,
            "trained_at": self.trained_at.isoformat(),
            "size_bytes": self.size_bytes,
            **self.description,
        }


class ModelStore:
    """The lake's model table (module docstring)."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake

    def _table(self):
        return self.lake.load_or_create_table(MODELS_NAMESPACE, MODELS_TABLE, MODELS_SCHEMA)

    def _rows(self) -> pa.Table:
        """Every stored model; an empty table when none was ever stored (reading creates nothing)."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            stored = self.lake.catalog.load_table((MODELS_NAMESPACE, MODELS_TABLE))
        except (NoSuchTableError, NoSuchNamespaceError):
            table = MODELS_SCHEMA.empty_table()
        else:
            table = stored.scan().to_arrow()
        return table.append_column("size_bytes", pc.binary_length(table["artifact"]))

    def store(self, artifact_id: str, artifact: bytes, model_kind: str, dataset: str, feature_spec_sha256: str,
              description: dict[str, Any]) -> bool:
        """Append the artifact unless its id is stored already; ``True`` when it was appended."""
        if self.exists(artifact_id):
            return False
        row = pa.table(
            {
                "artifact_id": [artifact_id],
                "model_kind": [model_kind],
                "dataset": [dataset],
                "feature_spec_sha256": [feature_spec_sha256],
                "trained_at": [datetime.now(UTC)],
                "description": [json.dumps(description, sort_keys=True)],
                "artifact": [artifact],
            },
            schema=MODELS_SCHEMA,
        )
        self._table().append(row)
        return True

    def exists(self, artifact_id: str) -> bool:
        table = self._rows()
        return bool(pc.any(pc.equal(table["artifact_id"], artifact_id)).as_py()) if len(table) else False

    def models(self, model_kind: str | None = None, dataset: str | None = None) -> list[StoredModel]:
        """The stored models (optionally of one kind and dataset), newest first."""
        table = self._rows().drop_columns(["artifact"]).to_pylist()
        found = [
            StoredModel(row["artifact_id"], row["model_kind"], row["dataset"], row["feature_spec_sha256"],
                        row["trained_at"], json.loads(row["description"]), int(row["size_bytes"]))
            for row in table
            if (model_kind is None or row["model_kind"] == model_kind) and (dataset is None or row["dataset"] == dataset)
        ]
        found.sort(key=lambda model: model.artifact_id)
        found.sort(key=lambda model: model.trained_at, reverse=True)
        return found

    def load(self, artifact_id: str) -> bytes:
        table = self._rows()
        match = table.filter(pc.equal(table["artifact_id"], artifact_id)) if len(table) else table
        if len(match) == 0:
            raise PrivlakeError(f"model artifact {artifact_id} is not in the lake {self.lake.description}")
        return match["artifact"][0].as_py()

    def model(self, artifact_id: str) -> StoredModel:
        """The stored model with this id (``PrivlakeError`` if it is not in the lake)."""
        for model in self.models():
            if model.artifact_id == artifact_id:
                return model
        raise PrivlakeError(f"model artifact {artifact_id} is not in the lake {self.lake.description}")

    def resolve(self, reference: str, model_kind: str, dataset: str, feature_spec_sha256: str) -> StoredModel:
        """The model a config names: an id (checked to exist, to be of this kind and to read the same
        feature spec), or ``latest``: the newest artifact of this kind for the dataset and feature spec."""
        if reference != "latest":
            found = [model for model in self.models(model_kind) if model.artifact_id == reference]
            if not found:
                raise PrivlakeError(f"encoder.artifact {reference[:12]}… is not in the lake {self.lake.description}")
            if found[0].feature_spec_sha256 != feature_spec_sha256:
                raise PrivlakeError(f"encoder.artifact {reference[:12]}…: it was trained on a different feature spec")
            return found[0]
        matching = [m for m in self.models(model_kind, dataset) if m.feature_spec_sha256 == feature_spec_sha256]
        if not matching:
            raise PrivlakeError(
                f"no encoder in the lake {self.lake.description} for dataset {dataset!r} and this feature spec: "
                "run `privlake train-encoder CONFIG` first"
            )
        return matching[0]
