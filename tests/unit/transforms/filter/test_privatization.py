"""Per-record privatization: the keyed normals depend on the position only and are standard normal;
a privatized latent follows ``N(μ + B e_y, diag σ² + AAᵀ)`` (with a negative control); the whole
record path is the same however the records are batched."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from schemas.filter.features import FeatureSpec
from transforms.core.keyed_randomness import keyed_generator
from transforms.filter.features import encode_features, feature_layout
from transforms.filter.latent_filter import LinearLatentFilter
from transforms.filter.privatization import (
    NOISE_BLOCK_ROWS,
    filter_latents,
    privatize_features,
    record_standard_normals,
)
from transforms.filter.vae import VaeArchitecture, VariationalAutoencoder, configure_deterministic_torch

SECRET = bytes(range(32))


def test_a_records_draws_depend_on_its_position_only() -> None:
    positions = np.array([5, NOISE_BLOCK_ROWS + 7, 3 * NOISE_BLOCK_ROWS - 1, 0, 5])
    together = record_standard_normals(SECRET, "r1", positions, 6)
    for index, position in enumerate(positions):
        alone = record_standard_normals(SECRET, "r1", np.array([position]), 6)
        np.testing.assert_array_equal(alone[0], together[index])
    np.testing.assert_array_equal(together[0], together[4])
    assert not np.array_equal(together[0], together[3])
    other_release = record_standard_normals(SECRET, "r2", positions, 6)
    assert not np.isclose(other_release, together).any()
    other_purpose = record_standard_normals(SECRET, "r1", positions, 6, purpose="filter-evaluation-baseline")
    assert not np.isclose(other_purpose, together).any()
    with pytest.raises(ValueError, match="non-negative"):
        record_standard_normals(SECRET, "r1", np.array([-1]), 2)


def test_the_keyed_normals_are_standard_and_uncorrelated_across_blocks() -> None:
    positions = np.arange(0, 5 * NOISE_BLOCK_ROWS, 2)
    draws = record_standard_normals(SECRET, "stats", positions, 3)
    for column in range(3):
        assert stats.kstest(draws[:, column], "norm").pvalue > 1e-3
    correlations = np.corrcoef(draws.T)[np.triu_indices(3, 1)]
    assert np.abs(correlations).max() < 4 / np.sqrt(len(positions)), "four standard errors"
    boundary = record_standard_normals(SECRET, "stats", np.arange(NOISE_BLOCK_ROWS - 500, NOISE_BLOCK_ROWS + 500), 1)
    assert abs(np.corrcoef(boundary[:500, 0], boundary[500:, 0])[0, 1]) < 4 / np.sqrt(500)


def test_a_privatized_latent_follows_the_filters_gaussian() -> None:
    """Every record has the same posterior ``N(μ, diag σ²)`` and label ``y``: ``z̃`` must be
    ``N(μ + B e_y, diag σ² + AAᵀ)``. Checked by a KS test on four fixed projections, and a negative
    control (the law without ``AAᵀ``) must be rejected."""
    rng = keyed_generator(SECRET, "test", "filter", 0)
    latent_filter = LinearLatentFilter(np.array([[1.0, 0.3], [0.2, -0.8], [0.5, 0.6]]), rng.normal(size=(3, 2)))
    records = 6000
    mean = np.tile([0.5, -1.0, 2.0], (records, 1))
    log_variance = np.tile(np.log([0.3, 1.2, 0.6]), (records, 1))
    labels = np.ones(records, dtype=np.int64)
    normals = record_standard_normals(SECRET, "law", np.arange(records), 5)
    filtered = filter_latents(mean, log_variance, np.zeros(records, dtype=np.int64), labels, [latent_filter], normals)
    expected_mean = mean[0] + latent_filter.label_shift[:, 1]
    covariance = np.diag(np.exp(log_variance[0])) + latent_filter.noise_matrix @ latent_filter.noise_matrix.T
    without_filter_noise = np.diag(np.exp(log_variance[0]))
    rejected = 0
    for direction in np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, -1.0, 1.0]]):
        projected = filtered @ direction
        location = direction @ expected_mean
        assert stats.kstest(projected, "norm", args=(location, np.sqrt(direction @ covariance @ direction))).pvalue > 1e-3
        wrong = stats.kstest(projected, "norm", args=(location, np.sqrt(direction @ without_filter_noise @ direction)))
        rejected += wrong.pvalue < 1e-3
    assert rejected == 4


def test_each_choice_uses_its_own_filter_and_noise_width() -> None:
    rng = np.random.default_rng(3)
    wide = LinearLatentFilter(rng.normal(size=(2, 4)), rng.normal(size=(2, 2)))
    narrow = LinearLatentFilter(rng.normal(size=(2, 1)), rng.normal(size=(2, 3)))
    mean, log_variance = rng.normal(size=(10, 2)), rng.normal(size=(10, 2)) * 0.1
    choices = np.array([0, 1] * 5)
    labels = np.array([1, 2] * 5)
    normals = rng.normal(size=(10, 6))
    result = filter_latents(mean, log_variance, choices, labels, [wide, narrow], normals)
    latents = mean + np.exp(0.5 * log_variance) * normals[:, :2]
    row = 3
    expected = latents[row] + narrow.noise_matrix @ normals[row, 2:3] + narrow.label_shift[:, 2]
    np.testing.assert_allclose(result[row], expected, rtol=1e-12)
    row = 4
    expected = latents[row] + wide.noise_matrix @ normals[row, 2:6] + wide.label_shift[:, 1]
    np.testing.assert_allclose(result[row], expected, rtol=1e-12)


def test_privatized_records_do_not_depend_on_batching() -> None:
    configure_deterministic_torch(1)
    spec = FeatureSpec.model_validate({"features": [
        {"name": "x", "type": "numeric", "bounds": [0, 10]},
        {"name": "c", "type": "categorical", "categories": ["a", "b", "c"]},
    ]})
    import pandas as pd
    import torch

    frame = pd.DataFrame({"x": np.linspace(0, 10, 1300), "c": np.array(["a", "b", "c"])[np.arange(1300) % 3]})
    features = encode_features(frame, spec).matrix
    model = VariationalAutoencoder(VaeArchitecture(feature_layout(spec), 3, (8,)), torch.Generator().manual_seed(1))
    model.eval()
    filters = [LinearLatentFilter(0.5 * np.eye(3), np.array([[0.2, -0.2], [0.0, 0.1], [0.3, 0.0]]))]
    positions = np.arange(1300)
    choices = np.zeros(1300, dtype=np.int64)
    labels = (positions % 2).astype(np.int64)
    whole = privatize_features(model, features, positions, choices, labels, filters, SECRET, "batches")
    order = np.random.default_rng(0).permutation(1300)
    pieces = np.empty_like(whole)
    for part in np.array_split(order, 7):
        pieces[part] = privatize_features(model, features[part], positions[part], choices[part], labels[part],
                                          filters, SECRET, "batches")
    np.testing.assert_array_equal(pieces, whole)
