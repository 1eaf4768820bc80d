"""The randomized plausible-deniability test (PrisCrowd step 5).

Bindschaedler, Shokri and Gunter (VLDB 2017, "Plausible Deniability for Privacy-Preserving
Data Synthesis", Section 3, Privacy Test 2 — the randomized test — and Theorem 1) release a
candidate ``y`` generated from a seed record ``d`` only if enough other records could have
generated it about as likely: with ``γ > 1``, find the integer ``a ≥ 0`` with
``γ^(-a-1) < P(y | d) ≤ γ^(-a)``, count the records ``d'`` whose ``P(y | d')`` falls in the same
interval (the seed itself included), and pass iff that count ``k'`` reaches the noisy threshold
``k̃ = k + Lap(1/ε0)``. PrisCrowd (Huai et al., IJCAI 2019, Section 4.2) applies the test per
object with the object's claims as the records and the object's Gaussian kernel as the
generative model; the tabular kind (Bindschaedler et al. 2017) with the seed records as the records
and the learned Bayesian network as the generative model. Each kind computes its own ``P(y | d)``
(``transforms/crowd/rounded_kernel.py``, ``transforms/tabular/privacy_test.py``); this module holds
the test itself: interval indices, counts, the randomized threshold.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri

from transforms.core.exact_sampling import sample_threshold_noise

NO_INTERVAL = -1
"""Interval index of a probability that is zero (``log P = -inf``), NaN, or below ``γ^(-2^52)``.

Such a seed cannot (numerically) have generated the candidate. The index is negative, so it
never equals a real interval index (those are ``≥ 0``), and ``deniability_counts`` gives
``k' = 0`` to a candidate whose own seed has this index, so that candidate fails the test.
"""

_LARGEST_INTERVAL_INDEX = float(2**52)
def deniability_interval_index(log_probability: np.ndarray, gamma: float) -> np.ndarray:
    """The integer ``a ≥ 0`` with ``γ^(-a-1) < P ≤ γ^(-a)`` for each ``log P`` (Privacy Test 2).

    ``a = floor(−log P / log γ)``, then corrected by one step either way so that the returned
    index satisfies the two inequalities exactly as evaluated in floating point,
    ``−(a+1)·log γ < log P ≤ −a·log γ``; the intervals ``(−(a+1) log γ, −a log γ]`` partition
    ``(−∞, 0]`` so every finite ``log P ≤ 0`` gets exactly one index. ``P = 0``, NaN, or ``P`` below
    ``γ^(-2^52)`` give ``NO_INTERVAL`` (−1), which no candidate's own interval ever matches (see
    ``deniability_counts``). Returns int64 of the input's shape.
    """
    if not gamma > 1.0:
        raise ValueError("gamma must be greater than 1")
    log_gamma = math.log(gamma)
    log_probability = np.minimum(np.asarray(log_probability, dtype=np.float64), 0.0)
    valid = np.isfinite(log_probability) & (log_probability > -_LARGEST_INTERVAL_INDEX * log_gamma)
    safe = np.where(valid, log_probability, 0.0)
    index = np.floor(-safe / log_gamma)
    index = np.where(safe > -index * log_gamma, index - 1.0, index)
    index = np.where(safe <= -(index + 1.0) * log_gamma, index + 1.0, index)
    index = np.maximum(index, 0.0)
    return np.where(valid, index, NO_INTERVAL).astype(np.int64)


def noisy_threshold(k: int, epsilon0: float, rng: np.random.Generator, size) -> np.ndarray:
    """``k + ⌈Lap(1/ε0)⌉``, the randomized threshold of Privacy Test 2, as exact integers (int64).

    The count ``k'`` it is compared with is an integer, so ``k' ≥ k + L`` is the event
    ``k' ≥ k + ⌈L⌉``; the ceiling is drawn exactly (``transforms/core/exact_sampling.py``): the
    pass probability is ``P(L ≤ k' − k)`` with no floating point in the draw.
    """
    if not epsilon0 > 0.0:
        raise ValueError("epsilon0 must be positive")
    shape = (size,) if isinstance(size, int | np.integer) else tuple(size)
    count = int(np.prod(shape, dtype=np.int64))
    return (int(k) + sample_threshold_noise(epsilon0, count, rng)).reshape(shape)


def _symmetric_midpoints(uniform: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ``u = j·2^-53`` (NumPy's doubles) the exact distance of ``v = u + 2^-54`` to the nearer end.

    Returns ``(tail, upper)``: ``tail = min(v, 1 − v)`` computed without rounding (``2^-54`` steps
    fit in 53 bits below one half) and whether ``v`` is in the upper half. ``v`` is the midpoint
    of the uniform's cell, so ``v`` lies strictly inside ``(0, 1)`` and is symmetric about ½.
    """
    uniform = np.asarray(uniform, dtype=np.float64)
    upper = uniform >= 0.5
    tail = np.where(upper, (1.0 - uniform) - 2.0**-54, uniform + 2.0**-54)
    return tail, upper


def laplace_from_uniform(uniform: np.ndarray, scale: float) -> np.ndarray:
    """Laplace(0, ``scale``) by the inverse CDF of the cell midpoints of ``uniform`` ∈ [0, 1).

    ``F⁻¹(v) = scale·log(2v)`` for ``v < ½`` and ``−scale·log(2(1 − v))`` above; the values are
    bounded by ``±scale·ln(2^53) ≈ ±36.7·scale`` (a tail mass of ``2^-53`` is cut).
    """
    tail, upper = _symmetric_midpoints(uniform)
    magnitude = -scale * np.log(2.0 * tail)
    return np.where(upper, magnitude, -magnitude)


def standard_normal_from_uniform(uniform: np.ndarray) -> np.ndarray:
    """N(0, 1) by the inverse CDF (``scipy.special.ndtri``) of the cell midpoints of ``uniform``.

    The lower tail is computed directly and the upper one by symmetry, so both tails keep full
    relative precision; values are bounded by ``±Φ⁻¹(2^-54) ≈ ±8.2`` (a tail mass of ``2^-53``).
    """
    tail, upper = _symmetric_midpoints(uniform)
    magnitude = ndtri(tail)
    return np.where(upper, -magnitude, magnitude)


def deniability_counts(
    log_probabilities_over_seeds: np.ndarray, seed_index: np.ndarray, gamma: float
) -> np.ndarray:
    """``k'`` per candidate: how many seeds' ``P(y | x_s')`` share the generating seed's interval.

    ``log_probabilities_over_seeds`` is ``(..., n)``: for each candidate (all leading axes) the
    ``log P(y | x_s')`` of every seed ``s'`` of its object; ``seed_index`` (...) is the seed that
    generated the candidate. The generating seed counts itself. Padding columns (objects with
    fewer seeds in a rectangular batch) may be filled with ``-inf``: they have ``NO_INTERVAL``
    and are never counted. A candidate whose own seed has ``NO_INTERVAL`` gets ``k' = 0``.
    """
    intervals = deniability_interval_index(log_probabilities_over_seeds, gamma)
    seed_index = np.asarray(seed_index, dtype=np.int64)
    own = np.take_along_axis(intervals, seed_index[..., None], axis=-1)
    matches = (intervals == own) & (own != NO_INTERVAL)
    return matches.sum(axis=-1, dtype=np.int64)


def plausible_deniability_test(
    log_probabilities_over_seeds: np.ndarray, seed_index: np.ndarray, gamma: float, threshold: np.ndarray
) -> np.ndarray:
    """Privacy Test 2 (randomized): pass iff ``k' ≥ k̃`` for each candidate.

    ``threshold`` holds each candidate's noisy threshold ``k̃ = k + Lap(1/ε0)`` (a fresh draw per
    candidate, see ``noisy_threshold``). Returns a boolean array of the candidates' shape; use
    ``deniability_counts`` for the ``k'`` themselves.
    """
    counts = deniability_counts(log_probabilities_over_seeds, seed_index, gamma)
    return counts >= np.asarray(threshold, dtype=np.float64)
