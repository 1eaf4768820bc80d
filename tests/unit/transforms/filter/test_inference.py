"""The frozen VAE's NumPy inference: equal (to float32 rounding) to the torch model it was trained
as and to a hand-written float64 forward pass, the artifact read without torch, and shapes checked."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from schemas.filter.features import FeatureSpec
from transforms.filter.features import feature_layout
from transforms.filter.inference import (
    LOG_VARIANCE_LIMITS,
    VaeWeights,
    decode_latents,
    encode_latents,
    parse_artifact,
    vae_weights,
)
from transforms.filter.vae import (
    VaeArchitecture,
    VaeArtifact,
    VariationalAutoencoder,
    configure_deterministic_torch,
)

SPEC = FeatureSpec.model_validate(
    {
        "features": [
            {"type": "numeric", "name": "a", "bounds": [0, 1]},
            {"type": "categorical", "name": "c", "categories": ["x", "y", "z"]},
            {"type": "numeric", "name": "b", "bounds": [0, 1]},
        ]
    }
)
ARCHITECTURE = VaeArchitecture(feature_layout(SPEC), latent_dimension=3, hidden_widths=(8, 6), numeric_noise_scale=0.1)
ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def model() -> VariationalAutoencoder:
    configure_deterministic_torch(1)
    network = VariationalAutoencoder(ARCHITECTURE, torch.Generator().manual_seed(4))
    with torch.no_grad():  # larger weights than the initialization: some log-variances hit the clamp
        for parameter in network.encoder.parameters():
            parameter.mul_(6.0)
    return network.eval()


def records(rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    matrix = np.zeros((rows, 5))
    matrix[:, 0] = rng.random(rows)
    matrix[np.arange(rows), 1 + rng.integers(0, 3, rows)] = 1.0
    matrix[:, 4] = rng.random(rows)
    return matrix


def hand_forward(state: dict[str, np.ndarray], network: str, layers: int, inputs: np.ndarray) -> np.ndarray:
    """The perceptron in float64, written out: ``h ← max(0, h Wᵀ + b)`` but for the last layer."""
    hidden = inputs
    for index in range(layers):
        hidden = hidden @ state[f"{network}.{2 * index}.weight"].T.astype(np.float64)
        hidden = hidden + state[f"{network}.{2 * index}.bias"].astype(np.float64)
        if index < layers - 1:
            hidden = np.maximum(hidden, 0.0)
    return hidden


def test_numpy_inference_matches_torch_and_a_hand_computation(model: VariationalAutoencoder) -> None:
    features = records(700, seed=1)
    mean, log_variance = encode_latents(model, features)
    with torch.no_grad():
        torch_mean, torch_log_variance = model.encode(torch.from_numpy(features.astype(np.float32)))
    np.testing.assert_allclose(mean, torch_mean.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(log_variance, torch_log_variance.numpy(), rtol=1e-5, atol=1e-5)
    state = {name: tensor.numpy() for name, tensor in model.state_dict().items()}
    output = hand_forward(state, "encoder", 3, features)
    np.testing.assert_allclose(mean, output[:, :3], rtol=1e-4, atol=1e-4)
    clamped = np.clip(output[:, 3:], *LOG_VARIANCE_LIMITS)
    assert (output[:, 3:] < LOG_VARIANCE_LIMITS[0]).any() or (output[:, 3:] > LOG_VARIANCE_LIMITS[1]).any()
    np.testing.assert_allclose(log_variance, clamped, rtol=1e-4, atol=1e-4)

    latents = np.random.default_rng(2).normal(size=(300, 3))
    decoded = decode_latents(model, latents)
    raw = hand_forward(state, "decoder", 3, latents)
    logits = raw[:, 1:4]
    probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(decoded[:, [0, 4]], raw[:, [0, 4]], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(decoded[:, 1:4], probabilities, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(decoded[:, 1:4].sum(axis=1), 1.0, atol=1e-6)
    with torch.no_grad():
        torch_raw = model.decode(torch.from_numpy(latents.astype(np.float32))).numpy()
    np.testing.assert_allclose(decoded[:, [0, 4]], torch_raw[:, [0, 4]], rtol=1e-5, atol=1e-5)
    # the comparison has teeth: without the hidden ReLU the hand forward is far from the inference
    linear = latents @ state["decoder.0.weight"].T + state["decoder.0.bias"]
    linear = linear @ state["decoder.2.weight"].T + state["decoder.2.bias"]
    linear = linear @ state["decoder.4.weight"].T + state["decoder.4.bias"]
    assert np.abs(linear[:, [0, 4]] - decoded[:, [0, 4]]).max() > 1e-2


def test_a_records_result_does_not_depend_on_its_block(model: VariationalAutoencoder) -> None:
    features = records(1100, seed=3)
    weights = vae_weights(model)
    mean, log_variance = encode_latents(weights, features)
    for start, stop in ((0, 1), (5, 6), (512, 1100), (1099, 1100), (3, 700)):
        part_mean, part_log_variance = encode_latents(weights, features[start:stop])
        np.testing.assert_array_equal(part_mean, mean[start:stop])
        np.testing.assert_array_equal(part_log_variance, log_variance[start:stop])
    decoded = decode_latents(weights, mean)
    np.testing.assert_array_equal(decode_latents(weights, mean[700:703]), decoded[700:703])
    assert encode_latents(weights, features[:0])[0].shape == (0, 3) and decode_latents(weights, mean[:0]).shape == (0, 5)


def test_the_artifact_is_read_and_evaluated_without_torch(model: VariationalAutoencoder, tmp_path: Path) -> None:
    """In a process where importing torch fails, the artifact parses and encodes to the same bits."""
    data = VaeArtifact(model, SPEC, {"rows": 0}, {}).to_bytes()
    (tmp_path / "artifact.bin").write_bytes(data)
    features = records(40, seed=5)
    np.save(tmp_path / "features.npy", features)
    blocker = tmp_path / "blocked"
    (blocker / "torch").mkdir(parents=True)
    (blocker / "torch" / "__init__.py").write_text("raise ImportError('torch was imported')\n")
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import numpy as np
        from transforms.filter.inference import parse_artifact, encode_latents
        parsed = parse_artifact(Path({str(tmp_path / 'artifact.bin')!r}).read_bytes())
        mean, _ = encode_latents(parsed.weights(), np.load({str(tmp_path / 'features.npy')!r}))
        np.save({str(tmp_path / 'mean.npy')!r}, mean)
        assert "torch" not in sys.modules
    """)
    done = subprocess.run([sys.executable, "-c", script], env={"PYTHONPATH": f"{blocker}:{ROOT}", "PATH": "/usr/bin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "mean.npy"), encode_latents(model, features)[0])
    # the blocker works: the torch model cannot be rebuilt in such a process
    failed = subprocess.run([sys.executable, "-c", "import transforms.filter.vae"],
                            env={"PYTHONPATH": f"{blocker}:{ROOT}", "PATH": "/usr/bin"}, capture_output=True, text=True,
                            timeout=120)
    assert failed.returncode != 0 and "torch was imported" in failed.stderr


def test_parsing_checks_the_artifact(model: VariationalAutoencoder) -> None:
    data = VaeArtifact(model, SPEC, {}, {}).to_bytes()
    parsed = parse_artifact(data)
    assert parsed.architecture == ARCHITECTURE and parsed.feature_spec == SPEC
    for name, tensor in model.state_dict().items():
        np.testing.assert_array_equal(parsed.tensors[name], tensor.numpy())
    with pytest.raises(ValueError, match="magic"):
        parse_artifact(b"Y" + data[1:])
    with pytest.raises(ValueError, match="wrong shape or length"):
        parse_artifact(data[:-4])
    with pytest.raises(ValueError, match="do not match"):
        VaeWeights.from_state(ARCHITECTURE, dict(list(parsed.tensors.items())[:-1]))
    bad = dict(parsed.tensors)
    bad["decoder.4.bias"] = np.zeros(7, dtype=np.float32)
    with pytest.raises(ValueError, match="decoder.4.bias"):
        VaeWeights.from_state(ARCHITECTURE, bad)


def test_inputs_of_the_wrong_width_are_refused_and_weights_are_copies(model: VariationalAutoencoder) -> None:
    weights = vae_weights(model)
    with pytest.raises(ValueError, match=r"\(n, 5\) matrix"):
        encode_latents(weights, records(10, seed=1).reshape(-1)[:40].reshape(8, 5)[:, :4])
    with pytest.raises(ValueError, match=r"\(n, 5\) matrix"):
        encode_latents(weights, records(10, seed=1).reshape(5, 10))  # 50 values, not 10 records of width 5
    with pytest.raises(ValueError, match=r"\(n, 3\) matrix"):
        decode_latents(weights, np.zeros((4, 6)))
    before = weights.encoder[0][1].copy()
    with torch.no_grad():
        model.encoder[0].bias.add_(1.0)
    try:
        np.testing.assert_array_equal(weights.encoder[0][1], before)
    finally:
        with torch.no_grad():
            model.encoder[0].bias.sub_(1.0)
