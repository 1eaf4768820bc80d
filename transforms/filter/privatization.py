"""Privatize records: encode, filter with the owner's choice, decode (issue 5, step 3).

Chen, Navidi, Rajagopal, "Generating private data with user customization": a record ``x`` with
private label ``y`` whose owner chose filter ``f = (A, B)`` is released as ``x̃ = g(z̃)`` with

    z = μ(x) + σ(x)·ε₀,     z̃ = z + A·ε + B·e_y,     ε₀ ~ N(0, I_k), ε ~ N(0, I_m),

``μ, σ`` the frozen encoder's posterior and ``g`` the frozen decoder (NumPy inference: ``inference.py``;
the filter: ``latent_filter.py``). No torch: a worker privatizing records needs only NumPy.

Keyed, partition-free draws: the standard normals ``(ε₀, ε)`` of the record at input position
``p`` are row ``p mod R`` of the ``R × w`` block drawn from
``keyed_generator(secret, release_id, "filter-privatization", p div R)`` (``R = NOISE_BLOCK_ROWS``,
``w = k + max m`` over the release's filters; a filter with a smaller ``m`` uses the first ``m``
noise columns). A record's draws therefore depend only on the secret, the release id and its
position, never on which batch, partition, engine or retry computes it; and with the VAE's
fixed-block inference (``inference.encode_latents``) its released record is bit-identical everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from transforms.core.keyed_randomness import keyed_generator
from transforms.filter.inference import VaeWeights, decode_latents, encode_latents, vae_weights
from transforms.filter.latent_filter import LinearLatentFilter, apply_latent_filter, sample_posterior

NOISE_BLOCK_ROWS = 4096
PURPOSE_PRIVATIZATION = "filter-privatization"


def record_standard_normals(secret: bytes, release_id: str, positions: np.ndarray, width: int,
                            purpose: str = PURPOSE_PRIVATIZATION,
                            block_rows: int = NOISE_BLOCK_ROWS) -> np.ndarray:
    """``(len(positions), width)`` standard normals, row ``i`` a function of ``positions[i]`` only
    (module docstring)."""
    positions = np.asarray(positions, dtype=np.int64)
    if positions.ndim != 1 or (positions.size and positions.min() < 0):
        raise ValueError("positions must be a 1-d array of non-negative integers")
    draws = np.empty((positions.size, width))
    blocks = positions // block_rows
    for block in np.unique(blocks).tolist():
        rows = blocks == block
        generator = keyed_generator(secret, release_id, purpose, int(block))
        draws[rows] = generator.standard_normal((block_rows, width))[positions[rows] - block * block_rows]
    return draws


def noise_width(latent_dimension: int, filters: Sequence[LinearLatentFilter]) -> int:
    return latent_dimension + max(latent_filter.noise_dimension for latent_filter in filters)


def filter_latents(latent_mean: np.ndarray, latent_log_variance: np.ndarray, choices: np.ndarray,
                   private_labels: np.ndarray, filters: Sequence[LinearLatentFilter],
                   normals: np.ndarray) -> np.ndarray:
    """``z̃`` of each record: a posterior draw from ``normals[:, :k]``, then its choice's filter with
    ``normals[:, k:k+m]`` as ``ε`` (``choices`` index ``filters``)."""
    latent_dimension = latent_mean.shape[1]
    latents = sample_posterior(latent_mean, latent_log_variance, normals[:, :latent_dimension])
    filtered = np.empty_like(latents)
    choices = np.asarray(choices, dtype=np.int64)
    for code in np.unique(choices).tolist():
        rows = choices == code
        latent_filter = filters[code]
        noise = normals[rows, latent_dimension : latent_dimension + latent_filter.noise_dimension]
        filtered[rows] = apply_latent_filter(latents[rows], np.asarray(private_labels)[rows], latent_filter, noise)
    return filtered


def privatize_encoded(model: VaeWeights | Any, latent_mean: np.ndarray, latent_log_variance: np.ndarray,
                      positions: np.ndarray, choices: np.ndarray, private_labels: np.ndarray,
                      filters: Sequence[LinearLatentFilter], secret: bytes, release_id: str,
                      purpose: str = PURPOSE_PRIVATIZATION) -> np.ndarray:
    """``privatize_features`` from the records' posterior parameters (``inference.encode_latents``), for
    callers that privatize the same records more than once."""
    normals = record_standard_normals(secret, release_id, positions,
                                      noise_width(latent_mean.shape[1], filters), purpose)
    return decode_latents(model, filter_latents(latent_mean, latent_log_variance, choices, private_labels, filters,
                                                normals))


def privatize_features(model: VaeWeights | Any, features: np.ndarray, positions: np.ndarray,
                       choices: np.ndarray, private_labels: np.ndarray, filters: Sequence[LinearLatentFilter],
                       secret: bytes, release_id: str, purpose: str = PURPOSE_PRIVATIZATION) -> np.ndarray:
    """The decoded, feature-shaped matrix of the privatized records (``features.decode_features``
    turns it into records)."""
    weights = vae_weights(model)
    mean, log_variance = encode_latents(weights, features)
    return privatize_encoded(weights, mean, log_variance, positions, choices, private_labels, filters, secret,
                             release_id, purpose)
