"""Stored filter sets: every choice's trained linear latent filter, trained once and reused.

``privlake train-filters CONFIG`` trains each choice's filter on the training records (frozen
encoder, keyed draws) and stores the set in the lake's model table (``model_store.py``) next to the
encoder it was trained against. A release whose config says ``filters: {artifact: latest}`` (or an
id) loads the set instead of training: it then knows its guarantee before reading any record, reads
no training record (unless its evaluation is on) and never imports torch.

Artifact: canonical JSON (sorted keys, float64 values written exactly), so equal sets have equal
bytes and the id (SHA-256 of the bytes) pins the exact filters. It names the encoder's artifact id
and ``choices_sha256``, the fingerprint of everything the filters depend on besides the training
records (``choices_fingerprint``); a release only uses a set whose two match its own.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from schemas.filter.config import FilterConfig
from transforms.filter.latent_filter import LinearLatentFilter

FILTER_SET_FORMAT = "privlake-filter-set"
FILTER_SET_FORMAT_VERSION = 1


def choices_fingerprint(config: FilterConfig, encoder_artifact_id: str) -> str:
    """SHA-256 of what a choice's filter depends on besides the training records: the encoder, each
    choice's settings, the definitions of the labels they use and the filter-training settings."""
    used = sorted({label for choice in config.choices for label in (choice.private, choice.utility)})
    document = {
        "encoder_artifact_id": encoder_artifact_id,
        "choices": [choice.model_dump(mode="json") for choice in config.choices],
        # the whole definition (column, categories, groups or threshold), not only the class names:
        # a regrouped or re-thresholded label is another label
        "labels": {label: config.labels[label].model_dump(mode="json") for label in used},
        "filter_training": config.filter_training.model_dump(mode="json"),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class StoredChoice:
    """One choice's filter with what its training reported (the release's internal figures)."""

    name: str
    latent_filter: LinearLatentFilter
    distortion: float
    training_records: int
    final_epoch: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        # a loss that diverged is recorded as null: canonical JSON has no NaN
        final = {key: value if math.isfinite(value) else None for key, value in self.final_epoch.items()}
        return {"name": self.name, "filter": self.latent_filter.to_dict(), "distortion": self.distortion,
                "training_records": self.training_records, "final_epoch": final}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> StoredChoice:
        return cls(str(document["name"]), LinearLatentFilter.from_dict(document["filter"]),
                   float(document["distortion"]), int(document["training_records"]),
                   {key: math.nan if value is None else float(value)
                    for key, value in document["final_epoch"].items()})


@dataclass(frozen=True)
class FilterSet:
    """The filters of a config's choices, in the config's order, for one encoder."""

    encoder_artifact_id: str
    choices_sha256: str
    choices: tuple[StoredChoice, ...]

    def to_bytes(self) -> bytes:
        document = {"format": FILTER_SET_FORMAT, "format_version": FILTER_SET_FORMAT_VERSION,
                    "encoder_artifact_id": self.encoder_artifact_id, "choices_sha256": self.choices_sha256,
                    "choices": [choice.to_json() for choice in self.choices]}
        return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")

    @property
    def artifact_id(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    @classmethod
    def from_bytes(cls, data: bytes) -> FilterSet:
        """A stored set; anything else is a ``ValueError``."""
        try:
            document = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"unreadable filter set: {error}") from None
        if not isinstance(document, dict) or document.get("format") != FILTER_SET_FORMAT:
            raise ValueError("not a privlake filter set")
        if document.get("format_version") != FILTER_SET_FORMAT_VERSION:
            raise ValueError(f"unsupported filter set format version {document.get('format_version')!r}")
        try:
            return cls(str(document["encoder_artifact_id"]), str(document["choices_sha256"]),
                       tuple(StoredChoice.from_json(choice) for choice in document["choices"]))
        except (KeyError, TypeError, AttributeError, ValueError) as error:
            raise ValueError(f"malformed filter set ({type(error).__name__}: {error})") from None
