"""The release's public kernel bandwidth (``transforms/crowd/bandwidth.py:public_bandwidth``): from
configuration only (a fixed value, or a fraction of the public value range), never below the
precision; the data-fitted Silverman rule is refused for a release."""

from __future__ import annotations

import math

import pytest

from transforms.crowd.bandwidth import BANDWIDTH_METHODS, PUBLIC_BANDWIDTH_METHODS, public_bandwidth


def test_a_fixed_bandwidth_is_its_value() -> None:
    assert public_bandwidth("fixed", 0.0, 100.0, 0.5, value=3.0) == 3.0
    assert public_bandwidth("fixed", -1e6, 1e6, 0.01, value=250) == 250.0
    assert isinstance(public_bandwidth("fixed", 0.0, 1.0, 0.5, value=2), float)
    # the range does not matter for a fixed bandwidth
    assert public_bandwidth("fixed", -5.0, 5.0, 0.5, value=3.0) == public_bandwidth("fixed", 0.0, 1e9, 0.5, value=3.0)


def test_a_range_bandwidth_is_a_fraction_of_the_public_range() -> None:
    assert public_bandwidth("range", 0.0, 100.0, 0.5, fraction=0.05) == pytest.approx(5.0, rel=1e-15)
    assert public_bandwidth("range", -20.0, 30.0, 0.5, fraction=0.1) == pytest.approx(5.0, rel=1e-15)
    assert public_bandwidth("range", -20.0, 30.0, 0.5, fraction=1.0) == 50.0
    # the fraction is ignored by a fixed bandwidth and the value by a range bandwidth
    assert public_bandwidth("range", 0.0, 100.0, 0.5, value=7.0, fraction=0.2) == pytest.approx(20.0)
    assert public_bandwidth("fixed", 0.0, 100.0, 0.5, value=7.0, fraction=0.2) == 7.0


@pytest.mark.parametrize(
    ("method", "value", "fraction", "precision"),
    [("fixed", 0.1, None, 0.5), ("fixed", 1e-9, None, 1e-3), ("range", None, 1e-4, 0.5), ("range", None, 0.001, 2.0)],
)
def test_the_bandwidth_is_never_below_the_precision(method: str, value: float | None, fraction: float | None,
                                                    precision: float) -> None:
    assert public_bandwidth(method, 0.0, 100.0, precision, value=value, fraction=fraction) == precision


@pytest.mark.parametrize(
    ("method", "value", "fraction", "message"),
    [("fixed", None, None, "positive value"), ("fixed", 0.0, None, "positive value"),
     ("fixed", -2.0, None, "positive value"), ("fixed", math.nan, None, "positive value"),
     ("range", None, None, "fraction"), ("range", None, 0.0, "fraction"), ("range", None, -0.1, "fraction"),
     ("range", None, 1.5, "fraction"), ("range", None, math.nan, "fraction"), ("range", 3.0, None, "fraction")],
)
def test_incomplete_or_invalid_settings_are_refused(method: str, value: float | None, fraction: float | None,
                                                    message: str) -> None:
    with pytest.raises(ValueError, match=message):
        public_bandwidth(method, 0.0, 100.0, 0.5, value=value, fraction=fraction)


@pytest.mark.parametrize("method", ["silverman", "scott", "", "Fixed"])
def test_a_method_that_is_not_public_is_refused(method: str) -> None:
    with pytest.raises(ValueError, match="not a public bandwidth method"):
        public_bandwidth(method, 0.0, 100.0, 0.5, value=3.0, fraction=0.1)


def test_silverman_is_known_but_not_public() -> None:
    assert "silverman" in BANDWIDTH_METHODS and "silverman" not in PUBLIC_BANDWIDTH_METHODS
    assert set(PUBLIC_BANDWIDTH_METHODS) == {"fixed", "range"}
