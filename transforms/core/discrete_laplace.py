"""Exact sampling of the discrete Laplace (two-sided geometric) distribution.

``P(x) = (1 − e^{−1/b}) / (1 + e^{−1/b}) · e^{−|x|/b}`` for every integer ``x``, with scale ``b``.
Adding it to an integer query of L1 sensitivity ``Δ`` is ``(Δ/b)``-differentially private (Ghosh,
Roughgarden, Sundararajan 2009), so ``b ≥ Δ/ε`` gives ε-DP.

The sampler is Canonne, Kamath and Steinke ("The Discrete Gaussian for Differential Privacy",
NeurIPS 2020), Algorithm 1 (a Bernoulli(exp(−γ)) coin for rational ``γ`` from Bernoulli coins of
rational bias) and Algorithm 2 (the discrete Laplace from those coins by rejection). With the
scale a rational ``b = t/s`` every coin is a comparison of uniform integers, so the output has
exactly the distribution above: no floating point is involved (DESIGN.md, "Randomness and
noise"). The algorithms' loops run vectorized: every sample still draws its own coins until it
is done; the arrays only batch the samples that are at the same step.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

SCALE_DENOMINATOR = 1_000_000
"""``discrete_laplace_scale`` rounds ``Δ/ε`` up to a multiple of ``1/SCALE_DENOMINATOR``."""

_LARGEST_SCALE_TERM = 2**52


def discrete_laplace_scale(epsilon: float, sensitivity: int) -> Fraction:
    """The scale for ε-DP on an integer query of L1 sensitivity ``sensitivity``: a rational ``b ≥ Δ/ε``.

    ``Δ/ε`` is computed exactly from the float ``ε`` and rounded *up* to a multiple of
    ``1/1,000,000``, so the noise is never smaller than the guarantee needs (the rounding can
    only strengthen privacy, by a relative ``< 10^-6 / b``) and the numerator and denominator stay
    small enough for exact integer coins.
    """
    if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("epsilon must be a finite positive number")
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int | np.integer) or sensitivity < 1:
        raise ValueError("the sensitivity must be a positive integer")
    exact = Fraction(int(sensitivity)) / Fraction(epsilon)
    return Fraction(math.ceil(exact * SCALE_DENOMINATOR), SCALE_DENOMINATOR)


def bernoulli_exp_minus_fraction(
    numerators: np.ndarray, denominator: int, rng: np.random.Generator
) -> np.ndarray:
    """Bernoulli(exp(−γ)) for ``γ = numerators/denominator ∈ [0, 1]`` (CKS Algorithm 1, first case).

    ``K = 1``; while a Bernoulli(γ/K) coin — a uniform integer in ``[0, denominator·K)`` below
    ``numerator`` — shows 1, ``K ← K + 1``; the result is 1 iff ``K`` is odd.
    """
    numerators = np.asarray(numerators, dtype=np.int64)
    k = np.ones(numerators.shape, dtype=np.int64)
    active = np.flatnonzero(numerators > 0)
    while active.size:
        coins = rng.integers(0, denominator * k[active]) < numerators[active]
        k[active[coins]] += 1
        active = active[coins]
    return (k % 2) == 1


def _bernoulli_exp_minus_one(size: int, rng: np.random.Generator) -> np.ndarray:
    """Bernoulli(exp(−1)) coins (CKS Algorithm 1 with γ = 1)."""
    return bernoulli_exp_minus_fraction(np.ones(size, dtype=np.int64), 1, rng)


def geometric_exp_minus_one(size: int, rng: np.random.Generator) -> np.ndarray:
    """``V``: the number of Bernoulli(exp(−1)) successes before the first failure (CKS Algorithm 2)."""
    counts = np.zeros(size, dtype=np.int64)
    active = np.arange(size)
    while active.size:
        coins = _bernoulli_exp_minus_one(active.size, rng)
        counts[active[coins]] += 1
        active = active[coins]
    return counts


def _check_scale(scale: Fraction) -> tuple[int, int]:
    if not isinstance(scale, Fraction | int) or isinstance(scale, bool):
        raise TypeError("the scale must be a fractions.Fraction (or an int)")
    scale = Fraction(scale)
    if scale <= 0:
        raise ValueError("the scale must be positive")
    if scale.numerator > _LARGEST_SCALE_TERM or scale.denominator > _LARGEST_SCALE_TERM:
        raise ValueError(
            "the scale's numerator and denominator must be below 2^52 (use discrete_laplace_scale)"
        )
    return scale.numerator, scale.denominator


def sample_discrete_laplace(scale: Fraction, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` exact samples of the discrete Laplace distribution with scale ``b = t/s`` (int64).

    CKS Algorithm 2, per sample: draw ``U`` uniform in ``{0, …, t−1}`` and accept with probability
    ``exp(−U/t)``; draw ``V`` geometric (Bernoulli(exp(−1)) successes); ``X = U + t·V`` is then
    geometric with ratio ``e^{−1/t}``, and ``Y = floor(X/s)`` geometric with ratio ``e^{−s/t}``;
    a fair sign ``B`` gives ``(1 − 2B)·Y``, rejecting ``B = 1, Y = 0`` so zero is not counted twice.
    Rejected samples start over with fresh coins.
    """
    t, s = _check_scale(scale)
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
        raise ValueError("size must be a non-negative integer")
    result = np.zeros(int(size), dtype=np.int64)
    pending = np.arange(int(size))
    while pending.size:
        uniform = rng.integers(0, t, size=pending.size, dtype=np.int64)
        accepted = bernoulli_exp_minus_fraction(uniform, t, rng)
        uniform, still_pending = uniform[accepted], pending[accepted]
        rejected_first = pending[~accepted]
        geometric = geometric_exp_minus_one(still_pending.size, rng)
        magnitude = (uniform + t * geometric) // s
        negative = rng.integers(0, 2, size=still_pending.size) == 1
        accepted = ~(negative & (magnitude == 0))
        result[still_pending[accepted]] = np.where(
            negative[accepted], -magnitude[accepted], magnitude[accepted]
        )
        pending = np.sort(np.concatenate([rejected_first, still_pending[~accepted]]))
    return result


def discrete_laplace_pmf(values: np.ndarray, scale: Fraction | float) -> np.ndarray:
    """``P(x)`` of the discrete Laplace distribution with scale ``b`` (float64), for tests and reports."""
    ratio = math.exp(-1.0 / float(scale))
    values = np.abs(np.asarray(values, dtype=np.float64))
    return (1.0 - ratio) / (1.0 + ratio) * np.power(ratio, values)
