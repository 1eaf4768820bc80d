"""The shared VAE: its likelihood and loss against hand computations, determinism from keyed
generators, the decoder-robustness effect, and the artifact's byte round trip."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from schemas.filter.features import FeatureSpec
from transforms.core.keyed_randomness import keyed_generator
from transforms.filter.features import encode_features, feature_fingerprint, feature_layout
from transforms.filter.inference import ARTIFACT_MAGIC, decode_latents, encode_latents
from transforms.filter.vae import (
    VaeArchitecture,
    VaeArtifact,
    VaeTrainingConfig,
    configure_deterministic_torch,
    kl_to_standard_normal,
    reconstruction_negative_log_likelihood,
    train_vae,
    training_summary,
    vae_loss,
)

SPEC = FeatureSpec.model_validate(
    {
        "features": [
            {"type": "numeric", "name": "a", "bounds": [0, 1]},
            {"type": "categorical", "name": "c", "categories": ["x", "y", "z"]},
            {"type": "numeric", "name": "b", "bounds": [0, 1]},
            {"type": "categorical", "name": "d", "categories": ["p", "q"]},
        ]
    }
)
ARCHITECTURE = VaeArchitecture(
    feature_layout(SPEC), latent_dimension=2, hidden_widths=(32, 32), numeric_noise_scale=0.1
)


@pytest.fixture(autouse=True)
def _deterministic_torch() -> None:
    configure_deterministic_torch(1)


def two_factor_records(rows: int, seed: int) -> np.ndarray:
    """Records driven by two latent factors: numeric columns and categories are functions of them."""
    rng = np.random.default_rng(seed)
    factors = rng.normal(size=(rows, 2))
    frame = pd.DataFrame(
        {
            "a": np.clip(0.5 + 0.15 * factors[:, 0], 0, 1),
            "b": np.clip(0.5 + 0.15 * (factors[:, 0] - factors[:, 1]), 0, 1),
            "c": np.where(factors[:, 1] > 0.5, "x", np.where(factors[:, 1] < -0.5, "z", "y")).astype(object),
            "d": np.where(factors[:, 0] + 0.3 * rng.normal(size=rows) > 0, "p", "q").astype(object),
        }
    )
    return encode_features(frame, SPEC).matrix


def test_reconstruction_likelihood_is_gaussian_on_numeric_and_categorical_on_blocks() -> None:
    rng = np.random.default_rng(1)
    features = two_factor_records(5, seed=1)
    outputs = rng.normal(size=features.shape)
    value = reconstruction_negative_log_likelihood(
        torch.tensor(outputs), torch.tensor(features, dtype=torch.float64), ARCHITECTURE
    ).numpy()
    scale = ARCHITECTURE.numeric_noise_scale
    for row in range(5):
        expected = 0.0
        for column in (0, 4):
            expected -= stats.norm(outputs[row, column], scale).logpdf(features[row, column])
        for start, stop in ((1, 4), (5, 7)):
            logits = outputs[row, start:stop]
            probabilities = np.exp(logits) / np.exp(logits).sum()
            expected -= math.log(probabilities[int(np.argmax(features[row, start:stop]))])
        assert value[row] == pytest.approx(expected, rel=1e-9)


def test_kl_to_the_prior_matches_monte_carlo() -> None:
    rng = np.random.default_rng(2)
    mean, log_variance = rng.normal(size=3), rng.uniform(-2, 1, 3)
    closed = float(kl_to_standard_normal(torch.tensor(mean[None]), torch.tensor(log_variance[None]))[0])
    sample = mean + np.exp(0.5 * log_variance) * rng.normal(size=(200_000, 3))
    posterior = stats.norm(mean, np.exp(0.5 * log_variance)).logpdf(sample).sum(axis=1)
    log_ratio = posterior - stats.norm().logpdf(sample).sum(axis=1)
    assert abs(log_ratio.mean() - closed) < 5 * log_ratio.std() / math.sqrt(len(log_ratio))


def test_loss_is_the_documented_equation() -> None:
    features = torch.tensor(two_factor_records(64, seed=3))
    model = train_vae(
        features.numpy(), ARCHITECTURE, np.random.default_rng(0), VaeTrainingConfig(epochs=1)
    ).model
    config = VaeTrainingConfig(robustness_weight=0.7, robustness_max_sigma=0.4)
    loss, parts = vae_loss(model, features, config, torch.Generator().manual_seed(42))
    replay = torch.Generator().manual_seed(42)
    with torch.no_grad():
        mean, log_variance = model.encode(features)
        latents = mean + torch.exp(0.5 * log_variance) * torch.randn(mean.shape, generator=replay)
        sigma = 0.4 * torch.rand(1, generator=replay)
        perturbed = latents + sigma * torch.randn(latents.shape, generator=replay)
        reconstruction = reconstruction_negative_log_likelihood(model.decode(latents), features, ARCHITECTURE)
        robust = reconstruction_negative_log_likelihood(model.decode(perturbed), features, ARCHITECTURE)
        prior_kl = 0.5 * (log_variance.exp() + mean**2 - 1 - log_variance).sum(dim=1)
        expected = (reconstruction + prior_kl + 0.7 * robust).mean()
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    assert parts["perturbed_reconstruction"] == pytest.approx(float(robust.mean()), rel=1e-5)


def test_same_keys_give_identical_weights_and_other_keys_do_not(fixed_secret: bytes) -> None:
    features = two_factor_records(400, seed=4)
    config = VaeTrainingConfig(epochs=2, batch_size=64)

    def train(key: int) -> torch.nn.Module:
        return train_vae(
            features, ARCHITECTURE, keyed_generator(fixed_secret, "test", "vae", key), config
        ).model

    first, second, other = train(0), train(0), train(1)
    for name, tensor in first.state_dict().items():
        assert torch.equal(tensor, second.state_dict()[name]), name
    assert not torch.equal(first.state_dict()["encoder.0.weight"], other.state_dict()["encoder.0.weight"])


def test_training_learns_the_records_structure() -> None:
    features = two_factor_records(1500, seed=4)
    trained = train_vae(
        features, ARCHITECTURE, np.random.default_rng(0), VaeTrainingConfig(epochs=12, batch_size=64)
    )
    assert trained.history[-1]["loss"] < trained.history[0]["loss"]
    held_out = two_factor_records(1000, seed=5)
    mean, _ = encode_latents(trained.model, held_out)
    decoded = decode_latents(trained.model, mean)
    for (start, stop), margin in (((1, 4), 0.07), ((5, 7), 0.25)):
        truth = held_out[:, start:stop].argmax(axis=1)
        majority = np.bincount(truth).max() / len(truth)
        accuracy = np.mean(decoded[:, start:stop].argmax(axis=1) == truth)
        assert accuracy > majority + margin
    numeric_error = np.sqrt(np.mean((decoded[:, [0, 4]] - held_out[:, [0, 4]]) ** 2))
    assert numeric_error < 0.6 * held_out[:, [0, 4]].std()


def test_robustness_term_keeps_decoding_of_perturbed_latents_faithful() -> None:
    features, held_out = two_factor_records(2000, seed=6), torch.tensor(two_factor_records(2000, seed=7))
    results = {}
    for weight in (0.0, 1.0):
        config = VaeTrainingConfig(epochs=15, robustness_weight=weight, robustness_max_sigma=0.5)
        model = train_vae(features, ARCHITECTURE, np.random.default_rng(0), config).model
        mean, _ = encode_latents(model, held_out.numpy())
        latents = torch.tensor(mean, dtype=torch.float32)
        with torch.no_grad():
            perturbed = latents + 0.4 * torch.randn(latents.shape, generator=torch.Generator().manual_seed(5))
            results[weight] = float(
                reconstruction_negative_log_likelihood(model.decode(perturbed), held_out, ARCHITECTURE).mean()
            )
    assert results[1.0] < results[0.0]


def test_a_records_latent_and_decoding_do_not_depend_on_its_batch() -> None:
    features = two_factor_records(700, seed=9)
    model = train_vae(features, ARCHITECTURE, np.random.default_rng(2), VaeTrainingConfig(epochs=1)).model
    mean, log_variance = encode_latents(model, features)
    decoded = decode_latents(model, mean)
    order = np.random.default_rng(3).permutation(700)
    shuffled_mean, shuffled_log_variance = encode_latents(model, features[order])
    np.testing.assert_array_equal(shuffled_mean, mean[order])
    np.testing.assert_array_equal(shuffled_log_variance, log_variance[order])
    np.testing.assert_array_equal(decode_latents(model, mean[order]), decoded[order])
    for row in (0, 1, 699):
        single_mean, _ = encode_latents(model, features[row : row + 1])
        np.testing.assert_array_equal(single_mean[0], mean[row])
        np.testing.assert_array_equal(decode_latents(model, mean[row : row + 1])[0], decoded[row])
    empty_mean, _ = encode_latents(model, features[:0])
    assert empty_mean.shape == (0, 2) and decode_latents(model, empty_mean).shape == (0, 7)


def test_artifact_round_trip_is_exact_and_refuses_damaged_bytes() -> None:
    features = two_factor_records(300, seed=8)
    config = VaeTrainingConfig(epochs=2)
    trained = train_vae(features, ARCHITECTURE, np.random.default_rng(1), config)
    artifact = VaeArtifact(
        trained.model, SPEC, feature_fingerprint(features, SPEC), training_summary(config, trained)
    )
    data = artifact.to_bytes()
    assert data == artifact.to_bytes()
    restored = VaeArtifact.from_bytes(data)
    assert restored.to_bytes() == data and restored.artifact_id == artifact.artifact_id
    assert restored.feature_spec == SPEC
    assert restored.data_fingerprint == artifact.data_fingerprint
    assert restored.training == artifact.training
    assert restored.model.architecture == ARCHITECTURE
    for name, tensor in trained.model.state_dict().items():
        assert torch.equal(tensor, restored.model.state_dict()[name]), name
    np.testing.assert_array_equal(
        encode_latents(restored.model, features)[0], encode_latents(trained.model, features)[0]
    )

    with pytest.raises(ValueError, match="magic"):
        VaeArtifact.from_bytes(b"X" + data[1:])
    with pytest.raises(ValueError, match="version"):
        VaeArtifact.from_bytes(data.replace(b'"format_version":1', b'"format_version":7', 1))
    with pytest.raises(ValueError, match="wrong shape or length"):
        VaeArtifact.from_bytes(data[:-4])
    assert data.startswith(ARTIFACT_MAGIC)
    other_spec = FeatureSpec.model_validate(
        {"features": [{"type": "numeric", "name": "a", "bounds": [0, 1]}]}
    )
    with pytest.raises(ValueError, match="layout"):
        VaeArtifact(trained.model, other_spec, {}, {})
