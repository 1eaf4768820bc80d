"""The filter release's evaluation report for the manifest (issue 5, "Evaluation").

Per choice, on a keyed sample of that choice's records split into training and held-out parts, an
adversary (private label) and a utility classifier are trained afresh — never the ones of the
filter's training — and scored on the held-out part, on three versions of the same records: the
raw records, the released (privatized) records, and the records privatized by the Gaussian baseline
``z̃ = z + N(0, σ²I)`` at the same distortion budget (``filter_accounting.gaussian_baseline_noise_scale``).
Classifiers see each version as a feature matrix (the decoded records encoded again by the spec).
Computed from raw labels: an internal report, not privacy-protected, and never an input to the release.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from pipelines.filter_input import FilterRecords
from schemas.expectations import FILTER_RECORD_COLUMN
from schemas.filter_config import FilterConfig
from schemas.filter_schema import FeatureSpec
from transforms.filter.features import decode_features, encode_features
from transforms.filter.filter_accounting import gaussian_baseline_filter, gaussian_baseline_noise_scale
from transforms.filter.filter_evaluation import release_evaluation
from transforms.filter.latent_filter import LinearLatentFilter
from transforms.filter.privatization import privatize_features
from transforms.filter.vae import VaeArtifact, encode_latents
from transforms.keyed_randomness import keyed_generator

PURPOSE_EVALUATION = "filter-evaluation"
PURPOSE_BASELINE = "filter-evaluation-baseline"
MINIMUM_PART_RECORDS = 10


def _version_scores(features: np.ndarray, train: np.ndarray, test: np.ndarray, private: np.ndarray,
                    utility: np.ndarray, private_classes: int, utility_classes: int, classifier: str) -> dict[str, Any]:
    return release_evaluation(features[train], private[train], utility[train], features[test], private[test],
                              utility[test], private_classes, utility_classes, classifier)  # type: ignore[arg-type]


def evaluation_report(config: FilterConfig, spec: FeatureSpec, artifact: VaeArtifact,
                      filters: list[LinearLatentFilter], released: pd.DataFrame, records: FilterRecords,
                      choices: np.ndarray, private: np.ndarray, utility: np.ndarray, training: FilterRecords,
                      secret: bytes, release_id: str) -> dict[str, Any]:
    settings = config.evaluation
    ordered = released.sort_values(FILTER_RECORD_COLUMN, kind="stable").reset_index(drop=True)
    released_features = encode_features(ordered, spec).matrix
    _, training_log_variance = encode_latents(artifact.model, training.features)
    report: dict[str, Any] = {
        "note": "classifiers trained afresh on a keyed sample of each choice's records and scored on held-out "
                "records; computed from raw labels: an internal report, not privacy-protected",
        "classifier": settings.classifier,
        "choices": {},
    }
    for code, choice in enumerate(config.choices):
        rng = keyed_generator(secret, release_id, PURPOSE_EVALUATION, choice.name)
        rows = np.flatnonzero(choices == code)
        if rows.size > settings.max_records:
            rows = np.sort(rng.choice(rows, size=settings.max_records, replace=False))
        order = rng.permutation(rows.size)
        test_size = int(round(settings.test_fraction * rows.size))
        test, train = np.sort(order[:test_size]), np.sort(order[test_size:])
        if min(test.size, train.size) < MINIMUM_PART_RECORDS:
            report["choices"][choice.name] = {"skipped": f"too few records ({rows.size}) to train and test classifiers"}
            continue
        noise_scale = gaussian_baseline_noise_scale(training_log_variance, choice.budget)
        baseline = gaussian_baseline_filter(artifact.model.architecture.latent_dimension,
                                            len(config.labels[choice.private].classes), noise_scale)
        baseline_decoded = privatize_features(artifact.model, records.features[rows], rows,
                                              np.zeros(rows.size, dtype=np.int64), private[rows], [baseline],
                                              secret, release_id, PURPOSE_BASELINE)
        baseline_features = encode_features(decode_features(baseline_decoded, spec), spec).matrix
        private_classes = len(config.labels[choice.private].classes)
        utility_classes = len(config.labels[choice.utility].classes)
        versions = {
            "raw": records.features[rows],
            "privatized": released_features[rows],
            "gaussian_baseline": baseline_features,
        }
        scores = {name: _version_scores(features, train, test, private[rows].astype(np.int64),
                                        utility[rows].astype(np.int64), private_classes, utility_classes,
                                        settings.classifier)
                  for name, features in versions.items()}
        report["choices"][choice.name] = {
            "records": int(rows.size),
            "train_records": int(train.size),
            "test_records": int(test.size),
            "gaussian_baseline_noise_scale": noise_scale,
            **scores,
        }
    return report
