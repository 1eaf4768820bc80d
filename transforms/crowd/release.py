"""The whole crowd computation in memory, on one block: the reference the engines must match,
the floor of the scaling benchmark, and the engine of the reproduction tests.

Same mathematics as the engine pipeline (``pipelines/crowd/pipeline.py``), without the engine:
claims clipped to the public range, public bandwidths, the source qualities by
``estimate_global_weights`` (private with ``private_global``: the release's form), the local
weights, the seed weights and the synthesis.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import pandas as pd

from transforms.crowd.bandwidth import object_bandwidths
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.combined_weights import seed_weights
from transforms.crowd.global_weights import PrivateSourceQuality, SourceQuality, estimate_global_weights
from transforms.crowd.local_weights import local_weights
from transforms.crowd.synthesis import BlockSynthesis, SynthesisParameters, synthesize_block

WeightsMethod = Literal["combined", "global", "local", "uniform"]


@dataclass(frozen=True)
class WeightSettings:
    """How the seed weights are made. ``private_global`` is the release's private form of the
    source qualities (``None``: the non-private fixed point, for evaluation only)."""

    method: WeightsMethod = "combined"
    ratio_cap: float = 4.0
    local_ratio_cap: float = 2.0
    tolerance: float = 1e-6
    max_iterations: int = 100
    private_global: PrivateSourceQuality | None = None


@dataclass(frozen=True)
class CrowdModel:
    """What the synthesis draws from: per-object bandwidths and per-claim seed weights."""

    block: ClaimsBlock
    bandwidths: np.ndarray
    seed_weights: np.ndarray
    source_quality: SourceQuality
    global_iterations: int
    clipped_claims: int


def fit_crowd_model(
    claims: pd.DataFrame,
    parameters: SynthesisParameters,
    *,
    bandwidth: float | None,
    weights: WeightSettings,
    silverman_floor: float | None = None,
) -> CrowdModel:
    """The model of every object: claims clipped to the public range, the public ``bandwidth``
    (``None``: the data-fitted Silverman rule with ``silverman_floor`` — evaluation only), and the
    seed weights of ``weights.method``."""
    clipped, outside = parameters.grid.clip(claims["value"].to_numpy(dtype=np.float64))
    block = ClaimsBlock.from_frame(claims.assign(value=clipped))
    if bandwidth is None:
        bandwidths = object_bandwidths(block, silverman_floor if silverman_floor is not None else parameters.grid.precision)
    else:
        bandwidths = np.full(block.number_of_objects, float(bandwidth))
    quality, iterations = SourceQuality.uniform(), 0
    if weights.method in ("combined", "global"):
        quality, iterations, _ = estimate_global_weights(
            block, bandwidths, weights.tolerance, weights.max_iterations, private=weights.private_global
        )
    local = None
    if weights.method in ("combined", "local"):
        local = local_weights(block, bandwidths, weights.tolerance, weights.max_iterations).weights
    seeds = seed_weights(block, weights.method, local, quality.lookup(block.source_ids), weights.ratio_cap,
                         weights.local_ratio_cap)
    return CrowdModel(block, bandwidths, seeds, quality, iterations, outside)


def synthesize_in_memory(
    claims: pd.DataFrame,
    parameters: SynthesisParameters,
    *,
    secret: bytes,
    release_id: str,
    bandwidth: float | None,
    weights: WeightSettings,
    silverman_floor: float | None = None,
) -> tuple[CrowdModel, BlockSynthesis]:
    """Fit the model and synthesize every object of ``claims``. With private global weights, their
    noise is keyed by ``secret`` and ``release_id`` here too."""
    if weights.private_global is not None:
        weights = replace(weights, private_global=replace(weights.private_global, secret=secret, release_id=release_id))
    model = fit_crowd_model(claims, parameters, bandwidth=bandwidth, weights=weights, silverman_floor=silverman_floor)
    result = synthesize_block(model.block, model.bandwidths, model.seed_weights, parameters, secret, release_id)
    return model, result
