"""Retrained-classifier scores and the mutual-information estimates against known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from transforms.filter.evaluation import (
    classifier_mutual_information_bound,
    classifier_scores,
    knn_mutual_information,
    label_entropy,
    release_evaluation,
)


def mixture_mutual_information(separation: float) -> float:
    """I(X; Y) for Y uniform on {0, 1} and X | Y ~ N(±separation/2, 1), by numerical integration."""

    def mixture_entropy_integrand(x: float) -> float:
        density = 0.5 * stats.norm.pdf(x, -separation / 2) + 0.5 * stats.norm.pdf(x, separation / 2)
        return -density * math.log(density) if density > 0 else 0.0

    mixture_entropy, _ = integrate.quad(mixture_entropy_integrand, -30, 30, limit=200)
    return mixture_entropy - stats.norm.entropy()


def mixture_sample(rows: int, separation: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, rows)
    return (rng.normal(size=rows) + separation * (labels - 0.5))[:, None], labels


def test_knn_estimate_matches_the_true_mutual_information_and_is_near_zero_when_independent() -> None:
    for separation in (1.0, 3.0):
        truth = mixture_mutual_information(separation)
        features, labels = mixture_sample(4000, separation, seed=1)
        assert knn_mutual_information(features, labels) == pytest.approx(truth, abs=0.03)
    features, _ = mixture_sample(4000, 2.0, seed=2)
    independent = np.random.default_rng(3).integers(0, 2, 4000)
    assert knn_mutual_information(features, independent) < 0.02


def test_classifier_bound_is_below_the_truth_and_close_to_it_for_a_well_specified_model() -> None:
    truth = mixture_mutual_information(2.0)
    features, labels = mixture_sample(8000, 2.0, seed=4)
    bound = classifier_mutual_information_bound(
        features[:4000], labels[:4000], features[4000:], labels[4000:], 2
    )
    assert truth - 0.03 < bound < truth + 0.02
    independent = np.random.default_rng(5).integers(0, 2, 8000)
    assert (
        classifier_mutual_information_bound(
            features[:4000], independent[:4000], features[4000:], independent[4000:], 2
        )
        < 0.01
    )


def test_scores_on_separable_and_on_independent_labels() -> None:
    rng = np.random.default_rng(6)
    features = rng.normal(size=(2000, 3))
    labels = (features[:, 0] + features[:, 1] > 0).astype(np.int64)
    separable = classifier_scores(features[:1000], labels[:1000], features[1000:], labels[1000:], 2)
    assert separable.accuracy > 0.97 and separable.auroc > 0.99
    unbalanced = (rng.uniform(size=2000) < 0.8).astype(np.int64)
    for kind in ("logistic", "gradient_boosting"):
        scores = classifier_scores(
            features[:1000], unbalanced[:1000], features[1000:], unbalanced[1000:], 2, kind
        )
        assert scores.majority_rate == pytest.approx(np.mean(unbalanced[1000:] == 1))
        assert scores.accuracy < scores.majority_rate + 0.02
        assert abs(scores.auroc - 0.5) < 0.08


def test_multiclass_auroc_is_the_mean_of_one_versus_rest_pair_counts() -> None:
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 3, 600)
    features = rng.normal(size=(600, 2)) + np.eye(3)[labels][:, :2] * 1.5
    scores = classifier_scores(features[:300], labels[:300], features[300:], labels[300:], 3)
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(
        features[:300], labels[:300]
    )
    probabilities = model.predict_proba(features[300:])
    test = labels[300:]
    per_class = []
    for label in range(3):
        positives, negatives = probabilities[test == label, label], probabilities[test != label, label]
        wins = (positives[:, None] > negatives[None, :]).sum() + 0.5 * (
            positives[:, None] == negatives[None, :]
        ).sum()
        per_class.append(wins / (len(positives) * len(negatives)))
    assert scores.auroc == pytest.approx(np.mean(per_class), rel=1e-12)
    assert scores.cross_entropy == pytest.approx(
        -np.mean(np.log(probabilities[np.arange(300), test])), rel=1e-9
    )


def test_a_label_missing_from_training_gets_probability_zero_and_entropy_is_plug_in() -> None:
    features = np.arange(20, dtype=float)[:, None]
    scores = classifier_scores(
        features[:10], np.zeros(10, dtype=np.int64), features[10:], np.array([0] * 8 + [2] * 2), 3
    )
    assert scores.accuracy == pytest.approx(0.8)
    assert scores.majority_rate == pytest.approx(0.8)
    assert label_entropy(np.array([0, 0, 1, 2]), 3) == pytest.approx(
        -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    )


def test_release_evaluation_reports_both_classifiers() -> None:
    features, private = mixture_sample(1000, 3.0, seed=8)
    utility = np.random.default_rng(9).integers(0, 2, 1000)
    report = release_evaluation(
        features[:500], private[:500], utility[:500], features[500:], private[500:], utility[500:], 2, 2
    )
    assert report["adversary"]["accuracy"] > 0.85
    assert report["utility"]["accuracy"] < 0.6
    assert report["adversary"]["test_rows"] == 500
    with pytest.raises(ValueError, match="labels"):
        release_evaluation(
            features[:500],
            private[:500] + 2,
            utility[:500],
            features[500:],
            private[500:],
            utility[500:],
            2,
            2,
        )
