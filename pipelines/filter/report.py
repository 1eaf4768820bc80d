"""The filter release's evaluation report for the manifest (issue 5, "Evaluation").

Per choice, on a keyed sample of that choice's records split into training and held-out parts, an
adversary (private label) and a utility classifier of each configured kind (linear and gradient
boosting by default: a filter can hide from one and not the other) are trained afresh — never the
ones of the filter's training — and scored on the held-out part, on four versions of the same
records: the raw records; the VAE round trip without a filter (the reference the filter must
improve on: the VAE alone already loses information, and a filter can in principle make the label
more readable than the round trip); the released (privatized) records; and the records privatized
by the Gaussian baseline ``z̃ = z + N(0, σ²I)`` at the same distortion budget
(``filter_accounting.gaussian_baseline_noise_scale``).
Classifiers see each version as a feature matrix (the decoded records encoded again by the spec).
Computed from raw labels: an internal report, not privacy-protected, and never an input to the release.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pipelines.filter.input import FilterRecords
from schemas.filter.config import FilterConfig
from schemas.filter.expectations import FILTER_RECORD_COLUMN
from schemas.filter.features import FeatureSpec
from transforms.core.keyed_randomness import keyed_generator
from transforms.filter.accounting import gaussian_baseline_filter, gaussian_baseline_noise_scale
from transforms.filter.evaluation import release_evaluation
from transforms.filter.features import decode_features, encode_features
from transforms.filter.inference import VaeWeights, encode_latents
from transforms.filter.latent_filter import LinearLatentFilter, filter_distortion
from transforms.filter.privatization import privatize_encoded

PURPOSE_EVALUATION = "filter-evaluation"
PURPOSE_BASELINE = "filter-evaluation-baseline"
PURPOSE_ROUND_TRIP = "filter-evaluation-round-trip"
MINIMUM_PART_RECORDS = 10


def _version_scores(features: np.ndarray, train: np.ndarray, test: np.ndarray, private: np.ndarray,
                    utility: np.ndarray, private_classes: int, utility_classes: int,
                    classifiers: list[str]) -> dict[str, Any]:
    """Per classifier, the adversary's and the utility classifier's held-out scores, and the
    strongest of them (the highest accuracy: the adversary a careful attacker would pick)."""
    scores = {classifier: release_evaluation(features[train], private[train], utility[train], features[test],
                                             private[test], utility[test], private_classes, utility_classes,
                                             classifier)  # type: ignore[arg-type]
              for classifier in classifiers}
    strongest = {
        task: max((scores[classifier][task] for classifier in classifiers), key=lambda result: result["accuracy"])
        for task in ("adversary", "utility")
    }
    return {"by_classifier": scores, "strongest": strongest}


def _privatized_version(weights: VaeWeights, spec: FeatureSpec, latents: tuple[np.ndarray, np.ndarray],
                        rows: np.ndarray, private: np.ndarray, latent_filter: LinearLatentFilter, secret: bytes,
                        release_id: str, purpose: str) -> np.ndarray:
    decoded = privatize_encoded(weights, *latents, rows, np.zeros(rows.size, dtype=np.int64), private,
                                [latent_filter], secret, release_id, purpose)
    return encode_features(decode_features(decoded, spec), spec).matrix


@dataclass(frozen=True)
class ChoiceSample:
    """The evaluated records of one choice, in position order: their positions (``rows``), raw
    feature matrix, released (privatized) feature matrix and label codes."""

    rows: np.ndarray
    features: np.ndarray
    released_features: np.ndarray
    private: np.ndarray
    utility: np.ndarray


def sample_ranks(config: FilterConfig, counts: np.ndarray, secret: bytes,
                 release_id: str) -> list[tuple[np.random.Generator, np.ndarray]]:
    """Per choice, its keyed generator and the ranks (among the choice's records, in position order)
    of the records the evaluation reads: all of them up to ``evaluation.max_records``, beyond it a
    keyed sample — the draws ``rng.choice(rows, ...)`` makes on the positions themselves, so the
    driver needs only each choice's count."""
    settings = config.evaluation
    draws = []
    for choice, count in zip(config.choices, counts, strict=True):
        rng = keyed_generator(secret, release_id, PURPOSE_EVALUATION, choice.name)
        count = int(count)
        if count > settings.max_records:
            ranks = np.sort(rng.choice(count, size=settings.max_records, replace=False)).astype(np.int64)
        else:
            ranks = np.arange(count, dtype=np.int64)
        draws.append((rng, ranks))
    return draws


def evaluation_report(config: FilterConfig, spec: FeatureSpec, weights: VaeWeights,
                      filters: list[LinearLatentFilter], released: pd.DataFrame, records: FilterRecords,
                      choices: np.ndarray, private: np.ndarray, utility: np.ndarray,
                      training_log_variance: np.ndarray, secret: bytes, release_id: str) -> dict[str, Any]:
    """:func:`evaluation_report_of_samples` with every record at hand (the samples cut from whole
    arrays)."""
    ordered = released.sort_values(FILTER_RECORD_COLUMN, kind="stable").reset_index(drop=True)
    released_features = encode_features(ordered, spec).matrix
    counts = np.bincount(choices, minlength=len(config.choices))
    draws = sample_ranks(config, counts, secret, release_id)
    samples = []
    for code, (_, ranks) in enumerate(draws):
        rows = np.flatnonzero(choices == code)[ranks]
        samples.append(ChoiceSample(rows, records.features[rows], released_features[rows], private[rows],
                                    utility[rows]))
    return evaluation_report_of_samples(config, spec, weights, filters, draws, samples, training_log_variance,
                                        secret, release_id)


def evaluation_report_of_samples(config: FilterConfig, spec: FeatureSpec, weights: VaeWeights,
                                 filters: list[LinearLatentFilter],
                                 draws: list[tuple[np.random.Generator, np.ndarray]], samples: list[ChoiceSample],
                                 training_log_variance: np.ndarray, secret: bytes, release_id: str) -> dict[str, Any]:
    """Per choice: scores of the four versions (module docstring) and the filter's distortion on the
    evaluated records (the budget is enforced on the training records; here it is measured on
    records it was not fitted to). ``draws`` and ``samples``: :func:`sample_ranks` and the records
    at those ranks."""
    settings = config.evaluation
    latent_dimension = weights.architecture.latent_dimension
    report: dict[str, Any] = {
        "note": "classifiers trained afresh on a keyed sample of each choice's records and scored on held-out "
                "records; computed from raw labels: an internal report, not privacy-protected",
        "classifiers": list(settings.classifiers),
        "versions": {
            "raw": "the input records",
            "vae_round_trip": "encoded, a posterior draw, decoded: the VAE alone, no filter (b = 0)",
            "privatized": "the released records",
            "gaussian_baseline": "z + N(0, sigma^2 I) with the distortion of the choice's budget, decoded",
        },
        "choices": {},
    }
    for (choice, latent_filter), (rng, _), sample in zip(zip(config.choices, filters, strict=True), draws, samples,
                                                         strict=True):
        rows = sample.rows
        order = rng.permutation(rows.size)
        test_size = int(round(settings.test_fraction * rows.size))
        test, train = np.sort(order[:test_size]), np.sort(order[test_size:])
        if min(test.size, train.size) < MINIMUM_PART_RECORDS:
            report["choices"][choice.name] = {"skipped": f"too few records ({rows.size}) to train and test classifiers"}
            continue
        private_classes = len(config.labels[choice.private].classes)
        utility_classes = len(config.labels[choice.utility].classes)
        labels = sample.private.astype(np.int64)
        noise_scale = gaussian_baseline_noise_scale(training_log_variance, choice.budget)
        no_filter = LinearLatentFilter(np.zeros((latent_dimension, 1)), np.zeros((latent_dimension, private_classes)))
        features = sample.features
        latents = encode_latents(weights, features)
        versions = {
            "raw": features,
            "vae_round_trip": _privatized_version(weights, spec, latents, rows, labels, no_filter, secret,
                                                  release_id, PURPOSE_ROUND_TRIP),
            "privatized": sample.released_features,
            "gaussian_baseline": _privatized_version(
                weights, spec, latents, rows, labels,
                gaussian_baseline_filter(latent_dimension, private_classes, noise_scale), secret, release_id,
                PURPOSE_BASELINE),
        }
        report["choices"][choice.name] = {
            "records": int(rows.size),
            "train_records": int(train.size),
            "test_records": int(test.size),
            "distortion_on_evaluated_records": filter_distortion(latent_filter, latents[1], labels),
            "gaussian_baseline_noise_scale": noise_scale,
            **{name: _version_scores(matrix, train, test, labels, sample.utility.astype(np.int64), private_classes,
                                     utility_classes, list(settings.classifiers))
               for name, matrix in versions.items()},
        }
    return report
