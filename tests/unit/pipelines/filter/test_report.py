"""The filter evaluation report (``pipelines/filter/report.py``) on tiny inputs: its keys, record counts,
scores in range, the strongest classifier really the most accurate, the distortion against the
closed-form Gaussian KL computed by hand, the baseline's noise scale, a choice with too few records
skipped, and the same report under the same secret."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pipelines.filter.blocks import (
    PRIVATE_COLUMN,
    UTILITY_COLUMN,
    PrivatizationSide,
    compact_features,
    feature_columns,
    privatized_rows,
)
from pipelines.filter.input import FilterRecords
from pipelines.filter.report import evaluation_report
from schemas.filter.config import FilterConfig
from schemas.filter.expectations import FILTER_CHOICE_COLUMN, FILTER_RECORD_COLUMN
from schemas.filter.features import FeatureSpec
from transforms.filter.accounting import gaussian_baseline_noise_scale
from transforms.filter.features import encode_features, feature_layout
from transforms.filter.inference import encode_latents, vae_weights
from transforms.filter.latent_filter import LinearLatentFilter
from transforms.filter.vae import VaeArchitecture, VaeArtifact, VariationalAutoencoder

SECRET = bytes(range(32))
SPEC = FeatureSpec.model_validate(
    {
        "features": [
            {"type": "numeric", "name": "age", "bounds": [17, 90]},
            {"type": "categorical", "name": "colour", "categories": ["red", "green", "blue"]},
        ]
    }
)
LATENT = 2
ROWS = 82
FILTERS = [LinearLatentFilter(0.4 * np.eye(LATENT), np.array([[0.3, -0.3], [0.0, 0.2]])),
           LinearLatentFilter(0.1 * np.eye(LATENT), np.zeros((LATENT, 2)))]


def filter_config(tmp_path: Path, **evaluation: object) -> FilterConfig:
    return FilterConfig.model_validate(
        {
            "kind": "filter",
            "dataset": "people",
            "lake": str(tmp_path / "lake"),
            "training": {"path": str(tmp_path / "training.csv")},
            "input": {"path": str(tmp_path / "input.csv"), "choice_column": "choice"},
            "feature_spec": str(tmp_path / "spec.yaml"),
            "labels": {"sex": {"column": "sex", "categories": ["F", "M"]},
                       "income": {"column": "income", "categories": ["low", "high"]}},
            "choices": [{"name": "hide-sex", "private": "sex", "utility": "income", "budget": 0.5},
                        {"name": "hide-income", "private": "income", "utility": "sex", "budget": 1.0}],
            "evaluation": {"classifiers": ["logistic"], "max_records": 40, "test_fraction": 0.5, **evaluation},
        }
    )


def inputs() -> dict:
    rng = np.random.default_rng(11)
    sex = rng.integers(0, 2, ROWS)
    income = (rng.random(ROWS) < 0.3 + 0.4 * sex).astype(np.int64)
    frame = pd.DataFrame({"age": np.clip(30 + 20 * income + rng.normal(0, 8, ROWS), 17, 90),
                          "colour": np.array(["red", "green", "blue"])[(sex + rng.integers(0, 2, ROWS)) % 3]})
    features = encode_features(frame, SPEC).matrix
    choices = np.where(np.arange(ROWS) < 70, 0, 1)
    private = np.where(choices == 0, sex, income)
    utility = np.where(choices == 0, income, sex)
    model = VariationalAutoencoder(VaeArchitecture(feature_layout(SPEC), LATENT, (6,)), torch.Generator().manual_seed(2))
    model.eval()
    artifact = VaeArtifact.from_bytes(VaeArtifact(model, SPEC, {}, {}).to_bytes())
    staged = pd.DataFrame({FILTER_RECORD_COLUMN: np.arange(ROWS), FILTER_CHOICE_COLUMN: choices,
                           PRIVATE_COLUMN: private, UTILITY_COLUMN: utility,
                           **dict(zip(feature_columns(SPEC), compact_features(features, SPEC), strict=True))})
    side = PrivatizationSide(artifact=artifact.to_bytes(), artifact_id="report-test", filters=tuple(FILTERS),
                             choice_names=("hide-sex", "hide-income"), choice_utility_labels=("income", "sex"),
                             utility_classes={"income": ["low", "high"], "sex": ["F", "M"]}, secret=SECRET,
                             release_id="report")
    released = privatized_rows(staged, side).sample(frac=1.0, random_state=0)
    _, training_log_variance = encode_latents(artifact.model, features)
    return {"spec": SPEC, "weights": vae_weights(artifact.model), "filters": FILTERS, "released": released,
            "records": FilterRecords(frame, features, {}, {}), "choices": choices, "private": private,
            "utility": utility, "training_log_variance": training_log_variance, "release_id": "report"}


def hand_distortion(latent_filter: LinearLatentFilter, log_variance: np.ndarray, labels: np.ndarray) -> float:
    """Mean ``KL(N(μ + B e_y, diag σ² + AAᵀ) ‖ N(μ, diag σ²))`` for ``A = aI``: per coordinate
    ``½((σ² + a²)/σ² − 1 + b²/σ² − ln((σ² + a²)/σ²))``."""
    a = latent_filter.noise_matrix[0, 0]
    variance = np.exp(log_variance)
    shift = latent_filter.label_shift[:, labels].T
    ratio = (variance + a * a) / variance
    return float(np.mean(0.5 * np.sum(ratio - 1 + shift * shift / variance - np.log(ratio), axis=1)))


def test_report_keys_counts_and_ranges(tmp_path: Path) -> None:
    data = inputs()
    report = evaluation_report(filter_config(tmp_path, classifiers=["logistic", "gradient_boosting"]), **data,
                               secret=SECRET)
    assert set(report) == {"note", "classifiers", "versions", "choices"}
    assert report["classifiers"] == ["logistic", "gradient_boosting"]
    assert set(report["versions"]) == {"raw", "vae_round_trip", "privatized", "gaussian_baseline"}
    assert report["choices"]["hide-income"] == {"skipped": "too few records (12) to train and test classifiers"}
    choice = report["choices"]["hide-sex"]
    assert (choice["records"], choice["train_records"], choice["test_records"]) == (40, 20, 20)
    assert choice["gaussian_baseline_noise_scale"] == gaussian_baseline_noise_scale(data["training_log_variance"], 0.5)
    assert choice["gaussian_baseline_noise_scale"] > 0
    assert math.isfinite(choice["distortion_on_evaluated_records"]) and choice["distortion_on_evaluated_records"] > 0
    for version in report["versions"]:
        scores = choice[version]
        assert set(scores["by_classifier"]) == {"logistic", "gradient_boosting"}
        for task in ("adversary", "utility"):
            for classifier in ("logistic", "gradient_boosting"):
                result = scores["by_classifier"][classifier][task]
                assert 0.0 <= result["accuracy"] <= 1.0 and 0.0 <= result["majority_rate"] <= 1.0
                assert (result["train_rows"], result["test_rows"]) == (20, 20)
            strongest = max(scores["by_classifier"][c][task]["accuracy"] for c in ("logistic", "gradient_boosting"))
            assert scores["strongest"][task]["accuracy"] == strongest
    json.dumps(report)


def test_same_secret_same_report_and_another_secret_another_sample(tmp_path: Path) -> None:
    data = inputs()
    settings = filter_config(tmp_path)
    first = evaluation_report(settings, **data, secret=SECRET)
    again = evaluation_report(settings, **data, secret=SECRET)
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    other = evaluation_report(settings, **data, secret=bytes(32))
    assert other["choices"]["hide-sex"]["records"] == 40
    assert (other["choices"]["hide-sex"]["distortion_on_evaluated_records"]
            != first["choices"]["hide-sex"]["distortion_on_evaluated_records"])


def test_the_distortion_on_all_of_a_choices_records_is_the_closed_form_kl(tmp_path: Path) -> None:
    data = inputs()
    report = evaluation_report(filter_config(tmp_path, max_records=1000), **data, secret=SECRET)
    choice = report["choices"]["hide-sex"]
    assert (choice["records"], choice["test_records"], choice["train_records"]) == (70, 35, 35)
    rows = np.flatnonzero(data["choices"] == 0)
    _, log_variance = encode_latents(data["weights"], data["records"].features[rows])
    expected = hand_distortion(FILTERS[0], log_variance, data["private"][rows])
    assert choice["distortion_on_evaluated_records"] == pytest.approx(expected, rel=1e-12)
