"""The lake's model store: artifacts stored once by content id, found by dataset and feature spec."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pipelines.platform.errors import PrivlakeError
from pipelines.platform.lake import Lake
from pipelines.platform.model_store import MODEL_KIND_FILTER_VAE, ModelStore


def test_store_is_idempotent_and_round_trips_bytes(tmp_path: Path) -> None:
    store = ModelStore(Lake(tmp_path / "lake"))
    payload = bytes(range(256)) * 100
    assert store.store("a" * 64, payload, MODEL_KIND_FILTER_VAE, "adult", "s1", {"note": 1}) is True
    assert store.store("a" * 64, b"other", MODEL_KIND_FILTER_VAE, "adult", "s1", {}) is False
    assert store.load("a" * 64) == payload
    [model] = store.models()
    assert model.size_bytes == len(payload) and model.description == {"note": 1}
    with pytest.raises(PrivlakeError, match="not in the lake"):
        store.load("b" * 64)


def test_resolve_latest_takes_the_newest_for_the_dataset_and_spec(tmp_path: Path) -> None:
    store = ModelStore(Lake(tmp_path / "lake"))
    store.store("1" * 64, b"old", MODEL_KIND_FILTER_VAE, "adult", "spec", {})
    time.sleep(0.01)
    store.store("2" * 64, b"new", MODEL_KIND_FILTER_VAE, "adult", "spec", {})
    time.sleep(0.01)
    store.store("3" * 64, b"other spec", MODEL_KIND_FILTER_VAE, "adult", "another", {})
    store.store("4" * 64, b"other dataset", MODEL_KIND_FILTER_VAE, "census", "spec", {})
    assert store.resolve("latest", MODEL_KIND_FILTER_VAE, "adult", "spec").artifact_id == "2" * 64
    assert store.resolve("1" * 64, MODEL_KIND_FILTER_VAE, "adult", "spec").artifact_id == "1" * 64
    assert store.model("4" * 64).dataset == "census"
    with pytest.raises(PrivlakeError, match="different feature spec"):
        store.resolve("3" * 64, MODEL_KIND_FILTER_VAE, "adult", "spec")
    with pytest.raises(PrivlakeError, match="train-encoder"):
        store.resolve("latest", MODEL_KIND_FILTER_VAE, "abalone", "spec")
    with pytest.raises(PrivlakeError, match="is not in the lake"):
        store.resolve("5" * 64, MODEL_KIND_FILTER_VAE, "adult", "spec")
