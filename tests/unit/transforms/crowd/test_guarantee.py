"""The crowd release's guarantee (``transforms/crowd/guarantee.py``): the per-claim terms against
values worked out by hand from the module's formulas, the composition against dp_accounting, and
the cases it must refuse. (Whether the numbers bound the real mechanism is the enumeration test's
job, ``test_privacy_enumeration.py``.)"""

from __future__ import annotations

import math

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.pld.common import DifferentialPrivacyParameters

from transforms.crowd.guarantee import (
    WEIGHT_ROUNDING,
    CrowdMechanism,
    crowd_guarantee,
    per_claim_guarantee,
    whole_release_guarantee,
)


def mechanism(**overrides) -> CrowdMechanism:
    values = dict(k=10, gamma=2.0, epsilon0=2.0, weight_ratio_cap=2.0, local_influence=1.0,
                  fallback_probability=0.1, claims_per_object=4, max_attempts_per_claim=300, smallest_object=10)
    values.update(overrides)
    return CrowdMechanism(**values)


def test_per_claim_terms_by_hand() -> None:
    claim = per_claim_guarantee(mechanism(), t=2)
    q0, e0, c_bar = 0.1, 2.0, 2.0 / (2.0 + 9) * WEIGHT_ROUNDING
    assert claim["epsilon_attempt"] == pytest.approx(e0 + math.log(WEIGHT_ROUNDING) + math.log(1 + 2.0 * 2.0 * WEIGHT_ROUNDING / 2))
    assert claim["delta_attempt"] == pytest.approx((1 - q0) * c_bar * 0.5 * math.exp(-e0 * 8))
    b = (1 - q0) * 0.5 * math.exp(-e0)
    moved = (q0 + math.exp(e0) * b) / (q0 + b)
    rho = WEIGHT_ROUNDING
    moved = (q0 + rho * math.exp(e0) * b) / (q0 + b)
    assert claim["epsilon_pass_probability"] == pytest.approx(
        math.log(max(rho * (2 - math.exp(-e0)), moved) + (1 - q0) * c_bar / q0))
    cap = 0.9**300
    assert claim["epsilon"] == pytest.approx(
        claim["epsilon_attempt"] + claim["epsilon_pass_probability"] + math.log1p(cap / q0) - math.log1p(-cap)
    )
    expected_delta = (1 + cap / q0) * claim["delta_attempt"] / q0
    assert claim["delta"] == pytest.approx(expected_delta)


def test_local_influence_and_larger_weights_cost_epsilon() -> None:
    base = per_claim_guarantee(mechanism(), 2)["epsilon"]
    assert per_claim_guarantee(mechanism(local_influence=1.5), 2)["epsilon"] > base
    assert per_claim_guarantee(mechanism(weight_ratio_cap=4.0), 2)["epsilon"] > base
    assert per_claim_guarantee(mechanism(smallest_object=30), 2)["epsilon"] < base


def test_the_whole_release_is_the_best_t_and_never_worse_than_basic_composition() -> None:
    subject = mechanism(global_iterations=3, global_epsilon_per_iteration=0.2)
    release = whole_release_guarantee(subject, 1e-6)
    for t in range(1, subject.k):
        claim = per_claim_guarantee(subject, t)
        if 4 * claim["delta"] >= 1e-6:
            continue
        assert release["epsilon"] <= 4 * claim["epsilon"] + 0.6 + 1e-9
        composed = (
            pld.from_privacy_parameters(DifferentialPrivacyParameters(claim["epsilon"], claim["delta"]))
            .self_compose(4)
            .compose(pld.from_privacy_parameters(DifferentialPrivacyParameters(0.2, 0.0)).self_compose(3))
        )
        assert release["epsilon"] <= composed.get_epsilon_for_delta(1e-6) + 1e-9


def test_the_source_unit_composes_over_its_objects() -> None:
    claim_unit = crowd_guarantee(mechanism(epsilon0=3.0), 1e-6)
    source_unit = crowd_guarantee(mechanism(epsilon0=3.0, objects_per_source=3), 1e-6)
    assert source_unit["epsilon"] > 2.5 * claim_unit["epsilon"]
    assert "one source" in source_unit["privacy_unit"]
    assert source_unit["steps"][0]["count"] == 3 * 4


def test_an_unreachable_delta_is_refused_with_advice() -> None:
    with pytest.raises(ValueError, match="raise k or epsilon0"):
        whole_release_guarantee(mechanism(k=3, smallest_object=3, epsilon0=0.5), 1e-9)


def test_the_manifest_names_the_scope_and_keeps_per_test_numbers_apart() -> None:
    guarantee = crowd_guarantee(mechanism(global_iterations=2, global_epsilon_per_iteration=0.5), 1e-6)
    assert guarantee["scope"].startswith("everything the release publishes")
    assert guarantee["per_test_theorem_2"]["epsilon"] < guarantee["epsilon"]
    assert "not a bound" in guarantee["per_test_theorem_2"]["note"]
    assert [step["mechanism"] for step in guarantee["steps"]] == ["approximate_dp", "pure_dp"]
    assert any("public" in item for item in guarantee["not_covered"])


@pytest.mark.parametrize(
    "overrides",
    [{"k": 1, "smallest_object": 1}, {"gamma": 1.0}, {"epsilon0": 0.0}, {"fallback_probability": 0.0},
     {"smallest_object": 5}, {"global_iterations": 2}, {"weight_ratio_cap": 0.5}],
)
def test_invalid_mechanisms_are_refused(overrides: dict) -> None:
    with pytest.raises(ValueError):
        mechanism(**overrides)


def test_the_guarantee_analyses_the_fallback_probability_the_sampler_draws() -> None:
    """The fallback coin passes below round(q0·10⁶) of 10⁶; a configured q0 that rounds down must
    not be analysed at its larger configured value (the terms carry 1/q0)."""
    drawn = per_claim_guarantee(mechanism(fallback_probability=1e-6, k=40, smallest_object=40), t=20)
    configured = per_claim_guarantee(mechanism(fallback_probability=1.0000009e-6, k=40, smallest_object=40), t=20)
    assert configured == drawn
    above = per_claim_guarantee(mechanism(fallback_probability=1.0000004e-6, k=40, smallest_object=40), t=20)
    assert above == drawn  # rounds to the same 1 part in 10⁶, and min() keeps the smaller
