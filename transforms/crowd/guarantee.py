"""The (ε, δ) guarantee of a crowd release (PrisCrowd Theorem 2) and its composition.

The theorem's numbers and the compositions are shared with the tabular kind
(``transforms/core/guarantee.py``); this module states what they cover for a crowd release.

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

from typing import Any

from transforms.core.guarantee import (
    choose_t,
    composition_entry,
    is_integer,
    plausible_deniability_delta,
    plausible_deniability_epsilon,
)

PRIVACY_UNIT = "one claim of one object"
SCOPE = "per released synthetic claim, PrisCrowd Theorem 2"
NOT_COVERED = (
    "failed tests (the outcome ⊥): the attempt counts, pass rates and shortfalls in the manifest count "
    "failures and are operator figures outside the guarantee, per test or composed",
    "the evaluation (computed from the raw claims and the truth file)",
)

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
        if not is_integer(value) or value < 1:
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
        if not is_integer(max_objects_per_source) or max_objects_per_source < 1:
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
