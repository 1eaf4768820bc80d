"""Utility and privacy evidence of a tabular release against held-out real records.

Issue 3, "Evaluation". All functions take integer-coded record matrices (``(n, m)``, the schema's
attribute order, ``0 ≤ codes[:, j] < domain_sizes[j]``) except train-on-synthetic-test-on-real,
which takes decoded frames so the classifier sees the released values.

Utility (as in PrivBayes' evaluation, Zhang et al. 2014, Section 6, and Bindschaedler et al. 2017,
Section 6):

* ``mean_marginal_tvd``: the total variation distance ``½·Σ|p − q|`` between the real and the
  synthetic joint distribution of every set of ``way`` attributes (1-, 2- and 3-way), averaged.
  With many attributes the 3-way sets can be subsampled (``max_subsets``) by a keyed generator.
* ``cramers_v_matrix`` and ``mean_cramers_v_difference``: pairwise association (Cramér's V,
  uncorrected) in the real and the synthetic data, and the mean absolute difference over pairs.
* ``train_on_synthetic_test_on_real``: accuracy and AUC of a classifier for a binary target
  trained on synthetic records and tested on real held-out records, next to the same classifier
  trained on real records.

Privacy evidence (Bindschaedler et al. 2017, Section 6): ``exact_match_rate`` of released records
to the seeds ``DS``, and ``distance_to_closest_record`` (Hamming distance on codes), to compare the
released→DS distances with held-out→DS distances.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from transforms.tabular.contingency import contingency_counts


def _checked_codes(codes: np.ndarray, domain_sizes: Sequence[int], name: str) -> np.ndarray:
    matrix = np.asarray(codes)
    if matrix.ndim != 2 or matrix.shape[1] != len(domain_sizes):
        raise ValueError(f"{name} must be an (n, {len(domain_sizes)}) matrix, got shape {matrix.shape}")
    if matrix.shape[0] == 0:
        raise ValueError(f"{name} has no records")
    return matrix


def marginal_total_variation(
    real_codes: np.ndarray,
    synthetic_codes: np.ndarray,
    domain_sizes: Sequence[int],
    attributes: Sequence[int],
) -> float:
    """``½·Σ_v |p_real(v) − p_synthetic(v)|`` over the joint values ``v`` of ``attributes``."""
    real = contingency_counts(real_codes, attributes, domain_sizes).astype(np.float64)
    synthetic = contingency_counts(synthetic_codes, attributes, domain_sizes).astype(np.float64)
    return 0.5 * float(np.abs(real / real.sum() - synthetic / synthetic.sum()).sum())


def marginal_subsets(
    attribute_count: int, way: int, max_subsets: int | None = None, rng: np.random.Generator | None = None
) -> list[tuple[int, ...]]:
    """All attribute sets of size ``way`` in lexicographic order, or — when there are more than
    ``max_subsets`` — a uniform random sample of ``max_subsets`` of them without replacement drawn
    from ``rng`` (a keyed generator), kept in lexicographic order."""
    if way < 1 or way > attribute_count:
        raise ValueError(f"way must be between 1 and the number of attributes ({attribute_count}), got {way}")
    subsets = list(combinations(range(attribute_count), way))
    if max_subsets is None or len(subsets) <= max_subsets:
        return subsets
    if max_subsets < 1:
        raise ValueError("max_subsets must be at least 1")
    if rng is None:
        raise ValueError(
            f"{len(subsets)} attribute sets exceed max_subsets={max_subsets}: pass a keyed rng to sample"
        )
    chosen = np.sort(rng.choice(len(subsets), size=max_subsets, replace=False))
    return [subsets[index] for index in chosen]


def mean_marginal_tvd(
    real_codes: np.ndarray,
    synthetic_codes: np.ndarray,
    domain_sizes: Sequence[int],
    way: int,
    max_subsets: int | None = None,
    rng: np.random.Generator | None = None,
) -> float:
    """Mean total variation distance over the ``way``-way marginals (all of them, or a sample:
    ``marginal_subsets``)."""
    real = _checked_codes(real_codes, domain_sizes, "real_codes")
    synthetic = _checked_codes(synthetic_codes, domain_sizes, "synthetic_codes")
    subsets = marginal_subsets(len(domain_sizes), way, max_subsets, rng)
    return float(
        np.mean([marginal_total_variation(real, synthetic, domain_sizes, subset) for subset in subsets])
    )


def cramers_v(pair_counts: np.ndarray) -> float:
    """Cramér's V ``sqrt(χ²/(n·(min(r, c) − 1)))`` of a 2-D table, without bias correction.

    Values that never occur (empty rows or columns) are dropped first, so ``r`` and ``c`` count
    observed values; with fewer than two observed values on either side the association is 0.
    """
    table = np.asarray(pair_counts, dtype=np.float64)
    table = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
    if min(table.shape) < 2:
        return 0.0
    total = table.sum()
    rows = table.sum(axis=1, keepdims=True)
    columns = table.sum(axis=0, keepdims=True)
    chi_square = total * (float(np.sum(table * table / (rows * columns))) - 1.0)
    return float(min(max(math.sqrt(max(chi_square, 0.0) / (total * (min(table.shape) - 1))), 0.0), 1.0))


def cramers_v_matrix(codes: np.ndarray, domain_sizes: Sequence[int]) -> np.ndarray:
    """The symmetric ``(m, m)`` matrix of pairwise Cramér's V; the diagonal is 1 by convention."""
    matrix = _checked_codes(codes, domain_sizes, "codes")
    attribute_count = len(domain_sizes)
    association = np.eye(attribute_count)
    for first, second in combinations(range(attribute_count), 2):
        value = cramers_v(contingency_counts(matrix, (first, second), domain_sizes))
        association[first, second] = association[second, first] = value
    return association


def mean_cramers_v_difference(
    real_codes: np.ndarray, synthetic_codes: np.ndarray, domain_sizes: Sequence[int]
) -> float:
    """Mean ``|V_real − V_synthetic|`` over the ``m(m−1)/2`` attribute pairs (0 with one attribute)."""
    if len(domain_sizes) < 2:
        return 0.0
    upper = np.triu_indices(len(domain_sizes), k=1)
    difference = cramers_v_matrix(real_codes, domain_sizes) - cramers_v_matrix(synthetic_codes, domain_sizes)
    return float(np.mean(np.abs(difference[upper])))


PositiveLabel = Any | Callable[[pd.Series], pd.Series]


def _binary_target(frame: pd.DataFrame, target_column: str, positive_value: PositiveLabel) -> np.ndarray:
    if target_column not in frame.columns:
        raise ValueError(f"target column {target_column!r} is not in the frame")
    target = frame[target_column]
    if callable(positive_value):
        return np.asarray(positive_value(target), dtype=bool)
    return np.asarray(target == positive_value, dtype=bool)


def _one_hot_pipeline(feature_frame: pd.DataFrame) -> Any:
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder

    categorical = [
        column for column in feature_frame.columns if not pd.api.types.is_numeric_dtype(feature_frame[column])
    ]
    numeric = [column for column in feature_frame.columns if column not in categorical]
    features = ColumnTransformer(
        [
            ("categorical", OneHotEncoder(handle_unknown="ignore", sparse_output=False), categorical),
            ("numeric", "passthrough", numeric),
        ]
    )
    return Pipeline([("features", features), ("model", HistGradientBoostingClassifier(random_state=0))])


def _features(frame: pd.DataFrame, target_column: str) -> pd.DataFrame:
    features = frame.drop(columns=[target_column])
    for column in features.columns:
        if not pd.api.types.is_numeric_dtype(features[column]):
            features[column] = features[column].astype(str)
    return features


def _fit_and_score(
    train: pd.DataFrame, test: pd.DataFrame, target_column: str, positive_value: PositiveLabel, threads: int
) -> tuple[float, float]:
    from sklearn.metrics import roc_auc_score
    from threadpoolctl import threadpool_limits

    train_labels = _binary_target(train, target_column, positive_value)
    test_labels = _binary_target(test, target_column, positive_value)
    if train_labels.size == 0:
        raise ValueError("the training frame has no records")
    if np.unique(train_labels).size < 2:
        scores = np.full(test_labels.size, float(train_labels[0]))
    else:
        model = _one_hot_pipeline(_features(train, target_column))
        with threadpool_limits(limits=threads):
            model.fit(_features(train, target_column), train_labels)
            scores = model.predict_proba(_features(test, target_column))[:, 1]
    accuracy = float(np.mean((scores >= 0.5) == test_labels))
    auc = float(roc_auc_score(test_labels, scores)) if np.unique(test_labels).size == 2 else float("nan")
    return accuracy, auc


def train_on_synthetic_test_on_real(
    synthetic_frame: pd.DataFrame,
    train_real_frame: pd.DataFrame,
    test_real_frame: pd.DataFrame,
    target_column: str,
    positive_value: PositiveLabel,
    threads: int = 1,
) -> dict[str, float]:
    """Accuracy and AUC on ``test_real_frame`` of a classifier trained on the synthetic records and of
    the same classifier trained on ``train_real_frame``.

    The target is ``frame[target_column] == positive_value``, or ``positive_value(frame[target_column])``
    when it is callable (e.g. ``lambda rings: rings > 10`` for Abalone). Features: every other
    column; non-numeric columns one-hot encoded (categories unseen in training are ignored),
    numeric columns as they are. Classifier: scikit-learn's histogram gradient boosting with
    ``random_state=0``, limited to ``threads`` OpenMP threads (default 1: its spinning OpenMP
    workers slow to a crawl when the cores are shared, e.g. with Spark executors, and a fixed
    thread count keeps runs comparable). A training set with one class predicts that
    class with probability 1 (AUC 0.5). AUC is NaN when the test set has one class.
    """
    columns = list(test_real_frame.columns)
    for name, frame in (("synthetic_frame", synthetic_frame), ("train_real_frame", train_real_frame)):
        if sorted(frame.columns) != sorted(columns):
            raise ValueError(
                f"{name} must have the test frame's columns {columns}, got {list(frame.columns)}"
            )
    synthetic_accuracy, synthetic_auc = _fit_and_score(
        synthetic_frame[columns], test_real_frame, target_column, positive_value, threads
    )
    real_accuracy, real_auc = _fit_and_score(
        train_real_frame[columns], test_real_frame, target_column, positive_value, threads
    )
    test_labels = _binary_target(test_real_frame, target_column, positive_value)
    return {
        "synthetic_accuracy": synthetic_accuracy,
        "synthetic_auc": synthetic_auc,
        "real_accuracy": real_accuracy,
        "real_auc": real_auc,
        "test_records": float(test_labels.size),
        "test_positive_rate": float(test_labels.mean()) if test_labels.size else float("nan"),
    }


def exact_match_rate(released_codes: np.ndarray, seeds_codes: np.ndarray) -> float:
    """The fraction of released records identical (on every attribute) to some seed record; 0 when
    nothing was released."""
    released = np.asarray(released_codes)
    seeds = np.asarray(seeds_codes)
    if released.ndim != 2 or seeds.ndim != 2 or released.shape[1] != seeds.shape[1]:
        raise ValueError("released and seed codes must be matrices with the same number of attributes")
    if released.shape[0] == 0 or seeds.shape[0] == 0:
        return 0.0
    stacked = np.concatenate([released, seeds]).astype(np.int64, copy=False)
    _, row_ids = np.unique(stacked, axis=0, return_inverse=True)
    row_ids = row_ids.reshape(-1)
    return float(np.isin(row_ids[: released.shape[0]], row_ids[released.shape[0] :]).mean())


def _one_hot(codes: np.ndarray, offsets: np.ndarray, width: int) -> np.ndarray:
    encoded = np.zeros((codes.shape[0], width), dtype=np.float32)
    rows = np.repeat(np.arange(codes.shape[0]), codes.shape[1])
    encoded[rows, (codes.astype(np.int64) + offsets).reshape(-1)] = 1.0
    return encoded


def distance_to_closest_record(
    released: np.ndarray,
    reference: np.ndarray,
    domain_sizes: Sequence[int] | None = None,
    chunk_size: int = 2048,
) -> np.ndarray:
    """For every released record, the Hamming distance (number of differing attributes) to its
    closest record in ``reference`` (int64, one value per released record: the empirical
    distribution).

    Vectorized: with one-hot codes, ``matches = A·Bᵀ`` counts the agreeing attributes of every
    pair (exact in float32 for fewer than 2^24 attributes) and the distance is ``m − matches``;
    both sides are processed in chunks of ``chunk_size`` rows so memory stays at
    ``chunk_size² × 4`` bytes.
    """
    left = np.asarray(released)
    right = np.asarray(reference)
    if left.ndim != 2 or right.ndim != 2 or left.shape[1] != right.shape[1]:
        raise ValueError("released and reference codes must be matrices with the same number of attributes")
    if right.shape[0] == 0:
        raise ValueError("the reference set is empty")
    attribute_count = left.shape[1]
    if left.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    if domain_sizes is None:
        sizes = np.maximum(left.max(axis=0), right.max(axis=0)).astype(np.int64) + 1
    else:
        sizes = np.asarray(domain_sizes, dtype=np.int64)
        if sizes.shape != (attribute_count,):
            raise ValueError(f"expected {attribute_count} domain sizes, got {sizes.size}")
        for block in (left, right):
            if block.min() < 0 or np.any(block.max(axis=0) >= sizes):
                raise ValueError("codes outside their domains")
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    width = int(sizes.sum())
    closest = np.full(left.shape[0], attribute_count, dtype=np.int64)
    for left_start in range(0, left.shape[0], chunk_size):
        left_block = _one_hot(left[left_start : left_start + chunk_size], offsets, width)
        window = slice(left_start, left_start + left_block.shape[0])
        for right_start in range(0, right.shape[0], chunk_size):
            right_block = _one_hot(right[right_start : right_start + chunk_size], offsets, width)
            matches = (left_block @ right_block.T).max(axis=1)
            closest[window] = np.minimum(closest[window], attribute_count - np.rint(matches).astype(np.int64))
    return closest


def closest_record_distance_distribution(distances: np.ndarray, attribute_count: int) -> np.ndarray:
    """The fraction of records at each distance ``0, 1, …, m`` (length ``m + 1``)."""
    values = np.asarray(distances, dtype=np.int64)
    if values.size == 0:
        return np.zeros(attribute_count + 1)
    return np.bincount(values, minlength=attribute_count + 1)[: attribute_count + 1] / values.size
