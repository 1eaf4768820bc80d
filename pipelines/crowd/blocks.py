"""The crowd release's per-block functions: what the engines run on their workers.

Kept apart from the driver-side pipeline so a worker process imports only ``transforms``,
numpy and pandas (not the lake, the validation gate or the engines) to run them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from transforms.crowd.claims_block import ClaimsBlock, in_canonical_order
from transforms.crowd.combined_weights import seed_weights
from transforms.crowd.contribution_bound import bound_source_contributions
from transforms.crowd.gaussian_kernel import WithinObjectKernel
from transforms.crowd.global_weights import SourceQuality, source_loss_contributions
from transforms.crowd.local_weights import local_weights
from transforms.crowd.private_density import (
    REASON_TOO_FEW_CLAIMS,
    DensityParameters,
    synthesize_density_block,
)
from transforms.crowd.synthesis import SynthesisParameters, synthesize_block

SUMMARY_ROW = -1


def object_block(frame: pd.DataFrame) -> ClaimsBlock:
    """Whole objects' claims as a block, in canonical order (however the frame was ordered)."""
    return ClaimsBlock.from_frame(in_canonical_order(frame))


def public_bandwidths(block: ClaimsBlock, bandwidth: float) -> np.ndarray:
    """Each object's kernel bandwidth ``h_i``: the release's public constant (the data-fitted
    Silverman rule is refused for a release), never fitted to the claims."""
    return np.full(block.number_of_objects, float(bandwidth))


@dataclass(frozen=True)
class GlobalPassSide:
    source_quality: SourceQuality
    bandwidth: float


def global_pass_block(frame: pd.DataFrame, side: GlobalPassSide) -> pd.DataFrame:
    """Map-by-object half of a global-weights iteration: per-source fixed-point loss sums.

    The kernel is used once here, so it is computed tile by tile and never held: holding it
    (about 160 bytes a claim) only made every task fault that much fresh memory in (issue 15:
    0.21 s against 0.26-0.96 s for 1.25 million claims; the sums are bitwise the same)."""
    block = object_block(frame)
    bandwidths = public_bandwidths(block, side.bandwidth)
    return source_loss_contributions(block, bandwidths, side.source_quality,
                                     kernel=WithinObjectKernel(block, bandwidths, cache_bytes=0))


@dataclass(frozen=True)
class SynthesisSide:
    source_quality: SourceQuality
    weights_method: str
    local_tolerance: float
    local_max_iterations: int
    weight_ratio_cap: float
    local_ratio_cap: float
    parameters: SynthesisParameters
    secret: bytes
    release_id: str
    bandwidth: float
    density: DensityParameters | None = None
    """``histogram``'s parameters: when set, the block releases private densities (``parameters``
    and the weights are not used)."""


def object_weights(block: ClaimsBlock, bandwidths: np.ndarray, side: SynthesisSide) -> np.ndarray:
    """The per-claim seed weights of the configured method, in the form the guarantee covers
    (``transforms/crowd/combined_weights.py:seed_weights``)."""
    local = None
    if side.weights_method in ("combined", "local"):
        local = local_weights(block, bandwidths, side.local_tolerance, side.local_max_iterations).weights
    return seed_weights(block, side.weights_method, local, side.source_quality.lookup(block.source_ids),
                        side.weight_ratio_cap, side.local_ratio_cap)


def synthesis_block(frame: pd.DataFrame, side: SynthesisSide) -> pd.DataFrame:
    """Map-by-object synthesis: released claims plus one summary row per object, sorted by
    object (so the outcome stays clustered and is staged without a shuffle)."""
    block = object_block(frame)
    if side.density is not None:
        return _density_outcome(block, side)
    bandwidths = public_bandwidths(block, side.bandwidth)
    weights = object_weights(block, bandwidths, side)
    result = synthesize_block(block, bandwidths, weights, side.parameters, side.secret, side.release_id)
    return _outcome_frame(result.claims, result.objects)


def _density_outcome(block: ClaimsBlock, side: SynthesisSide) -> pd.DataFrame:
    """``histogram``: each object's private density and its ``m`` claims (``private_density.py``),
    in the outcome's form (no attempts, fallbacks or caps: nothing is tested)."""
    assert side.density is not None
    outcome = synthesize_density_block(block, side.density, side.secret, side.release_id)
    released = outcome.released
    zeros = np.zeros(block.number_of_objects, dtype=np.int64)
    objects = pd.DataFrame({
        "object_id": block.object_ids, "claims": block.counts.astype(np.int64),
        "released": np.where(released, side.density.claims_per_object, 0), "attempts": zeros,
        "fallbacks": zeros, "capped": zeros, "suppressed": ~released,
        "reason": np.where(released, "", REASON_TOO_FEW_CLAIMS).astype(object),
    })
    return _outcome_frame(outcome.claims, objects)


def _outcome_frame(claims: pd.DataFrame, objects: pd.DataFrame) -> pd.DataFrame:
    released = pd.DataFrame(
        {
            "object_id": claims["object_id"],
            "claim_index": claims["claim_index"].astype(np.int32),
            "value": claims["value"].astype(np.float64),
        }
    )
    summary = pd.DataFrame(
        {
            "object_id": objects["object_id"],
            "claim_index": np.full(len(objects), SUMMARY_ROW, dtype=np.int32),
            "value": np.zeros(len(objects)),
            "claims": objects["claims"].astype(np.int64),
            "released": objects["released"].astype(np.int64),
            "attempts": objects["attempts"].astype(np.int64),
            "fallbacks": objects["fallbacks"].astype(np.int64),
            "capped": objects["capped"].astype(np.int64),
            "suppressed": objects["suppressed"].astype(bool),
            "reason": objects["reason"].astype(str),
        }
    )
    together = pd.concat([released, summary], ignore_index=True)
    return together.sort_values("object_id", kind="mergesort", ignore_index=True)


def released_rows(frame: pd.DataFrame, _side: Any) -> pd.DataFrame:
    rows = frame[frame["claim_index"] >= 0]
    return rows[["object_id", "claim_index", "value"]].reset_index(drop=True)


def summary_rows(frame: pd.DataFrame, _side: Any) -> pd.DataFrame:
    return frame[frame["claim_index"] == SUMMARY_ROW].reset_index(drop=True)


@dataclass(frozen=True)
class BoundSide:
    max_objects_per_source: int
    secret: bytes
    release_id: str


def bound_block(frame: pd.DataFrame, side: BoundSide) -> pd.DataFrame:
    return bound_source_contributions(frame, side.max_objects_per_source, side.secret, side.release_id)
