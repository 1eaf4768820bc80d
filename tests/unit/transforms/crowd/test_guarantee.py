"""The crowd release's guarantee (PrisCrowd Theorem 2 with its composition per object and per source)
against hand computation."""

from __future__ import annotations

import json
import math

import pytest

from transforms.crowd.guarantee import crowd_guarantee


def test_crowd_guarantee_with_delta_target() -> None:
    guarantee = crowd_guarantee(
        k=10,
        gamma=2.0,
        epsilon0=1.0,
        weight_ratio_cap=3.0,
        delta_target=1e-3,
        claims_per_object=5,
        max_attempts_per_object=50,
    )
    json.dumps(guarantee)
    assert guarantee["t"] == 3
    assert guarantee["epsilon"] == pytest.approx(1.0 + math.log(1.0 + 2.0 / 3.0 * 3.0))
    assert guarantee["delta"] == pytest.approx(math.exp(-7.0))
    assert guarantee["privacy_unit"] == "one claim of one object"
    assert guarantee["scope"] == "per released synthetic claim, PrisCrowd Theorem 2"
    assert "ln(1 + (gamma / t) * R)" in guarantee["formula"]
    per_object = guarantee["composition"]["per_object"]
    assert per_object["invocations"] == 50
    assert per_object["basic"]["epsilon"] == pytest.approx(50 * guarantee["epsilon"])
    assert per_object["epsilon"] <= per_object["basic"]["epsilon"]
    assert "per_source" not in guarantee["composition"]


def test_crowd_guarantee_with_t_and_source_bound() -> None:
    guarantee = crowd_guarantee(
        k=8,
        gamma=1.5,
        epsilon0=0.5,
        weight_ratio_cap=2.0,
        t=4,
        claims_per_object=3,
        max_attempts_per_object=12,
        max_objects_per_source=7,
    )
    json.dumps(guarantee)
    assert guarantee["epsilon"] == pytest.approx(0.5 + math.log(1.75))
    assert guarantee["delta"] == pytest.approx(math.exp(-2.0))
    per_source = guarantee["composition"]["per_source"]
    assert per_source["invocations"] == 84
    assert per_source["basic"]["epsilon"] == pytest.approx(84 * guarantee["epsilon"])
    assert per_source["basic"]["delta"] == pytest.approx(84 * guarantee["delta"])


def test_crowd_guarantee_needs_exactly_one_of_delta_and_t() -> None:
    common = dict(
        k=8, gamma=1.5, epsilon0=0.5, weight_ratio_cap=2.0, claims_per_object=3, max_attempts_per_object=12
    )
    with pytest.raises(ValueError, match="exactly one"):
        crowd_guarantee(**common)
    with pytest.raises(ValueError, match="exactly one"):
        crowd_guarantee(**common, t=2, delta_target=1e-3)
    with pytest.raises(ValueError):
        crowd_guarantee(**common, t=8)
    with pytest.raises(ValueError):
        crowd_guarantee(**common, t=2, max_objects_per_source=0)


def test_crowd_guarantee_states_what_the_per_test_numbers_do_not_cover() -> None:
    guarantee = crowd_guarantee(k=5, gamma=4.0, epsilon0=2.0, weight_ratio_cap=4.0, delta_target=1e-3, t=None,
                                claims_per_object=10, max_attempts_per_object=500, max_objects_per_source=None)
    assert any("failed tests" in item for item in guarantee["not_covered"])
