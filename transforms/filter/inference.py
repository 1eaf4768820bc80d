"""The frozen VAE's inference in NumPy: the artifact read without torch, encoder and decoder forwards.

Issue 5, step 3 (Chen, Navidi, Rajagopal, "Generating private data with user customization"): once
the shared VAE is trained (``vae.py``, torch) a release only evaluates it — ``μ(x), log σ²(x)`` from
the encoder and ``g(z̃)`` from the decoder, each a multilayer perceptron ``h ← ReLU(h·Wᵀ + b)`` with
no ReLU after the last layer. That is a handful of float32 matrix products, so it runs here in
NumPy: a release with a stored encoder and stored filters then never imports torch (1.5 s and
200 MiB per process, on the driver and on every Spark/Beam worker), and the filter kind's workers
need only NumPy.

Bit-identical everywhere. A float32 matrix product's rounding depends on the BLAS kernel, which
is chosen by the matrices' shapes; so the network always runs on blocks of exactly ``block_rows``
rows (the last one zero-padded) and a record's result is the same however the records are batched,
grouped or partitioned (engines, retries, BLAS thread counts). The outputs are converted to
float64 afterwards. The kernel is also chosen by the CPU: machines of different CPU families
(OpenBLAS core types) can round differently, so a cluster of mixed CPUs gives bit-identical
releases only with one core type set on every machine (``OPENBLAS_CORETYPE``,
docs/PRODUCTION.md).

The artifact format (``ARTIFACT_MAGIC ‖ u64 header length ‖ JSON header ‖ float32 tensors``) is
defined here, where it is read; ``vae.VaeArtifact`` writes it and rebuilds a torch model from the
same parse. Tensor names follow the torch model (``encoder.0.weight``, …: ``nn.Sequential``
numbers a ReLU as a layer, so the ``i``-th linear layer is ``2i``).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from schemas.filter.features import FeatureSpec
from transforms.filter.features import FeatureLayout, feature_layout

LOG_VARIANCE_LIMITS = (-12.0, 6.0)
ARTIFACT_MAGIC = b"PRIVLAKE-FILTER-VAE\n"
ARTIFACT_FORMAT_VERSION = 1
INFERENCE_BLOCK_ROWS = 512


@dataclass(frozen=True)
class VaeArchitecture:
    """The network's shape: the feature layout, the latent dimension ``k``, the hidden widths of the
    encoder (the decoder mirrors them) and the numeric columns' likelihood scale ``s``.

    Defaults are those tried on Adult (106 feature columns): a smaller ``s`` weights the numeric
    columns more against the KL term, which kept more of what predicts income (``s = 0.03`` against
    ``0.1``: utility accuracy of the reconstruction 0.836 against 0.827; about 5 of the 16 latent
    coordinates stay active either way)."""

    layout: FeatureLayout
    latent_dimension: int = 16
    hidden_widths: tuple[int, ...] = (128, 128)
    numeric_noise_scale: float = 0.03

    def __post_init__(self) -> None:
        if self.latent_dimension < 1:
            raise ValueError("latent_dimension must be at least 1")
        if any(width < 1 for width in self.hidden_widths):
            raise ValueError("hidden widths must be positive")
        if not self.numeric_noise_scale > 0:
            raise ValueError("numeric_noise_scale must be positive")

    @property
    def encoder_widths(self) -> list[int]:
        return [self.layout.width, *self.hidden_widths, 2 * self.latent_dimension]

    @property
    def decoder_widths(self) -> list[int]:
        return [self.latent_dimension, *reversed(self.hidden_widths), self.layout.width]

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Name → shape of every tensor, in the torch model's ``state_dict`` order."""
        shapes: dict[str, tuple[int, ...]] = {}
        for network, widths in (("encoder", self.encoder_widths), ("decoder", self.decoder_widths)):
            for index, (inputs, outputs) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
                shapes[f"{network}.{2 * index}.weight"] = (outputs, inputs)
                shapes[f"{network}.{2 * index}.bias"] = (outputs,)
        return shapes

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": self.layout.to_dict(),
            "latent_dimension": self.latent_dimension,
            "hidden_widths": list(self.hidden_widths),
            "numeric_noise_scale": self.numeric_noise_scale,
        }

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> VaeArchitecture:
        return cls(
            layout=FeatureLayout.from_dict(document["layout"]),
            latent_dimension=int(document["latent_dimension"]),
            hidden_widths=tuple(int(width) for width in document["hidden_widths"]),
            numeric_noise_scale=float(document["numeric_noise_scale"]),
        )


@dataclass(frozen=True)
class VaeWeights:
    """The frozen VAE as float32 arrays: per layer the transposed weight ``Wᵀ`` (C-contiguous, so
    every product has the same memory layout) and the bias."""

    architecture: VaeArchitecture
    encoder: tuple[tuple[np.ndarray, np.ndarray], ...]
    decoder: tuple[tuple[np.ndarray, np.ndarray], ...]

    @classmethod
    def from_state(cls, architecture: VaeArchitecture, state: Mapping[str, Any]) -> VaeWeights:
        """From tensors named as in ``VaeArchitecture.tensor_shapes`` (NumPy arrays, or anything with
        a ``numpy()`` method such as a torch ``state_dict``'s tensors)."""
        shapes = architecture.tensor_shapes()
        if list(state) != list(shapes):
            raise ValueError("the tensors do not match the architecture")
        arrays = {}
        for name, shape in shapes.items():
            value = state[name]
            # a copy: the weights never alias a live torch parameter
            array = np.array(value.detach().numpy() if hasattr(value, "detach") else value, dtype=np.float32)
            if array.shape != shape:
                raise ValueError(f"tensor {name!r} has shape {array.shape}, expected {shape}")
            arrays[name] = array

        def layers(network: str, widths: list[int]) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
            return tuple(
                (np.ascontiguousarray(arrays[f"{network}.{2 * index}.weight"].T),
                 np.ascontiguousarray(arrays[f"{network}.{2 * index}.bias"]))
                for index in range(len(widths) - 1)
            )

        return cls(architecture, layers("encoder", architecture.encoder_widths),
                   layers("decoder", architecture.decoder_widths))


def vae_weights(model: VaeWeights | Any) -> VaeWeights:
    """``model`` itself if it is ``VaeWeights``; else the weights of a trained torch
    ``vae.VariationalAutoencoder`` (read through its ``architecture`` and ``state_dict``, so this
    module never imports torch)."""
    if isinstance(model, VaeWeights):
        return model
    return VaeWeights.from_state(model.architecture, model.state_dict())


@dataclass(frozen=True)
class ParsedArtifact:
    """A VAE artifact's header and tensors (``vae.VaeArtifact`` without torch)."""

    header: dict[str, Any]
    architecture: VaeArchitecture
    feature_spec: FeatureSpec
    tensors: dict[str, np.ndarray]

    def weights(self) -> VaeWeights:
        return VaeWeights.from_state(self.architecture, self.tensors)


def parse_artifact(data: bytes) -> ParsedArtifact:
    """Read an artifact; a wrong magic, version, layout or tensor table is a ``ValueError``."""
    if not data.startswith(ARTIFACT_MAGIC):
        raise ValueError("not a privlake filter VAE artifact (wrong magic bytes)")
    position = len(ARTIFACT_MAGIC)
    if len(data) < position + 8:
        raise ValueError("truncated VAE artifact (no header length)")
    (header_length,) = struct.unpack("<Q", data[position : position + 8])
    position += 8
    try:
        header = json.loads(data[position : position + header_length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"unreadable VAE artifact header: {error}") from None
    if header.get("format_version") != ARTIFACT_FORMAT_VERSION:
        raise ValueError(f"unsupported VAE artifact format version {header.get('format_version')!r}")
    position += header_length
    architecture = VaeArchitecture.from_dict(header["architecture"])
    feature_spec = FeatureSpec.model_validate(header["feature_spec"])
    if feature_layout(feature_spec) != architecture.layout:
        raise ValueError("the model's feature layout does not match the feature spec")
    expected = architecture.tensor_shapes()
    if [entry["name"] for entry in header["tensors"]] != list(expected):
        raise ValueError("the artifact's tensors do not match its architecture")
    tensors = {}
    for entry in header["tensors"]:
        start = position + int(entry["offset"])
        blob = data[start : start + int(entry["length"])]
        shape = tuple(int(size) for size in entry["shape"])
        if shape != expected[entry["name"]] or len(blob) != 4 * math.prod(shape):
            raise ValueError(f"tensor {entry['name']!r} has the wrong shape or length")
        tensors[entry["name"]] = np.frombuffer(blob, dtype="<f4").reshape(shape).astype(np.float32)
    return ParsedArtifact(header, architecture, feature_spec, tensors)


def _perceptron(layers: tuple[tuple[np.ndarray, np.ndarray], ...], block: np.ndarray) -> np.ndarray:
    """``h ← h·Wᵀ + b`` per layer, ReLU between layers (none after the last), in float32."""
    hidden = block
    for index, (weight_t, bias) in enumerate(layers):
        hidden = hidden @ weight_t
        hidden += bias
        if index < len(layers) - 1:
            np.maximum(hidden, np.float32(0.0), out=hidden)
    return hidden


def _fixed_blocks(data: np.ndarray, block_rows: int) -> list[tuple[np.ndarray, int]]:
    """``data`` (float32) cut into blocks of exactly ``block_rows`` rows (the last one padded with
    zeros), with the number of real rows in each."""
    blocks = []
    for start in range(0, data.shape[0], block_rows):
        block = data[start : start + block_rows]
        rows = block.shape[0]
        if rows < block_rows:
            block = np.concatenate([block, np.zeros((block_rows - rows, block.shape[1]), dtype=np.float32)])
        blocks.append((np.ascontiguousarray(block), rows))
    return blocks


def _matrix(values: np.ndarray, width: int, name: str) -> np.ndarray:
    matrix = np.asarray(values, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[1] != width:
        raise ValueError(f"{name} must be an (n, {width}) matrix, not {matrix.shape}")
    return matrix


def encode_latents(
    model: VaeWeights | Any, features: np.ndarray, block_rows: int = INFERENCE_BLOCK_ROWS
) -> tuple[np.ndarray, np.ndarray]:
    """The posterior's mean ``μ(x)`` and log-variance ``log σ²(x)`` (clamped to
    ``LOG_VARIANCE_LIMITS``) of every record, float64 ``(n, k)`` each; fixed blocks (module
    docstring)."""
    weights = vae_weights(model)
    latent = weights.architecture.latent_dimension
    data = _matrix(features, weights.architecture.layout.width, "features")
    means, log_variances = [np.zeros((0, latent))], [np.zeros((0, latent))]
    low, high = (np.float32(limit) for limit in LOG_VARIANCE_LIMITS)
    for block, rows in _fixed_blocks(data, block_rows):
        output = _perceptron(weights.encoder, block)[:rows]
        means.append(output[:, :latent].astype(np.float64))
        log_variances.append(np.clip(output[:, latent:], low, high).astype(np.float64))
    return np.concatenate(means), np.concatenate(log_variances)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def decode_latents(
    model: VaeWeights | Any, latents: np.ndarray, block_rows: int = INFERENCE_BLOCK_ROWS
) -> np.ndarray:
    """Feature-shaped float64 matrix decoded from latents: numeric columns are the decoder's means
    ``g_j(z)``, categorical blocks ``softmax(g_c(z))`` (``features.decode_features`` turns it into
    records). Fixed blocks, as in ``encode_latents``."""
    weights = vae_weights(model)
    layout = weights.architecture.layout
    data = _matrix(latents, weights.architecture.latent_dimension, "latents")
    pieces = [np.zeros((0, layout.width))]
    for block, rows in _fixed_blocks(data, block_rows):
        outputs = _perceptron(weights.decoder, block)[:rows]
        for block_start, block_stop in layout.categorical_blocks:
            outputs[:, block_start:block_stop] = _softmax(outputs[:, block_start:block_stop])
        pieces.append(outputs.astype(np.float64))
    return np.concatenate(pieces)
