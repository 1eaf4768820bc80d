"""Local claim weights by robust KDE (PrisCrowd step 2; Kim & Scott, JMLR 2012).

Within one object the claims that lie far from the bulk should count less. Kim & Scott's
robust KDE minimizes ``J(f) = (1/n) Σ_j ρ(‖Φ(x_j) − f‖)`` over ``f = Σ_j l_j Φ(x_j)`` by
iteratively re-weighted least squares (their kernelized IRWLS)::

    l^(0) = 1/n;   r_j^(k) = ‖Φ(x_j) − f^(k)‖;   l_j^(k+1) = φ(r_j^(k)) / Σ_u φ(r_u^(k)),

with ``φ(r) = ψ(r)/r`` (``φ(0) = 1``) and ``ψ = ρ'``. We use the Hampel loss (as in their
experiments) with thresholds ``a < b < c`` set, as Kim & Scott do, to the median, 75th and 95th
percentile of the distances ``r^(0)`` of the claims to the uniform-weight KDE (the first pass),
per object. The iteration stops for an object when the relative change of
``J = mean_j ρ(r_j)`` falls to the tolerance, or at the cap. Distances use the unit-norm
Gaussian kernel (see :mod:`transforms.crowd.gaussian_kernel`); the weights do not depend on that
normalization because the thresholds rescale with the distances.

Special cases: if all first-pass distances are zero (identical claims, or a single claim) the
weights stay uniform; if at some iteration every ``φ(r_j)`` of an object is zero (all claims
beyond ``c``), the object's weights become uniform and it stops there. Both are reported as
converged with the iterations actually made.

Behaviour to expect: with thresholds fixed at the first pass the iteration is mode-seeking —
as weight concentrates, the distances of tail claims grow past ``c`` and their weight becomes
exactly 0. On a clean normal sample of 20-200 claims with the Silverman bandwidth about a third
to a half of the claims end at weight 0 (far outliers always do). The combined weights' public
ratio cap (:func:`transforms.crowd.combined_weights.clip_weight_ratio`) lifts them back to
``max / R``.

All objects of a block iterate together, vectorized, with a per-object convergence mask:
a converged object is frozen (its weights never change again) and dropped from the kernel
work, so each object's result depends only on its own claims — bitwise the same in any block.
A block larger than :data:`~transforms.crowd.gaussian_kernel.CHUNK_CLAIMS` claims is processed in
chunks of whole objects (same results, bounded memory).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transforms.crowd.bandwidth import per_object_percentiles
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.gaussian_kernel import CHUNK_CLAIMS, WithinObjectKernel, object_chunks

HAMPEL_PERCENTILES = (50.0, 75.0, 95.0)
"""Percentiles of the first-pass distances used as Hampel thresholds a, b, c (Kim & Scott)."""

Thresholds = tuple[np.ndarray | float, np.ndarray | float, np.ndarray | float]


def _threshold_arrays(r: np.ndarray, thresholds: Thresholds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a, b, c = (np.broadcast_to(np.asarray(t, dtype=np.float64), r.shape) for t in thresholds)
    return a, b, c


def hampel_psi(r: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """Hampel's ψ (as in Kim & Scott 2012) for distances ``r ≥ 0``.

    ``ψ(r) = r`` on ``[0, a)``, ``a`` on ``[a, b)``, ``a (c − r)/(c − b)`` on ``[b, c)`` and
    ``0`` from ``c`` on. ``thresholds = (a, b, c)``, each a scalar or an array broadcastable to
    ``r`` (per claim, e.g. an object's thresholds repeated over its claims); ``a ≤ b ≤ c``,
    empty pieces (``a = b`` or ``b = c``) are skipped.
    """
    r = np.asarray(r, dtype=np.float64)
    a, b, c = _threshold_arrays(r, thresholds)
    descending_width = np.where(c > b, c - b, 1.0)
    descending = a * np.maximum(c - r, 0.0) / descending_width
    return np.where(r < b, np.minimum(r, a), descending)


def hampel_rho(r: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """Hampel's ρ (as in Kim & Scott 2012), the integral of :func:`hampel_psi` from 0.

    ``r²/2`` on ``[0, a)``; ``a r − a²/2`` on ``[a, b)``;
    ``−a (c − r)² / (2 (c − b)) + a (b + c − a)/2`` on ``[b, c)``; ``a (b + c − a)/2`` beyond.
    """
    r = np.asarray(r, dtype=np.float64)
    a, b, c = _threshold_arrays(r, thresholds)
    descending_width = np.where(c > b, c - b, 1.0)
    plateau = a * (b + c - a) / 2.0
    remaining = np.maximum(c - r, 0.0)
    rising = np.where(r < a, r * r / 2.0, a * r - a * a / 2.0)
    return np.where(r < b, rising, plateau - a * remaining * remaining / (2.0 * descending_width))


def hampel_phi(r: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """``φ(r) = ψ(r)/r`` with ``φ(0) = 1`` (the IRWLS weight function)."""
    r = np.asarray(r, dtype=np.float64)
    psi = hampel_psi(r, thresholds)
    positive = r > 0
    return np.where(positive, psi / np.where(positive, r, 1.0), 1.0)


@dataclass(frozen=True, eq=False)
class LocalWeights:
    """Result of :func:`local_weights`.

    Attributes:
        weights: (N,) local weights ``l_j``, summing to 1 within each object.
        iterations: (O,) IRWLS updates made per object.
        converged: (O,) whether the object met the tolerance (or hit a special case) before the cap.
    """

    weights: np.ndarray
    iterations: np.ndarray
    converged: np.ndarray


def _mean_per_object(position: np.ndarray, per_claim: np.ndarray, counts: np.ndarray) -> np.ndarray:
    return np.bincount(position, weights=per_claim, minlength=len(counts)) / counts


def local_weights(
    block: ClaimsBlock,
    bandwidths: np.ndarray,
    tolerance: float = 1e-6,
    max_iterations: int = 100,
    kernel: WithinObjectKernel | None = None,
    chunk_claims: int = CHUNK_CLAIMS,
) -> LocalWeights:
    """Kim & Scott's IRWLS with the Hampel loss for every object of ``block`` at once.

    Starts from uniform weights; thresholds ``a, b, c`` are the per-object median, 75th and 95th
    percentile of the first-pass distances; an object stops when
    ``|J^(k+1) − J^(k)| ≤ tolerance · J^(k)`` for ``J = mean_j ρ(r_j)``, or after
    ``max_iterations`` updates. See the module docstring for the special cases.

    Args:
        block: whole objects' claims.
        bandwidths: (O,) positive per-object bandwidths.
        tolerance: relative change of ``J`` that stops an object.
        max_iterations: cap on weight updates per object.
        kernel: a prebuilt :class:`WithinObjectKernel` for ``(block, bandwidths)`` to reuse
            (then the block is processed in one piece).
        chunk_claims: without ``kernel``, larger blocks are processed in chunks of whole
            objects of about this many claims (bitwise the same result, bounded memory).
    """
    if kernel is None and block.number_of_claims > chunk_claims:
        parts, start = [], 0
        for chunk in object_chunks(block, chunk_claims):
            stop = start + chunk.number_of_objects
            parts.append(
                _iteratively_reweighted(chunk, bandwidths[start:stop], tolerance, max_iterations, None)
            )
            start = stop
        return LocalWeights(
            weights=np.concatenate([part.weights for part in parts]),
            iterations=np.concatenate([part.iterations for part in parts]),
            converged=np.concatenate([part.converged for part in parts]),
        )
    return _iteratively_reweighted(block, bandwidths, tolerance, max_iterations, kernel)


def _iteratively_reweighted(
    block: ClaimsBlock,
    bandwidths: np.ndarray,
    tolerance: float,
    max_iterations: int,
    kernel: WithinObjectKernel | None,
) -> LocalWeights:
    number_of_objects = block.number_of_objects
    if kernel is None:
        kernel = WithinObjectKernel(block, bandwidths)
    if kernel.number_of_objects != number_of_objects or len(kernel.claims) != block.number_of_claims:
        raise ValueError("the kernel must cover every object of the block")
    object_of_claim = block.object_of_claim
    counts = block.counts
    weights = 1.0 / counts[object_of_claim].astype(np.float64)
    iterations = np.zeros(number_of_objects, dtype=np.int64)
    converged = np.zeros(number_of_objects, dtype=bool)
    if number_of_objects == 0:
        return LocalWeights(weights, iterations, converged)

    distances = np.sqrt(kernel.squared_distances_local(weights))
    largest = np.maximum.reduceat(distances, block.offsets[:-1])
    first_a, first_b, first_c = per_object_percentiles(distances, block.offsets, HAMPEL_PERCENTILES)
    degenerate = largest == 0
    converged[degenerate] = True
    kernel = kernel.restrict(~degenerate)

    # Working state of the still-active objects, aligned with kernel.claims / kernel.objects.
    position = kernel.object_position
    claim_counts = counts[kernel.objects][position].astype(np.float64)
    distances = distances[kernel.claims]
    thresholds = tuple(threshold[kernel.objects][position] for threshold in (first_a, first_b, first_c))
    objective = _mean_per_object(position, hampel_rho(distances, thresholds), counts[kernel.objects])

    live = np.ones(kernel.number_of_objects, dtype=bool)
    for _ in range(max_iterations):
        if not live.any():
            break
        if np.count_nonzero(live) <= kernel.number_of_objects // 2:
            keep_claims = live[position]
            kernel = kernel.restrict(live)
            position = kernel.object_position
            claim_counts = claim_counts[keep_claims]
            distances = distances[keep_claims]
            thresholds = tuple(threshold[keep_claims] for threshold in thresholds)
            objective = objective[live]
            live = np.ones(kernel.number_of_objects, dtype=bool)
        live_claims = live[position]
        phi = hampel_phi(distances, thresholds)
        phi_totals = np.bincount(position, weights=phi, minlength=kernel.number_of_objects)
        all_zero = phi_totals == 0
        updated = np.where(
            all_zero[position], 1.0 / claim_counts, phi / np.where(all_zero, 1.0, phi_totals)[position]
        )
        weights[kernel.claims[live_claims]] = updated[live_claims]
        iterations[kernel.objects[live]] += 1
        distances = np.sqrt(kernel.squared_distances_local(updated))
        new_objective = _mean_per_object(position, hampel_rho(distances, thresholds), counts[kernel.objects])
        settled = live & (all_zero | (np.abs(new_objective - objective) <= tolerance * objective))
        converged[kernel.objects[settled]] = True
        live &= ~settled
        objective = new_objective
    return LocalWeights(weights=weights, iterations=iterations, converged=converged)
