"""Evaluation metrics against hand computations, brute force and scipy's Cramér's V."""

from __future__ import annotations

from collections import Counter
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from scipy.stats.contingency import association

from transforms.core.keyed_randomness import keyed_generator
from transforms.tabular.evaluation import (
    closest_record_distance_distribution,
    cramers_v,
    cramers_v_matrix,
    distance_to_closest_record,
    exact_match_rate,
    marginal_subsets,
    mean_cramers_v_difference,
    mean_marginal_tvd,
    train_on_synthetic_test_on_real,
)

SECRET = bytes(range(32))


def test_total_variation_by_hand() -> None:
    real = np.array([[0, 0], [0, 1], [1, 1], [1, 1]])
    synthetic = np.array([[0, 0], [0, 0], [0, 1], [1, 0]])
    # attribute 0: (.5, .5) vs (.75, .25) → .25; attribute 1: (.25, .75) vs (.75, .25) → .5
    assert mean_marginal_tvd(real, synthetic, (2, 2), 1) == pytest.approx((0.25 + 0.5) / 2)
    # pairs: real (00 .25, 01 .25, 11 .5), synthetic (00 .5, 01 .25, 10 .25) → ½(.25 + 0 + .25 + .5) = .5
    assert mean_marginal_tvd(real, synthetic, (2, 2), 2) == pytest.approx(0.5)
    assert mean_marginal_tvd(real, real, (2, 2), 2) == 0.0


def brute_force_tvd(real: np.ndarray, synthetic: np.ndarray, subset: tuple[int, ...]) -> float:
    p = Counter(tuple(row[list(subset)]) for row in real)
    q = Counter(tuple(row[list(subset)]) for row in synthetic)
    return 0.5 * sum(abs(p[v] / len(real) - q[v] / len(synthetic)) for v in set(p) | set(q))


def test_three_way_tvd_against_brute_force() -> None:
    rng = np.random.default_rng(3)
    sizes = (2, 3, 4, 2, 3)
    real = np.column_stack([rng.integers(0, s, size=300) for s in sizes])
    synthetic = np.column_stack([rng.integers(0, s, size=200) for s in sizes])
    expected = np.mean([brute_force_tvd(real, synthetic, subset) for subset in combinations(range(5), 3)])
    assert mean_marginal_tvd(real, synthetic, sizes, 3) == pytest.approx(expected, abs=1e-12)
    sample = marginal_subsets(5, 3, 4, keyed_generator(SECRET, "eval", "subsets", 0))
    assert len(sample) == len(set(sample)) == 4 and sample == sorted(sample)
    assert sample == marginal_subsets(5, 3, 4, keyed_generator(SECRET, "eval", "subsets", 0))
    sampled = mean_marginal_tvd(real, synthetic, sizes, 3, 4, keyed_generator(SECRET, "eval", "subsets", 0))
    assert sampled == pytest.approx(np.mean([brute_force_tvd(real, synthetic, s) for s in sample]), abs=1e-12)
    with pytest.raises(ValueError, match="keyed rng"):
        marginal_subsets(5, 3, 4)


def test_cramers_v_against_scipy_and_by_hand() -> None:
    rng = np.random.default_rng(5)
    for _ in range(30):
        shape = tuple(int(s) for s in rng.integers(2, 6, size=2))
        table = rng.integers(1, 20, size=shape)
        assert cramers_v(table) == pytest.approx(association(table, method="cramer"), abs=1e-12)
    assert cramers_v(np.array([[10, 0], [0, 10]])) == pytest.approx(1.0)
    assert cramers_v(np.array([[10, 10], [10, 10]])) == pytest.approx(0.0)
    with_empty_row = np.array([[3, 7, 1], [0, 0, 0], [6, 2, 5]])
    assert cramers_v(with_empty_row) == pytest.approx(association(with_empty_row[[0, 2]], method="cramer"))
    assert cramers_v(np.array([[4, 5, 6]])) == 0.0


def test_cramers_v_matrix_and_mean_difference() -> None:
    rng = np.random.default_rng(6)
    sizes = (3, 3, 2)
    first = rng.integers(0, 3, size=400)
    real = np.column_stack([first, first, rng.integers(0, 2, size=400)])
    shuffled = real.copy()
    shuffled[:, 1] = rng.permutation(shuffled[:, 1])
    matrix = cramers_v_matrix(real, sizes)
    np.testing.assert_allclose(matrix, matrix.T)
    np.testing.assert_allclose(np.diag(matrix), 1.0)
    assert matrix[0, 1] == pytest.approx(1.0)
    synthetic_matrix = cramers_v_matrix(shuffled, sizes)
    expected = np.mean(
        np.abs(
            [
                matrix[0, 1] - synthetic_matrix[0, 1],
                matrix[0, 2] - synthetic_matrix[0, 2],
                matrix[1, 2] - synthetic_matrix[1, 2],
            ]
        )
    )
    assert mean_cramers_v_difference(real, shuffled, sizes) == pytest.approx(expected)
    assert mean_cramers_v_difference(real, real, sizes) == 0.0


def toy_frame(n: int, seed: int, flip: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    kind = rng.choice(["x", "y", "z"], size=n)
    label = np.where(np.isin(kind, ["x", "z"]), ">50K", "<=50K")
    if flip:
        label = np.where(label == ">50K", "<=50K", ">50K")
    return pd.DataFrame({"kind": kind, "noise": rng.normal(size=n), "income": label})


def test_train_on_synthetic_equals_train_on_real_when_they_are_the_same_records() -> None:
    train, test = toy_frame(400, 1), toy_frame(300, 2)
    train.loc[train.index[:60], "income"] = ">50K"  # not perfectly separable
    result = train_on_synthetic_test_on_real(train.copy(), train, test, "income", ">50K")
    assert result["synthetic_accuracy"] == result["real_accuracy"]
    assert result["synthetic_auc"] == result["real_auc"]
    assert result["test_records"] == 300
    assert result["test_positive_rate"] == pytest.approx(np.mean(test["income"] == ">50K"))


def test_separable_target_is_learned_and_flipped_labels_are_learned_backwards() -> None:
    train, test = toy_frame(400, 3), toy_frame(300, 4)
    result = train_on_synthetic_test_on_real(toy_frame(400, 5, flip=True), train, test, "income", ">50K")
    assert result["real_accuracy"] == 1.0 and result["real_auc"] == 1.0
    assert result["synthetic_accuracy"] == 0.0 and result["synthetic_auc"] == 0.0


def test_single_class_synthetic_training_set_predicts_that_class() -> None:
    train, test = toy_frame(400, 6), toy_frame(250, 7)
    constant = train.assign(income="<=50K")
    result = train_on_synthetic_test_on_real(constant, train, test, "income", ">50K")
    assert result["synthetic_accuracy"] == pytest.approx(np.mean(test["income"] == "<=50K"))
    assert result["synthetic_auc"] == 0.5


def test_a_callable_defines_a_threshold_target() -> None:
    rng = np.random.default_rng(8)
    frames = []
    for n in (400, 400, 300):
        length = rng.uniform(0.1, 0.8, size=n)
        frames.append(
            pd.DataFrame(
                {
                    "length": length,
                    "sex": rng.choice(["M", "F", "I"], size=n),
                    "rings": np.round(length * 25).astype(int),
                }
            )
        )
    result = train_on_synthetic_test_on_real(
        frames[0], frames[1], frames[2], "rings", lambda rings: rings > 10
    )
    assert result["real_auc"] > 0.99 and result["synthetic_auc"] > 0.99
    assert result["test_positive_rate"] == pytest.approx(np.mean(frames[2]["rings"] > 10))


def test_exact_match_rate_by_hand_and_against_a_set() -> None:
    seeds = np.array([[0, 1, 2], [1, 1, 1], [2, 0, 1]])
    released = np.array([[1, 1, 1], [0, 1, 1], [2, 0, 1], [2, 0, 1]])
    assert exact_match_rate(released, seeds) == pytest.approx(0.75)
    rng = np.random.default_rng(9)
    seeds = rng.integers(0, 3, size=(200, 4))
    released = rng.integers(0, 3, size=(150, 4))
    rows = {tuple(row) for row in seeds}
    assert exact_match_rate(released, seeds) == pytest.approx(
        np.mean([tuple(row) in rows for row in released])
    )
    assert exact_match_rate(np.zeros((0, 4), dtype=int), seeds) == 0.0


def test_distance_to_closest_record_against_brute_force() -> None:
    assert list(
        distance_to_closest_record(np.array([[0, 1, 2], [2, 2, 2]]), np.array([[0, 1, 1], [1, 2, 2]]))
    ) == [1, 1]
    rng = np.random.default_rng(10)
    sizes = (2, 3, 4, 3, 2, 5)
    released = np.column_stack([rng.integers(0, s, size=53) for s in sizes])
    reference = np.column_stack([rng.integers(0, s, size=41) for s in sizes])
    brute = np.array([min(int(np.sum(row != other)) for other in reference) for row in released])
    np.testing.assert_array_equal(distance_to_closest_record(released, reference, sizes, chunk_size=7), brute)
    np.testing.assert_array_equal(distance_to_closest_record(released, reference), brute)
    distribution = closest_record_distance_distribution(brute, len(sizes))
    assert distribution.size == len(sizes) + 1 and distribution.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(distribution, [np.mean(brute == d) for d in range(len(sizes) + 1)])
    with pytest.raises(ValueError, match="outside"):
        distance_to_closest_record(released, reference, (2, 2, 2, 2, 2, 2))
