"""Global source weights (PrisCrowd step 1; Huai et al., IJCAI 2019, after KDEm).

Each source ``s`` gets one quality ``g_s`` shared by all objects it claims about. With the
object's weighted KDE ``f_i = Σ_{t∈S_i} w_it K_h(·, x_it)`` and ``w_is = g_s / Σ_{t∈S_i} g_t``,
the iteration of KDEm (Wan et al., KDD 2016, with the CRH-style logarithm) is::

    loss_is = ‖Φ(x_is) − f_i‖²                                  (RKHS distance, kernel trick)
    L_s     = Σ_{i∈O_s} loss_is / |S_i|
    g_s     = log( Σ_{s'} L_{s'} / (L_s / n_s) )                 (n_s = |O_s|, objects of s)

starting from ``g ≡ 1`` (uniform weights) and repeated until the largest relative change of
``g`` is below a tolerance or an iteration cap is hit.

Privately (what a release uses, :class:`PrivateSourceQuality`): a fixed number of iterations,
each updating ``g`` from *noisy* loss sums. A claim's change moves its object's KDE ``f_i`` and so
every ``loss_is'/|S_i|`` of that object by at most ``2/|S_i|`` (each loss is a squared RKHS
distance between a unit-norm feature and a convex combination of them, in ``[0, 2]``): the vector
of per-source sums ``(L_s)`` has L1 sensitivity 2 (``2L`` for a source's claims on ``L``
objects). The driver reads the exact sums in units of ``2^-20`` (floor), adds discrete Laplace
noise of scale ``(2·2^20 + 2 n_max)/ε`` (``n_max``: the largest object, public; the ``2 n_max``
covers per-claim and unit rounding) from a keyed stream, and computes ``g`` from the noisy sums —
``ε``-DP per iteration, post-processing after. The objects per source ``n_s`` are public (which
sources answered which objects is, by the release's neighbouring relation).

This is a cross-object aggregation, split for the engines into a *map by object*
(:func:`source_loss_contributions`: per block, each source's partial ``L_s`` and ``n_s``) and a
*reduce by source* on the driver (:func:`update_source_quality`). Partial losses are converted
to fixed point per claim (``round(loss_is / |S_i| · 2^40)``) before any summation, so the sums
are exact integers: the reduced ``L_s`` is the same however objects are split into blocks,
partitions or engines. Exactness holds while a source's ``loss_fixed`` fits in int64, i.e.
for fewer than ``2^22`` (about 4 million) objects per source in the worst case (every loss 2,
|S_i| = 1); the losses of real sources are far smaller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from transforms.core.discrete_laplace import discrete_laplace_scale, sample_discrete_laplace
from transforms.core.keyed_randomness import keyed_generator
from transforms.crowd.claims_block import SOURCE_ID, ClaimsBlock
from transforms.crowd.gaussian_kernel import WithinObjectKernel

LOSS_FIXED_POINT_BITS = 40
LOSS_FIXED_POINT_SCALE: int = 2**LOSS_FIXED_POINT_BITS
"""Fixed-point scale of the per-claim source losses (resolution ≈ 9.1e-13; a loss is ≤ 2)."""

MINIMUM_MEAN_LOSS: float = 1.0 / LOSS_FIXED_POINT_SCALE
"""Floor of ``L_s / n_s`` (and of ``Σ L``): one fixed-point unit. A source whose claims all sit
exactly on their objects' KDEs would otherwise get ``g_s = log(x / 0) = ∞``."""

MINIMUM_SOURCE_QUALITY: float = 1e-6
"""Floor of ``g_s``. ``log`` is ≤ 0 only when a source's mean loss reaches the total of all
sources' losses (e.g. a single source); the floor keeps every weight positive so each object's
weights stay defined (and the combined weights can be ratio-clipped)."""

MAX_OBJECTS_PER_SOURCE = 2**21
"""A source's fixed-point loss sum is at most ``n_s · 2·2^40``: it fits in int64, with room for any
split into block partial sums, while a source answers at most ``2^21`` objects. A release refuses
more (a public count: which sources answered which objects is public)."""

LOSS_FIXED = "loss_fixed"
OBJECTS = "objects"


@dataclass(frozen=True, eq=False)
class SourceQuality:
    """Source qualities ``g_s`` (PrisCrowd's global weights before per-object normalization).

    Attributes:
        source_ids: (S,) sorted source ids.
        quality: (S,) positive ``g_s``.
    """

    source_ids: np.ndarray
    quality: np.ndarray

    @classmethod
    def uniform(cls) -> SourceQuality:
        """The starting point: no source known, every source has quality 1."""
        return cls(source_ids=np.empty(0, dtype=np.int64), quality=np.empty(0, dtype=np.float64))

    def lookup(self, source_ids: np.ndarray) -> np.ndarray:
        """``g_s`` per claim; a source not present gets 1.0 (the uniform start)."""
        source_ids = np.asarray(source_ids)
        result = np.ones(len(source_ids), dtype=np.float64)
        if len(self.source_ids) == 0 or len(source_ids) == 0:
            return result
        inverse, unique = pd.factorize(source_ids, sort=True)
        return self.lookup_distinct(np.asarray(unique))[inverse]

    def lookup_distinct(self, unique: np.ndarray) -> np.ndarray:
        """``g_s`` of sorted distinct ``unique`` ids (1.0 where unknown)."""
        if len(self.source_ids) == 0 or len(unique) == 0:
            return np.ones(len(unique), dtype=np.float64)
        position = np.searchsorted(self.source_ids, unique)
        clipped = np.minimum(position, len(self.source_ids) - 1)
        found = (position < len(self.source_ids)) & (self.source_ids[clipped] == unique)
        return np.where(found, self.quality[clipped], 1.0)


@dataclass(frozen=True, eq=False)
class BlockSources:
    """The sources of a block's claims, indexed once and reused across iterations.

    Attributes:
        source_ids: (S_b,) sorted distinct source ids of the block.
        source_of_claim: (N,) position of each claim's source in ``source_ids``.
        objects: (S_b,) int64 number of the block's objects each source claims about.
    """

    source_ids: np.ndarray
    source_of_claim: np.ndarray
    objects: np.ndarray

    @classmethod
    def of(cls, block: ClaimsBlock) -> BlockSources:
        source_of_claim, unique = pd.factorize(np.asarray(block.source_ids), sort=True)
        source_of_claim = source_of_claim.astype(np.int64)
        object_of_claim = block.object_of_claim
        first_of_pair = np.ones(len(source_of_claim), dtype=bool)
        first_of_pair[1:] = (object_of_claim[1:] != object_of_claim[:-1]) | (
            source_of_claim[1:] != source_of_claim[:-1]
        )
        objects = np.bincount(source_of_claim[first_of_pair], minlength=len(unique)).astype(np.int64)
        return cls(source_ids=np.asarray(unique), source_of_claim=source_of_claim, objects=objects)

    def quality_per_claim(self, source_quality: SourceQuality) -> np.ndarray:
        """(N,) ``g_s`` of each claim's source."""
        return source_quality.lookup_distinct(self.source_ids)[self.source_of_claim]


def normalize_per_object(block: ClaimsBlock, per_claim: np.ndarray) -> np.ndarray:
    """(N,) ``v_j / Σ_{l in j's object} v_l`` (sequential per-object sums; bitwise block-independent)."""
    totals = np.bincount(block.object_of_claim, weights=per_claim, minlength=block.number_of_objects)
    return per_claim / totals[block.object_of_claim]


def global_weights(block: ClaimsBlock, source_quality: SourceQuality) -> np.ndarray:
    """(N,) ``w_is = g_s / Σ_{t∈S_i} g_t`` (PrisCrowd step 1)."""
    return normalize_per_object(block, source_quality.lookup(block.source_ids))


def source_loss_contributions(
    block: ClaimsBlock,
    bandwidths: np.ndarray,
    source_quality: SourceQuality,
    kernel: WithinObjectKernel | None = None,
    sources: BlockSources | None = None,
) -> pd.DataFrame:
    """The map-by-object half of one global-weights iteration, for the objects of ``block``.

    Returns one row per source present in the block with columns ``source_id``,
    ``loss_fixed`` (int64): ``Σ_{i in block, i∈O_s} round(loss_is / |S_i| · 2^40)``, and
    ``objects`` (int64): the number of the block's objects the source claims about. The
    rounding is per claim, before summation, so these integers add up exactly across blocks.
    A source with several claims on one object (if the duplicates policy keeps them) adds all
    its claims' losses but counts the object once. ``kernel`` and ``sources`` may be passed to
    reuse them across iterations on the same block.
    """
    if kernel is None:
        kernel = WithinObjectKernel(block, bandwidths)
    if sources is None:
        sources = BlockSources.of(block)
    weights = normalize_per_object(block, sources.quality_per_claim(source_quality))
    losses = kernel.squared_distances(weights)
    per_claim = losses / block.counts[block.object_of_claim]
    fixed = np.rint(per_claim * LOSS_FIXED_POINT_SCALE).astype(np.int64)
    loss_fixed = np.zeros(len(sources.source_ids), dtype=np.int64)
    np.add.at(loss_fixed, sources.source_of_claim, fixed)
    return pd.DataFrame({SOURCE_ID: sources.source_ids, LOSS_FIXED: loss_fixed, OBJECTS: sources.objects})


def update_source_quality(source_sums: pd.DataFrame) -> SourceQuality:
    """The reduce-by-source half on the driver: ``g_s = log(Σ_{s'} L_{s'} / (L_s / n_s))``.

    ``source_sums`` holds columns ``source_id, loss_fixed, objects`` (rows of the same source,
    e.g. per-block contributions not yet reduced, are summed). ``L_s = loss_fixed / 2^40``; the
    total ``Σ L`` is summed exactly as integers. ``L_s / n_s`` and the total are floored at
    :data:`MINIMUM_MEAN_LOSS` and ``g_s`` at :data:`MINIMUM_SOURCE_QUALITY`.
    """
    reduced = (
        source_sums[[SOURCE_ID, LOSS_FIXED, OBJECTS]]
        .groupby(SOURCE_ID, sort=True)[[LOSS_FIXED, OBJECTS]]
        .sum()
    )
    loss_fixed = reduced[LOSS_FIXED].to_numpy(dtype=np.int64)
    objects = reduced[OBJECTS].to_numpy(dtype=np.int64)
    if np.any(loss_fixed < 0) or np.any(objects <= 0):
        raise ValueError("source loss sums must be non-negative with at least one object per source")
    total_fixed = sum(int(value) for value in loss_fixed)
    total_loss = max(total_fixed / LOSS_FIXED_POINT_SCALE, MINIMUM_MEAN_LOSS)
    mean_loss = np.maximum(loss_fixed / LOSS_FIXED_POINT_SCALE / objects, MINIMUM_MEAN_LOSS)
    quality = np.maximum(np.log(total_loss / mean_loss), MINIMUM_SOURCE_QUALITY)
    return SourceQuality(source_ids=reduced.index.to_numpy(), quality=quality)


NOISY_UNIT_BITS = 20
"""The noisy sums are read in units of ``2^-NOISY_UNIT_BITS`` of loss."""
GLOBAL_WEIGHTS_NOISE_PURPOSE = "crowd/global-weights-noise"


@dataclass(frozen=True)
class PrivateSourceQuality:
    """The private form of the iteration: ``iterations`` updates, each ``epsilon_per_iteration``-DP
    for ``objects_per_unit`` objects' worth of changed claims (1 for a claim, ``L`` for a source),
    noise from ``keyed_generator(secret, release_id, "crowd/global-weights-noise", iteration)``."""

    iterations: int
    epsilon_per_iteration: float
    largest_object: int
    secret: bytes
    release_id: str
    objects_per_unit: int = 1

    def sensitivity(self) -> int:
        """L1 sensitivity of the per-source sums in noisy units (module docstring)."""
        return self.objects_per_unit * (2 * 2**NOISY_UNIT_BITS + 2 * int(self.largest_object))

    def exact_sums(self, source_sums: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(source ids, L_s in noisy units (floor), n_s)`` reduced from the map half's partial
        sums: the only quantity of the claims the update reads — the vector the noise covers."""
        reduced = (
            source_sums[[SOURCE_ID, LOSS_FIXED, OBJECTS]]
            .groupby(SOURCE_ID, sort=True)[[LOSS_FIXED, OBJECTS]]
            .sum()
        )
        if len(reduced) and int(reduced[OBJECTS].max()) > MAX_OBJECTS_PER_SOURCE:
            raise ValueError(f"a source answered more than {MAX_OBJECTS_PER_SOURCE} objects: its loss sum could overflow")
        coarse = reduced[LOSS_FIXED].to_numpy(dtype=np.int64) >> (LOSS_FIXED_POINT_BITS - NOISY_UNIT_BITS)
        return reduced.index.to_numpy(), coarse, reduced[OBJECTS].to_numpy(dtype=np.int64)

    def update(self, source_sums: pd.DataFrame, iteration: int) -> SourceQuality:
        """One private update: exact sums → noisy sums → ``g``."""
        source_ids, coarse, objects = self.exact_sums(source_sums)
        rng = keyed_generator(self.secret, self.release_id, GLOBAL_WEIGHTS_NOISE_PURPOSE, int(iteration))
        scale = discrete_laplace_scale(self.epsilon_per_iteration, self.sensitivity())
        noisy = (coarse + sample_discrete_laplace(scale, len(coarse), rng)) / 2.0**NOISY_UNIT_BITS
        mean_loss = np.maximum(noisy / objects, MINIMUM_MEAN_LOSS)
        total_loss = max(float(np.sum(mean_loss * objects)), MINIMUM_MEAN_LOSS)
        quality = np.maximum(np.log(total_loss / mean_loss), MINIMUM_SOURCE_QUALITY)
        return SourceQuality(source_ids=source_ids, quality=quality)


def source_quality_change(old: SourceQuality, new: SourceQuality) -> float:
    """Largest relative change ``|g_new − g_old| / g_old`` over the sources of either.

    A source missing from one side counts with quality 1 (the uniform start), as in
    :meth:`SourceQuality.lookup`.
    """
    sources = np.union1d(old.source_ids, new.source_ids)
    if len(sources) == 0:
        return 0.0
    before = old.lookup(sources)
    after = new.lookup(sources)
    return float(np.max(np.abs(after - before) / before))


def iterate_source_quality(
    source_loss_sums: Callable[[SourceQuality], pd.DataFrame],
    tolerance: float,
    max_iterations: int,
    on_iteration: Callable[[int], None] | None = None,
    private: PrivateSourceQuality | None = None,
) -> tuple[SourceQuality, int, bool]:
    """The global-weights fixed point: ``(quality, iterations, converged)``.

    From the uniform start, each iteration asks ``source_loss_sums(quality)`` for the per-source
    fixed-point loss sums (the map-by-object half: in memory, or a job on an engine) and updates
    the qualities (the reduce-by-source half, :func:`update_source_quality`), until
    :func:`source_quality_change` ≤ ``tolerance`` or ``max_iterations`` updates. With ``private``,
    exactly ``private.iterations`` private updates (a stopping rule would depend on the data).
    One loop for the in-memory reference and every engine, so they stop at the same iteration.
    """
    quality = SourceQuality.uniform()
    if private is not None:
        for iteration in range(1, private.iterations + 1):
            if on_iteration is not None:
                on_iteration(iteration)
            quality = private.update(source_loss_sums(quality), iteration)
        return quality, private.iterations, False
    if max_iterations < 1:
        raise ValueError("max_iterations must be at least 1")
    for iteration in range(1, max_iterations + 1):
        if on_iteration is not None:
            on_iteration(iteration)
        updated = update_source_quality(source_loss_sums(quality))
        change = source_quality_change(quality, updated)
        quality = updated
        if change <= tolerance:
            return quality, iteration, True
    return quality, max_iterations, False


def estimate_global_weights(
    block: ClaimsBlock,
    bandwidths: np.ndarray,
    tolerance: float = 1e-6,
    max_iterations: int = 100,
    kernel: WithinObjectKernel | None = None,
    private: PrivateSourceQuality | None = None,
) -> tuple[SourceQuality, int, bool]:
    """The whole global-weights iteration in memory: ``(quality, iterations, converged)``.

    :func:`iterate_source_quality` over one block holding every object. Used by tests, the
    benchmark floor and the local reference.
    """
    if kernel is None:
        kernel = WithinObjectKernel(block, bandwidths)
    sources = BlockSources.of(block)
    return iterate_source_quality(
        lambda quality: source_loss_contributions(block, bandwidths, quality, kernel, sources),
        tolerance,
        max_iterations,
        private=private,
    )
