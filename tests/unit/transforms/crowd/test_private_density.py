"""The private per-object density (``transforms/crowd/private_density.py``, issue 29): the public
bin rule, the bins' layout, the released density, the stratified sampler (a statistical test), the
per-object ε of the source unit against the exact optimal composition of pure-DP steps (Kairouz,
Oh, Viswanath 2015, computed here independently), and the keyed streams' independence of blocks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.private_density import (
    DensityBins,
    DensityParameters,
    HistogramMechanism,
    bins_for,
    grid_points,
    histogram_guarantee,
    noise_scale,
    per_object_epsilon,
    released_density,
    stratified_points,
    synthesize_density_block,
)
from transforms.crowd.value_grid import ValueGrid


@pytest.mark.parametrize(("claims", "epsilon", "points", "expected"), [
    (20, 4.0, 10_001, 21),      # 2⌊80/8⌋ + 1
    (10, 4.0, 201, 11),         # 2⌊40/8⌋ + 1
    (3, 4.0, 10_001, 5),        # 2⌊1.5⌋ + 1 = 3, raised to the floor of 5
    (0, 1.0, 10_001, 5),
    (1_000, 8.0, 10_001, 255),  # 2001, capped at 255
    (100, 4.0, 7, 7),           # never more bins than grid points
    (100, 4.0, 3, 3),
])
def test_the_bin_rule(claims: int, epsilon: float, points: int, expected: int) -> None:
    assert bins_for(claims, epsilon, points) == expected


def test_the_bin_rule_refuses_nonsense() -> None:
    for arguments in ((-1, 1.0, 10), (5, 0.0, 10), (5, math.inf, 10), (5, 1.0, 0)):
        with pytest.raises(ValueError):
            bins_for(*arguments)


@pytest.mark.parametrize(("bins", "points"), [(5, 5), (5, 201), (21, 10_001), (7, 100), (255, 256), (1, 9)])
def test_bins_are_contiguous_and_balanced(bins: int, points: int) -> None:
    layout = DensityBins(bins, points)
    sizes = layout.sizes
    assert sizes.sum() == points and sizes.min() >= 1 and sizes.max() - sizes.min() <= 1
    every = np.arange(points)
    owner = layout.bin_of(every)
    assert np.all(np.diff(owner) >= 0) and owner[0] == 0 and owner[-1] == bins - 1
    assert np.array_equal(np.bincount(owner, minlength=bins), sizes)
    assert np.array_equal(layout.first_points[:-1], np.searchsorted(owner, np.arange(bins)))


def test_an_odd_bin_count_centres_a_bin_on_the_range_midpoint() -> None:
    layout = DensityBins(21, 201)  # [-100, 100] at precision 1: point 100 is the value 0
    middle = int(layout.bin_of(np.array([100]))[0])
    assert middle == 10
    # the bin's centre within half a grid point of the range's (its points 96..105: 201/21 is not whole)
    assert abs((layout.first_points[middle] + layout.first_points[middle + 1] - 1) / 2 - 100) <= 0.5


def test_grid_points_clip_and_round_each_claim_alone() -> None:
    grid = ValueGrid(0.0, 10.0, 0.5)
    values = np.array([-3.0, 0.0, 0.24, 0.26, 4.75, 10.0, 99.0])
    assert grid_points(values, grid).tolist() == [0, 0, 0, 1, 10, 20, 20]


def test_the_released_density_clips_and_normalizes() -> None:
    layout = DensityBins(4, 8)
    assert released_density(np.array([3, -2, 1, 0]), layout).tolist() == [0.75, 0.0, 0.25, 0.0]
    uniform = released_density(np.array([-1, 0, -5, 0]), layout)
    assert uniform.tolist() == [0.25, 0.25, 0.25, 0.25]
    assert released_density(np.array([0, 0, 0]), DensityBins(3, 7)).tolist() == pytest.approx([3 / 7, 2 / 7, 2 / 7])


def test_stratified_points_are_the_quantiles() -> None:
    layout = DensityBins(2, 4)  # bins {0, 1} and {2, 3}
    mass = np.array([0.5, 0.5])
    # quantiles (k - 0.5)/4 = 1/8, 3/8, 5/8, 7/8: points 0, 1, 2, 3 (each point carries 1/4)
    assert stratified_points(mass, layout, 4, 0.5).tolist() == [0, 1, 2, 3]
    # all the mass in the second bin: every quantile in points 2 and 3
    assert stratified_points(np.array([0.0, 1.0]), layout, 4, 0.5).tolist() == [2, 2, 3, 3]
    with pytest.raises(ValueError):
        stratified_points(mass, layout, 4, 1.0)


def test_stratified_sampling_draws_the_density() -> None:
    """Over many uniform offsets, each grid point's share of the drawn claims is its mass (a
    chi-square test at level 10⁻³ on 20,000 offsets × 7 claims): the sampler is unbiased."""
    layout = DensityBins(5, 13)
    mass = np.array([0.1, 0.0, 0.45, 0.3, 0.15])
    expected_point = np.repeat(mass / layout.sizes, layout.sizes)
    rng = np.random.default_rng(11)
    drawn = np.concatenate([stratified_points(mass, layout, 7, float(u)) for u in rng.random(20_000)])
    observed = np.bincount(drawn, minlength=13)
    assert observed[expected_point == 0].sum() == 0
    positive = expected_point > 0
    statistic, p_value = stats.chisquare(observed[positive], expected_point[positive] * drawn.size)
    assert p_value > 1e-3, (statistic, p_value)


def test_stratified_sampling_keeps_the_median_within_one_quantile_cell() -> None:
    layout = DensityBins(101, 101)
    mass = np.full(101, 1 / 101)
    for offset in (0.0, 0.3, 0.99):
        points = stratified_points(mass, layout, 20, offset)
        assert abs(np.median(points) - 50) <= 101 / 20 + 1


def optimal_composition_delta(epsilon0: float, steps: int, epsilon: float) -> float:
    """Kairouz–Oh–Viswanath's exact δ(ε) of ``steps``-fold composition of ε0-DP: the worst pair is
    randomized response, whose privacy-loss distribution is binomial (design note, eq. (2))."""
    total = 0.0
    for i in range(steps + 1):
        loss = (steps - 2 * i) * epsilon0
        if loss > epsilon:
            # P[loss = (L - 2i) ε0] under the first randomized response, minus e^ε times the second's
            first = math.comb(steps, i) * math.exp((steps - i) * epsilon0) / (1 + math.exp(epsilon0)) ** steps
            second = math.comb(steps, i) * math.exp(i * epsilon0) / (1 + math.exp(epsilon0)) ** steps
            total += first - math.exp(epsilon) * second
    return total


@pytest.mark.parametrize("objects", [2, 5, 10, 20])
def test_the_source_units_per_object_epsilon_composes_within_the_budget(objects: int) -> None:
    epsilon, delta = 4.0, 1e-6
    epsilon0 = per_object_epsilon(epsilon, delta, objects)
    assert epsilon / objects <= epsilon0 < epsilon
    assert optimal_composition_delta(epsilon0, objects, epsilon) <= delta
    # and not far from the largest that does (the accountant's PLD is pessimistic, never optimistic)
    assert optimal_composition_delta(epsilon0 * 1.15, objects, epsilon) > delta or epsilon0 * 1.15 * objects <= epsilon


def test_the_claim_units_per_object_epsilon_is_the_release_epsilon() -> None:
    assert per_object_epsilon(2.5, 1e-6, 1) == 2.5
    with pytest.raises(ValueError):
        per_object_epsilon(0.0, 1e-6, 3)


def test_the_guarantee_does_not_grow_with_the_claims_released() -> None:
    small = histogram_guarantee(HistogramMechanism(2.0, 1, 1), None)
    large = histogram_guarantee(HistogramMechanism(2.0, 10_000, 1), None)
    assert small["epsilon"] == large["epsilon"] == 2.0 and small["delta"] == large["delta"] == 0.0
    assert large["steps"] == [{"mechanism": "pure_dp", "epsilon": 2.0, "delta": 0.0, "count": 1,
                               "what": "one object's noisy histogram"}]
    source = histogram_guarantee(HistogramMechanism(4.0, 20, 1, objects_per_source=10), 1e-6)
    assert source["epsilon"] <= 4.0 + 1e-9 and source["delta"] == 1e-6
    assert source["steps"][0]["count"] == 10 and source["per_object"]["epsilon"] < 1.0
    with pytest.raises(ValueError):
        histogram_guarantee(HistogramMechanism(4.0, 20, 1, objects_per_source=10), None)


def test_the_noise_scale_is_two_over_epsilon_rounded_up() -> None:
    assert noise_scale(4.0) == pytest.approx(0.5)
    assert noise_scale(3.0) >= 2 / 3


def block_of(objects: dict[int, list[float]]) -> ClaimsBlock:
    rows = [(obj, f"s{j}", value) for obj, values in objects.items() for j, value in enumerate(values)]
    frame = pd.DataFrame(rows, columns=["object_id", "source_id", "value"])
    frame["source_id"] = pd.factorize(frame["source_id"], sort=True)[0]
    return ClaimsBlock.from_frame(frame)


def test_an_objects_release_does_not_depend_on_its_block() -> None:
    """The keyed streams are per object: releasing object 7 alone or beside others gives the same claims."""
    parameters = DensityParameters(ValueGrid(0.0, 100.0, 0.5), claims_per_object=12, epsilon=2.0)
    together = synthesize_density_block(block_of({3: [1.0, 5.0, 9.0], 7: [50.0, 52.0, 60.0, 61.0]}), parameters,
                                        b"k" * 32, "r1").claims
    alone = synthesize_density_block(block_of({7: [50.0, 52.0, 60.0, 61.0]}), parameters, b"k" * 32, "r1").claims
    mine = together[together["object_id"] == 7].reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, alone)
    other_release = synthesize_density_block(block_of({7: [50.0, 52.0, 60.0, 61.0]}), parameters, b"k" * 32, "r2")
    assert not np.array_equal(other_release.claims["value"].to_numpy(), alone["value"].to_numpy())


def test_objects_below_the_floor_are_suppressed_and_the_rest_release_m_claims_on_the_grid() -> None:
    grid = ValueGrid(0.0, 100.0, 0.5)
    parameters = DensityParameters(grid, claims_per_object=9, epsilon=4.0, minimum_claims=3)
    outcome = synthesize_density_block(block_of({1: [10.0, 11.0], 2: [40.0, 41.0, 42.5]}), parameters, b"s" * 32, "r")
    assert outcome.released.tolist() == [False, True]
    claims = outcome.claims
    assert claims["object_id"].tolist() == [2] * 9 and sorted(claims["claim_index"]) == list(range(9))
    values = claims["value"].to_numpy()
    assert np.all((values >= 0) & (values <= 100)) and np.allclose(values * 2, np.round(values * 2))


def test_the_log_grid_keeps_each_value_within_its_relative_step() -> None:
    from transforms.crowd.private_density import LogDensityGrid

    grid = LogDensityGrid(ValueGrid(0.0, 20_000_000.0, 1.0))
    values = np.array([0.0, 1.0, 9.0, 150.0, 21_680.0, 478_403.0, 6_724_976.0, 20_000_000.0, 3e9, -5.0])
    points = grid.points_of(values)
    assert points[0] == 0 and points[-1] == 0 and points[-3] == points[-2] == grid.size - 1
    assert np.all(np.diff(points[:-2]) >= 0)
    back = grid.values(points)
    step = 10 ** (grid.span / (grid.size - 1))  # one point's ratio in 1 + x: about 0.4 %
    inside = values[:-2]
    assert np.all((1 + back[:-2]) / (1 + inside) <= step ** 0.5 * (1 + 1e-9) + 1 / (1 + inside))
    assert np.all((1 + inside) / (1 + back[:-2]) <= step ** 0.5 * (1 + 1e-9) + 1 / (1 + back[:-2]))
    assert back[-2] == 20_000_000.0 and back[-1] == 0.0


def test_a_release_on_the_log_grid_stays_in_the_range_on_the_value_grid() -> None:
    from transforms.crowd.private_density import LogDensityGrid

    parameters = DensityParameters(LogDensityGrid(ValueGrid(0.0, 20_000_000.0, 100.0)), claims_per_object=20,
                                   epsilon=4.0)
    claims = synthesize_density_block(block_of({1: [480_000.0, 478_403.0, 500_000.0]}), parameters,
                                      b"p" * 32, "r").claims
    values = claims["value"].to_numpy()
    assert len(values) == 20 and np.all((values >= 0) & (values <= 20_000_000.0))
    assert np.allclose(values / 100, np.round(values / 100))
