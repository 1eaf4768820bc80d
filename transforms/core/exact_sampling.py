"""Exact samplers for the noise that decides what is released (DESIGN.md, "Randomness and noise").

Floating-point noise can leak through its rounding pattern (Mironov, CCS 2012), so wherever noise
decides a release — a noisy threshold compared with an integer count, the choice of the
exponential mechanism, a geometric report — it is drawn here from coins of rational bias, with
integer arithmetic only (Canonne, Kamath and Steinke, "The Discrete Gaussian for Differential
Privacy", NeurIPS 2020, Algorithms 1 and 2, whose coins ``transforms/core/discrete_laplace.py``
implements vectorized):

* ``sample_geometric_exp(rate, size, rng)``: ``P(G = g) = (1 − e^{−r}) e^{−r g}``, ``g ≥ 0``;
* ``sample_threshold_noise(epsilon0, size, rng)``: ``N = ⌈L⌉`` for ``L ~ Laplace(1/ε0)``. The
  randomized plausible-deniability test passes iff ``k' ≥ k + L`` with ``k'`` an integer count,
  which is the event ``k' ≥ k + ⌈L⌉``: only the ceiling's law matters, and it is a two-sided
  geometric (``P(N ≥ 1) = ½``, ``N − 1 | N ≥ 1`` and ``−N | N ≤ 0`` both geometric with ratio
  ``e^{−ε0}``), so the test is run exactly;
* ``threshold_test_passes(excess, epsilon0, bits, refine)``: the same test decided per candidate
  as an exact ``Bernoulli(P(L ≤ excess))`` from 64 uniform bits that one vectorized draw gives
  (``u < P`` with ``u`` the uniform real whose leading bits they are). A float64 evaluation of
  ``P`` with a safe error bracket decides every candidate whose bits are not within ``~2^-47`` of
  it; the others (about one in ``10^14``) draw more bits from their own stream and compare with
  ``P`` evaluated by ``mpmath`` at growing precision until decided — so the decision has exactly
  the law of the test, at the cost of one array draw per batch;
* ``permute_and_flip(scores, sensitivity, epsilon, rng)``: McKenna and Sheldon's permute-and-flip
  (NeurIPS 2020), ε-DP like the exponential mechanism and never worse in expected score: visit
  the candidates in a uniformly random order and stop at the first whose coin
  ``Bernoulli(exp(−ε (q* − q_r) / (2Δ)))`` shows 1 (the best candidate's coin always does). Each
  coin's exponent is the exact rational value of the floating-point scores.

A rate ``ε0`` given as a float is used through ``rational_rate``: rounded *down* to a multiple of
``1/RATE_DENOMINATOR``, so the noise is never smaller than the configured ε0 asks for (a smaller
rate is more noise: the guarantee computed from the configured ε0 still holds).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import mpmath
import numpy as np

from transforms.core.discrete_laplace import bernoulli_exp_minus_fraction, geometric_exp_minus_one

RATE_DENOMINATOR = 1_000_000
_LARGEST_TERM = 2**52


def rational_rate(rate: float | Fraction) -> Fraction:
    """``rate`` as a rational ``≤ rate`` with denominator at most ``RATE_DENOMINATOR``: the closest
    such rational when it is not above ``rate`` (``0.1`` gives ``1/10``), else ``rate`` rounded down
    to a multiple of ``1/RATE_DENOMINATOR``; ``ValueError`` when that is not positive."""
    if isinstance(rate, Fraction):
        exact = rate
    else:
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate):
            raise ValueError("the rate must be a finite positive number")
        exact = Fraction(rate)
    closest = exact.limit_denominator(RATE_DENOMINATOR)
    if closest > exact:
        closest = Fraction(math.floor(exact * RATE_DENOMINATOR), RATE_DENOMINATOR)
    if closest <= 0 or closest.numerator > _LARGEST_TERM:
        raise ValueError(f"the rate must be between 1/{RATE_DENOMINATOR} and {_LARGEST_TERM}")
    return closest


def sample_geometric_exp(rate: float | Fraction, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` exact draws of ``G`` with ``P(G = g) = (1 − e^{−r}) e^{−r g}`` for ``g = 0, 1, …`` (int64).

    With ``r = s/t``: ``U`` uniform in ``{0, …, t−1}`` accepted with probability ``e^{−U/t}`` and ``V``
    the number of Bernoulli(e^{−1}) successes give ``X = U + tV``, geometric with ratio ``e^{−1/t}``;
    ``⌊X/s⌋`` is then geometric with ratio ``e^{−s/t}`` (CKS Algorithm 2 without the sign).
    """
    exact = rational_rate(rate)
    s, t = exact.numerator, exact.denominator
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0:
        raise ValueError("size must be a non-negative integer")
    result = np.zeros(int(size), dtype=np.int64)
    pending = np.arange(int(size))
    while pending.size:
        uniform = rng.integers(0, t, size=pending.size, dtype=np.int64)
        accepted = bernoulli_exp_minus_fraction(uniform, t, rng)
        done = pending[accepted]
        magnitude = (uniform[accepted] + t * geometric_exp_minus_one(done.size, rng)) // s
        result[done] = magnitude
        pending = pending[~accepted]
    return result


def sample_threshold_noise(epsilon0: float | Fraction, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` exact draws of ``N = ⌈L⌉``, ``L ~ Laplace(1/ε0)`` (int64): a fair sign, then ``1 + G``
    on the positive side and ``−G`` on the other, ``G`` geometric with ratio ``e^{−ε0}``.

    ``P(N ≤ z) = P(L ≤ z)`` for every integer ``z``: ``½ e^{ε0 z}`` for ``z ≤ 0`` and
    ``1 − ½ e^{−ε0 z}`` above."""
    geometric = sample_geometric_exp(epsilon0, size, rng)
    positive = rng.integers(0, 2, size=int(size)) == 1
    return np.where(positive, 1 + geometric, -geometric)


def threshold_noise_cdf(z: np.ndarray | int, epsilon0: float) -> np.ndarray:
    """``P(N ≤ z) = P(L ≤ z)`` for integers ``z`` (float64): the pass probability of a candidate whose
    count exceeds ``k`` by ``z``. For the analysis and tests; sampling never uses it."""
    z = np.asarray(z, dtype=np.float64)
    return np.where(z <= 0, 0.5 * np.exp(epsilon0 * np.minimum(z, 0.0)), 1.0 - 0.5 * np.exp(-epsilon0 * np.maximum(z, 0.0)))


_BRACKET = 2.0**-44
"""Relative error bound of the float64 pass probability (a few ulps of ``exp``, far inside)."""
_CONVERSION = 2.0**-52
"""Absolute error bound of a 64-bit integer read as a float64 uniform in ``[0, 1)``."""


def _exact_pass_probability(excess: int, epsilon0: float, bits: int) -> mpmath.mpf:
    with mpmath.workprec(bits):
        rate = mpmath.mpf(epsilon0)
        if excess <= 0:
            return mpmath.mpf(0.5) * mpmath.exp(rate * excess)
        return 1 - mpmath.mpf(0.5) * mpmath.exp(-rate * excess)


def _refined_pass(leading: int, excess: int, epsilon0: float, refine: np.random.Generator) -> bool:
    """Decide ``u < P`` for the uniform real ``u`` whose first 64 bits are ``leading``: extend ``u``
    by 64 bits at a time from ``refine`` and evaluate ``P`` with 64 more bits of precision each
    time, until ``[u_low, u_low + 2^-bits)`` lies on one side of ``P``'s error interval."""
    numerator, bits = leading, 64
    while True:
        with mpmath.workprec(bits + 64):
            probability = _exact_pass_probability(excess, epsilon0, bits + 64)
            low = mpmath.mpf(numerator) / mpmath.mpf(2) ** bits
            width = mpmath.mpf(2) ** (-bits)
            slack = mpmath.mpf(2) ** (-(bits + 32))
            if low + width <= probability - slack:
                return True
            if low >= probability + slack:
                return False
        numerator = (numerator << 64) | int(refine.integers(0, 2**64, dtype=np.uint64))
        bits += 64


def threshold_test_passes(
    excess: np.ndarray, epsilon0: float, bits: np.ndarray, refine: Callable[[int], np.random.Generator]
) -> np.ndarray:
    """The randomized test's outcomes for candidates whose counts exceed ``k`` by ``excess``: pass
    with probability exactly ``P(⌈Lap(1/ε0)⌉ ≤ excess)`` (module docstring). ``bits`` are one
    uint64 per candidate; ``refine(position)`` gives the stream for a candidate left undecided."""
    excess = np.asarray(excess, dtype=np.int64)
    bits = np.asarray(bits, dtype=np.uint64)
    probability = threshold_noise_cdf(excess, epsilon0)
    uniform = bits.astype(np.float64) * 2.0**-64
    low, high = probability * (1 - _BRACKET), probability * (1 + _BRACKET)
    passes = uniform + _CONVERSION < low
    undecided = ~passes & ~(uniform - _CONVERSION > high)
    for position in np.flatnonzero(undecided):
        passes.flat[position] = _refined_pass(
            int(bits.flat[position]), int(excess.flat[position]), epsilon0, refine(int(position))
        )
    return passes


def _uniform_below(bound: int, rng: np.random.Generator) -> int:
    """A uniform integer in ``[0, bound)`` for any positive Python ``bound`` (rejection over whole
    bytes, so no bias)."""
    bits = bound.bit_length()
    while True:
        value = int.from_bytes(rng.bytes((bits + 7) // 8), "little") >> ((8 - bits % 8) % 8)
        if value < bound:
            return value


def bernoulli_exp_minus(gamma: Fraction, rng: np.random.Generator) -> bool:
    """One exact ``Bernoulli(exp(−γ))`` coin for any rational ``γ ≥ 0`` (CKS Algorithm 1): ``⌊γ⌋``
    coins of ``e^{−1}`` and one of ``e^{−(γ − ⌊γ⌋)}``, each by the alternating-series loop with
    integer comparisons of arbitrary size."""
    if gamma < 0:
        raise ValueError("gamma must be non-negative")

    def below_one(numerator: int, denominator: int) -> bool:
        k = 1
        while _uniform_below(denominator * k, rng) < numerator:
            k += 1
        return k % 2 == 1

    for _ in range(math.floor(gamma)):
        if not below_one(1, 1):
            return False
    fraction = gamma - math.floor(gamma)
    return fraction == 0 or below_one(fraction.numerator, fraction.denominator)


def permute_and_flip(scores: np.ndarray, sensitivity: float, epsilon: float, rng: np.random.Generator) -> int:
    """The index chosen by permute-and-flip (module docstring) for the utilities ``scores``."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0 or not np.all(np.isfinite(scores)):
        raise ValueError("scores must be a non-empty vector of finite numbers")
    if not (math.isfinite(sensitivity) and sensitivity > 0 and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("sensitivity and epsilon must be finite positive numbers")
    best = Fraction(float(scores.max()))
    rate = Fraction(epsilon) / (2 * Fraction(sensitivity))
    for index in rng.permutation(scores.size):
        if bernoulli_exp_minus(rate * (best - Fraction(float(scores[index]))), rng):
            return int(index)
    raise AssertionError("unreachable: the best candidate's coin is Bernoulli(1)")
