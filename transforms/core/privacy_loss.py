"""Privacy-loss distributions (PLDs), discretized pessimistically: the accountant's composition.

For a pair of output distributions ``(P, Q)`` of a mechanism on neighbouring inputs, the *privacy
loss* of an outcome ``o`` is ``L(o) = log(P(o) / Q(o))`` (``+∞`` where ``Q(o) = 0 < P(o)``) and its
distribution under ``o ~ P`` is the pair's PLD (Dwork and Rothblum 2016; Sommer, Meiser, Mohammadi
2019). The hockey-stick divergence — the smallest δ for which the pair is (ε, δ)-indistinguishable
in this direction — is read off the PLD (Sommer et al., Lemma 5; Koskela, Jälkö, Honkela 2020,
eq. 2.3):

    δ(ε) = P[L = ∞] + E[(1 − e^(ε − L))₊]                                             (δ of ε)

and the PLD of a composition is the distribution of the sum of the independent losses, so PLDs
compose by convolution (Sommer et al., Theorem 1; under adaptive composition, by the dominating
pairs of the steps: Zhu, Dong, Wang 2022, Theorem 10).

**Pessimistic discretization.** ``δ(ε)`` is non-decreasing in ``L``: moving loss mass up (to a
larger finite loss or to ``+∞``) can only increase it, for every ε, and sums of independent losses
that are each moved up are moved up. So every approximation here only moves mass up, and the
``ε(δ)`` this module reports is never below the true one (Meiser and Mohammadi 2018; Koskela et
al. 2020, Section 5 on rounding up):

* a loss is rounded *up* to the grid ``k·h`` (``h`` = :data:`GRID`, in nats);
* a tail of at most :data:`TAIL_MASS` in total is cut after each convolution: the upper tail goes
  to ``+∞``, the lower tail to the lowest kept grid point;
* a convolution by FFT carries rounding errors; a bound on their total is added to ``+∞``
  (:func:`_convolve`), and mass that floating point lost is added to ``+∞`` too.

Dominating pairs of the steps (``transforms/core/accounting.py``):

* an (ε, δ)-DP step: the pair of Kairouz, Oh, Viswanath 2015 (Theorem 2.1: every (ε, δ)-DP
  mechanism is a post-processing of it): loss ``+∞`` with probability δ, ``+ε`` with
  ``(1 − δ)·e^ε/(1 + e^ε)``, ``−ε`` with ``(1 − δ)/(1 + e^ε)`` (:func:`from_privacy_parameters`);
* additive Gaussian noise with ``s = Δ/σ``: ``N(0, 1)`` against ``N(s, 1)``, whose loss is
  ``N(s²/2, s²)`` (Balle and Wang 2018; :func:`from_gaussian`).

The ``dp_accounting`` library (Doroshenko et al. 2022) implements the same construction; the tests
use it as an oracle, with exact enumeration of small compositions as the ground truth. This module
needs only NumPy and the standard library (a release's start-up imports no SciPy for it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

GRID = 1e-4
"""The loss grid's step ``h`` (nats): losses are rounded up to multiples of it."""
TAIL_MASS = 1e-15
"""Mass cut from the tails after each operation (moved up, so counted pessimistically)."""
_FFT_FROM = 4096
"""Below this output length a convolution is direct (exact sums); from it on, by FFT."""
_SPARSE_PAIRS = 1 << 20
"""Up to this many pairs of atoms a long convolution sums the pairs (exact) instead of an FFT."""
_ROUNDING = float(np.finfo(np.float64).eps)
_ULPS_UP = 4 * _ROUNDING
"""A few units in the last place: the mass at +∞ is rounded up by this relative amount."""


@dataclass(frozen=True)
class PrivacyLossDistribution:
    """A loss distribution on the grid: ``mass[i]`` at loss ``(lowest + i)·h``, and
    ``infinity_mass`` at ``+∞``. Built by :func:`from_privacy_parameters` or :func:`from_gaussian`;
    composed by :meth:`compose` and :meth:`self_compose`; read by :meth:`epsilon_for_delta`."""

    lowest: int
    mass: np.ndarray
    infinity_mass: float

    def compose(self, other: PrivacyLossDistribution) -> PrivacyLossDistribution:
        """The PLD of both mechanisms run on the same data (the sum of independent losses)."""
        mass, extra = _convolve(self.mass, other.mass)
        a, b = self.infinity_mass, other.infinity_mass
        # P[L₁ + L₂ = ∞] = a + b − ab, written so that small masses keep their relative precision
        # (1 − (1 − a)(1 − b) loses ~1e-16 absolute, all of a 1e-15 mass), then rounded up.
        infinity = (a + b - a * b) * (1 + _ULPS_UP)
        return _normalized(self.lowest + other.lowest, mass, infinity + extra)

    def self_compose(self, count: int) -> PrivacyLossDistribution:
        """``count`` runs of this mechanism (by repeated squaring: ``O(log count)`` convolutions)."""
        if count < 1:
            raise ValueError("count must be at least 1")
        result: PrivacyLossDistribution | None = None
        power = self
        while True:
            if count & 1:
                result = power if result is None else result.compose(power)
            count >>= 1
            if not count:
                return result  # type: ignore[return-value]
            power = power.compose(power)

    def delta_for_epsilon(self, epsilon: float) -> float:
        """``δ(ε)`` (the module's equation "δ of ε") of this (pessimistic) distribution."""
        losses = (self.lowest + np.arange(len(self.mass))) * GRID
        above = losses > epsilon
        tail = self.mass[above]
        return float(min(1.0, self.infinity_mass + math.fsum(tail * -np.expm1(epsilon - losses[above]))))

    def epsilon_for_delta(self, delta: float) -> float:
        """The smallest ``ε ≥ 0`` with ``δ(ε) ≤ delta`` (``math.inf`` when ``P[L = ∞] > delta``).

        ``δ(ε)`` is continuous and non-increasing; between neighbouring grid losses the set of
        losses above ε is fixed, so there ``δ(ε) = p∞ + A − e^ε·B`` with ``A = Σ p_l`` and
        ``B = Σ p_l·e^(−l)`` over those losses, solved exactly for ε."""
        if not 0 <= delta < 1:
            raise ValueError("delta must be in [0, 1)")
        if self.infinity_mass > delta:
            return math.inf
        losses = (self.lowest + np.arange(len(self.mass))) * GRID
        positive = losses > 0
        losses, mass = losses[positive], self.mass[positive]
        if not len(losses):
            return 0.0
        # Suffix sums from the largest loss down (small terms first): A_k, B_k over losses l_k, l_k+1, ...
        above_mass = np.cumsum(mass[::-1])[::-1]
        above_weight = np.cumsum((mass * np.exp(-losses))[::-1])[::-1]
        # δ at ε = l_j counts the losses above l_j: A_{j+1} − e^{l_j}·B_{j+1}.
        next_mass = np.append(above_mass[1:], 0.0)
        next_weight = np.append(above_weight[1:], 0.0)
        # e^l capped at e^700 (no overflow): the capped term subtracts less, so δ is overstated there.
        at_losses = self.infinity_mass + next_mass - np.exp(np.minimum(losses, 700.0)) * next_weight
        if self.infinity_mass + above_mass[0] - above_weight[0] <= delta:  # δ(0) already within
            return 0.0
        j = int(np.argmax(at_losses <= delta))  # the first grid loss where δ is within (δ(l_last) = p∞ ≤ δ)
        # On [l_{j−1}, l_j] (or [0, l_0]) the losses above ε are l_j, l_j+1, ...
        floor = losses[j - 1] if j > 0 else 0.0
        gap = self.infinity_mass + above_mass[j] - delta
        if above_weight[j] <= 0 or gap <= 0:
            return _rounded_up(float(losses[j]))
        epsilon = math.log(gap) - math.log(float(above_weight[j]))  # a ratio could overflow
        return _rounded_up(float(min(max(epsilon, floor), losses[j])))


def _rounded_up(epsilon: float) -> float:
    """``ε`` raised by a relative 10⁻¹²: covers the rounding of the last logarithm and grid
    products, so the answer is never below the discretized distribution's exact one."""
    return epsilon + 1e-12 * max(1.0, epsilon)


def from_privacy_parameters(epsilon: float, delta: float = 0.0) -> PrivacyLossDistribution:
    """The dominating pair of every (ε, δ)-DP mechanism (Kairouz, Oh, Viswanath 2015), on the grid
    with losses rounded up: ``±ε`` to ``⌈±ε/h⌉·h``."""
    if not (math.isfinite(epsilon) and epsilon >= 0 and 0 <= delta < 1):
        raise ValueError("need a finite epsilon ≥ 0 and delta in [0, 1)")
    up, down = math.ceil(epsilon / GRID), math.ceil(-epsilon / GRID)
    at_up = (1.0 - delta) / (1.0 + math.exp(-epsilon))
    at_down = (1.0 - delta) * math.exp(-epsilon) / (1.0 + math.exp(-epsilon))  # no overflow for large ε
    mass = np.zeros(up - down + 1)
    mass[0] += at_down
    mass[-1] += at_up
    return _normalized(down, mass, delta)


def from_gaussian(sensitivity_over_sigma: float) -> PrivacyLossDistribution:
    """``N(0, 1)`` against ``N(s, 1)``: the loss is ``N(s²/2, s²)``; the mass of each grid cell
    ``((k − 1)·h, k·h]`` goes to ``k·h`` and the tails beyond ``TAIL_MASS/2`` each are moved up."""
    s = float(sensitivity_over_sigma)
    if not (math.isfinite(s) and s > 0):
        raise ValueError("sensitivity_over_sigma must be finite and positive")
    mean, spread = s * s / 2, s
    reach = _normal_quantile_upper(TAIL_MASS / 2) * spread
    lowest = math.ceil((mean - reach) / GRID)
    highest = math.ceil((mean + reach) / GRID)
    edges = (lowest - 1 + np.arange(highest - lowest + 2)) * GRID  # cell k covers (edges[k], edges[k+1]]
    z = (edges - mean) / spread
    # Each cell's mass as a difference of small numbers: of the CDF below the mean, of the
    # survival function above it (no cancellation against 1).
    below = _normal_tail(z)  # P[N > z] for z ≥ 0, P[N ≤ z] for z < 0
    mass = np.where(z[1:] <= 0, below[1:] - below[:-1], below[:-1] - below[1:])
    straddle = (z[:-1] < 0) & (z[1:] > 0)
    mass[straddle] = 1.0 - below[:-1][straddle] - below[1:][straddle]
    mass[0] += below[0] if z[0] < 0 else 1.0 - below[0]  # the lower tail: moved up to the lowest grid point
    mass = np.clip(mass, 0.0, None)
    # The upper tail beyond the highest cell goes to +∞ (and, in _normalized, what rounding lost).
    upper = below[-1] if z[-1] >= 0 else 1.0 - below[-1]
    return _normalized(lowest, mass, float(upper))


def _normal_tail(z: np.ndarray) -> np.ndarray:
    """The standard normal's tail on the side of ``z``: ``P[N > z]`` where ``z ≥ 0``, ``P[N ≤ z]``
    where ``z < 0`` — both ``erfc(|z|/√2)/2``, accurate far out (element by element)."""
    return np.array([0.5 * math.erfc(abs(value) / math.sqrt(2.0)) for value in z.tolist()])


def _normal_quantile_upper(tail: float) -> float:
    """The ``z`` with ``P[N(0, 1) > z] = tail`` (bisection on ``erfc``; ``tail`` small)."""
    low, high = 0.0, 40.0
    for _ in range(200):
        middle = (low + high) / 2
        if 0.5 * math.erfc(middle / math.sqrt(2.0)) > tail:
            low = middle
        else:
            high = middle
    return high


def _convolve(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, float]:
    """The convolution, and a bound on the mass its floating point may have moved (added to ``+∞``
    by the caller). Direct sums when short or when the two have few atoms (non-negative terms:
    relative rounding only). By real
    FFT otherwise: the FFT of length ``n = 2^t`` has relative 2-norm error ``O(t·u)`` (``u`` the unit
    roundoff; Higham, *Accuracy and Stability of Numerical Algorithms*, Theorem 24.2), and the
    pointwise product's 2-norm is at most ``‖a‖₁·√n·‖b‖₂`` (Parseval, ``‖FFT a‖_∞ ≤ ‖a‖₁``), so the
    output's error is ``O(t·u·‖a‖₁·‖b‖₂)`` in 2-norm and ``√n`` times that in 1-norm; the bound
    used (a factor 10 of margin) is ``10·t·u·√n`` times the smaller of ``‖a‖₁·‖b‖₂`` and
    ``‖b‖₁·‖a‖₂``."""
    length = len(first) + len(second) - 1
    if length < _FFT_FROM:
        return np.convolve(first, second), 0.0
    at_first, at_second = np.flatnonzero(first), np.flatnonzero(second)
    if len(at_first) * len(at_second) <= _SPARSE_PAIRS:
        # Few atoms (a step's ±ε pair, a few of them composed): every pair of atoms, summed exactly
        # as the direct sums are, on a grid that may be long but is mostly empty.
        where = (at_first[:, None] + at_second[None, :]).ravel()
        weights = (first[at_first][:, None] * second[at_second][None, :]).ravel()
        return np.bincount(where, weights=weights, minlength=length), 0.0
    size = 1 << (length - 1).bit_length()
    product = np.fft.irfft(np.fft.rfft(first, size) * np.fft.rfft(second, size), size)[:length]
    norms = min(float(first.sum() * np.linalg.norm(second)), float(second.sum() * np.linalg.norm(first)))
    error = 10.0 * math.log2(size) * _ROUNDING * math.sqrt(size) * norms
    return np.clip(product, 0.0, None), error


def _normalized(lowest: int, mass: np.ndarray, infinity_mass: float) -> PrivacyLossDistribution:
    """Tails cut (at most :data:`TAIL_MASS` in all, moved up), zero ends trimmed, mass floating
    point lost moved to ``+∞``, and the result's total at most 1. Works on the atoms only (a
    composed ±ε pair is a long, mostly empty grid)."""
    mass = np.asarray(mass, dtype=np.float64)
    infinity_mass = min(1.0, max(0.0, infinity_mass))
    at = np.flatnonzero(mass)
    values = mass[at]
    lost = 1.0 - infinity_mass - float(np.sum(values))  # before any cut: what rounding lost
    if lost > 0:
        infinity_mass = min(1.0, infinity_mass + lost * (1 + _ULPS_UP))
    if not len(at):
        return PrivacyLossDistribution(lowest, np.zeros(1), infinity_mass)
    upper_cumulative = np.cumsum(values[::-1])
    cut_upper = int(np.searchsorted(upper_cumulative, TAIL_MASS / 2, side="right"))  # top atoms with mass ≤ τ/2
    moved_up = float(upper_cumulative[cut_upper - 1]) if cut_upper else 0.0
    infinity_mass = min(1.0, infinity_mass + moved_up * (1 + _ULPS_UP))
    kept = len(at) - cut_upper
    if kept == 0:  # every finite atom went to +∞
        return PrivacyLossDistribution(lowest, np.zeros(1), infinity_mass)
    lower_cumulative = np.cumsum(values[:kept])
    cut_lower = min(int(np.searchsorted(lower_cumulative, TAIL_MASS / 2, side="right")), kept - 1)
    first, last = int(at[cut_lower]), int(at[kept - 1])
    trimmed = mass[first: last + 1].copy()
    if cut_lower:
        trimmed[0] += float(lower_cumulative[cut_lower - 1])  # the lower tail, moved up to the first kept atom
    return PrivacyLossDistribution(lowest + first, trimmed, infinity_mass)
