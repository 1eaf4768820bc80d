"""Stored filters (``privlake train-filters``, ``filters: {artifact: latest | id}``): the set is
keyed and stored once; a release that uses it privatizes with exactly those filters, knows its
guarantee before any record is read, and runs in a process where torch cannot be imported; a set
trained for other choices, another encoder, or above a choice's cap is refused in one line."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from pipelines.cli import main
from pipelines.filter.filter_set import FilterSet, StoredChoice
from pipelines.filter.pipeline import train_encoder
from pipelines.platform.config import load_config
from pipelines.platform.lake import Lake
from pipelines.platform.model_store import MODEL_KIND_FILTER_SET, MODEL_KIND_FILTER_VAE, ModelStore
from schemas.filter.features import FeatureSpec
from tests.e2e.test_filter_release import FEATURES, SECRET_HEX, exported, filter_case, set_budget
from tests.lake_setup import prepare_lake
from transforms.core.keyed_randomness import secret_from_hex
from transforms.filter.features import decode_features, encode_features
from transforms.filter.inference import parse_artifact
from transforms.filter.latent_filter import LinearLatentFilter, label_sensitivity
from transforms.filter.privatization import privatize_features

ROOT = Path(__file__).resolve().parents[2]
UNCAPPED = [{"name": "hide-group", "private": "group", "utility": "senior", "budget": 1.0, "max_sensitivity": None},
            {"name": "hide-senior", "private": "senior", "utility": "group", "budget": 1.0}]


@pytest.fixture(autouse=True)
def _fixed_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)


def test_train_filters_stores_one_keyed_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_path = filter_case(tmp_path, two_choices=True, choices=UNCAPPED)
    train_encoder(load_config(config_path))
    assert main(["train-filters", str(config_path), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["train-filters", str(config_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == first["artifact_id"] and "hide-group (epsilon" in lines[0]
    store = ModelStore(Lake(tmp_path / "lake"))
    sets = store.models(MODEL_KIND_FILTER_SET)
    assert [model.artifact_id for model in sets] == [first["artifact_id"]]
    encoder = store.models(MODEL_KIND_FILTER_VAE)[0]
    assert first["encoder_artifact_id"] == encoder.artifact_id
    assert [choice["name"] for choice in first["choices"]] == ["hide-group", "hide-senior"]
    filter_set = FilterSet.from_bytes(store.load(first["artifact_id"]))
    assert filter_set.artifact_id == first["artifact_id"] and len(filter_set.choices) == 2
    assert label_sensitivity(filter_set.choices[1].latent_filter) <= 1.0  # hide-senior is capped at 1


def run_blocked(config: Path, release_id: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``privlake run`` in a fresh process where ``import torch`` fails."""
    blocker = tmp_path / "blocked"
    (blocker / "torch").mkdir(parents=True, exist_ok=True)
    (blocker / "torch" / "__init__.py").write_text("raise ImportError('torch was imported')\n")
    environment = {**os.environ, "PYTHONPATH": f"{blocker}:{ROOT}", "PRIVLAKE_TEST_SECRET": SECRET_HEX}
    return subprocess.run([sys.executable, "-m", "pipelines", "run", str(config), "--release-id", release_id, "--json"],
                          env=environment, capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_a_release_with_stored_filters_imports_no_torch_and_uses_exactly_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path = filter_case(tmp_path, two_choices=True, choices=UNCAPPED)
    config = load_config(config_path)
    train_encoder(config)
    assert main(["train-filters", str(config_path), "--json"]) == 0
    set_id = json.loads(capsys.readouterr().out)["artifact_id"]
    document = yaml.safe_load(config_path.read_text())
    stored_path = tmp_path / "stored.yaml"
    stored_path.write_text(yaml.safe_dump({**document, "filters": {"artifact": "latest"}}))
    done = run_blocked(stored_path, "stored-1", tmp_path)
    assert done.returncode == 0, done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["status"] == "published"
    # the known-bad variant: training the filters in the release needs torch, and fails here
    trains = run_blocked(config_path, "trains-1", tmp_path)
    assert trains.returncode != 0 and "torch" in trains.stderr

    lake = Lake(config.lake)
    manifest = lake.manifest("stored-1")
    assert manifest["filters"] == {"source": "stored", "artifact_id": set_id}
    assert "stored filters" in manifest["guarantee"]["basis"]
    store = ModelStore(lake)
    filter_set = FilterSet.from_bytes(store.load(set_id))
    summaries = store.model(set_id).description["choices"]
    worst = max(min(value for value in (entry["privacy"]["epsilon"], entry["privacy"]["epsilon_exact_gaussian"])
                    if value is not None) for entry in summaries)
    assert manifest["epsilon"] == pytest.approx(worst, rel=1e-12)
    # privatized with exactly the stored filters (the in-memory computation, bit for bit)
    rows = exported(config.lake, "stored-1")
    records = pd.read_csv(config.input.path, dtype=str, keep_default_na=False)
    spec = FeatureSpec.model_validate(FEATURES)
    choices = (records["choice"] == "hide-senior").to_numpy(np.int64)
    private = np.where(choices == 0, records["group"] == "b", records["senior"] == "yes").astype(np.int64)
    weights = parse_artifact(store.load(manifest["model_artifact_id"])).weights()
    decoded = privatize_features(weights, encode_features(records, spec).matrix, np.arange(len(records)), choices,
                                 private, [choice.latent_filter for choice in filter_set.choices],
                                 secret_from_hex(SECRET_HEX), "stored-1")
    expected = decode_features(decoded, spec)
    for column in expected.columns:
        np.testing.assert_array_equal(rows[column].to_numpy(), expected[column].to_numpy(), err_msg=column)


def encoder_case(directory: Path) -> tuple[Path, Any]:
    """A two-choice config with ``filters: {artifact: latest}`` and its encoder in the lake."""
    config_path = filter_case(directory, two_choices=True, choices=UNCAPPED, filters={"artifact": "latest"})
    config = load_config(config_path)
    train_encoder(config)
    return config_path, config


def test_stored_filters_give_the_guarantee_before_any_record_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path, config = encoder_case(tmp_path)
    assert main(["train-filters", str(config_path)]) == 0
    capsys.readouterr()
    prepare_lake(config.lake, "people")
    set_budget(config.lake, epsilon=1e-3, delta=1e-3)
    Path(config.input.path).unlink()
    Path(config.training.path).unlink()  # neither the records nor the training records are read
    assert main(["run", str(config_path), "--release-id", "refused"]) == 4
    assert "privacy budget of dataset 'people' exceeded" in capsys.readouterr().err


def test_a_set_for_other_choices_another_encoder_or_above_a_cap_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path, config = encoder_case(tmp_path)
    assert main(["run", str(config_path), "--release-id", "none"]) == 2
    error = capsys.readouterr().err.strip()
    assert "no filter set" in error and "privlake train-filters" in error and len(error.splitlines()) == 1
    assert main(["train-filters", str(config_path), "--json"]) == 0
    set_id = json.loads(capsys.readouterr().out)["artifact_id"]
    document = yaml.safe_load(config_path.read_text())

    def run(name: str, **changes: object) -> str:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**document, **changes}))
        assert main(["run", str(path), "--release-id", name]) == 2
        message = capsys.readouterr().err.strip()
        assert len(message.splitlines()) == 1, message
        return message

    other_budget = [dict(UNCAPPED[0], budget=2.0), UNCAPPED[1]]
    assert "no filter set" in run("latest-other", choices=other_budget)
    assert "other choices" in run("id-other", choices=other_budget, filters={"artifact": set_id})
    encoder_id = ModelStore(Lake(config.lake)).models(MODEL_KIND_FILTER_VAE)[0].artifact_id
    assert "not a filter set" in run("vae-id", filters={"artifact": encoder_id})

    # a set whose capped choice exceeds its cap (not written by train-filters) is not trusted
    store = ModelStore(Lake(config.lake))
    honest = FilterSet.from_bytes(store.load(set_id))
    capped = honest.choices[1]
    shifted = LinearLatentFilter(capped.latent_filter.noise_matrix, capped.latent_filter.label_shift * 100.0)
    inflated = StoredChoice(capped.name, shifted, capped.distortion, capped.training_records, {})
    forged = FilterSet(honest.encoder_artifact_id, honest.choices_sha256, (honest.choices[0], inflated))
    assert label_sensitivity(shifted) > 1.0  # the same noise, a hundred times the shift
    model = store.model(set_id)
    store.store(forged.artifact_id, forged.to_bytes(), MODEL_KIND_FILTER_SET, "people", model.feature_spec_sha256,
                model.description)
    assert "exceeds its max_sensitivity" in run("forged", filters={"artifact": forged.artifact_id})

    def store_forged(choice: StoredChoice) -> str:
        forged = FilterSet(honest.encoder_artifact_id, honest.choices_sha256, (honest.choices[0], choice))
        store.store(forged.artifact_id, forged.to_bytes(), MODEL_KIND_FILTER_SET, "people",
                    model.feature_spec_sha256, model.description)
        return forged.artifact_id

    # unused label columns that overflow the Mahalanobis distance: a NaN sensitivity would pass "s > cap"
    noise = capped.latent_filter.noise_matrix
    huge = np.concatenate([capped.latent_filter.label_shift, np.full((noise.shape[0], 2), 1.7e308) * [1, -1]], axis=1)
    overflowing = StoredChoice(capped.name, LinearLatentFilter(noise, huge), 0.0, 1, {})
    assert math.isinf(label_sensitivity(overflowing.latent_filter))
    assert "stored filter is" in run("overflow", filters={"artifact": store_forged(overflowing)})
    wide = StoredChoice(capped.name, LinearLatentFilter(np.vstack([noise, noise[:1]]),
                                                        np.vstack([capped.latent_filter.label_shift,
                                                                   np.zeros((1, 2))])), 0.0, 1, {})
    assert "latent dimensions" in run("wide", filters={"artifact": store_forged(wide)})
    # the description says the right encoder and choices, the bytes another encoder's
    other = FilterSet("0" * 64, honest.choices_sha256, honest.choices)
    store.store(other.artifact_id, other.to_bytes(), MODEL_KIND_FILTER_SET, "people", model.feature_spec_sha256,
                model.description)
    assert "bytes do not match" in run("other-bytes", filters={"artifact": other.artifact_id})
    # a label regrouped is another label: the set trained for the old one is not found
    regrouped = {**document["labels"], "group": {"column": "group", "groups": {"a": ["b"], "b": ["a"]}}}
    assert "no filter set" in run("regrouped", labels=regrouped)
    assert Lake(config.lake).list_releases() == []
