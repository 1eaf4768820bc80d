"""The Gaussian kernel and squared RKHS distances of claims to their object's weighted KDE.

PrisCrowd (Huai et al., IJCAI 2019; global and local weights) measures how far a claim ``x_j`` of object ``i``
lies from the object's weighted kernel density estimate ``f_i = Σ_t w_t K_h(·, x_t)`` by the
distance in the reproducing-kernel Hilbert space (RKHS) of the kernel. With the feature map
``Φ(x) = k(·, x)`` the kernel trick gives (Kim & Scott, JMLR 2012, the KDE as a mean in the RKHS; Wan et al.,
KDEm, KDD 2016)::

    ‖Φ(x_j) − f_i‖² = k(x_j, x_j) − 2 Σ_t w_t k(x_j, x_t) + Σ_t Σ_u w_t w_u k(x_t, x_u).

The kernel used here is the *unit-norm* Gaussian ``k(x, y) = exp(−(x − y)² / (2 h_i²))``, so
``k(x, x) = 1`` and, for weights on the simplex, every squared distance lies in ``[0, 2]``.
This makes the losses of objects of very different scales (city populations next to 1-5
scores) comparable when they are summed per source for the global weights. The density kernel
``K_h = k / (h √(2π))`` would multiply every squared distance of object ``i`` by
``1 / (h_i √(2π))``: objects with a small bandwidth would then dominate the source losses for
no reason but their units. (The local weights are unaffected by that constant: Hampel
thresholds are percentiles of the same distances, so they rescale with them.)

Computation: an object with ``n`` claims needs its ``n × n`` kernel matrix. Objects are grouped
by claim count and each group is processed as dense ``(objects, n, n)`` tiles, so a whole block
is computed with a few NumPy operations per tile and no Python loop over objects. Every
per-object sum is reduced along that object's own row (``ndarray.sum`` over the last axis, or
``np.bincount``'s sequential accumulation), so the result for an object is bitwise the same
whichever other objects share the block or the tile — the property the engines rely on.
Cost is ``O(Σ_i n_i²)`` time; kernel tiles are cached up to a memory budget so iterative
callers (global and local weights) evaluate ``exp`` once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transforms.crowd.claims_block import ClaimsBlock

TILE_ENTRIES = 1 << 20
"""Kernel entries per tile (8 MiB of float64): large enough to amortize NumPy call overhead,
small enough to stay cache- and memory-friendly."""

KERNEL_CACHE_BYTES = 1 << 29
"""Kernel tiles kept between calls, at most this many bytes (512 MiB: all of a 10^6-claim block
at 20 claims per object needs 160 MB); tiles beyond the budget are recomputed on every call."""

CHUNK_CLAIMS = 1 << 20
"""Claims per chunk when a per-object computation walks a large block chunk by chunk."""


def gaussian_kernel(x: np.ndarray, y: np.ndarray, bandwidth: np.ndarray | float) -> np.ndarray:
    """The unit-norm Gaussian RKHS kernel ``k(x, y) = exp(−(x − y)² / (2 h²))`` (elementwise)."""
    scaled = (np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64)) / bandwidth
    return np.exp(-0.5 * (scaled * scaled))


@dataclass(frozen=True, eq=False)
class _KernelTile:
    """Rows ``rows`` of the kernel matrices of G objects that all have ``n`` claims.

    ``positions`` (G, n) index the kernel's claims (one object per row, in block order);
    ``scale`` (G,) are the bandwidths; ``kernel`` (G, len(rows), n) is cached or ``None``
    (recomputed on use).
    """

    positions: np.ndarray
    scale: np.ndarray
    rows: slice
    kernel: np.ndarray | None


def _tile_kernel(values: np.ndarray, positions: np.ndarray, scale: np.ndarray, rows: slice) -> np.ndarray:
    row_values = values[positions[:, rows]]
    column_values = values[positions]
    scaled = (row_values[:, :, None] - column_values[:, None, :]) / scale[:, None, None]
    scaled *= scaled
    scaled *= -0.5
    return np.exp(scaled, out=scaled)


class WithinObjectKernel:
    """The Gaussian kernel matrices ``k(x_j, x_l)`` of the objects of a block (or a subset).

    Built once per block and bandwidth vector and reused across the iterations of the global
    and local weights. Besides the block-level :meth:`squared_distances`, the ``*_local``
    methods work on arrays aligned with :attr:`claims` (the claims of the kernel's objects,
    ascending), so iterative callers can shrink their work with :meth:`restrict`.

    Attributes:
        block: the block.
        objects: (K,) block indices of the kernel's objects, ascending.
        claims: (M,) block indices of their claims, ascending.
        object_position: (M,) position (0..K-1) in ``objects`` of each claim's object.
    """

    block: ClaimsBlock
    objects: np.ndarray
    claims: np.ndarray
    object_position: np.ndarray
    values: np.ndarray
    tiles: list[_KernelTile]
    cached_bytes: int

    def __init__(
        self,
        block: ClaimsBlock,
        bandwidths: np.ndarray,
        cache_bytes: int = KERNEL_CACHE_BYTES,
        tile_entries: int = TILE_ENTRIES,
    ) -> None:
        bandwidths = np.asarray(bandwidths, dtype=np.float64)
        if bandwidths.shape != (block.number_of_objects,):
            raise ValueError("one bandwidth per object is required")
        if not np.all(bandwidths > 0) or not np.all(np.isfinite(bandwidths)):
            raise ValueError("every bandwidth must be positive and finite (apply a floor)")
        counts = block.counts
        self.block = block
        self.objects = np.arange(block.number_of_objects, dtype=np.int64)
        self.claims = np.arange(block.number_of_claims, dtype=np.int64)
        self.object_position = block.object_of_claim
        self.values = np.asarray(block.values, dtype=np.float64)
        tiles: list[_KernelTile] = []
        cached = 0
        order = np.argsort(counts, kind="stable")
        boundaries = np.flatnonzero(np.diff(counts[order])) + 1
        for group in np.split(order, boundaries):
            if len(group) == 0 or counts[group[0]] == 0:
                continue
            n = int(counts[group[0]])
            group_positions = block.offsets[group][:, None] + np.arange(n, dtype=np.int64)[None, :]
            group_scale = bandwidths[group]
            if n * n <= tile_entries:
                per_tile = max(1, tile_entries // (n * n))
                pieces = [(slice(g, g + per_tile), slice(0, n)) for g in range(0, len(group), per_tile)]
            else:
                rows_per_tile = max(1, tile_entries // n)
                pieces = [
                    (slice(g, g + 1), slice(row, min(row + rows_per_tile, n)))
                    for g in range(len(group))
                    for row in range(0, n, rows_per_tile)
                ]
            for object_slice, rows in pieces:
                positions = group_positions[object_slice]
                scale = group_scale[object_slice]
                size = positions.shape[0] * (rows.stop - rows.start) * n * 8
                kernel = None
                if cached + size <= cache_bytes:
                    kernel = _tile_kernel(self.values, positions, scale, rows)
                    cached += size
                tiles.append(_KernelTile(positions, scale, rows, kernel))
        self.tiles = tiles
        self.cached_bytes = cached

    @property
    def number_of_objects(self) -> int:
        return len(self.objects)

    def restrict(self, keep: np.ndarray) -> WithinObjectKernel:
        """The kernel of the objects ``objects[keep]`` (``keep`` is a (K,) mask).

        Cached tiles are subset, not recomputed; each kept object's results are bitwise
        unchanged.
        """
        keep = np.asarray(keep, dtype=bool)
        keep_claims = keep[self.object_position]
        new_position = np.cumsum(keep_claims) - 1
        new_object_position = np.cumsum(keep) - 1
        restricted = WithinObjectKernel.__new__(WithinObjectKernel)
        restricted.block = self.block
        restricted.objects = self.objects[keep]
        restricted.claims = self.claims[keep_claims]
        restricted.object_position = new_object_position[self.object_position[keep_claims]]
        restricted.values = self.values[keep_claims]
        tiles: list[_KernelTile] = []
        cached = 0
        for tile in self.tiles:
            rows_kept = keep_claims[tile.positions[:, 0]]
            if not rows_kept.any():
                continue
            kernel = tile.kernel
            if not rows_kept.all():
                kernel = None if kernel is None else kernel[rows_kept]
            tiles.append(
                _KernelTile(new_position[tile.positions[rows_kept]], tile.scale[rows_kept], tile.rows, kernel)
            )
            if kernel is not None:
                cached += kernel.nbytes
        restricted.tiles = tiles
        restricted.cached_bytes = cached
        return restricted

    def weighted_sums_local(self, weights: np.ndarray) -> np.ndarray:
        """(M,) ``Σ_l w_l k(x_j, x_l)`` over the claims ``l`` of claim ``j``'s object.

        ``weights`` (M,) are aligned with :attr:`claims`.
        """
        weights = np.asarray(weights, dtype=np.float64)
        sums = np.empty(len(self.claims))
        for tile in self.tiles:
            kernel = tile.kernel
            if kernel is None:
                kernel = _tile_kernel(self.values, tile.positions, tile.scale, tile.rows)
            sums[tile.positions[:, tile.rows]] = (kernel * weights[tile.positions][:, None, :]).sum(axis=2)
        return sums

    def squared_distances_local(self, weights: np.ndarray) -> np.ndarray:
        """(M,) ``‖Φ(x_j) − f_i‖²`` by the kernel trick, clipped at 0; ``weights`` aligned with :attr:`claims`."""
        weights = np.asarray(weights, dtype=np.float64)
        sums = self.weighted_sums_local(weights)
        quadratic = np.bincount(
            self.object_position, weights=weights * sums, minlength=self.number_of_objects
        )
        return np.maximum(1.0 - 2.0 * sums + quadratic[self.object_position], 0.0)

    def squared_distances(self, weights: np.ndarray) -> np.ndarray:
        """(N,) block-level :meth:`squared_distances_local`: ``weights`` (N,), NaN outside the objects."""
        weights = np.asarray(weights, dtype=np.float64)
        distances = np.full(self.block.number_of_claims, np.nan)
        distances[self.claims] = self.squared_distances_local(weights[self.claims])
        return distances


def object_chunks(block: ClaimsBlock, max_claims: int = CHUNK_CLAIMS) -> list[ClaimsBlock]:
    """The block cut into consecutive runs of whole objects of about ``max_claims`` claims.

    Per-object computations give bitwise the same results on the chunks as on the whole block,
    with memory bounded by the chunk size. Each chunk holds at least one object; the chunks
    are views, not copies.
    """
    offsets = block.offsets
    if block.number_of_claims <= max_claims:
        return [block]
    cuts = np.searchsorted(offsets, np.arange(max_claims, block.number_of_claims, max_claims), side="left")
    bounds = np.unique(np.concatenate([[0], cuts, [block.number_of_objects]]))
    chunks = []
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        first, last = int(offsets[start]), int(offsets[stop])
        chunks.append(
            ClaimsBlock(
                object_ids=block.object_ids[start:stop],
                offsets=offsets[start : stop + 1] - offsets[start],
                source_ids=block.source_ids[first:last],
                values=block.values[first:last],
            )
        )
    return chunks


def rkhs_squared_distances(
    block: ClaimsBlock,
    bandwidths: np.ndarray,
    weights: np.ndarray,
    kernel: WithinObjectKernel | None = None,
) -> np.ndarray:
    """(N,) squared RKHS distance of every claim to its object's weighted KDE (kernel trick).

    ``‖Φ(x_j) − f_i‖² = k(x_j, x_j) − 2 Σ_t w_t k(x_j, x_t) + Σ_t Σ_u w_t w_u k(x_t, x_u)``,
    clipped at 0 against rounding, with the unit-norm Gaussian RKHS kernel
    ``k(x, y) = exp(−(x − y)² / (2 h_i²))`` (PrisCrowd step 1; Kim & Scott 2012).
    Unit norm (``k(x, x) = 1``) keeps the losses in ``[0, 2]`` whatever the object's scale, so
    city populations and 1-5 scores give comparable source losses; the density kernel's
    normalizing constant ``1 / (h √(2π))`` would only rescale each object's distances and let
    small-bandwidth objects dominate the source losses.

    Args:
        block: whole objects' claims.
        bandwidths: (O,) positive per-object bandwidths ``h_i``.
        weights: (N,) claim weights ``w_t``, summing to 1 within each object.
        kernel: a prebuilt :class:`WithinObjectKernel` for ``(block, bandwidths)`` to reuse.
    """
    if kernel is None:
        kernel = WithinObjectKernel(block, bandwidths)
    return kernel.squared_distances(weights)
