"""The (ε, δ) a crowd release guarantees for everything it publishes (``docs/PRIVACY.md``, "Crowd").

Neighbouring relation. Two inputs are neighbours when they differ in the *value* of one claim
(unit ``claim``), or in the values of all claims of one source, which the contribution bound keeps
to at most ``L`` objects (unit ``source``). Which sources answered which objects, and so every
object's claim count, is public; values are clipped to the public range first, a per-claim map.

What is released, per object with at least ``k`` claims: exactly ``m`` claims, each a *claim
slot* of ``transforms/crowd/synthesis.py`` — attempts until one passes, at most ``T``, a uniform
grid value if none did. Attempt counts, failures and pass rates are not released.

Per released claim (claim unit). Let ``c_s`` be the object's seed weights (max/min ratio ``≤ R``),
whose dependence on the object's own claims is limited to a local factor with ratio ``≤ R_l``, so
that a changed claim moves every other claim's weight by a factor ``≤ ρ = R_l²`` (``ρ = 1`` when the
weights do not depend on the object's claims); ``c̄ = R/(R + n − 1)`` bounds any one weight for an
object of ``n ≥ k`` claims; ``q0`` is the fallback probability. For any integer ``1 ≤ t < k``:

* one attempt, ``A(y)`` = P(pass with value ``y``), satisfies ``A_D(y) ≤ e^{ε_1} A_D'(y) + δ_1(y)`` with
  ``ε_1 = ε0 + ln ρ + ln(1 + γR/t)`` and ``Σ_y δ_1(y) ≤ Δ = (1 − q0) c̄ ½ e^{−ε0 (k − t)}``
  (Bindschaedler et al. 2017, Theorem 1, and PrisCrowd, Theorem 2, with the other seeds' weights
  moving by at most ``ρ`` and their counts by one: the changed seed's own mass is covered by ``t``
  seeds of its interval, or is at most ``Δ`` when it has fewer);
* the pass probability ``S = Σ_y A(y) ≥ q0`` moves by ``S_D' ≤ e^{ε_S} S_D`` with
  ``e^{ε_S} = max(ρ(2 − e^{−ε0}), M) + (1 − q0) c̄ / q0``. A count that moves by one moves a pass
  probability ``π(z) = P(N ≤ z)`` by at most ``2 − e^{−ε0}`` where ``z ≥ 0``, and by ``e^{ε0}``
  only where ``z ≤ −1``, whose pass mass is at most ``b = (1 − q0) ½ e^{−ε0}``; with the fallback's
  ``q0`` that part moves by at most ``M = (q0 + ρ e^{ε0} b)/(q0 + b)``. The changed seed's own pass
  mass, at most ``(1 − q0) c̄``, is turned into a factor by ``S ≥ q0``;
* a slot's claim without its cap has the law ``A/S``: ``A_D(y)/S_D ≤ e^{ε_1} A_D'(y)/S_D + δ_1(y)/S_D``
  with ``1/S_D ≤ e^{ε_S}/S_D'`` and ``S_D ≥ q0``, so ``(ε_∞, δ_∞) = (ε_1 + ε_S, Δ / q0)``;
* the cap: the slot's law is ``(1 − φ_D) A/S + φ_D U`` with ``φ_D ≤ φ = (1 − q0)^T`` and
  ``U ≤ (A/S)/q0``, so ``ε_c = ε_∞ + ln((1 + φ/q0)/(1 − φ))``, ``δ_c = (1 + φ/q0) δ_∞``. The
  kernel cell, the test and the fallback are drawn exactly; the seed choice's floating-point
  deviation is a relative factor folded into the weight bounds (``WEIGHT_ROUNDING``).

Whole release. The claim's object releases ``m`` independent slots; every other object's release
is a function of its own claims and of the source qualities only. The qualities are differentially
private (``transforms/crowd/global_weights.py``: per iteration, per-source loss sums of L1
sensitivity 2 with discrete Laplace noise, ε per iteration), so a claim reaches another object
only through them. The release is the adaptive composition of ``m`` (ε_c, δ_c) mechanisms and the
iterations' pure-DP mechanisms (``L`` objects' slots for a source, whose qualities' noise is
calibrated to a source's ``L``-fold sensitivity); its
(ε, δ) at the configured δ is computed by composing privacy-loss distributions
(``transforms/core/privacy_loss.py``, pessimistic discretization) and taking the smaller of that and basic
composition, for the ``t`` that gives the smallest ε. That (ε, δ) is the headline and what the
ledger charges; the per-claim and per-test numbers stay in the manifest under their own names.

Not covered: the claim counts and the source-object incidence (public by the relation above), and
the operator figures (internal table): attempts, fallbacks, pass rates, clipped values, timings,
the evaluation against ground truth.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from transforms.core.accounting import APPROXIMATE_DP, PURE_DP, PrivacyStep, compose
from transforms.core.guarantee import plausible_deniability_delta, plausible_deniability_epsilon

CLAIM_UNIT = "one claim's value (claim counts and which sources answered which objects are public)"
WEIGHT_ROUNDING = 1 + 2.0**-18
"""The seed weights' bounds (``R``, ``ρ``, ``c̄``) hold in exact arithmetic; float64 renormalization
can exceed them by a few ulps (``WEIGHT_RATIO_SLACK``, ``2^-20``), and the seed choice's float64
lattice and cumulative sums move a weight of at least ``2^-32`` (smaller ones are refused) by a
relative ``2^-19.7`` at most in the worst case; a ratio of two weights takes that twice. The
guarantee uses the bounds enlarged by this factor, which covers all of it."""


def privacy_unit(objects_per_source: int | None) -> str:
    """The manifest's words for the unit: one claim's value, or one source's claims (``L`` objects)."""
    if objects_per_source is None:
        return CLAIM_UNIT
    return (f"one source's claims (at most {objects_per_source} objects; claim counts and which sources "
            "answered which objects are public)")


NOT_COVERED = (
    "the claim counts per object and which sources answered which objects (public by the neighbouring relation)",
    "operator figures in the internal table: attempts, fallbacks, pass rates, clipped values, timings, "
    "the evaluation against ground truth",
    "the commit time of the published snapshot, which reveals roughly how long the release ran",
    "refusals: the guarantee is over valid inputs (finite, inside the value range or clipped into it); "
    "with out_of_range: reject or a failed validation the job publishes nothing, and that it refused is visible",
)


@dataclass(frozen=True)
class CrowdMechanism:
    """The public parameters the guarantee depends on (none is computed from the claims).

    ``smallest_object`` is the least claim count of a released object (``≥ k``; ``k`` before the
    input is read); ``global_iterations`` and ``global_epsilon_per_iteration`` describe the private
    source qualities (0 iterations: none), ε per iteration *for the release's unit* (their noise is
    calibrated to a whole source's sensitivity with the source unit); ``objects_per_source`` is
    ``L`` for the source unit (``None``: the claim unit)."""

    k: int
    gamma: float
    epsilon0: float
    weight_ratio_cap: float
    local_influence: float
    fallback_probability: float
    claims_per_object: int
    max_attempts_per_claim: int
    smallest_object: int
    global_iterations: int = 0
    global_epsilon_per_iteration: float = 0.0
    objects_per_source: int | None = None

    def __post_init__(self) -> None:
        checks = [
            (self.k >= 2, "k must be at least 2 (t must satisfy 1 <= t < k)"),
            (self.gamma > 1, "gamma must be greater than 1"),
            (math.isfinite(self.epsilon0) and self.epsilon0 > 0, "epsilon0 must be a finite positive number"),
            (self.weight_ratio_cap >= 1, "the weight ratio cap must be at least 1"),
            (self.local_influence >= 1, "the local influence bound must be at least 1"),
            (0 < self.fallback_probability < 1, "the fallback probability must be in (0, 1)"),
            (self.claims_per_object >= 1 and self.max_attempts_per_claim >= 1, "m and T must be positive"),
            (self.smallest_object >= self.k, "released objects have at least k claims"),
            (self.global_iterations >= 0, "the global iterations must be non-negative"),
            (self.global_iterations == 0 or self.global_epsilon_per_iteration > 0,
             "private global weights need a positive epsilon per iteration"),
            (self.objects_per_source is None or self.objects_per_source >= 1, "L must be positive"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def largest_weight(self) -> float:
        """``c̄ = R / (R + n − 1)``: the largest seed weight of an object of ``n`` claims."""
        return self.weight_ratio_cap / (self.weight_ratio_cap + self.smallest_object - 1)

    @property
    def objects_affected(self) -> int:
        return 1 if self.objects_per_source is None else self.objects_per_source


def per_claim_guarantee(mechanism: CrowdMechanism, t: int) -> dict[str, float]:
    """``(ε_c, δ_c)`` of one released claim for the analysis parameter ``t`` (module docstring),
    with the intermediate terms."""
    if not 1 <= t < mechanism.k:
        raise ValueError("t must satisfy 1 <= t < k")
    # the sampler's coin passes below round(q0·10⁶) of 10⁶ (transforms/crowd/synthesis.py): never
    # analyse a larger q0 than it draws
    q0 = min(mechanism.fallback_probability, round(mechanism.fallback_probability * 1_000_000) / 1_000_000)
    c_bar = mechanism.largest_weight * WEIGHT_ROUNDING
    rho, ratio_cap = mechanism.local_influence * WEIGHT_ROUNDING, mechanism.weight_ratio_cap * WEIGHT_ROUNDING
    epsilon_attempt = mechanism.epsilon0 + math.log(rho) + math.log1p(mechanism.gamma * ratio_cap / t)
    delta_attempt = (1 - q0) * c_bar * 0.5 * math.exp(-mechanism.epsilon0 * (mechanism.k - t))
    below_threshold = (1 - q0) * 0.5 * math.exp(-mechanism.epsilon0)
    moved_below = (q0 + rho * math.exp(mechanism.epsilon0) * below_threshold) / (q0 + below_threshold)
    epsilon_pass = math.log(
        max(rho * (2 - math.exp(-mechanism.epsilon0)), moved_below) + (1 - q0) * c_bar / q0
    )
    cap = (1 - q0) ** mechanism.max_attempts_per_claim
    epsilon_cap = math.log1p(cap / q0) - math.log1p(-cap)
    delta_uncapped = delta_attempt / q0
    return {
        "t": t,
        "epsilon_attempt": epsilon_attempt,
        "delta_attempt": delta_attempt,
        "epsilon_pass_probability": epsilon_pass,
        "cap_probability_bound": cap,
        "epsilon": epsilon_attempt + epsilon_pass + epsilon_cap,
        "delta": (1 + cap / q0) * delta_uncapped,
    }


def release_steps(mechanism: CrowdMechanism, claim: dict[str, float]) -> list[PrivacyStep]:
    """What one release runs, for its unit: ``m`` claim slots per affected object, each the
    per-claim ``(ε_c, δ_c)``, and the private source-quality iterations (pure DP)."""
    steps = [PrivacyStep(APPROXIMATE_DP, claim["epsilon"], claim["delta"],
                         mechanism.claims_per_object * mechanism.objects_affected,
                         what="one released claim (claim slot)")]
    if mechanism.global_iterations:
        steps.append(PrivacyStep(PURE_DP, mechanism.global_epsilon_per_iteration, 0.0, mechanism.global_iterations,
                                 what="one iteration of the private source qualities"))
    return steps


def whole_release_guarantee(mechanism: CrowdMechanism, delta: float) -> dict[str, Any]:
    """The release's (ε, δ) at ``delta`` (module docstring): the best ``t``, by PLD composition
    or basic composition, whichever gives the smaller ε (``transforms/core/accounting.py``).
    ``ValueError`` when no ``t`` reaches ``delta``."""
    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1)")
    best: dict[str, Any] | None = None
    for t in range(1, mechanism.k):
        claim = per_claim_guarantee(mechanism, t)
        if mechanism.claims_per_object * mechanism.objects_affected * claim["delta"] >= delta:
            continue  # this t cannot reach delta
        steps = release_steps(mechanism, claim)
        composition = compose(steps, delta)
        if not math.isfinite(composition.epsilon):
            continue
        if best is None or composition.epsilon < best["epsilon"]:
            best = {"epsilon": composition.epsilon, "delta": delta, "composition": composition.method,
                    "per_claim": claim, "steps": [step.to_json() for step in steps],
                    "basic_composition": {"epsilon": composition.basic_epsilon, "delta": composition.basic_delta}}
    if best is None:
        raise ValueError(
            f"no t with 1 <= t < k gives a whole-release delta below {delta}: raise k or epsilon0, "
            "or the fallback probability"
        )
    return best


def crowd_guarantee(mechanism: CrowdMechanism, delta: float) -> dict[str, Any]:
    """The guarantee of a crowd release as a JSON-ready dict: the whole-release headline first,
    then the per-claim and per-test numbers under their own names and the mechanism's steps (what
    the ledger composes across releases)."""
    release = whole_release_guarantee(mechanism, delta)
    claim = release["per_claim"]
    t = int(claim["t"])
    steps = release["steps"]
    unit = privacy_unit(mechanism.objects_per_source)
    return {
        "epsilon": release["epsilon"],
        "delta": release["delta"],
        "privacy_unit": unit,
        "scope": "everything the release publishes: every released claim of every object, whole release",
        "composition": release["composition"],
        "basic_composition": release["basic_composition"],
        "per_claim": claim,
        "per_record": {"epsilon": release["epsilon"], "delta": release["delta"], "steps": steps,
                       "covers": "one input claim is the record: its value reaches every released claim of its "
                                 "object, so the per-record figure is the whole-release bound"},
        "per_test_theorem_2": {
            "epsilon": plausible_deniability_epsilon(mechanism.epsilon0, mechanism.gamma, t, mechanism.weight_ratio_cap),
            "delta": plausible_deniability_delta(mechanism.epsilon0, mechanism.k, t),
            "note": "one invocation of the randomized test with fixed weights (PrisCrowd Theorem 2); not a bound "
                    "for the release",
        },
        "steps": steps,
        "mechanism": asdict(mechanism),
        "not_covered": list(NOT_COVERED),
    }
