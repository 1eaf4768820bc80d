"""The (ε, δ) guarantee of a crowd release (PrisCrowd Theorem 2) and its composition.

Per test. Bindschaedler, Shokri and Gunter (VLDB 2017, Theorem 1) show that one invocation of
the randomized plausible-deniability test — draw a candidate from a seed chosen uniformly,
output it if ``k' ≥ k + Lap(1/ε0)`` and ``⊥`` otherwise — is (ε, δ)-differentially private for
neighbouring datasets that differ in one record, for every integer ``1 ≤ t < k``, with
``ε = ε0 + ln(1 + γ/t)`` and ``δ = e^(−ε0 (k − t))``. PrisCrowd (Huai et al., IJCAI 2019,
Theorem 2) chooses the seed with the combined weights ``c_is`` instead of uniformly, which
multiplies the ratio term by ``R = max c / min c``: ``ε = ε0 + ln(1 + (γ/t)·R)``. Here ``R`` is a
public, configured cap (the weights are clipped to it before synthesis), so ε does not depend
on the data.

What the numbers cover, and what they do not:

* Unit: one claim of one object, neighbours differing in the *value* of that claim (the
  number of claims per object, and which sources answered which objects, are treated as
  public — suppression of objects with fewer than ``k`` claims depends on them).
* The per-test (ε, δ) covers one invocation of the test, released or not. An object runs up
  to ``max_attempts_per_object`` invocations on the same claims, so the guarantee for one
  claim over a whole release composes over that many invocations (``composition.per_object``).
  The attempt and release counts reported per object count failed invocations (the outcome
  ⊥), which the theorem's δ does not bound — a privacy review computed a case where one changed
  record moves the failure probability by about 1/(records); composing per-test numbers does not
  cover them either. They are operator figures outside the guarantee (``NOT_COVERED``).
* Source (user) level: a source contributes one claim to each of at most ``L`` objects
  (``max_objects_per_source``, enforced by contribution bounding), so changing all of a
  source's claims is covered by composing ``L × max_attempts_per_object`` invocations.
* Data-dependent weights: the combined weights are computed from the claims themselves
  (truth discovery). Theorem 2 accounts for the weights only through the ratio bound ``R``;
  it does not separately account for how changing one claim shifts the other claims' weights.
  The numbers are those of the theorem under that model.

Composition is reported both ways: basic (``T·ε, T·δ``) and advanced (Dwork, Rothblum, Vadhan,
"Boosting and Differential Privacy", FOCS 2010, Theorem III.3; also Dwork and Roth 2014,
Theorem 3.20), and the smaller ε of the two is the headline number.
"""

from __future__ import annotations

import math
from numbers import Integral
from typing import Any

PRIVACY_UNIT = "one claim of one object"
SCOPE = "per released synthetic claim, PrisCrowd Theorem 2"
NOT_COVERED = (
    "failed tests (the outcome ⊥): the attempt counts, pass rates and shortfalls in the manifest count "
    "failures and are operator figures outside the guarantee, per test or composed",
    "the evaluation (computed from the raw claims and the truth file)",
)
BASIC = "basic"
ADVANCED = "advanced (Dwork-Rothblum-Vadhan 2010, Theorem III.3)"


def _is_integer(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def _check_test_parameters(epsilon0: float, k: int, t: int) -> None:
    if not (math.isfinite(epsilon0) and epsilon0 > 0.0):
        raise ValueError("epsilon0 must be a finite positive number")
    if not (_is_integer(k) and _is_integer(t)):
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
    if not _is_integer(t) or t < 1:
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
    if not _is_integer(k) or k < 1:
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
    if not _is_integer(times) or times < 1:
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


def crowd_guarantee(
    *,
    k: int,
    gamma: float,
    epsilon0: float,
    weight_ratio_cap: float,
    delta_target: float | None = None,
    t: int | None = None,
    claims_per_object: int,
    max_attempts_per_object: int,
    max_objects_per_source: int | None = None,
    composition_delta_slack: float | None = None,
) -> dict[str, Any]:
    """The guarantee of a crowd release as a JSON-ready dict.

    Give exactly one of ``delta_target`` (then ``t = choose_t(k, ε0, delta_target)``) and ``t``.

    Keys:
        ``epsilon``, ``delta``, ``t``: PrisCrowd Theorem 2 for one invocation of the randomized
            test (one candidate, released or not) — the ``scope``; ``privacy_unit`` is one
            claim of one object (its value).
        ``formula``: the formulas with the parameters substituted.
        ``composition.per_object``: one claim over all of its object's invocations, up to
            ``max_attempts_per_object`` (every attempt is a test, whether or not it releases;
            ``claims_per_object`` only bounds how many are released).
        ``composition.per_source_per_test`` (only when ``max_objects_per_source`` ``L`` is
            set): all of one source's claims, one invocation on each of its ``L`` objects — the
            headline's scope lifted to the source-level unit.
        ``composition.per_source`` (same condition): all of one source's claims over every
            invocation, ``L × max_attempts_per_object``.
        Each composition entry gives basic and advanced composition and the smaller-ε one as
        its ``epsilon``/``delta``; ``composition_delta_slack`` is advanced composition's δ'
        (default: the per-test δ).

    See the module docstring for the assumptions (value-neighbours, public claim counts,
    weights modelled only through the ratio cap ``R``).
    """
    if (delta_target is None) == (t is None):
        raise ValueError("give exactly one of delta_target and t")
    if t is None:
        t = choose_t(k, epsilon0, delta_target)  # type: ignore[arg-type]
    epsilon = plausible_deniability_epsilon(epsilon0, gamma, t, weight_ratio_cap)
    delta = plausible_deniability_delta(epsilon0, k, t)
    for name, value in (
        ("claims_per_object", claims_per_object),
        ("max_attempts_per_object", max_attempts_per_object),
    ):
        if not _is_integer(value) or value < 1:
            raise ValueError(f"{name} must be a positive integer")
    slack = delta if composition_delta_slack is None else composition_delta_slack
    composition: dict[str, Any] = {
        "per_object": composition_entry(
            epsilon,
            delta,
            max_attempts_per_object,
            slack,
            f"one claim over all tests of its object (at most {max_attempts_per_object} attempts, "
            f"at most {claims_per_object} released)",
        )
    }
    if max_objects_per_source is not None:
        if not _is_integer(max_objects_per_source) or max_objects_per_source < 1:
            raise ValueError("max_objects_per_source must be a positive integer")
        composition["per_source_per_test"] = composition_entry(
            epsilon,
            delta,
            max_objects_per_source,
            slack,
            f"all claims of one source, one test on each of its at most {max_objects_per_source} "
            "objects (the headline scope, composed across the source's objects)",
        )
        composition["per_source"] = composition_entry(
            epsilon,
            delta,
            max_objects_per_source * max_attempts_per_object,
            slack,
            f"all claims of one source (at most {max_objects_per_source} objects x "
            f"{max_attempts_per_object} attempts)",
        )
    return {
        "epsilon": epsilon,
        "delta": delta,
        "t": t,
        "k": k,
        "gamma": gamma,
        "epsilon0": epsilon0,
        "weight_ratio_cap": weight_ratio_cap,
        "formula": (
            f"epsilon = epsilon0 + ln(1 + (gamma / t) * R) = {epsilon0} + ln(1 + ({gamma} / {t}) * {weight_ratio_cap}); "
            f"delta = exp(-epsilon0 * (k - t)) = exp(-{epsilon0} * ({k} - {t}))"
        ),
        "privacy_unit": PRIVACY_UNIT,
        "scope": SCOPE,
        "composition": composition,
        "not_covered": list(NOT_COVERED),
    }
