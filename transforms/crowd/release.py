"""The whole PrisCrowd computation in memory, on one block: the reference the engines must
match, the floor of the scaling benchmark, and the engine of the reproduction tests.

Same mathematics as the engine pipeline (``pipelines/crowd/pipeline.py``), without the
engine: global weights by ``estimate_global_weights`` (the same map/reduce, done in one
process), then per object bandwidth, local and combined weights and Algorithm 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from transforms.crowd.bandwidth import object_bandwidths
from transforms.crowd.baselines import uniform_weights
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.combined_weights import clip_weight_ratio, combined_weights
from transforms.crowd.global_weights import SourceQuality, estimate_global_weights, global_weights
from transforms.crowd.local_weights import local_weights
from transforms.crowd.synthesis import BlockSynthesis, SynthesisParameters, synthesize_block

WeightsMethod = Literal["combined", "global", "local", "uniform"]


@dataclass(frozen=True)
class CrowdModel:
    """What the synthesis draws from: per-object bandwidths and per-claim seed weights."""

    block: ClaimsBlock
    bandwidths: np.ndarray
    seed_weights: np.ndarray
    source_quality: SourceQuality
    global_iterations: int
    global_converged: bool


def fit_crowd_model(
    claims: pd.DataFrame,
    *,
    method: WeightsMethod = "combined",
    bandwidth_floor: float,
    weight_ratio_cap: float,
    tolerance: float = 1e-6,
    max_iterations: int = 100,
) -> CrowdModel:
    """Weights of the chosen method for every claim (PrisCrowd: combined, steps 1-3)."""
    block = ClaimsBlock.from_frame(claims)
    bandwidths = object_bandwidths(block, bandwidth_floor)
    quality, iterations, converged = SourceQuality.uniform(), 0, True
    if method in ("combined", "global"):
        quality, iterations, converged = estimate_global_weights(block, bandwidths, tolerance, max_iterations)
    if method == "uniform":
        weights = clip_weight_ratio(uniform_weights(block), block.offsets, weight_ratio_cap)
    elif method == "global":
        weights = clip_weight_ratio(global_weights(block, quality), block.offsets, weight_ratio_cap)
    else:
        local = local_weights(block, bandwidths, tolerance, max_iterations).weights
        if method == "local":
            weights = clip_weight_ratio(local, block.offsets, weight_ratio_cap)
        else:
            weights = combined_weights(block, local, quality.lookup(block.source_ids), weight_ratio_cap)
    return CrowdModel(block, bandwidths, weights, quality, iterations, converged)


def synthesize_in_memory(
    claims: pd.DataFrame,
    parameters: SynthesisParameters,
    *,
    secret: bytes,
    release_id: str,
    method: WeightsMethod = "combined",
    bandwidth_floor: float,
    weight_ratio_cap: float,
    tolerance: float = 1e-6,
    max_iterations: int = 100,
) -> tuple[CrowdModel, BlockSynthesis]:
    """Fit the model and run Algorithm 1 for every object of ``claims``."""
    model = fit_crowd_model(
        claims,
        method=method,
        bandwidth_floor=bandwidth_floor,
        weight_ratio_cap=weight_ratio_cap,
        tolerance=tolerance,
        max_iterations=max_iterations,
    )
    result = synthesize_block(model.block, model.bandwidths, model.seed_weights, parameters, secret, release_id)
    return model, result
