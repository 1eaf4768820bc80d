"""DP parameter learning: noisy counts, prior, clipping, normalization, and the JSON round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest

from transforms.core.discrete_laplace import discrete_laplace_scale, sample_discrete_laplace
from transforms.tabular.contingency import contingency_counts
from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.parameter_learning import (
    ConditionalTables,
    noisy_conditional_distributions,
    table_attributes,
)

from .random_models import random_codes, random_structure

STRUCTURE = NetworkStructure(order=(2, 0, 1), parents=((2,), (2, 0), ()))
SIZES = (3, 2, 4)


def counts_of(codes: np.ndarray, structure: NetworkStructure = STRUCTURE, sizes=SIZES) -> list[np.ndarray]:
    return [contingency_counts(codes, attributes, sizes) for attributes in table_attributes(structure)]


def test_tables_have_parent_major_shapes_and_rows_are_distributions() -> None:
    codes = random_codes(500, SIZES, np.random.default_rng(0))
    tables = noisy_conditional_distributions(
        counts_of(codes), STRUCTURE, SIZES, 1.0, 1.0, np.random.default_rng(1)
    )
    assert [table.shape for table in tables.tables] == [(4, 3), (4, 3, 2), (4,)]
    for table in tables.tables:
        assert np.all(table >= 0)
        np.testing.assert_allclose(table.sum(axis=-1), 1.0, rtol=0, atol=1e-12)


def test_matches_a_hand_computation_with_the_same_noise_draws() -> None:
    codes = random_codes(300, SIZES, np.random.default_rng(2))
    counts = counts_of(codes)
    epsilon, alpha = 0.4, 0.5
    tables = noisy_conditional_distributions(
        counts, STRUCTURE, SIZES, epsilon, alpha, np.random.default_rng(3)
    )
    scale = discrete_laplace_scale(epsilon, 2 * 3)  # replace-one: 2 per table, three tables
    noise = sample_discrete_laplace(scale, sum(c.size for c in counts), np.random.default_rng(3))
    offset = 0
    for attribute, table in enumerate(counts):
        cells = table.size
        values = np.maximum(table.reshape(-1) + noise[offset : offset + cells] + alpha, 0.0).reshape(
            table.shape
        )
        offset += cells
        rows = values.reshape(-1, values.shape[-1])
        expected = np.array(
            [row / row.sum() if row.sum() > 0 else np.full(row.size, 1 / row.size) for row in rows]
        ).reshape(table.shape)
        np.testing.assert_allclose(tables.tables[attribute], expected, rtol=1e-15, atol=0)


def test_without_noise_the_tables_are_the_smoothed_empirical_conditionals() -> None:
    codes = np.array([[0, 1, 3], [0, 1, 3], [1, 0, 3], [2, 1, 0]], dtype=np.int32)
    tables = noisy_conditional_distributions(
        counts_of(codes), STRUCTURE, SIZES, 1e9, 1.0, np.random.default_rng(4)
    )
    root = tables.tables[2]
    np.testing.assert_allclose(root, np.array([1 + 1, 0 + 1, 0 + 1, 3 + 1]) / 8)
    np.testing.assert_allclose(tables.tables[0][3], np.array([2 + 1, 1 + 1, 0 + 1]) / 6)
    np.testing.assert_allclose(tables.tables[1][3, 0], np.array([0 + 1, 2 + 1]) / 4)


def test_a_row_with_nothing_left_after_clipping_is_uniform() -> None:
    codes = np.array([[0, 0, 0]], dtype=np.int32)
    tables = noisy_conditional_distributions(
        counts_of(codes), STRUCTURE, SIZES, 1e9, 0.0, np.random.default_rng(5)
    )
    np.testing.assert_allclose(tables.tables[0][0], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(tables.tables[0][1], [1 / 3] * 3)
    np.testing.assert_allclose(tables.tables[1][2, 1], [0.5, 0.5])


def test_noise_scale_grows_with_the_number_of_tables() -> None:
    rng = np.random.default_rng(6)
    structure = random_structure(6, 2, rng)
    sizes = (3, 2, 4, 2, 3, 2)
    codes = random_codes(50, sizes, rng)
    epsilon = 2.0
    tables = noisy_conditional_distributions(
        counts_of(codes, structure, sizes), structure, sizes, epsilon, 0.0, np.random.default_rng(7)
    )
    counts = counts_of(codes, structure, sizes)
    noise = sample_discrete_laplace(
        discrete_laplace_scale(epsilon, 12), sum(c.size for c in counts), np.random.default_rng(7)
    )
    first = (
        np.maximum(counts[0].reshape(-1) + noise[: counts[0].size], 0).astype(float).reshape(counts[0].shape)
    )
    rows = first.reshape(-1, first.shape[-1])
    totals = rows.sum(axis=1, keepdims=True)
    expected = np.where(totals > 0, rows / np.where(totals > 0, totals, 1), 1 / rows.shape[1]).reshape(
        first.shape
    )
    np.testing.assert_allclose(tables.tables[0], expected, rtol=1e-15, atol=0)


def test_json_round_trip_is_exact() -> None:
    codes = random_codes(200, SIZES, np.random.default_rng(8))
    tables = noisy_conditional_distributions(
        counts_of(codes), STRUCTURE, SIZES, 0.7, 0.3, np.random.default_rng(9)
    )
    restored = ConditionalTables.from_json(json.loads(json.dumps(tables.to_json())))
    assert restored.parents == tables.parents and restored.domain_sizes == tables.domain_sizes
    for original, copy in zip(tables.tables, restored.tables, strict=True):
        assert original.shape == copy.shape
        np.testing.assert_array_equal(original, copy)
    assert ConditionalTables.from_json(json.dumps(tables.to_json())).tables[1].shape == (4, 3, 2)


def test_bad_inputs_are_refused() -> None:
    codes = random_codes(20, SIZES, np.random.default_rng(10))
    counts = counts_of(codes)
    with pytest.raises(ValueError, match="shape"):
        noisy_conditional_distributions(
            [counts[0].T, *counts[1:]], STRUCTURE, SIZES, 1.0, 1.0, np.random.default_rng(0)
        )
    with pytest.raises(ValueError, match="one count table"):
        noisy_conditional_distributions(counts[:2], STRUCTURE, SIZES, 1.0, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="alpha"):
        noisy_conditional_distributions(counts, STRUCTURE, SIZES, 1.0, -1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="epsilon"):
        noisy_conditional_distributions(counts, STRUCTURE, SIZES, 0.0, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="expected"):
        ConditionalTables(parents=((), ()), domain_sizes=(2, 2), tables=(np.ones(2) / 2, np.ones(3) / 3))
