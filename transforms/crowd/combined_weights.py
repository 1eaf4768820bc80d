"""Combined claim weights and their public ratio bound (PrisCrowd step 3 and Theorem 2).

PrisCrowd (Huai et al., IJCAI 2019) combines the local weight ``l_is`` of a claim
(how typical it is within its object) with the global quality ``g_s`` of its source by the
geometric mean, normalized per object::

    c_is = sqrt(l_is · g_s) / Σ_{t∈S_i} sqrt(l_it · g_t)

and the object's density is ``f_i = Σ_s c_is K_h(·, x_is)``. Theorem 2's privacy loss
``ε = ε0 + ln(1 + (γ/t) R)`` depends on ``R = max_s c_is / min_s c_is``. For a guarantee that
does not depend on the data, :func:`clip_weight_ratio` enforces ``max/min ≤ R`` per object
with ``R`` a configured public cap, and ``ε`` is computed from the cap.
"""

from __future__ import annotations

import numpy as np

from transforms.crowd.claims_block import ClaimsBlock


def _object_of_claim(offsets: np.ndarray) -> np.ndarray:
    counts = np.diff(offsets)
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts)


def combine_weights(
    block: ClaimsBlock, local_weights: np.ndarray, source_quality_per_claim: np.ndarray
) -> np.ndarray:
    """(N,) ``c_is = sqrt(l_is g_s) / Σ_t sqrt(l_it g_t)``; uniform for an object whose sum is 0."""
    product = np.asarray(local_weights, dtype=np.float64) * np.asarray(
        source_quality_per_claim, dtype=np.float64
    )
    if np.any(product < 0):
        raise ValueError("local weights and source qualities must be non-negative")
    root = np.sqrt(product)
    object_of_claim = block.object_of_claim
    totals = np.bincount(object_of_claim, weights=root, minlength=block.number_of_objects)
    positive = totals > 0
    uniform = 1.0 / block.counts[object_of_claim]
    return np.where(
        positive[object_of_claim], root / np.where(positive, totals, 1.0)[object_of_claim], uniform
    )


def clip_weight_ratio(weights: np.ndarray, offsets: np.ndarray, ratio_cap: float) -> np.ndarray:
    """Per object, raise every weight to at least ``max / ratio_cap`` and renormalize.

    Afterwards ``max_j c_j / min_j c_j ≤ ratio_cap`` holds for every object *as evaluated in
    float64*: raising to ``max/R`` bounds the ratio by ``R`` in exact arithmetic, and any weight
    that rounding of the renormalization leaves a hair too small is moved up by one ulp at a
    time until the check passes (this perturbs the per-object sum by a few ulps at most). The
    largest weight keeps its relative position, so weights already within the cap are only
    renormalized. An object whose weights are all zero becomes uniform.
    """
    if not ratio_cap >= 1.0:
        raise ValueError("the weight ratio cap must be at least 1")
    weights = np.asarray(weights, dtype=np.float64)
    offsets = np.asarray(offsets, dtype=np.int64)
    if np.any(weights < 0) or not np.all(np.isfinite(weights)):
        raise ValueError("weights must be finite and non-negative")
    counts = np.diff(offsets)
    if len(weights) == 0:
        return weights.copy()
    if np.any(counts == 0):
        raise ValueError("every object needs at least one claim")
    object_of_claim = _object_of_claim(offsets)
    largest = np.maximum.reduceat(weights, offsets[:-1])
    all_zero = largest == 0
    floored = np.maximum(weights, (largest / ratio_cap)[object_of_claim])
    floored = np.where(all_zero[object_of_claim], 1.0, floored)
    totals = np.bincount(object_of_claim, weights=floored, minlength=len(counts))
    clipped = floored / totals[object_of_claim]
    while True:
        new_largest = np.maximum.reduceat(clipped, offsets[:-1])
        with np.errstate(divide="ignore"):
            too_small = new_largest[object_of_claim] / clipped > ratio_cap
        if not too_small.any():
            return clipped
        clipped[too_small] = np.nextafter(clipped[too_small], np.inf)


def combined_weights(
    block: ClaimsBlock,
    local_weights: np.ndarray,
    source_quality_per_claim: np.ndarray,
    ratio_cap: float,
) -> np.ndarray:
    """(N,) PrisCrowd's combined weights, ratio-clipped: :func:`combine_weights` then :func:`clip_weight_ratio`."""
    return clip_weight_ratio(
        combine_weights(block, local_weights, source_quality_per_claim), block.offsets, ratio_cap
    )


def weight_bounds(method: str, ratio_cap: float, local_ratio_cap: float) -> tuple[float, float]:
    """``(R, ρ)`` of a weighting method for the guarantee: the largest max/min seed-weight ratio
    within an object, and the largest factor by which a changed claim can move any *other* claim's
    weight (``transforms/crowd/guarantee.py``). Global qualities are differentially private, so
    only the local factor, computed from the object's own claims, moves: by its ratio cap ``R_l``
    on the claim and ``R_l`` on the normalization, ``ρ = R_l²``."""
    if method == "uniform":
        return 1.0, 1.0
    if method == "global":
        return ratio_cap, 1.0
    if method == "local":
        return ratio_cap, ratio_cap**2
    if method == "combined":
        if not 1.0 <= local_ratio_cap <= ratio_cap:
            raise ValueError("the local ratio cap must be between 1 and the weight ratio cap")
        return ratio_cap, local_ratio_cap**2
    raise ValueError(f"unknown weighting method {method!r}")


def seed_weights(
    block: ClaimsBlock,
    method: str,
    local_weights: np.ndarray | None,
    source_quality_per_claim: np.ndarray | None,
    ratio_cap: float,
    local_ratio_cap: float,
) -> np.ndarray:
    """(N,) the seed weights a release samples with, in the form the guarantee covers: the global
    factor ``sqrt(g_s)`` and the local factor ``sqrt(l_is)`` (PrisCrowd's geometric mean) are each
    ratio-clipped per object — to ``R/R_l`` and ``R_l`` — and multiplied, so that the product's
    ratio is at most ``R`` and the local factor's (the only part a claim of the same object moves)
    at most ``R_l``; no clipping after the product (it would couple the factors)."""
    offsets = block.offsets
    ones = np.ones(block.number_of_claims)
    if method == "uniform":
        return normalize(block, ones)
    global_factor = ones if source_quality_per_claim is None else np.sqrt(np.asarray(source_quality_per_claim, float))
    local_factor = ones if local_weights is None else np.sqrt(np.asarray(local_weights, float))
    if method == "global":
        return clip_weight_ratio(global_factor, offsets, ratio_cap)
    if method == "local":
        return clip_weight_ratio(local_factor, offsets, ratio_cap)
    weight_bounds(method, ratio_cap, local_ratio_cap)
    product = clip_weight_ratio(global_factor, offsets, ratio_cap / local_ratio_cap) * clip_weight_ratio(
        local_factor, offsets, local_ratio_cap
    )
    return normalize(block, product)


def normalize(block: ClaimsBlock, weights: np.ndarray) -> np.ndarray:
    """(N,) ``w / Σ_object w``."""
    totals = np.bincount(block.object_of_claim, weights=weights, minlength=block.number_of_objects)
    return weights / totals[block.object_of_claim]
