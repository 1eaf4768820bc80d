"""The public output grid of a crowd release (``transforms/crowd/value_grid.py``): the range must be
made of whole steps, the grid's size and values by hand, rounding to the nearest grid value with
clipping, and clipping of the claims with its count."""

from __future__ import annotations

import math

import numpy as np
import pytest

from transforms.crowd.value_grid import ValueGrid


@pytest.mark.parametrize(
    ("low", "high", "precision", "size"),
    [(-2.5, 2.5, 0.5, 11), (0.0, 100.0, 1.0, 101), (0.1, 1.0, 0.1, 10), (-3.0, 0.3, 0.1, 34),
     (1000.0, 1001.0, 0.001, 1001), (-1e6, 1e6, 0.01, 200_000_001), (0.0, 0.5, 0.5, 2),
     (0.3, 0.7, 0.1, 5), (1e9, 1e9 + 0.01, 0.001, 11), (0.0, 2e7, 1.0, 20_000_001)],
)
def test_ranges_of_whole_steps_are_accepted_and_counted(low: float, high: float, precision: float, size: int) -> None:
    grid = ValueGrid(low, high, precision)
    assert grid.size == size
    assert grid.first_step == round(low / precision)


@pytest.mark.parametrize(
    ("low", "high", "precision"),
    [(0.05, 1.0, 0.1), (0.0, 1.05, 0.1), (0.0, 10.0, 3.0), (-0.25, 1.0, 0.5), (0.0, 1.0, 0.3),
     # large |end / p|: a relative tolerance of 1e-9 accepted these, half a step and 0.0009 steps off
     # the grid, and the sampler's cells then differed from the model's by up to 2x (review finding)
     (1e9 + 0.0005, 1e9 + 0.01, 0.001), (1000000.0009, 1000010.0, 1.0), (0.0, 2e7 + 0.003, 1.0)],
)
def test_an_end_that_is_not_a_multiple_of_the_precision_is_refused(low: float, high: float, precision: float) -> None:
    with pytest.raises(ValueError, match="multiple of the precision"):
        ValueGrid(low, high, precision)


@pytest.mark.parametrize(
    ("low", "high", "precision", "message"),
    [(0.0, 1.0, 0.0, "positive"), (0.0, 1.0, -0.1, "positive"), (1.0, 1.0, 0.5, "high > low"),
     (2.0, 1.0, 0.5, "high > low"), (-math.inf, 1.0, 0.5, "finite"), (0.0, math.nan, 0.5, "finite"),
     (0.0, 1.0, math.inf, "finite")],
)
def test_degenerate_grids_are_refused(low: float, high: float, precision: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ValueGrid(low, high, precision)


def test_values_are_the_grid_by_hand() -> None:
    grid = ValueGrid(-2.5, 2.5, 0.5)
    assert grid.all_values().tolist() == [-2.5, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    assert grid.values(np.array([0, 5, 10])).tolist() == [-2.5, 0.0, 2.5]
    assert grid.values(3) == -1.0 and grid.all_values().dtype == np.float64
    tenths = ValueGrid(0.1, 1.0, 0.1)
    np.testing.assert_allclose(tenths.all_values(), [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0], rtol=1e-15)
    # every value is precision × an integer number of steps, so it rounds to itself
    np.testing.assert_array_equal(tenths.round(tenths.all_values()), tenths.all_values())
    wide = ValueGrid(-1e6, 1e6, 0.01)
    assert wide.values(np.array([0, wide.size - 1])).tolist() == [-1e6, 1e6]


def test_round_is_the_nearest_grid_value_with_ties_to_even_and_clips() -> None:
    grid = ValueGrid(-2.5, 2.5, 0.5)
    values = np.array([0.1, 0.24, 0.26, 0.74, 0.76, -1.3, 2.49, -2.51])
    assert grid.round(values).tolist() == [0.0, 0.0, 0.5, 0.5, 1.0, -1.5, 2.5, -2.5]
    # exact halves go to the even number of steps: 0.25 is 0.5 steps -> 0, 0.75 is 1.5 steps -> 2
    assert grid.round(np.array([0.25, 0.75, -0.25, -0.75])).tolist() == [0.0, 1.0, 0.0, -1.0]
    # values beyond the range are clipped to its ends, however far
    assert grid.round(np.array([2.75, 3.0, 1e300, -2.76, -1e300])).tolist() == [2.5, 2.5, 2.5, -2.5, -2.5]
    assert grid.round(np.array([[0.6, 9.0], [-9.0, 0.4]])).tolist() == [[0.5, 2.5], [-2.5, 0.5]]


def test_round_is_within_half_a_step_inside_the_range() -> None:
    grid = ValueGrid(-3.0, 0.3, 0.1)
    values = np.random.default_rng(4).uniform(-3.0, 0.3, 10_000)
    rounded = grid.round(values)
    assert np.all(np.abs(rounded - values) <= 0.05 + 1e-12)
    assert np.all((rounded >= -3.0 - 1e-12) & (rounded <= 0.3 + 1e-12))
    steps = rounded / 0.1
    np.testing.assert_allclose(steps, np.rint(steps), atol=1e-9)


def test_clip_moves_the_claims_outside_into_the_range_and_counts_them() -> None:
    grid = ValueGrid(0.0, 10.0, 0.5)
    clipped, outside = grid.clip(np.array([-3.0, 0.0, 4.3, 10.0, 10.01, 1e12, -1e-9]))
    assert clipped.tolist() == [0.0, 0.0, 4.3, 10.0, 10.0, 10.0, 0.0]
    assert outside == 4 and isinstance(outside, int)
    inside, none = grid.clip([1.0, 2.0])
    assert inside.tolist() == [1.0, 2.0] and none == 0
    assert clipped.dtype == np.float64


@pytest.mark.parametrize(("low", "high", "precision"), [(0.1, 0.7, 0.1), (-3.0, 0.3, 0.1)])
def test_the_grid_ends_are_exactly_the_range_ends(low: float, high: float, precision: float) -> None:
    """A precision that is not a binary fraction (0.1) must not put the top value one ulp past the
    range: every released value lies in ``privacy.value_range``."""
    grid = ValueGrid(low, high, precision)
    values = grid.all_values()
    assert values[0] == low and values[-1] == high
    assert grid.round(np.array([-1e9, 1e9])).tolist() == [low, high]
    assert grid.clip(values)[1] == 0
