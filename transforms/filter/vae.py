"""The shared variational autoencoder of the filter release kind, trained once (torch, CPU).

Issue 5, step 1 (Chen, Navidi, Rajagopal, "Generating private data with user customization",
the shared encoder/decoder). Records are the feature matrix of ``features.py``; labels never enter.

Model. Encoder ``q(z|x) = N(μ(x), diag σ²(x))`` (an MLP returning ``μ`` and ``log σ²``, the
latter clamped to ``LOG_VARIANCE_LIMITS`` for numerical safety), standard Gaussian prior
``p(z) = N(0, I)``, and a decoder ``p(x|z)`` for mixed features that factorizes over the feature
blocks of the ``FeatureLayout``:

* numeric column ``j``: ``N(x_j; g_j(z), s²)`` with a fixed public scale ``s``
  (``numeric_noise_scale``, in scaled units), i.e. ``−log p = ½((x_j − g_j(z))/s)² + log s + ½ log 2π``
  (a mean squared error weighted by ``1/(2s²)``);
* categorical block ``c``: ``Categorical(softmax(g_c(z)))``, i.e. ``−log p = −Σ_v x_{c,v} log
  softmax(g_c(z))_v``, the cross-entropy of the block's one-hot code.

Training loss (per record, averaged over a minibatch, minimized with Adam)::

    L(x) = E_{z~q(z|x)}[−log p(x|z)] + KL(q(z|x) ‖ N(0, I))
           + λ · E_{z~q(z|x)} E_{ε'~N(0,I)} [−log p(x | z + σ_b·ε')],     σ_b ~ U(0, σ_max) per batch,

with ``KL(q ‖ N(0, I)) = ½ Σ_j (σ_j² + μ_j² − 1 − log σ_j²)``. The first two terms are the negative
ELBO. The third is the decoder-robustness term: the filters of ``latent_filter.py`` add noise
``A·ε + B·onehot(y)`` to ``z`` before decoding, so the decoder is also trained to reconstruct the
record from a perturbed latent; one perturbation scale ``σ_b`` is drawn per minibatch so the
decoder sees a range of perturbation sizes up to ``σ_max`` (``robustness_max_sigma``; isotropic
Gaussian perturbations stand in for the filter family's ``A·ε + B·e_y``, whose shape is not known
when the VAE is trained). ``λ = robustness_weight``; ``λ = 0`` is the plain VAE. Each expectation
is estimated with one reparameterized draw.

Determinism: every draw (initial weights, minibatch order, ``z``, ``σ_b``, ``ε'``) comes from one
``torch.Generator`` whose seed is drawn from a keyed generator (``keyed_randomness``); nothing uses
torch's global random state. With ``configure_deterministic_torch`` (one thread, deterministic
algorithms) the same keys give bit-identical weights.

Inference of the trained model (``inference.encode_latents``, ``inference.decode_latents``) is
NumPy, on fixed-size, zero-padded blocks so a record's result is bit-identical however the records
are batched (engines, partitions, groups); releases need no torch.

Artifact: ``VaeArtifact.to_bytes`` (format read by ``inference.parse_artifact``) is a self-describing, pickle-free byte string (magic, a JSON
header with the format version, the architecture, the feature spec, the data fingerprint and the
training settings, then the float32 tensors), and ``artifact_id`` is its SHA-256.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from schemas.filter.features import FeatureSpec
from transforms.filter.adam import Adam
from transforms.filter.features import feature_layout
from transforms.filter.inference import (
    ARTIFACT_FORMAT_VERSION,
    ARTIFACT_MAGIC,
    LOG_VARIANCE_LIMITS,
    VaeArchitecture,
    parse_artifact,
)


def configure_deterministic_torch(threads: int = 1) -> None:
    """Deterministic CPU torch: ``threads`` intra-op threads and deterministic algorithms only.

    Changes torch's process-wide settings; call it once before training (tests, the driver, a
    worker) where bit-identical results are required.
    """
    torch.set_num_threads(threads)
    set_deterministic = getattr(torch._C, "_set_deterministic_algorithms", None)
    if set_deterministic is None or "torch._inductor" in sys.modules:
        torch.use_deterministic_algorithms(True)
    else:
        # What torch.use_deterministic_algorithms does, without importing torch._inductor (and
        # with it dynamo and sympy: 1.7 s) only to set the compiler's own flag; privlake never
        # compiles a model.
        set_deterministic(True, warn_only=False)


def torch_seed(rng: np.random.Generator) -> int:
    """A seed for ``torch.Generator`` drawn from a (keyed) NumPy generator."""
    return int(rng.integers(0, 2**63 - 1))


def seeded_torch_generator(rng: np.random.Generator) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded from ``rng``."""
    return torch.Generator().manual_seed(torch_seed(rng))


def initialized_linear(inputs: int, outputs: int, generator: torch.Generator) -> nn.Linear:
    """A linear layer with weights and bias uniform in ``±1/√inputs`` (PyTorch's default range)
    drawn from ``generator`` rather than the global random state."""
    layer = nn.Linear(inputs, outputs)
    bound = 1.0 / math.sqrt(inputs)
    with torch.no_grad():
        layer.weight.uniform_(-bound, bound, generator=generator)
        layer.bias.uniform_(-bound, bound, generator=generator)
    return layer


def multilayer_perceptron(widths: list[int], generator: torch.Generator) -> nn.Sequential:
    """Linear layers of the given widths with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for index, (inputs, outputs) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers.append(initialized_linear(inputs, outputs, generator))
        if index < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


@dataclass(frozen=True)
class VaeTrainingConfig:
    """Adam on minibatches; ``robustness_weight`` is ``λ`` and ``robustness_max_sigma`` is
    ``σ_max`` of the decoder-robustness term (module docstring)."""

    epochs: int = 40
    batch_size: int = 256
    learning_rate: float = 2e-3
    robustness_weight: float = 1.0
    robustness_max_sigma: float = 0.5

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError("epochs and batch_size must be at least 1")
        if not self.learning_rate > 0:
            raise ValueError("learning_rate must be positive")
        if self.robustness_weight < 0 or self.robustness_max_sigma < 0:
            raise ValueError("robustness_weight and robustness_max_sigma must be non-negative")


class VariationalAutoencoder(nn.Module):
    """Gaussian encoder ``x → (μ, log σ²)`` and decoder ``z → g(z)`` (numeric means and
    categorical logits, laid out like the feature matrix)."""

    def __init__(self, architecture: VaeArchitecture, generator: torch.Generator) -> None:
        super().__init__()
        self.architecture = architecture
        self.encoder = multilayer_perceptron(architecture.encoder_widths, generator)
        self.decoder = multilayer_perceptron(architecture.decoder_widths, generator)

    def encode(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The posterior's mean and log-variance, each ``(n, k)``."""
        output = self.encoder(features)
        latent = self.architecture.latent_dimension
        log_variance = output[:, latent:].clamp(*LOG_VARIANCE_LIMITS)
        return output[:, :latent], log_variance

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """The decoder's raw outputs ``g(z)``, ``(n, width)``."""
        return self.decoder(latents)


def reconstruction_negative_log_likelihood(
    outputs: torch.Tensor, features: torch.Tensor, architecture: VaeArchitecture
) -> torch.Tensor:
    """``−log p(x|z)`` per record (nats): Gaussian on numeric columns, categorical per block."""
    layout = architecture.layout
    total = torch.zeros(features.shape[0], dtype=outputs.dtype)
    if layout.numeric_columns:
        columns = list(layout.numeric_columns)
        scale = architecture.numeric_noise_scale
        residual = (features[:, columns] - outputs[:, columns]) / scale
        constant = math.log(scale) + 0.5 * math.log(2.0 * math.pi)
        total = total + (0.5 * residual.square() + constant).sum(dim=1)
    for start, stop in layout.categorical_blocks:
        log_probabilities = torch.log_softmax(outputs[:, start:stop], dim=1)
        total = total - (features[:, start:stop] * log_probabilities).sum(dim=1)
    return total


def kl_to_standard_normal(mean: torch.Tensor, log_variance: torch.Tensor) -> torch.Tensor:
    """``KL(N(μ, diag σ²) ‖ N(0, I))`` per record."""
    return 0.5 * (log_variance.exp() + mean.square() - 1.0 - log_variance).sum(dim=1)


def vae_loss(
    model: VariationalAutoencoder,
    features: torch.Tensor,
    config: VaeTrainingConfig,
    generator: torch.Generator,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The minibatch mean of ``L(x)`` (module docstring) and its three parts."""
    mean, log_variance = model.encode(features)
    latents = mean + (0.5 * log_variance).exp() * torch.randn(mean.shape, generator=generator)
    reconstruction = reconstruction_negative_log_likelihood(
        model.decode(latents), features, model.architecture
    )
    kl = kl_to_standard_normal(mean, log_variance)
    total = reconstruction + kl
    robust_value = 0.0
    if config.robustness_weight > 0:
        sigma = config.robustness_max_sigma * torch.rand(1, generator=generator)
        perturbed = latents + sigma * torch.randn(latents.shape, generator=generator)
        robust = reconstruction_negative_log_likelihood(model.decode(perturbed), features, model.architecture)
        total = total + config.robustness_weight * robust
        robust_value = float(robust.detach().mean())
    parts = {
        "reconstruction": float(reconstruction.detach().mean()),
        "kl": float(kl.detach().mean()),
        "perturbed_reconstruction": robust_value,
    }
    return total.mean(), parts


@dataclass
class TrainedVae:
    """The trained model (in eval mode) and the per-epoch mean loss parts."""

    model: VariationalAutoencoder
    history: list[dict[str, float]] = field(default_factory=list)


def train_vae(
    features: np.ndarray,
    architecture: VaeArchitecture,
    rng: np.random.Generator,
    config: VaeTrainingConfig | None = None,
) -> TrainedVae:
    """Fit the VAE to the feature matrix by minimizing ``L`` (module docstring) with Adam.

    ``rng`` is a keyed generator (``keyed_generator(secret, release_id, "vae-training", …)``); one
    seed is drawn from it for the torch generator that makes every random choice of the training.
    """
    config = config or VaeTrainingConfig()
    data = torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32))
    if data.ndim != 2 or data.shape[1] != architecture.layout.width:
        raise ValueError(
            f"features must have shape (n, {architecture.layout.width}), got {tuple(data.shape)}"
        )
    if data.shape[0] == 0:
        raise ValueError("no records to train the VAE on")
    generator = seeded_torch_generator(rng)
    model = VariationalAutoencoder(architecture, generator)
    optimizer = Adam(model.parameters(), lr=config.learning_rate)
    history: list[dict[str, float]] = []
    rows = data.shape[0]
    model.train()
    for _ in range(config.epochs):
        order = torch.randperm(rows, generator=generator)
        sums = {"loss": 0.0, "reconstruction": 0.0, "kl": 0.0, "perturbed_reconstruction": 0.0}
        for start in range(0, rows, config.batch_size):
            batch = data[order[start : start + config.batch_size]]
            loss, parts = vae_loss(model, batch, config, generator)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            weight = batch.shape[0] / rows
            sums["loss"] += float(loss.detach()) * weight
            for name, value in parts.items():
                sums[name] += value * weight
        history.append(sums)
    model.eval()
    return TrainedVae(model, history)


@dataclass
class VaeArtifact:
    """A trained VAE with what it needs to be reused: the feature spec it reads, the fingerprint of
    the data it was trained on (``features.feature_fingerprint`` or the pipeline's own) and the
    training settings."""

    model: VariationalAutoencoder
    feature_spec: FeatureSpec
    data_fingerprint: dict[str, Any]
    training: dict[str, Any]

    def __post_init__(self) -> None:
        if feature_layout(self.feature_spec) != self.model.architecture.layout:
            raise ValueError("the model's feature layout does not match the feature spec")

    def header(self) -> dict[str, Any]:
        return {
            "format_version": ARTIFACT_FORMAT_VERSION,
            "architecture": self.model.architecture.to_dict(),
            "feature_spec": self.feature_spec.model_dump(mode="json"),
            "data_fingerprint": self.data_fingerprint,
            "training": self.training,
        }

    def to_bytes(self) -> bytes:
        """``MAGIC ‖ u64 header length ‖ JSON header ‖ tensors`` (float32, little endian, in the
        header's order); equal artifacts give equal bytes."""
        header = self.header()
        tensors = []
        blobs = []
        offset = 0
        for name, tensor in self.model.state_dict().items():
            data = np.ascontiguousarray(tensor.detach().numpy(), dtype="<f4").tobytes()
            tensors.append({"name": name, "shape": list(tensor.shape), "offset": offset, "length": len(data)})
            blobs.append(data)
            offset += len(data)
        header["tensors"] = tensors
        header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
        return ARTIFACT_MAGIC + struct.pack("<Q", len(header_bytes)) + header_bytes + b"".join(blobs)

    @property
    def artifact_id(self) -> str:
        """SHA-256 (hex) of ``to_bytes()``."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    @classmethod
    def from_bytes(cls, data: bytes) -> VaeArtifact:
        """Rebuild an artifact (``inference.parse_artifact``); a wrong magic, version, layout or tensor
        table is a ``ValueError``."""
        parsed = parse_artifact(data)
        model = VariationalAutoencoder(parsed.architecture, torch.Generator().manual_seed(0))
        model.load_state_dict({name: torch.from_numpy(array.copy()) for name, array in parsed.tensors.items()})
        model.eval()
        return cls(
            model=model,
            feature_spec=parsed.feature_spec,
            data_fingerprint=parsed.header["data_fingerprint"],
            training=parsed.header["training"],
        )


def training_summary(config: VaeTrainingConfig, trained: TrainedVae) -> dict[str, Any]:
    """The training settings and final epoch's loss parts, for ``VaeArtifact.training``."""
    return {"config": asdict(config), "final_epoch": dict(trained.history[-1]) if trained.history else {}}
