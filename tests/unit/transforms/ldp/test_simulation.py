"""The free-will client simulator and the sufficient statistics it hands to the estimators.

Reproducibility is checked against a second run, the mechanism mix and each mechanism's
reports against their known laws (chi-square, with a negative control that a 30% wrong law is
rejected), and the grouped GIBU input against GIBU fed one likelihood row per user.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from transforms.core.keyed_randomness import keyed_generator
from transforms.ldp.estimators import generalized_iterative_bayesian_update
from transforms.ldp.mechanisms import BasicRappor, RandomizedResponse, TruncatedGeometric
from transforms.ldp.simulation import (
    ASSIGNMENT_PURPOSE,
    SANITIZE_PURPOSE,
    SimulatedReports,
    channel_matrices,
    gibu_groups,
    rappor_bit_sums,
    report_counts_per_mechanism,
    simulate_reports,
    total_report_counts,
    user_counts_per_mechanism,
)

SECRET = bytes(range(32))
OTHER_SECRET = bytes(range(1, 33))
K = 8
MECHANISMS = [
    RandomizedResponse(epsilon=1.0, input_size=K),
    TruncatedGeometric(epsilon=0.5, lower=0, upper=K - 1),
    RandomizedResponse(epsilon=3.0, input_size=K),
]
SHARES = [0.5, 0.3, 0.2]


def secrets(n: int, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).binomial(K - 1, 0.4, size=n)


def simulate(n: int = 2000, secret: bytes = SECRET, release_id: str = "r1") -> SimulatedReports:
    return simulate_reports(secrets(n), MECHANISMS, SHARES, secret, release_id)


def chi_square_p_value(observed: np.ndarray, expected: np.ndarray) -> float:
    keep = expected > 0
    statistic = float((((observed - expected) ** 2)[keep] / expected[keep]).sum())
    return float(stats.chi2.sf(statistic, int(keep.sum()) - 1))


def test_same_secret_and_release_give_identical_reports() -> None:
    first, second = simulate(), simulate()
    assert np.array_equal(first.user_mechanism, second.user_mechanism)
    assert np.array_equal(first.reports, second.reports)
    rappor = [BasicRappor(epsilon=e, input_size=K) for e in (0.5, 2.0)]
    one = simulate_reports(secrets(500), rappor, None, SECRET, "r1")
    two = simulate_reports(secrets(500), rappor, None, SECRET, "r1")
    assert one.reports.shape == (500, K) and one.reports.dtype == np.bool_
    assert np.array_equal(one.reports, two.reports)


def test_other_secret_or_release_give_other_reports() -> None:
    base = simulate()
    for other in (simulate(secret=OTHER_SECRET), simulate(release_id="r2")):
        assert not np.array_equal(base.user_mechanism, other.user_mechanism)
        assert np.mean(base.reports != other.reports) > 0.3


def test_mechanism_shares_follow_the_configured_mix() -> None:
    counts = user_counts_per_mechanism(simulate(n=20_000))
    assert counts.sum() == 20_000
    assert chi_square_p_value(counts, 20_000 * np.array(SHARES)) > 1e-3
    wrong = np.array([0.5 * 0.7, 0.3 * 1.3, 0.2])
    wrong /= wrong.sum()
    assert chi_square_p_value(counts, 20_000 * wrong) < 1e-6


def test_default_shares_are_uniform() -> None:
    simulated = simulate_reports(secrets(9000), MECHANISMS, None, SECRET, "r1")
    counts = user_counts_per_mechanism(simulated)
    assert chi_square_p_value(counts, np.full(3, 3000.0)) > 1e-3


def test_each_user_is_sanitized_by_their_own_mechanism() -> None:
    """Reports of mechanism j's users follow Σ_i A_j[x_i, :] over exactly those users; the
    same counts are rejected under the channel of another mechanism."""
    values = secrets(20_000)
    simulated = simulate_reports(values, MECHANISMS, SHARES, SECRET, "r1")
    matrices = channel_matrices(simulated)
    per_mechanism = report_counts_per_mechanism(simulated)
    for index, matrix in enumerate(matrices):
        members = values[simulated.user_mechanism == index]
        expected = matrix[members].sum(axis=0)
        assert chi_square_p_value(per_mechanism[index], expected) > 1e-3
        wrong = matrices[(index + 1) % len(matrices)][members].sum(axis=0)
        assert chi_square_p_value(per_mechanism[index], wrong) < 1e-6


def test_rappor_bits_follow_the_flip_probability() -> None:
    values = secrets(20_000)
    mechanism = BasicRappor(epsilon=1.0, input_size=K)
    simulated = simulate_reports(values, [mechanism], None, SECRET, "r1")
    flip = 1.0 / (1.0 + np.exp(0.5))
    holders = np.bincount(values, minlength=K)
    expected_ones = holders * (1 - flip) + (values.size - holders) * flip
    bit_sums, epsilons, users = rappor_bit_sums(simulated)
    assert np.array_equal(bit_sums, simulated.reports.sum(axis=0))
    assert np.array_equal(epsilons, [1.0]) and np.array_equal(users, [values.size])
    variance = values.size * flip * (1 - flip)
    z_scores = (bit_sums - expected_ones) / np.sqrt(variance)
    assert np.all(np.abs(z_scores) < 4.5)
    wrong_flip = flip * 1.3
    wrong_ones = holders * (1 - wrong_flip) + (values.size - holders) * wrong_flip
    assert np.max(np.abs((bit_sums - wrong_ones) / np.sqrt(variance))) > 10


def test_grouping_preserves_counts() -> None:
    simulated = simulate()
    per_mechanism = report_counts_per_mechanism(simulated)
    users = user_counts_per_mechanism(simulated)
    assert [int(c.sum()) for c in per_mechanism] == users.tolist()
    assert total_report_counts(simulated).sum() == simulated.n
    _, counts = gibu_groups(simulated)
    assert counts.sum() == simulated.n
    assert len(counts) <= len(MECHANISMS) * K
    rappor = simulate_reports(
        secrets(400), [BasicRappor(epsilon=e, input_size=K) for e in (0.5, 2.0)], None, SECRET, "r1"
    )
    likelihoods, rappor_counts = gibu_groups(rappor)
    assert rappor_counts.sum() == 400 and likelihoods.shape == (len(rappor_counts), K)
    distinct = sum(len(np.unique(rappor.reports[rappor.user_mechanism == j], axis=0)) for j in range(2))
    assert len(rappor_counts) == distinct


def test_gibu_on_groups_equals_gibu_on_one_row_per_user() -> None:
    simulated = simulate(n=300)
    matrices = channel_matrices(simulated)
    per_user = np.array(
        [matrices[j][:, z] for j, z in zip(simulated.user_mechanism, simulated.reports, strict=True)]
    )
    grouped = generalized_iterative_bayesian_update(*gibu_groups(simulated), tolerance=1e-13)
    ungrouped = generalized_iterative_bayesian_update(per_user, np.ones(300), tolerance=1e-13)
    assert grouped.iterations == ungrouped.iterations
    assert np.allclose(grouped.estimate, ungrouped.estimate, atol=1e-12)

    rappor_mechanisms = [BasicRappor(epsilon=e, input_size=K) for e in (0.5, 2.0, 4.0)]
    rappor = simulate_reports(secrets(300), rappor_mechanisms, None, SECRET, "r1")
    per_user = np.array(
        [
            rappor_mechanisms[j].report_probability(bits[None, :])[0]
            for j, bits in zip(rappor.user_mechanism, rappor.reports, strict=True)
        ]
    )
    grouped = generalized_iterative_bayesian_update(*gibu_groups(rappor), tolerance=1e-13)
    ungrouped = generalized_iterative_bayesian_update(per_user, np.ones(300), tolerance=1e-13)
    assert np.allclose(grouped.estimate, ungrouped.estimate, atol=1e-10)


def test_invalid_inputs_are_refused() -> None:
    values = secrets(10)
    with pytest.raises(ValueError, match="RAPPOR"):
        simulate_reports(values, [MECHANISMS[0], BasicRappor(1.0, K)], None, SECRET, "r")
    with pytest.raises(ValueError, match="same alphabet"):
        simulate_reports(values, [MECHANISMS[0], RandomizedResponse(1.0, K + 1)], None, SECRET, "r")
    with pytest.raises(ValueError, match="sum to 1"):
        simulate_reports(values, MECHANISMS, [0.5, 0.3, 0.3], SECRET, "r")
    with pytest.raises(ValueError, match="0..7"):
        simulate_reports(np.array([0, K]), MECHANISMS, None, SECRET, "r")
    with pytest.raises(ValueError, match="bit vectors"):
        report_counts_per_mechanism(simulate_reports(values, [BasicRappor(1.0, K)], None, SECRET, "r"))


def _reports_by_definition(values: np.ndarray, mechanisms: list, shares: list[float] | None) -> tuple:
    """The documented definition, written out one mechanism at a time with boolean masks."""
    weights = np.full(len(mechanisms), 1 / len(mechanisms)) if shares is None else np.asarray(shares)
    uniforms = keyed_generator(SECRET, "r1", ASSIGNMENT_PURPOSE, 0).random(values.size)
    assigned = np.array(
        [min(int(np.sum(u >= np.cumsum(weights)[:-1])), len(mechanisms) - 1) for u in uniforms]
    )
    if len(mechanisms) == 1:
        assigned = np.zeros(values.size, dtype=np.int64)
    shape = (values.size, K) if isinstance(mechanisms[0], BasicRappor) else (values.size,)
    reports = np.zeros(shape, dtype=bool if len(shape) == 2 else np.int64)
    for index, mechanism in enumerate(mechanisms):
        members = assigned == index
        if members.any():
            stream = keyed_generator(SECRET, "r1", SANITIZE_PURPOSE, index)
            reports[members] = mechanism.sanitize(values[members], stream)
    return assigned, reports


@pytest.mark.parametrize(
    ("mechanisms", "shares"),
    [
        (MECHANISMS, SHARES),
        ([MECHANISMS[0]], None),
        ([BasicRappor(epsilon=1.0, input_size=K)], None),
        ([BasicRappor(epsilon=e, input_size=K) for e in (0.5, 2.0, 4.0)], [0.2, 0.5, 0.3]),
    ],
    ids=["three_matrix_mechanisms", "one_krr", "one_rappor", "three_rappor"],
)
def test_simulation_matches_its_definition_written_out(mechanisms: list, shares: list[float] | None) -> None:
    values = secrets(3001)
    assigned, reports = _reports_by_definition(values, mechanisms, shares)
    simulated = simulate_reports(values, mechanisms, shares, SECRET, "r1")
    assert np.array_equal(simulated.user_mechanism, assigned)
    assert np.array_equal(simulated.reports, reports)
    assert simulated.reports.dtype == reports.dtype and simulated.user_mechanism.dtype == np.int64


def test_one_krr_mechanism_reports_follow_its_channel_with_a_negative_control() -> None:
    values = np.full(60_000, 3)
    mechanism = RandomizedResponse(epsilon=1.0, input_size=K)
    counts = np.bincount(simulate_reports(values, [mechanism], None, SECRET, "r1").reports, minlength=K)
    assert chi_square_p_value(counts, values.size * mechanism.channel_matrix()[3]) > 1e-3
    wrong = RandomizedResponse(epsilon=1.3, input_size=K).channel_matrix()[3]
    assert chi_square_p_value(counts, values.size * wrong) < 1e-6
