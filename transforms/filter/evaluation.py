"""Evaluation of a filter release: retrained adversary, utility, and mutual information estimates.

Issue 5, "Evaluation". The classifiers used during filter training are never reused: an adversary
(private label) and a utility classifier are trained afresh on privatized records and scored on
held-out privatized records, next to the same classifiers on the raw records.

* ``classifier_scores``: accuracy, AUROC (binary, or one-vs-rest macro average over the classes
  present in the test labels), the majority-class rate (the accuracy of always predicting the
  training labels' most frequent class, the floor an adversary falls to when the release says
  nothing), and the held-out cross-entropy. Classifiers: ``"logistic"`` (standardized features,
  L2-regularized logistic regression) or ``"gradient_boosting"`` (scikit-learn's histogram gradient
  boosting without early stopping, so no random draw is made).
* ``classifier_mutual_information_bound``: for any classifier ``q(y|r)``,
  ``I(R; Y) = H(Y) − H(Y|R) ≥ H(Y) − E[−log q(Y|R)]`` (the cross-entropy upper-bounds the
  conditional entropy), estimated on held-out records with the plug-in ``H(Y)`` of their labels;
  floored at 0. A lower bound up to sampling error: a stronger classifier gives a tighter bound.
* ``knn_mutual_information``: Ross's k-nearest-neighbour estimator for a continuous vector and a
  discrete label (Ross 2014, "Mutual information between discrete and continuous data sets",
  PLoS ONE 9(2), eq. 2): ``I ≈ ψ(N) − ⟨ψ(N_y)⟩ + ψ(k) − ⟨ψ(m)⟩``, where for each point ``d`` is the
  distance to its ``k``-th nearest neighbour with the same label, ``m`` the number of other points
  (any label) within ``d``, and ``N_y`` the size of its label class. For continuous representations
  (latents ``z`` or ``z̃``): ties from discrete features (one-hot decoded releases) bias it, use the
  classifier bound there. Labels with at most ``k`` points are left out.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from scipy.special import digamma
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.neighbors import KDTree, NearestNeighbors
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

ClassifierKind = Literal["logistic", "gradient_boosting"]
PROBABILITY_FLOOR = 1e-12


@dataclass(frozen=True)
class ClassifierScores:
    """Held-out scores of a classifier trained afresh; ``cross_entropy`` and
    ``mutual_information_bound`` are in nats."""

    accuracy: float
    auroc: float
    majority_rate: float
    cross_entropy: float
    mutual_information_bound: float
    train_rows: int
    test_rows: int

    def to_dict(self) -> dict[str, Any]:
        return {
            key: (None if isinstance(value, float) and math.isnan(value) else value)
            for key, value in asdict(self).items()
        }


def _make_classifier(classifier: ClassifierKind) -> Any:
    if classifier == "logistic":
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    if classifier == "gradient_boosting":
        return HistGradientBoostingClassifier(max_iter=100, early_stopping=False)
    raise ValueError(f"unknown classifier {classifier!r}")


def _checked(
    features: np.ndarray, labels: np.ndarray, classes: int, name: str
) -> tuple[np.ndarray, np.ndarray]:
    features = np.asarray(features, dtype=np.float64)
    labels = np.asarray(labels)
    if features.ndim != 2 or labels.ndim != 1 or features.shape[0] != labels.shape[0]:
        raise ValueError(f"{name}: features must be (n, d) and labels (n,) for the same n")
    if features.shape[0] == 0:
        raise ValueError(f"{name}: no records")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() >= classes:
        raise ValueError(f"{name}: labels must be integer codes in [0, {classes})")
    return features, labels.astype(np.int64)


def label_entropy(labels: np.ndarray, classes: int) -> float:
    """The plug-in entropy (nats) of the labels' empirical distribution."""
    frequencies = np.bincount(np.asarray(labels, dtype=np.int64), minlength=classes) / len(labels)
    present = frequencies[frequencies > 0]
    return float(-(present * np.log(present)).sum())


def _auroc(labels: np.ndarray, probabilities: np.ndarray) -> float:
    present = np.unique(labels)
    if len(present) < 2:
        return math.nan
    if probabilities.shape[1] == 2:
        return float(roc_auc_score(labels, probabilities[:, 1]))
    scores = [roc_auc_score(labels == label, probabilities[:, label]) for label in present]
    return float(np.mean(scores))


def classifier_scores(
    train_features: np.ndarray,
    train_labels: np.ndarray,
    test_features: np.ndarray,
    test_labels: np.ndarray,
    classes: int,
    classifier: ClassifierKind = "logistic",
    threads: int | None = 1,
) -> ClassifierScores:
    """Train ``classifier`` on the training records and score it on the test records.

    ``threads`` caps the BLAS/OpenMP threads of the fit (``None``: the libraries' default); one
    thread avoids the OpenMP spin-waiting that slows gradient boosting down by an order of
    magnitude on a busy machine.
    """
    train_x, train_y = _checked(train_features, train_labels, classes, "training records")
    test_x, test_y = _checked(test_features, test_labels, classes, "test records")
    majority = int(np.argmax(np.bincount(train_y, minlength=classes)))
    majority_rate = float(np.mean(test_y == majority))
    probabilities = np.zeros((len(test_y), classes))
    if len(np.unique(train_y)) == 1:
        probabilities[:, majority] = 1.0
    else:
        with threadpool_limits(limits=threads):
            model = _make_classifier(classifier).fit(train_x, train_y)
            probabilities[:, np.asarray(model.classes_, dtype=np.int64)] = model.predict_proba(test_x)
    accuracy = float(np.mean(np.argmax(probabilities, axis=1) == test_y))
    cross_entropy = float(
        -np.log(np.clip(probabilities[np.arange(len(test_y)), test_y], PROBABILITY_FLOOR, None)).mean()
    )
    bound = max(label_entropy(test_y, classes) - cross_entropy, 0.0)
    return ClassifierScores(
        accuracy=accuracy,
        auroc=_auroc(test_y, probabilities),
        majority_rate=majority_rate,
        cross_entropy=cross_entropy,
        mutual_information_bound=bound,
        train_rows=len(train_y),
        test_rows=len(test_y),
    )


def classifier_mutual_information_bound(
    train_features: np.ndarray,
    train_labels: np.ndarray,
    test_features: np.ndarray,
    test_labels: np.ndarray,
    classes: int,
    classifier: ClassifierKind = "logistic",
) -> float:
    """``max(H(Y) − CE, 0)`` in nats on the test records (module docstring)."""
    return classifier_scores(
        train_features, train_labels, test_features, test_labels, classes, classifier
    ).mutual_information_bound


def knn_mutual_information(features: np.ndarray, labels: np.ndarray, neighbours: int = 3) -> float:
    """Ross's k-NN estimate of ``I(X; Y)`` in nats for continuous ``X`` and discrete ``Y``
    (module docstring); negative estimates are floored at 0."""
    features = np.asarray(features, dtype=np.float64)
    labels = np.asarray(labels)
    if features.ndim == 1:
        features = features[:, None]
    if features.ndim != 2 or labels.shape != (features.shape[0],):
        raise ValueError("features must be (n, d) and labels (n,)")
    if neighbours < 1:
        raise ValueError("neighbours must be at least 1")
    values, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    usable = counts[inverse] > neighbours
    if usable.sum() < 2:
        raise ValueError("too few points with a label that has more than `neighbours` points")
    features, inverse = features[usable], inverse[usable]
    class_sizes = counts[inverse].astype(np.float64)
    radius = np.empty(len(features))
    for code in np.unique(inverse):
        members = inverse == code
        search = NearestNeighbors(n_neighbors=neighbours).fit(features[members])
        distances, _ = search.kneighbors()
        radius[members] = distances[:, -1]
    within = KDTree(features).query_radius(features, np.nextafter(radius, np.inf), count_only=True) - 1
    estimate = (
        digamma(len(features))
        - np.mean(digamma(class_sizes))
        + digamma(neighbours)
        - np.mean(digamma(within))
    )
    return max(float(estimate), 0.0)


def release_evaluation(
    train_release: np.ndarray,
    train_private: np.ndarray,
    train_utility: np.ndarray,
    test_release: np.ndarray,
    test_private: np.ndarray,
    test_utility: np.ndarray,
    private_classes: int,
    utility_classes: int,
    classifier: ClassifierKind = "logistic",
) -> dict[str, dict[str, Any]]:
    """A retrained adversary (private label) and utility classifier on released feature matrices,
    scored on held-out released records: ``{"adversary": …, "utility": …}``."""
    adversary = classifier_scores(
        train_release, train_private, test_release, test_private, private_classes, classifier
    )
    utility = classifier_scores(
        train_release, train_utility, test_release, test_utility, utility_classes, classifier
    )
    return {"adversary": adversary.to_dict(), "utility": utility.to_dict()}
