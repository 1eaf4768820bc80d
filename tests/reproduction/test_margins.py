"""Every reproduction claim keeps its measured margin (``tests/reproduction/margins.py``): its
figure was measured over at least ``MIN_KEYS`` keys, and the bound sits at least
``MIN_STANDARD_DEVIATIONS`` standard deviations beyond the worst key. A bound moved next to its
figure, or a new claim nobody measured, fails here before it can fail some other machine's CI."""

from __future__ import annotations

import importlib
import json

import pytest

from tests.reproduction.margins import MIN_KEYS, MIN_STANDARD_DEVIATIONS, MODULES, RECORD, Claim


def registered_claims() -> list[tuple[str, Claim]]:
    return [(name, claim) for name in MODULES for claim in importlib.import_module(name).CLAIMS]


@pytest.mark.parametrize(("module_name", "claim"), registered_claims(), ids=lambda value: getattr(value, "figure", ""))
def test_claim_keeps_three_standard_deviations_beyond_the_worst_key(module_name: str, claim: Claim) -> None:
    record = json.loads(RECORD.read_text())
    values = record.get(module_name, {}).get(claim.figure)
    assert values is not None, f"{claim.figure} was never measured: python -m tests.reproduction.margins {module_name}"
    assert len(values) >= MIN_KEYS, f"{claim.figure}: {len(values)} keys measured, need {MIN_KEYS}"
    distance, spread = claim.margin(values)
    assert distance >= MIN_STANDARD_DEVIATIONS * spread, (
        f"{claim.figure} {claim.relation} {claim.bound}: worst key {distance:+.4f} from the bound, "
        f"standard deviation over keys {spread:.4f}"
    )


def test_margin_rule_fails_a_bound_next_to_its_figure() -> None:
    """The rule itself can fail: a bound inside the measured spread is refused, one beyond it kept."""
    values = [0.80, 0.81, 0.79, 0.82, 0.80, 0.81, 0.80, 0.79, 0.81, 0.80]
    tight = Claim("group.figure", ">=", 0.78)
    loose = Claim("group.figure", ">=", 0.74)
    tight_distance, spread = tight.margin(values)
    loose_distance, _ = loose.margin(values)
    assert tight_distance < MIN_STANDARD_DEVIATIONS * spread
    assert loose_distance >= MIN_STANDARD_DEVIATIONS * spread
