"""The randomized plausible-deniability test's (ε, δ) and the composition of such guarantees.

Per test. Bindschaedler, Shokri and Gunter (VLDB 2017, Theorem 1) show that one invocation of
the randomized plausible-deniability test — draw a candidate from a seed chosen uniformly,
output it if ``k' ≥ k + Lap(1/ε0)`` and ``⊥`` otherwise — is (ε, δ)-differentially private for
neighbouring datasets that differ in one record, for every integer ``1 ≤ t < k``, with
``ε = ε0 + ln(1 + γ/t)`` and ``δ = e^(−ε0 (k − t))``. PrisCrowd (Huai et al., IJCAI 2019,
Theorem 2) chooses the seed with weights whose ratio is at most ``R``, which multiplies the ratio
term by ``R``: ``ε = ε0 + ln(1 + (γ/t)·R)``. Each kind states what its numbers cover
(``transforms/crowd/guarantee.py``, ``transforms/tabular/guarantee.py``).

Composition is reported both ways: basic (``T·ε, T·δ``) and advanced (Dwork, Rothblum, Vadhan,
"Boosting and Differential Privacy", FOCS 2010, Theorem III.3; also Dwork and Roth 2014,
Theorem 3.20), and the smaller ε of the two is the headline number.
"""

from __future__ import annotations

import math
from numbers import Integral
from typing import Any

BASIC = "basic"
ADVANCED = "advanced (Dwork-Rothblum-Vadhan 2010, Theorem III.3)"


def is_integer(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _check_test_parameters(epsilon0: float, k: int, t: int) -> None:
    if not (math.isfinite(epsilon0) and epsilon0 > 0.0):
        raise ValueError("epsilon0 must be a finite positive number")
    if not (is_integer(k) and is_integer(t)):
        raise ValueError("k and t must be integers")
    if not 1 <= t < k:
        raise ValueError(f"t must satisfy 1 <= t < k (t={t}, k={k})")


def plausible_deniability_epsilon(epsilon0: float, gamma: float, t: int, weight_ratio_cap: float) -> float:
    """``ε = ε0 + ln(1 + (γ/t)·R)`` (PrisCrowd Theorem 2; ``R = 1`` is Bindschaedler et al., Theorem 1)."""
    if not (math.isfinite(epsilon0) and epsilon0 > 0.0):
        raise ValueError("epsilon0 must be a finite positive number")
    if not (math.isfinite(gamma) and gamma > 1.0):
        raise ValueError("gamma must be a finite number greater than 1")
    if not (math.isfinite(weight_ratio_cap) and weight_ratio_cap >= 1.0):
        raise ValueError("weight_ratio_cap (R = max c / min c) must be a finite number >= 1")
    if not is_integer(t) or t < 1:
        raise ValueError("t must be a positive integer")
    return epsilon0 + math.log1p(gamma / t * weight_ratio_cap)


def plausible_deniability_delta(epsilon0: float, k: int, t: int) -> float:
    """``δ = e^(−ε0 (k − t))`` (PrisCrowd Theorem 2, Bindschaedler et al. Theorem 1), for ``1 ≤ t < k``."""
    _check_test_parameters(epsilon0, k, t)
    return math.exp(-epsilon0 * (k - t))


def _smallest_k_for(epsilon0: float, delta_target: float) -> int:
    k = 1 + max(1, math.ceil(math.log(1.0 / delta_target) / epsilon0))
    while k > 2 and plausible_deniability_delta(epsilon0, k - 1, 1) <= delta_target:
        k -= 1
    while plausible_deniability_delta(epsilon0, k, 1) > delta_target:
        k += 1
    return k


def choose_t(k: int, epsilon0: float, delta_target: float) -> int:
    """The largest integer ``1 ≤ t < k`` with ``e^(−ε0 (k − t)) ≤ delta_target``.

    ε decreases in ``t`` and δ increases, so the largest admissible ``t`` gives the smallest ε
    at the target δ. Raises ``ValueError`` naming the smallest ``k`` that would work when no
    ``t`` does.
    """
    if not (math.isfinite(delta_target) and 0.0 < delta_target < 1.0):
        raise ValueError("the target delta must be in (0, 1)")
    if not (math.isfinite(epsilon0) and epsilon0 > 0.0):
        raise ValueError("epsilon0 must be a finite positive number")
    if not is_integer(k) or k < 1:
        raise ValueError("k must be a positive integer")
    for t in range(k - 1, 0, -1):
        if plausible_deniability_delta(epsilon0, k, t) <= delta_target:
            return t
    smallest = _smallest_k_for(epsilon0, delta_target)
    raise ValueError(
        f"no t with 1 <= t < k gives delta <= {delta_target} for k={k} and epsilon0={epsilon0}; "
        f"the smallest k that would work is {smallest}"
    )


def _check_composition(epsilon: float, delta: float, times: int) -> None:
    if not (math.isfinite(epsilon) and epsilon >= 0.0):
        raise ValueError("epsilon must be finite and non-negative")
    if not (math.isfinite(delta) and 0.0 <= delta <= 1.0):
        raise ValueError("delta must be in [0, 1]")
    if not is_integer(times) or times < 1:
        raise ValueError("the number of compositions must be a positive integer")


def compose_basic(epsilon: float, delta: float, times: int) -> tuple[float, float]:
    """Basic composition of ``times`` (ε, δ)-DP mechanisms: ``(T·ε, T·δ)``."""
    _check_composition(epsilon, delta, times)
    return times * epsilon, times * delta


def compose_advanced(epsilon: float, delta: float, times: int, delta_slack: float) -> tuple[float, float]:
    """Advanced composition (Dwork, Rothblum, Vadhan 2010, Theorem III.3).

    ``T``-fold adaptive composition of (ε, δ)-DP mechanisms is (ε', Tδ + δ')-DP with
    ``ε' = sqrt(2 T ln(1/δ'))·ε + T·ε·(e^ε − 1)``, for any ``δ' ∈ (0, 1)`` (``delta_slack``).
    """
    _check_composition(epsilon, delta, times)
    if not (math.isfinite(delta_slack) and 0.0 < delta_slack < 1.0):
        raise ValueError("delta_slack must be in (0, 1)")
    composed_epsilon = math.sqrt(
        2.0 * times * math.log(1.0 / delta_slack)
    ) * epsilon + times * epsilon * math.expm1(epsilon)
    return composed_epsilon, times * delta + delta_slack


def best_composition(
    epsilon: float, delta: float, times: int, delta_slack: float
) -> tuple[float, float, str]:
    """The composition with the smaller ε, with its name.

    Advanced composition is reported only when its ε is strictly smaller than the basic one and
    its δ stays below one (otherwise its statement would be weaker in both coordinates or
    vacuous); on a tie basic wins, since its δ is smaller.
    """
    basic_epsilon, basic_delta = compose_basic(epsilon, delta, times)
    advanced_epsilon, advanced_delta = compose_advanced(epsilon, delta, times, delta_slack)
    if advanced_epsilon < basic_epsilon and advanced_delta < 1.0:
        return advanced_epsilon, advanced_delta, ADVANCED
    return basic_epsilon, basic_delta, BASIC


def composition_entry(
    epsilon: float, delta: float, times: int, delta_slack: float, covers: str
) -> dict[str, Any]:
    basic = compose_basic(epsilon, delta, times)
    advanced = compose_advanced(epsilon, delta, times, delta_slack)
    best_epsilon, best_delta, method = best_composition(epsilon, delta, times, delta_slack)
    return {
        "covers": covers,
        "invocations": times,
        "epsilon": best_epsilon,
        "delta": best_delta,
        "method": method,
        "basic": {"epsilon": basic[0], "delta": basic[1]},
        "advanced": {"epsilon": advanced[0], "delta": advanced[1], "delta_slack": delta_slack},
    }


