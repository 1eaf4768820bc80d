"""The (ε, δ) guarantee of a tabular release and the derivation of its parts from a total budget.

Issue 3, step 9. Neighbouring datasets: the number of records ``n`` is public and neighbours
differ by replacing one record. The records are split by a keyed permutation of positions into
disjoint parts (``data_split``), so a replaced record lies in the same single part on both
datasets, and:

* structure learning (exponential mechanism on ``DT``) is ``ε_s``-DP;
* parameter learning (discrete Laplace counts on ``DP``, L1 sensitivity 2 per table) is ``ε_p``-DP;
* one invocation of the randomized plausible-deniability test on ``DS`` (pick a seed uniformly,
  generate a candidate, release it iff ``k' ≥ k + Lap(1/ε0)``) is ``(ε0 + ln(1 + γ/t),
  e^{−ε0(k−t)})``-DP for every integer ``1 ≤ t < k`` (Bindschaedler, Shokri, Gunter, VLDB 2017,
  Theorem 1), for seed sets of at least ``k`` records (``data_split.minimum_record_count``). The
  generative model must not depend on ``DS``, which holds since it is learned on ``DT`` and ``DP``.
  We apply the theorem to replace-one neighbours with a public ``|DS|``: a replacement takes one
  seed out of one γ-interval of a candidate and puts one into another (or the same) interval while
  the uniform seed choice keeps its ``1/|DS|``, which is the situation the theorem's
  interval-by-interval bound covers (the gaining interval's count rises by one: factor
  ``e^{ε0}·(1 + γ/t)`` or mass below ``δ``; the losing interval only loses probability).

Parallel composition over the disjoint parts (the test may use the structure and parameters: each
part's mechanism is private for every fixed output of the others) gives
``(max(ε_s, ε_p, ε_test), δ_test)``. That is the headline, per released record — one invocation
of the test — the same convention as the crowd kind (``transforms/core/guarantee.py``).

The release loop runs the test once per *candidate*, released or not, on the same ``DS``: over a
whole release with at most ``T`` attempts (the attempt cap) the test part composes ``T`` times
(basic and advanced composition, the smaller ε reported), and the release is
``(max(ε_s, ε_p, ε_T), δ_T)``-DP. Both are written out in ``composition``.

What is *not* covered (``NOT_COVERED``, also in the manifest): the theorem bounds the probability
of each released record; the failure outcome ⊥ of an invocation is not bounded by ``δ_test`` (a
single replaced seed can change the probability of ⊥ by up to ``1/|DS|``; the review test
``tests/unit/transforms/tabular/test_privacy_test_outcomes.py`` computes a case exactly). Figures that count failures — the number
of attempts, the pass rate, the number of batches, a release cut short by the attempt cap — are
therefore outside the guarantee; the manifest reports them for the operator and says so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from numbers import Integral
from typing import Any

from transforms.core.accounting import APPROXIMATE_DP, PURE_DP, PrivacyStep, compose
from transforms.core.guarantee import (
    composition_entry,
    plausible_deniability_delta,
    plausible_deniability_epsilon,
)

PRIVACY_UNIT = "one record (neighbours replace one record; the number of records is public)"
SCOPE = (
    "per released synthetic record: one invocation of the randomized plausible-deniability test "
    "(Bindschaedler et al. 2017, Theorem 1) in parallel composition with DP structure and parameter learning"
)
PARALLEL_RULE = "parallel composition over the disjoint parts DT, DP, DS: epsilon = max, delta = the test's"
NOT_COVERED = (
    "failed test invocations (the outcome ⊥): candidate_attempts, pass_rate, batches and reached_target "
    "count them and are operator figures outside the guarantee",
    "the number of released rows when the attempt cap stops the release short",
    "clipped_values (exact counts of values clipped to the schema's bounds)",
    "evaluation (computed from raw and held-out records)",
)


def _check_positive(name: str, value: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (math.isfinite(value) and value > 0)
    ):
        raise ValueError(f"{name} must be a finite positive number (got {value!r})")


def _check_integer(name: str, value: int, smallest: int) -> None:
    if not isinstance(value, Integral) or isinstance(value, bool) or value < smallest:
        raise ValueError(f"{name} must be an integer >= {smallest} (got {value!r})")


def privacy_test_epsilon_delta(epsilon0: float, gamma: float, k: int, t: int) -> tuple[float, float]:
    """Theorem 1: ``(ε0 + ln(1 + γ/t), e^{−ε0(k−t)})`` for one invocation of the randomized test."""
    return plausible_deniability_epsilon(epsilon0, gamma, t, 1.0), plausible_deniability_delta(epsilon0, k, t)


def tabular_guarantee(
    epsilon_structure: float,
    epsilon_parameters: float,
    epsilon0: float,
    gamma: float,
    k: int,
    t: int,
    *,
    max_attempts: int | None = None,
    released_records: int | None = None,
    composition_delta_slack: float | None = None,
) -> dict[str, Any]:
    """The guarantee as a JSON-ready dict for the manifest (see the module docstring).

    ``epsilon``/``delta`` are per released record (one test invocation, parallel composition).
    ``composition.parallel`` lists the three parts; ``composition.whole_release`` (when
    ``max_attempts`` is given) composes the test over every attempt, basic and advanced
    (``composition_delta_slack`` is advanced composition's δ', default the per-test δ).
    """
    _check_positive("epsilon_structure", epsilon_structure)
    _check_positive("epsilon_parameters", epsilon_parameters)
    epsilon_test, delta_test = privacy_test_epsilon_delta(epsilon0, gamma, k, t)
    epsilon = max(epsilon_structure, epsilon_parameters, epsilon_test)
    parallel = {
        "rule": PARALLEL_RULE,
        "structure_learning": {"data": "DT", "epsilon": epsilon_structure, "delta": 0.0},
        "parameter_learning": {"data": "DP", "epsilon": epsilon_parameters, "delta": 0.0},
        "privacy_test": {
            "data": "DS",
            "epsilon": epsilon_test,
            "delta": delta_test,
            "formula": (
                f"epsilon = epsilon0 + ln(1 + gamma / t) = {epsilon0} + ln(1 + {gamma} / {t}); "
                f"delta = exp(-epsilon0 * (k - t)) = exp(-{epsilon0} * ({k} - {t}))"
            ),
        },
        "epsilon": epsilon,
        "delta": delta_test,
    }
    composition: dict[str, Any] = {"parallel": parallel}
    if max_attempts is not None:
        _check_integer("max_attempts", max_attempts, 1)
        slack = delta_test if composition_delta_slack is None else composition_delta_slack
        released = "" if released_records is None else f", {released_records} released"
        tests = composition_entry(
            epsilon_test,
            delta_test,
            int(max_attempts),
            slack,
            f"the privacy test over all attempts on DS (at most {max_attempts} candidates tested{released})",
        )
        composition["whole_release"] = {
            "covers": "one record over the whole release: structure, parameters and every test attempt",
            "privacy_test": tests,
            "epsilon": max(epsilon_structure, epsilon_parameters, tests["epsilon"]),
            "delta": tests["delta"],
        }
    return {
        "epsilon": epsilon,
        "delta": delta_test,
        "epsilon_structure": epsilon_structure,
        "epsilon_parameters": epsilon_parameters,
        "epsilon_test": epsilon_test,
        "epsilon0": epsilon0,
        "gamma": gamma,
        "k": k,
        "t": t,
        "privacy_unit": PRIVACY_UNIT,
        "scope": SCOPE,
        "composition": composition,
        "not_covered": list(NOT_COVERED),
    }


WHOLE_RELEASE_SCOPE = "everything the release publishes: every released record and how many were released"
OMEGA_ALL_NOTE = (
    "with omega = all every candidate is drawn from the model alone, so every seed is in the candidate's "
    "gamma-interval and the test's outcome depends only on the public |DS|: the release is post-processing of "
    "structure and parameter learning, which run in parallel on DT and DP"
)


def failure_epsilon(epsilon0: float) -> float:
    """``ln max(e^{ε0}, 2 − e^{−ε0})``: how much a neighbouring seed set can move the probability
    that one invocation fails (⊥) through the *other* seeds' counts — ``P(Lap > z)`` against
    ``P(Lap > z ± 1)`` for an integer ``z``; the replaced seed's own share adds at most ``1/|DS|``."""
    return max(epsilon0, math.log(2.0 - math.exp(-epsilon0)))


def release_guarantee(epsilon_structure: float, epsilon_parameters: float, epsilon0: float, gamma: float,
                      k: int, t: int, *, omega_all: bool, max_attempts: int, seeds: int,
                      delta: float) -> dict[str, Any]:
    """The whole-release guarantee the ledger charges (issue 12), with the per-record figures under
    ``per_record``.

    * ``omega = all`` (``OMEGA_ALL_NOTE``): ``(max(ε_s, ε_p), 0)``.
    * ``omega < all``: each of the ``T = max_attempts`` invocations is ``(max(ε_test, ε_⊥),
      δ_test + 1/|DS|)``-DP for its whole outcome, released record *or* ⊥ (``failure_epsilon``):
      Theorem 1 covers released records, and the failure's probability moves by at most
      ``e^{ε_⊥}`` plus the replaced seed's ``1/|DS|``. The ``T`` invocations compose (PLD or basic,
      ``transforms/core/accounting.py``) at ``delta``, in parallel with the learning. This is
      honest and, for any useful ``T``, no finite guarantee at all (``epsilon`` is then ``None``):
      use ``omega: all``, or a budget per record.
    """
    record = tabular_guarantee(epsilon_structure, epsilon_parameters, epsilon0, gamma, k, t, max_attempts=max_attempts)
    learning = max(epsilon_structure, epsilon_parameters)
    per_record = {
        "epsilon": record["epsilon"], "delta": record["delta"],
        "steps": [PrivacyStep(APPROXIMATE_DP, record["epsilon"], record["delta"], 1,
                              what="one released record (parallel: learning and one test invocation)").to_json()],
        "covers": record["scope"] + "; not a bound for the release",
    }
    if omega_all:
        steps = [PrivacyStep(PURE_DP, learning, 0.0, 1, what="structure and parameter learning (parallel over DT, DP)")]
        epsilon, release_delta, how = learning, 0.0, OMEGA_ALL_NOTE
    else:
        attempt_delta = record["delta"] + 1.0 / seeds
        attempt_epsilon = max(record["epsilon_test"], failure_epsilon(epsilon0))
        steps, epsilon, release_delta = [], None, delta
        how = (f"{max_attempts} test invocations of ({attempt_epsilon:.6g}, {attempt_delta:.3g}) each (failures "
               f"included; |DS| = {seeds}), composed, in parallel with learning")
        if attempt_delta < 1.0:
            tests = compose([PrivacyStep(APPROXIMATE_DP, attempt_epsilon, attempt_delta, max_attempts)], delta)
            if math.isfinite(tests.epsilon):
                epsilon = max(learning, tests.epsilon)
                steps = [PrivacyStep(APPROXIMATE_DP, epsilon, delta, 1, what="the whole release (omega < all)")]
    advice = None if epsilon is not None else (
        "with omega < all the test's failures make every attempt cost 1/|DS| of delta, so the attempts compose to "
        "no finite guarantee: use synthesis.omega: all, or have an operator budget the dataset per record"
    )
    return {
        "epsilon": epsilon,
        "delta": release_delta,
        "advice": advice,
        "privacy_unit": PRIVACY_UNIT,
        "scope": WHOLE_RELEASE_SCOPE,
        "how": how,
        "steps": [step.to_json() for step in steps],
        "per_record": per_record,
        "record_guarantee": record,
    }


@dataclass(frozen=True)
class EpsilonSplit:
    """The parts of a total budget: ``ε_s``, ``ε_p``, the test's ``ε0`` and ``t``, and the test's (ε, δ)."""

    epsilon_structure: float
    epsilon_parameters: float
    epsilon0: float
    t: int
    epsilon_test: float
    delta_test: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _largest_epsilon0(total_epsilon: float, gamma: float, t: int) -> float:
    """The largest float ``ε0 > 0`` with ``ε0 + ln(1 + γ/t) ≤ total`` as evaluated, or 0 if there is none."""
    epsilon0 = total_epsilon - math.log1p(gamma / t)
    if epsilon0 <= 0.0:
        return 0.0
    while epsilon0 > 0.0 and plausible_deniability_epsilon(epsilon0, gamma, t, 1.0) > total_epsilon:
        epsilon0 = math.nextafter(epsilon0, 0.0)
    return epsilon0


def smallest_feasible_k(total_epsilon: float, delta_target: float, gamma: float) -> int:
    """The smallest ``k`` for which some ``t`` meets both ``ε_test ≤ total`` and ``δ_test ≤ delta_target``."""
    best: int | None = None
    t = max(1, math.floor(gamma / math.expm1(total_epsilon)))
    while best is None or t + 1 < best:
        epsilon0 = _largest_epsilon0(total_epsilon, gamma, t)
        if epsilon0 > 0.0:
            gap = max(1, math.ceil(math.log(1.0 / delta_target) / epsilon0))
            while gap > 1 and plausible_deniability_delta(epsilon0, t + gap - 1, t) <= delta_target:
                gap -= 1
            while plausible_deniability_delta(epsilon0, t + gap, t) > delta_target:
                gap += 1
            best = t + gap if best is None else min(best, t + gap)
        t += 1
    return best


def split_total_epsilon(
    total_epsilon: float, delta_target: float, k: int, gamma: float, *, t: int | None = None
) -> EpsilonSplit:
    """Derive ``(ε_s, ε_p, ε0, t)`` from a total ε and a δ target, by this rule:

    * ``ε_s = ε_p = total``: the three mechanisms run on disjoint parts, so by parallel
      composition each may spend the whole budget (a smaller share would not lower the max).
    * the test: among the integers ``1 ≤ t < k``, take the largest ``t`` for which the largest
      ``ε0`` with ``ε0 + ln(1 + γ/t) ≤ total`` also gives ``e^{−ε0(k−t)} ≤ delta_target``; use that
      ``ε0``. Since ``ln(1 + γ/t)`` falls as ``t`` grows, this is the largest ``ε0`` (least noisy
      threshold) of all admissible ``(t, ε0)`` pairs, and the test's ε is the total exactly (up to
      float rounding, always downward). Passing ``t`` fixes it instead.

    Raises ``ValueError`` when no ``t`` works, naming the smallest ``k`` that would.
    """
    _check_positive("total_epsilon", total_epsilon)
    if not (
        isinstance(delta_target, float | int) and math.isfinite(delta_target) and 0.0 < delta_target < 1.0
    ):
        raise ValueError("the target delta must be in (0, 1)")
    _check_integer("k", k, 2)
    if not (math.isfinite(gamma) and gamma > 1.0):
        raise ValueError("gamma must be a finite number greater than 1")
    candidates = range(int(k) - 1, 0, -1)
    if t is not None:
        _check_integer("t", t, 1)
        if t >= k:
            raise ValueError(f"t must be smaller than k (t={t}, k={k})")
        candidates = range(int(t), int(t) - 1, -1)
    for candidate_t in candidates:
        epsilon0 = _largest_epsilon0(total_epsilon, gamma, candidate_t)
        if epsilon0 <= 0.0:
            break
        epsilon_test, delta_test = privacy_test_epsilon_delta(epsilon0, gamma, int(k), candidate_t)
        if delta_test <= delta_target:
            return EpsilonSplit(
                epsilon_structure=float(total_epsilon),
                epsilon_parameters=float(total_epsilon),
                epsilon0=epsilon0,
                t=candidate_t,
                epsilon_test=epsilon_test,
                delta_test=delta_test,
            )
    detail = f"t={t}" if t is not None else "any t with 1 <= t < k"
    raise ValueError(
        f"the privacy test cannot meet epsilon <= {total_epsilon} and delta <= {delta_target} with k={k}, "
        f"gamma={gamma} and {detail}; the smallest k that would work is "
        f"{smallest_feasible_k(float(total_epsilon), float(delta_target), float(gamma))}"
    )
