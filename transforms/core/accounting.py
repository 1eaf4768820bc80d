"""Composition of the mechanisms releases ran: what a release spends, and what a dataset has spent.

A release describes what it ran as a list of *privacy steps* — each a mechanism with its own
(ε, δ) statement for the release's unit, run ``count`` times (adaptively, on the same data) — and
the accountant composes steps, within one release and across the releases of one dataset:

* **basic composition** (Dwork and Roth, *The Algorithmic Foundations of Differential Privacy*,
  Theorem 3.16): ``(Σ count·ε, Σ count·δ)``, valid for any mix of mechanisms chosen adaptively;
* **privacy-loss distributions** (Koskela, Jälkö, Honkela 2020; Doroshenko, Ghazi, Kamath, Kumar,
  Manurangsi 2022; ``transforms/core/privacy_loss.py``, checked against the ``dp_accounting``
  library and exact enumeration in the tests): every step's *dominating pair* — for a pure
  ``ε``-DP or ``(ε, δ)``-DP step, the pair of distributions that dominates every mechanism with that
  guarantee (``from_privacy_parameters``; Kairouz, Oh, Viswanath 2015); for a Gaussian step, the
  exact pair ``N(0, 1)`` against ``N(s, 1)`` with ``s = Δ/σ`` — discretized pessimistically, so the
  composed PLD dominates the adaptive composition of the steps and its ``δ(ε)`` can only be
  overstated (Zhu, Dong, Wang 2022, Theorem 10; dominating pairs compose under adaptivity).

The charge at a target ``δ`` is the smaller ε of the two: basic composition when its δ is within
the target, and the PLD's ``ε(δ)``; so the accountant is never looser than summing.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from transforms.core import privacy_loss as pld

PURE_DP = "pure_dp"
APPROXIMATE_DP = "approximate_dp"
GAUSSIAN = "gaussian"
MECHANISMS = (PURE_DP, APPROXIMATE_DP, GAUSSIAN)
DISCRETIZATION = pld.GRID
"""Width of the privacy-loss buckets (nats); pessimistic rounding makes it a safe overstatement."""
PLD_METHOD = "privacy-loss distributions (pessimistic)"
DELTA_TOLERANCE = 1e-12
"""Relative slack on δ for basic composition: absorbs the rounding of float sums such as
6e-6 + 4e-6 (a relative 1e-16 each), so a δ budget split into exact parts can be used up; the
δ a release states is then exact to this relative 10⁻¹², and any real excess is far larger."""
MAX_PLD_CELLS = 1 << 25
"""Above this grid size (ε or Gaussian scales in the hundreds: spending no budget allows) the PLD
is not built; basic composition answers, or nothing does (∞)."""
BASIC_METHOD = "basic composition"


@dataclass(frozen=True)
class PrivacyStep:
    """One mechanism a release ran ``count`` times, for the release's unit.

    ``mechanism``: ``pure_dp`` (``ε``-DP), ``approximate_dp`` (``(ε, δ)``-DP) or ``gaussian``
    (additive Gaussian noise with ``sensitivity_over_sigma = Δ/σ``; its ``(ε, δ)`` is one point of
    its curve, used by basic composition). ``what`` says what the step is, for people."""

    mechanism: Literal["pure_dp", "approximate_dp", "gaussian"]
    epsilon: float
    delta: float = 0.0
    count: int = 1
    sensitivity_over_sigma: float | None = None
    what: str = ""

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"unknown privacy mechanism {self.mechanism!r}")
        if not (math.isfinite(self.epsilon) and self.epsilon >= 0):
            raise ValueError("a step's epsilon must be finite and at least 0")
        if not (math.isfinite(self.delta) and 0 <= self.delta < 1):
            raise ValueError("a step's delta must be in [0, 1)")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError("a step's count must be a positive integer")
        if self.mechanism == PURE_DP and self.delta != 0:
            raise ValueError("a pure_dp step has delta 0")
        if self.mechanism == GAUSSIAN and not (
            self.sensitivity_over_sigma is not None and math.isfinite(self.sensitivity_over_sigma)
            and self.sensitivity_over_sigma >= 0
        ):
            raise ValueError("a gaussian step needs a finite sensitivity_over_sigma at least 0")
        if self.mechanism == GAUSSIAN and self.delta < gaussian_delta(float(self.sensitivity_over_sigma), self.epsilon):
            # basic composition takes the stated point as given: it must hold for the noise scale
            raise ValueError("a gaussian step's (epsilon, delta) is not a point its noise scale achieves")

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> PrivacyStep:
        known = {"mechanism", "epsilon", "delta", "count", "sensitivity_over_sigma", "what"}
        return cls(**{key: value[key] for key in known if key in value})


@functools.lru_cache(maxsize=64)
def _step_distribution(mechanism: str, epsilon: float, delta: float, count: int,
                       sensitivity_over_sigma: float | None) -> pld.PrivacyLossDistribution | None:
    """A step's dominating pair as a PLD, composed ``count`` times (``None``: nothing spent); kept
    for the steps a release and its ledger compose again
    (the same iterations under every candidate ``t``; the dataset's earlier releases). The
    distributions are never modified in place."""
    if mechanism == GAUSSIAN:
        if sensitivity_over_sigma == 0:
            return None
        one = pld.from_gaussian(float(sensitivity_over_sigma))
    else:
        if epsilon == 0 and delta == 0:
            return None
        one = pld.from_privacy_parameters(epsilon, delta)
    return one.self_compose(count) if count > 1 else one


def gaussian_delta(s: float, epsilon: float) -> float:
    """The exact δ(ε) of the Gaussian mechanism with ``s = Δ/σ`` (Balle and Wang 2018, Theorem 8):
    ``Φ(s/2 − ε/s) − e^ε·Φ(−s/2 − ε/s)``; 0 when ``s = 0`` (nothing is spent). Slightly understated
    (a relative 10⁻⁹ and 10⁻³⁰⁰) so a point computed exactly passes the check that uses it."""
    if s == 0:
        return 0.0
    root = math.sqrt(2.0)
    upper = 0.5 * math.erfc(-(s / 2 - epsilon / s) / root)
    lower = 0.5 * math.erfc((s / 2 + epsilon / s) / root)
    try:
        value = upper - math.exp(epsilon) * lower
    except OverflowError:
        return 0.0
    return max(0.0, value * (1 - 1e-9) - 1e-300)


@dataclass(frozen=True)
class Composition:
    """What a list of steps spends at ``delta``: ``epsilon`` by ``method``, and the basic
    composition beside it (``basic_delta`` may exceed ``delta``: then basic did not apply)."""

    epsilon: float
    delta: float
    method: str
    basic_epsilon: float
    basic_delta: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def basic_composition(steps: Iterable[PrivacyStep]) -> tuple[float, float]:
    """``(Σ count·ε, Σ count·δ)`` (Dwork and Roth, Theorem 3.16), summed exactly (``fsum``)."""
    steps = list(steps)
    return (math.fsum(step.count * step.epsilon for step in steps),
            math.fsum(step.count * step.delta for step in steps))


def _grouped(steps: list[PrivacyStep]) -> list[tuple[str, float, float, int, float | None]]:
    """The steps' distinct dominating pairs as ``(mechanism, ε, δ, count, s)``: equal mechanisms
    merged into one with the summed count (a self-composition is one FFT power, far cheaper than
    composing the same distribution again and again). All Gaussian steps become one: ``N(0, 1)``
    against ``N(s_i, 1)`` composed is exactly ``N(0, 1)`` against ``N(√(Σ s_i²), 1)`` (the losses are
    independent normals ``N(s_i²/2, s_i²)``, whose sum is the loss of that pair; Dong, Roth, Su
    2019, Corollary 2), discretized once — exact, and tighter than composing discretized ones."""
    counts: dict[tuple, int] = {}
    for step in steps:
        if step.mechanism != GAUSSIAN:
            key = (step.mechanism, step.epsilon, step.delta, None)
            counts[key] = counts.get(key, 0) + step.count
    grouped = [(mechanism, epsilon, delta, count, s) for (mechanism, epsilon, delta, s), count in counts.items()]
    gaussian = [step for step in steps if step.mechanism == GAUSSIAN and step.sensitivity_over_sigma]
    if gaussian:
        joint = math.sqrt(math.fsum(step.count * float(step.sensitivity_over_sigma) ** 2 for step in gaussian))
        grouped.append((GAUSSIAN, 0.0, 0.0, 1, joint))
    return grouped


def _pld_cells(grouped: list[tuple[str, float, float, int, float | None]]) -> float:
    """About how many grid cells the composed distribution spans (before tails are cut)."""
    span = 0.0
    for mechanism, epsilon, _, count, s in grouped:
        span += 16.0 * float(s) * (1.0 + float(s)) if mechanism == GAUSSIAN else 2.0 * count * epsilon
    return span / pld.GRID


def compose(steps: Iterable[PrivacyStep], delta: float) -> Composition:
    """The smallest ε at ``delta`` that basic composition or the PLD proves for ``steps``
    (``math.inf`` when neither reaches ``delta``: the steps' own δ is too large)."""
    if not (math.isfinite(delta) and 0 < delta < 1):
        raise ValueError("delta must be in (0, 1)")
    steps = list(steps)
    basic_epsilon, basic_delta = basic_composition(steps)
    within = basic_delta <= delta * (1 + DELTA_TOLERANCE)
    best, method = (basic_epsilon, BASIC_METHOD) if within else (math.inf, BASIC_METHOD)
    # The composed pair puts mass 1 − Π(1 − δ_i) at infinite loss: past delta, no ε reaches it (and the
    # convolutions, which can be large, are not needed).
    log_no_infinity = math.fsum(step.count * math.log1p(-step.delta) for step in steps if step.mechanism != GAUSSIAN)
    if -math.expm1(log_no_infinity) > delta and not within:
        return Composition(math.inf, delta, method, basic_epsilon, basic_delta)
    grouped = _grouped(steps)
    if _pld_cells(grouped) > MAX_PLD_CELLS:  # huge ε or s: basic composition (or ∞), never an out-of-memory
        return Composition(best, delta, method, basic_epsilon, basic_delta)
    distributions = [d for d in (_step_distribution(*group) for group in grouped) if d is not None]
    if not distributions:
        return Composition(0.0 if within else math.inf, delta, method, basic_epsilon, basic_delta)
    composed = distributions[0]
    for other in distributions[1:]:
        composed = composed.compose(other)
    composed_epsilon = composed.epsilon_for_delta(delta)
    if composed_epsilon < best:
        best, method = float(composed_epsilon), PLD_METHOD
    return Composition(best, delta, method, basic_epsilon, basic_delta)
