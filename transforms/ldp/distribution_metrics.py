"""Distances between a true and an estimated distribution of secrets (LDP release kind).

ElSalamouny & Palamidessi ("Reconstruction of the distribution of sensitive data under
free-will privacy", experiments section) compare estimators by the earth mover's distance
(EMD) between the true and the estimated distribution: on a linear alphabet ``{0..k−1}`` with
unit spacing, on a grid of square cells with the Euclidean distance between cell centers.
L1 and L2 are given too (method item "Metrics" of issue 4).
"""

from __future__ import annotations

import os

import numpy as np

from transforms.ldp.mechanisms import grid_distances

_MASS_TOLERANCE = 1e-9


def earth_movers_distance_line(p: np.ndarray, q: np.ndarray) -> float:
    """EMD (1-Wasserstein) between two distributions on ``{0..k−1}`` with unit spacing.

    On the line the optimal transport cost has the closed form ``Σ_x |P(x) − Q(x)|`` with
    ``P`` and ``Q`` the cumulative distribution functions (Vallender 1974).
    """
    first, second = _paired_distributions(p, q)
    return float(np.abs(np.cumsum(first - second)).sum())


def grid_ground_distance(rows: int, columns: int, cell_side: float = 1.0) -> np.ndarray:
    """Euclidean distances between the centers of the cells of a ``rows x columns`` grid, the
    EMD's ground cost: the mechanisms' own ``grid_distances`` (cell ``row * columns + col``),
    with the arguments checked. Returns the (rows·columns, rows·columns) cost matrix.
    """
    if rows < 1 or columns < 1:
        raise ValueError("a grid needs at least one row and one column")
    if not cell_side > 0:
        raise ValueError("cell_side must be positive")
    return grid_distances(rows, columns, cell_side)


def earth_movers_distance_grid(
    p: np.ndarray, q: np.ndarray, rows: int, columns: int, cell_side: float = 1.0
) -> float:
    """Exact EMD between two distributions over the cells of a grid, Euclidean ground distance.

    Solves the transport linear program with POT's network simplex (``ot.emd2``) on the
    explicit cost matrix of ``grid_ground_distance``; the result is in the unit of
    ``cell_side``.
    """
    first, second = _paired_distributions(p, q)
    if len(first) != rows * columns:
        raise ValueError(f"distributions over a {rows}x{columns} grid need {rows * columns} entries")
    cost = grid_ground_distance(rows, columns, cell_side)
    # POT imports torch (+3.6 s, +200 MiB) for a backend this module never uses, unless told not to;
    # and scikit-learn and networkx besides (about a second): imported here, only for a grid
    os.environ.setdefault("POT_BACKEND_DISABLE_PYTORCH", "1")
    import ot

    return float(ot.emd2(first, second, cost, numItermax=10_000_000))


def l1_distance(p: np.ndarray, q: np.ndarray) -> float:
    """``Σ_x |p_x − q_x|`` (twice the total-variation distance)."""
    first, second = _same_length_vectors(p, q)
    return float(np.abs(first - second).sum())


def l2_distance(p: np.ndarray, q: np.ndarray) -> float:
    """``sqrt(Σ_x (p_x − q_x)²)``."""
    first, second = _same_length_vectors(p, q)
    return float(np.sqrt(((first - second) ** 2).sum()))


def _same_length_vectors(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    first = np.asarray(p, dtype=np.float64)
    second = np.asarray(q, dtype=np.float64)
    if first.ndim != 1 or first.shape != second.shape or len(first) == 0:
        raise ValueError("both vectors must be non-empty, 1-D and of the same length")
    if not (np.all(np.isfinite(first)) and np.all(np.isfinite(second))):
        raise ValueError("both vectors must be finite")
    return first, second


def _paired_distributions(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    first, second = _same_length_vectors(p, q)
    if np.any(first < 0) or np.any(second < 0):
        raise ValueError("distributions must be non-negative")
    if abs(first.sum() - second.sum()) > _MASS_TOLERANCE * max(1.0, first.sum()) or first.sum() <= 0:
        raise ValueError("the earth mover's distance needs two distributions of the same positive mass")
    return first, second
