"""Structure scores and their replace-one sensitivities.

Mutual information is checked against scikit-learn; PrivBayes' sensitivity lemma against an
exhaustive enumeration of every table and every one-record replacement for small ``n``; the
merit's derived bound against every single-record replacement of many small datasets.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest
from sklearn.metrics import mutual_info_score

from transforms.tabular.contingency import contingency_counts
from transforms.tabular.structure_scores import (
    candidate_score,
    correlation_merit_score,
    correlation_merit_sensitivity,
    mutual_information_score,
    mutual_information_sensitivity,
    public_symmetric_uncertainty,
    public_symmetric_uncertainty_sensitivity,
    score_sensitivity,
    score_table_keys,
)


def privbayes_general(n: int) -> float:
    return 2 / n * math.log((n + 1) / 2) + (n - 1) / n * math.log((n + 1) / (n - 1))


def privbayes_binary(n: int) -> float:
    return math.log(n) / n + (n - 1) / n * math.log(n / (n - 1))


def reference_information(table: np.ndarray) -> float:
    return float(mutual_info_score(None, None, contingency=np.asarray(table).reshape(-1, table.shape[-1])))


def test_mutual_information_matches_scikit_learn_on_random_tables() -> None:
    rng = np.random.default_rng(3)
    for shape in [(2, 2), (3, 5), (4, 2), (2, 3, 4), (3, 2, 2, 3)]:
        for _ in range(10):
            table = rng.integers(0, 6, size=shape) * (rng.random(shape) < 0.7)
            if table.sum() == 0:
                continue
            assert mutual_information_score(table) == pytest.approx(reference_information(table), abs=1e-12)


def test_mutual_information_hand_cases() -> None:
    assert mutual_information_score(np.array([[5, 0], [0, 5]])) == pytest.approx(math.log(2))
    assert mutual_information_score(np.outer([1, 3], [2, 4, 6])) == pytest.approx(0.0, abs=1e-15)
    assert mutual_information_score(np.array([3, 4, 5])) == 0.0
    # parents (2, 2) read as one 4-valued variable that determines a 4-valued child
    joint = np.zeros((2, 2, 4), dtype=int)
    for configuration in range(4):
        joint[configuration // 2, configuration % 2, configuration] = 7
    assert mutual_information_score(joint) == pytest.approx(math.log(4))


def all_tables(n: int, cells: int) -> np.ndarray:
    """Every vector of ``cells`` non-negative integers summing to ``n`` (stars and bars)."""
    tables = []
    for bars in combinations(range(n + cells - 1), cells - 1):
        edges = (-1, *bars, n + cells - 1)
        tables.append([edges[i + 1] - edges[i] - 1 for i in range(cells)])
    return np.array(tables, dtype=np.int64)


def largest_replacement_change(n: int, shape: tuple[int, int]) -> float:
    """max over all tables with n records and all one-record replacements of |ΔI|."""
    cells = shape[0] * shape[1]
    tables = all_tables(n, cells)
    information = np.array([mutual_information_score(t.reshape(shape)) for t in tables])
    index = {tuple(t): i for i, t in enumerate(tables)}
    largest = 0.0
    for source in range(cells):
        for target in range(cells):
            if source == target:
                continue
            movable = np.flatnonzero(tables[:, source] > 0)
            moved = tables[movable].copy()
            moved[:, source] -= 1
            moved[:, target] += 1
            neighbours = np.array([index[tuple(t)] for t in moved])
            largest = max(largest, float(np.abs(information[neighbours] - information[movable]).max()))
    return largest


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_privbayes_binary_bound_holds_and_is_attained(n: int) -> None:
    observed = largest_replacement_change(n, (2, 3))
    assert mutual_information_sensitivity(n, 3, 2) == pytest.approx(privbayes_binary(n))
    assert observed <= privbayes_binary(n) + 1e-12
    assert observed == pytest.approx(privbayes_binary(n), rel=1e-9)


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_privbayes_general_bound_holds_and_is_attained_for_odd_n(n: int) -> None:
    observed = largest_replacement_change(n, (3, 3))
    assert mutual_information_sensitivity(n, 3, 3) == pytest.approx(privbayes_general(n))
    assert observed <= privbayes_general(n) + 1e-12
    if n % 2 == 1:
        assert observed == pytest.approx(privbayes_general(n), rel=1e-9)
    # the binary form would be too small for non-binary domains: it is not a valid bound here
    assert observed > privbayes_binary(n)


def test_sensitivity_is_zero_when_information_is_identically_zero() -> None:
    assert mutual_information_sensitivity(1, 5, 5) == 0.0
    assert mutual_information_sensitivity(100, 1, 5) == 0.0
    assert mutual_information_sensitivity(100, 5, 1) == 0.0
    assert score_sensitivity("mutual_information", 100, 4, ()) == 0.0
    assert score_sensitivity("correlation_merit", 100, 4, ()) == 0.0
    assert score_sensitivity("mutual_information", 100, 3, (3, 3)) == pytest.approx(privbayes_general(100))
    assert score_sensitivity("mutual_information", 100, 3, (2,)) == pytest.approx(privbayes_binary(100))
    with pytest.raises(ValueError, match="record count"):
        score_sensitivity("mutual_information", 0, 3, (2,))
    with pytest.raises(ValueError, match="unknown structure score"):
        score_sensitivity("entropy", 10, 3, (2,))


def reference_uncertainty(table: np.ndarray) -> float:
    return 2 * reference_information(table) / (math.log(table.shape[0]) + math.log(table.shape[1]))


def test_public_symmetric_uncertainty_is_bounded_and_normalized_by_public_domains() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        shape = tuple(int(s) for s in rng.integers(2, 6, size=2))
        table = rng.integers(0, 5, size=shape)
        table[0, 0] += 1
        value = public_symmetric_uncertainty(table)
        assert 0.0 <= value <= 1.0
        assert value == pytest.approx(reference_uncertainty(table), abs=1e-12)
    assert public_symmetric_uncertainty(np.diag([4, 4, 4])) == pytest.approx(1.0)
    assert public_symmetric_uncertainty(np.array([[3, 4, 5]])) == 0.0
    assert public_symmetric_uncertainty_sensitivity(50, 3, 4) == pytest.approx(
        2 * privbayes_general(50) / (math.log(3) + math.log(4))
    )


def test_data_dependent_symmetric_uncertainty_moves_by_one_with_one_record() -> None:
    """Why the merit uses public normalizers: Hall's 2I/(H(X)+H(Y)) has sensitivity 1."""

    def hall(table: np.ndarray) -> float:
        p = table / table.sum()
        entropies = [-np.sum(q[q > 0] * np.log(q[q > 0])) for q in (p.sum(1), p.sum(0))]
        return 0.0 if sum(entropies) == 0 else 2 * mutual_information_score(table) / sum(entropies)

    before = np.array([[9, 0], [0, 1]])  # nine (0, 0) and one (1, 1)
    after = np.array([[9, 0], [1, 0]])  # the (1, 1) record replaced by (1, 0)
    assert hall(before) == pytest.approx(1.0) and hall(after) == pytest.approx(0.0)
    assert abs(public_symmetric_uncertainty(before) - public_symmetric_uncertainty(after)) <= (
        public_symmetric_uncertainty_sensitivity(10, 2, 2)
    )


def test_merit_follows_halls_formula() -> None:
    rng = np.random.default_rng(11)
    for parent_count in (1, 2, 3):
        sizes = (3, *[int(s) for s in rng.integers(2, 5, size=parent_count)])
        codes = np.column_stack([rng.integers(0, s, size=60) for s in sizes])
        codes[:, 1] = np.where(rng.random(60) < 0.6, codes[:, 0] % sizes[1], codes[:, 1])
        parents = tuple(range(1, parent_count + 1))
        tables = {
            key: contingency_counts(codes, key, sizes)
            for key in score_table_keys("correlation_merit", 0, parents)
        }
        relevance = [reference_uncertainty(contingency_counts(codes, (0, p), sizes)) for p in parents]
        redundancy = [
            reference_uncertainty(contingency_counts(codes, pair, sizes)) for pair in combinations(parents, 2)
        ]
        k = parent_count
        mean_relevance = np.mean(relevance)
        mean_redundancy = np.mean(redundancy) if redundancy else 0.0
        expected = k * mean_relevance / math.sqrt(k + k * (k - 1) * mean_redundancy)
        assert candidate_score("correlation_merit", 0, parents, tables) == pytest.approx(expected, abs=1e-12)
    assert correlation_merit_score([], []) == 0.0
    with pytest.raises(ValueError, match="parent pair tables"):
        correlation_merit_score([np.eye(2), np.eye(2)], [])


def merit_of(codes: np.ndarray, sizes: tuple[int, ...], parents: tuple[int, ...]) -> float:
    keys = score_table_keys("correlation_merit", 0, parents)
    return candidate_score(
        "correlation_merit", 0, parents, {key: contingency_counts(codes, key, sizes) for key in keys}
    )


@pytest.mark.parametrize("sizes", [(2, 3, 2), (3, 2, 2, 3)])
def test_merit_bound_covers_every_single_record_replacement(sizes: tuple[int, ...]) -> None:
    rng = np.random.default_rng(17)
    n = 8
    parents = tuple(range(1, len(sizes)))
    bound = correlation_merit_sensitivity(n, sizes[0], sizes[1:])
    assert bound == pytest.approx(
        (
            sum(public_symmetric_uncertainty_sensitivity(n, sizes[0], s) for s in sizes[1:])
            + sum(public_symmetric_uncertainty_sensitivity(n, a, b) for a, b in combinations(sizes[1:], 2))
        )
        / math.sqrt(len(parents))
    )
    cells = np.array(np.unravel_index(np.arange(math.prod(sizes)), sizes)).T
    largest = 0.0
    for trial in range(24):
        skew = 0.9 if trial % 2 else 0.0  # half the datasets near-constant, where changes are largest
        codes = np.column_stack(
            [np.where(rng.random(n) < skew, 0, rng.integers(0, s, size=n)) for s in sizes]
        )
        base = merit_of(codes, sizes, parents)
        for record in range(n):
            for cell in cells:
                if np.array_equal(cell, codes[record]):
                    continue
                neighbour = codes.copy()
                neighbour[record] = cell
                largest = max(largest, abs(merit_of(neighbour, sizes, parents) - base))
    assert 0.0 < largest <= bound


def test_table_keys_name_what_each_score_reads() -> None:
    assert score_table_keys("mutual_information", 4, (1, 2)) == ((1, 2, 4),)
    assert score_table_keys("mutual_information", 4, ()) == ()
    assert score_table_keys("correlation_merit", 2, (1, 5)) == ((1, 2), (2, 5), (1, 5))
    with pytest.raises(KeyError, match="missing"):
        candidate_score("mutual_information", 4, (1, 2), {})
