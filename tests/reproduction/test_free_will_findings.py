"""Reproduction of the findings of ElSalamouny & Palamidessi, "Reconstruction of the
distribution of sensitive data under free-will privacy" (experiments section), with the
reports produced by the client simulator (``transforms.ldp.simulation``) and the estimators of
``transforms.ldp.estimators``.

Thresholds are the paper's qualitative claims, nothing tuned, each on the mean over several
data seeds and release secrets so that a single lucky draw cannot pass:

* on a linear alphabet ``{0..99}`` with binomial data and a mix of k-RR and truncated
  geometric mechanisms, and on the San Francisco Gowalla grid with planar geometric and k-RR
  mechanisms (plus Shokri's optimal mechanism on a coarsened grid), GIBU's earth mover's
  distance to the truth is at most INV_M's, with either post-processing;
* the counter-example: half the users apply ``A`` and half ``A′ = 2U − A`` whose average ``U``
  is non-informative: IBU_M on the average cannot move from its start (error of the
  uninformed uniform answer), GIBU recovers the distribution;
* RAPPOR on ``{0..19}`` with 10 mechanisms: RAP_M and GIBU comparable for ε in [0.1, 1], GIBU
  better for ε in [1, 10];
* consistency: the error of GIBU and INV_M falls as ``n`` grows from 10^3 to 10^5.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

import numpy as np
import pytest
from scipy import stats

from benchmarks.harness import gowalla_cells
from transforms.ldp.distribution_metrics import earth_movers_distance_grid, earth_movers_distance_line
from transforms.ldp.estimators import (
    average_channel,
    channel_report_groups,
    generalized_iterative_bayesian_update,
    inverse_mechanism_estimate,
    iterative_bayesian_update,
    rappor_estimate,
)
from transforms.ldp.mechanisms import (
    BasicRappor,
    Mechanism,
    PlanarGeometric,
    RandomizedResponse,
    ShokriOptimal,
    TruncatedGeometric,
    sample_from_channel,
)
from transforms.ldp.simulation import (
    gibu_groups,
    rappor_bit_sums,
    simulate_reports,
    total_report_counts,
    user_counts_per_mechanism,
)

pytestmark = pytest.mark.slow

GRID_ROWS, GRID_COLUMNS, CELL_SIDE_KM = 16, 24, 0.5
SEEDS = range(5)
USERS = 20_000
ESTIMATORS = ("GIBU", "INV_M projection", "INV_M truncate")

Distance = Callable[[np.ndarray, np.ndarray], float]


def release_secret(seed: int) -> bytes:
    return bytes([seed + 1]) * 32


def estimator_errors(
    theta: np.ndarray,
    values: np.ndarray,
    mechanisms: Sequence[Mechanism],
    channels: Sequence[np.ndarray],
    seed: int,
    distance: Distance,
) -> dict[str, float]:
    """EMD to ``theta`` of GIBU and of INV_M (both post-processings) on one simulated release."""
    simulated = simulate_reports(values, list(mechanisms), None, release_secret(seed), f"repro-{seed}")
    gibu = generalized_iterative_bayesian_update(*gibu_groups(simulated, channels))
    users = user_counts_per_mechanism(simulated)
    counts = total_report_counts(simulated)
    return {
        "GIBU": distance(theta, gibu.estimate),
        "INV_M projection": distance(
            theta, inverse_mechanism_estimate(channels, users, counts, "projection")
        ),
        "INV_M truncate": distance(theta, inverse_mechanism_estimate(channels, users, counts, "truncate")),
    }


def mean_errors(runs: list[dict[str, float]]) -> dict[str, float]:
    return {name: float(np.mean([run[name] for run in runs])) for name in runs[0]}


LINEAR_SIZE = 100
LINEAR_THETA = stats.binom.pmf(np.arange(LINEAR_SIZE), LINEAR_SIZE - 1, 0.5)
LINEAR_MECHANISMS: tuple[Mechanism, ...] = (
    RandomizedResponse(epsilon=2.0, input_size=LINEAR_SIZE),
    RandomizedResponse(epsilon=4.0, input_size=LINEAR_SIZE),
    TruncatedGeometric(epsilon=0.5, lower=0, upper=LINEAR_SIZE - 1),
    TruncatedGeometric(epsilon=1.0, lower=0, upper=LINEAR_SIZE - 1),
)


@cache
def linear_errors(users: int) -> dict[str, float]:
    """Mean EMD over the seeds on ``{0..99}``, secrets ~ Binomial(99, 0.5)."""
    channels = [mechanism.channel_matrix() for mechanism in LINEAR_MECHANISMS]
    runs = []
    for seed in SEEDS:
        values = np.random.default_rng(1000 * users + seed).binomial(LINEAR_SIZE - 1, 0.5, size=users)
        runs.append(
            estimator_errors(
                LINEAR_THETA, values, LINEAR_MECHANISMS, channels, seed, earth_movers_distance_line
            )
        )
    return mean_errors(runs)


def test_linear_alphabet_gibu_is_at_least_as_accurate_as_inv_m() -> None:
    errors = linear_errors(USERS)
    assert errors["GIBU"] <= errors["INV_M projection"], errors
    assert errors["GIBU"] <= errors["INV_M truncate"], errors


def planar_errors(
    rows: int, columns: int, cell_side: float, mechanisms: Sequence[Mechanism], coarsening: int
) -> dict[str, float]:
    """Mean grid EMD (km) over the seeds, users drawn from the empirical check-in distribution
    on the grid coarsened by ``coarsening`` cells per side."""
    fine_row, fine_column = np.divmod(gowalla_cells(), GRID_COLUMNS)
    cells = (fine_row // coarsening) * columns + fine_column // coarsening
    theta = np.bincount(cells, minlength=rows * columns) / cells.size
    channels = [mechanism.channel_matrix() for mechanism in mechanisms]

    def grid_distance(truth: np.ndarray, estimate: np.ndarray) -> float:
        return earth_movers_distance_grid(truth, estimate, rows, columns, cell_side)

    runs = []
    for seed in SEEDS:
        values = np.random.default_rng(2000 + seed).choice(rows * columns, size=USERS, p=theta)
        runs.append(estimator_errors(theta, values, mechanisms, channels, seed, grid_distance))
    return mean_errors(runs)


def test_gowalla_grid_gibu_is_at_least_as_accurate_as_inv_m() -> None:
    mechanisms = [
        PlanarGeometric(epsilon=epsilon, rows=GRID_ROWS, columns=GRID_COLUMNS, cell_side=CELL_SIDE_KM)
        for epsilon in (0.5, 1.0, 2.0)
    ] + [RandomizedResponse(epsilon=4.0, input_size=GRID_ROWS * GRID_COLUMNS)]
    errors = planar_errors(GRID_ROWS, GRID_COLUMNS, CELL_SIDE_KM, mechanisms, coarsening=1)
    assert errors["GIBU"] <= errors["INV_M projection"], errors
    assert errors["GIBU"] <= errors["INV_M truncate"], errors


def test_coarsened_gowalla_grid_with_shokri_gibu_is_at_least_as_accurate_as_inv_m() -> None:
    """8 x 12 cells of 1 km (2 x 2 blocks of the original grid), so that Shokri's linear
    program (96 cells, prior = the check-in distribution, quality-loss bound 1 km) solves in
    seconds."""
    rows, columns, side = GRID_ROWS // 2, GRID_COLUMNS // 2, 2 * CELL_SIDE_KM
    fine_row, fine_column = np.divmod(gowalla_cells(), GRID_COLUMNS)
    cells = (fine_row // 2) * columns + fine_column // 2
    prior = np.bincount(cells, minlength=rows * columns) / cells.size
    mechanisms = [
        PlanarGeometric(epsilon=1.0, rows=rows, columns=columns, cell_side=side),
        PlanarGeometric(epsilon=2.0, rows=rows, columns=columns, cell_side=side),
        RandomizedResponse(epsilon=3.0, input_size=rows * columns),
        ShokriOptimal(quality_loss_bound=1.0, prior=tuple(prior), rows=rows, columns=columns, cell_side=side),
    ]
    errors = planar_errors(rows, columns, side, mechanisms, coarsening=2)
    assert errors["GIBU"] <= errors["INV_M projection"], errors
    assert errors["GIBU"] <= errors["INV_M truncate"], errors


def test_counter_example_average_is_non_informative_ibu_m_fails_gibu_recovers() -> None:
    """``A`` is k-RR on ``k = 10`` with ``e^ε = 2(k−1)/(k−2)``, so that ``A[x,x] = 2/k`` and
    ``A′ = 2U − A`` (``U`` the all-``1/k`` channel) is a channel too (report any value but the
    secret, uniformly). Half the users apply each: the average mechanism is ``U``, under which
    every ``θ`` gives the same report distribution. IBU_M started from the uniform
    distribution cannot move; GIBU, which knows each user's mechanism, recovers ``θ``.

    "Fails": IBU_M's EMD is at least 90% of the uniform answer's. "Recovers": GIBU's mean EMD
    is at most a quarter of it.
    """
    size = 10
    theta = stats.binom.pmf(np.arange(size), size - 1, 0.3)
    epsilon = float(np.log(2 * (size - 1) / (size - 2)))
    matrix = RandomizedResponse(epsilon=epsilon, input_size=size).channel_matrix()
    complement = 2.0 / size - matrix
    assert np.all(complement >= -1e-15) and np.allclose(complement.sum(axis=1), 1.0)
    uninformed = earth_movers_distance_line(theta, np.full(size, 1.0 / size))
    ibu_errors, gibu_errors = [], []
    for seed in SEEDS:
        generator = np.random.default_rng(3000 + seed)
        values = generator.choice(size, size=USERS, p=theta)
        first, second = values[: USERS // 2], values[USERS // 2 :]
        first_counts = np.bincount(sample_from_channel(matrix, first, generator), minlength=size)
        second_counts = np.bincount(
            sample_from_channel(np.clip(complement, 0.0, None), second, generator), minlength=size
        )
        average = average_channel([matrix, complement], [first.size, second.size])
        assert np.allclose(average, 1.0 / size)
        ibu = iterative_bayesian_update(average, first_counts + second_counts)
        gibu = generalized_iterative_bayesian_update(
            *channel_report_groups([matrix, complement], [first_counts, second_counts])
        )
        ibu_errors.append(earth_movers_distance_line(theta, ibu.estimate))
        gibu_errors.append(earth_movers_distance_line(theta, gibu.estimate))
    assert np.mean(ibu_errors) >= 0.9 * uninformed, (ibu_errors, uninformed)
    assert np.mean(gibu_errors) <= 0.25 * uninformed, (gibu_errors, uninformed)


RAPPOR_SIZE = 20
RAPPOR_THETA = stats.binom.pmf(np.arange(RAPPOR_SIZE), RAPPOR_SIZE - 1, 0.5)
RAPPOR_SEEDS = range(15)


@cache
def rappor_errors(lowest_epsilon: float, highest_epsilon: float) -> dict[str, float]:
    """Mean EMD over 15 seeds of GIBU and RAP_M (both post-processings) with 10 RAPPOR
    mechanisms whose ε are evenly spread over ``[lowest_epsilon, highest_epsilon]``. The
    low-ε regime's claim ("comparable") is about means whose ratio sits near 1.3–1.4, so it
    needs more repetitions than the other findings to be separated from seed noise."""
    mechanisms = [
        BasicRappor(epsilon=float(epsilon), input_size=RAPPOR_SIZE)
        for epsilon in np.linspace(lowest_epsilon, highest_epsilon, 10)
    ]
    runs = []
    for seed in RAPPOR_SEEDS:
        values = np.random.default_rng(4000 + seed).binomial(RAPPOR_SIZE - 1, 0.5, size=USERS)
        simulated = simulate_reports(values, mechanisms, None, release_secret(seed), f"rappor-{seed}")
        gibu = generalized_iterative_bayesian_update(*gibu_groups(simulated))
        bit_sums, epsilons, users = rappor_bit_sums(simulated)
        runs.append(
            {
                "GIBU": earth_movers_distance_line(RAPPOR_THETA, gibu.estimate),
                "RAP_M projection": earth_movers_distance_line(
                    RAPPOR_THETA, rappor_estimate(bit_sums, simulated.n, epsilons, users, "projection")
                ),
                "RAP_M truncate": earth_movers_distance_line(
                    RAPPOR_THETA, rappor_estimate(bit_sums, simulated.n, epsilons, users, "truncate")
                ),
            }
        )
    return mean_errors(runs)


def test_rappor_low_epsilons_gibu_and_rap_m_are_comparable() -> None:
    """ "Comparable" read as neither estimator's mean error exceeding the other's by more than
    half (factor 1.5): a larger gap would be a clear win, as in the high-ε regime."""
    errors = rappor_errors(0.1, 1.0)
    for post_processing in ("RAP_M projection", "RAP_M truncate"):
        assert errors["GIBU"] <= 1.5 * errors[post_processing], errors
        assert errors[post_processing] <= 1.5 * errors["GIBU"], errors


def test_rappor_high_epsilons_gibu_is_better_than_rap_m() -> None:
    errors = rappor_errors(1.0, 10.0)
    assert errors["GIBU"] < errors["RAP_M projection"], errors
    assert errors["GIBU"] < errors["RAP_M truncate"], errors


def test_error_falls_with_the_number_of_users() -> None:
    """Both estimators are consistent (the paper's bounds shrink like ``1/√n``): from
    ``n = 10^3`` to ``10^4`` to ``10^5`` the mean EMD must fall, each tenfold increase by at
    least a factor 2 (the ``√10 ≈ 3.2`` of the rate, less seed noise over 5 repetitions)."""
    by_size = [linear_errors(users) for users in (1_000, 10_000, 100_000)]
    for name in ESTIMATORS:
        for smaller, larger in zip(by_size, by_size[1:], strict=False):
            assert larger[name] <= smaller[name] / 2.0, (name, by_size)
