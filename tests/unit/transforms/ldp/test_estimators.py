"""INV_M, the k-RR closed form, IBU_M, GIBU and RAP_M against exact data, brute force and sampling.

Channel matrices and reports are built here with small local helpers (k-RR, truncated
geometric, RAPPOR) so that these tests do not depend on the mechanisms module.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize

from transforms.ldp.estimators import (
    EstimationResult,
    average_channel,
    channel_report_groups,
    generalized_iterative_bayesian_update,
    inverse_mechanism_estimate,
    iterative_bayesian_update,
    krr_closed_form_estimate,
    post_process,
    project_to_simplex,
    rappor_estimate,
    truncate_and_normalize,
)

THETA_SIX = np.array([0.30, 0.25, 0.20, 0.12, 0.08, 0.05])


def krr_matrix(k: int, epsilon: float) -> np.ndarray:
    off = 1.0 / (np.exp(epsilon) + k - 1)
    matrix = np.full((k, k), off)
    np.fill_diagonal(matrix, np.exp(epsilon) * off)
    return matrix


def geometric_matrix(k: int, epsilon: float) -> np.ndarray:
    """Truncated linear geometric mechanism on {0..k-1} (issue 4), written entry by entry."""
    alpha = np.exp(-epsilon)
    matrix = np.empty((k, k))
    for x in range(k):
        for z in range(k):
            if z == 0:
                matrix[x, z] = alpha**x / (1 + alpha)
            elif z == k - 1:
                matrix[x, z] = alpha ** (k - 1 - x) / (1 + alpha)
            else:
                matrix[x, z] = (1 - alpha) / (1 + alpha) * alpha ** abs(z - x)
    assert np.allclose(matrix.sum(axis=1), 1.0)
    return matrix


def sample_report_counts(
    generator: np.random.Generator, theta: np.ndarray, channel: np.ndarray, users: int
) -> np.ndarray:
    """Report counts of ``users`` users with secrets from ``theta`` through ``channel``.

    Secrets per value are multinomial, then the reports of the holders of each value are
    multinomial over that row of the channel: the same law as drawing user by user.
    """
    secret_counts = generator.multinomial(users, theta)
    counts = np.zeros(channel.shape[1], dtype=np.int64)
    for value, holders in enumerate(secret_counts):
        counts += generator.multinomial(holders, channel[value])
    return counts


def mixture_report_counts(generator, theta, channels, users_per_channel):
    return [
        sample_report_counts(generator, theta, channel, users)
        for channel, users in zip(channels, users_per_channel, strict=True)
    ]


def l1(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.abs(np.asarray(p) - np.asarray(q)).sum())


# --- post-processing -------------------------------------------------------------------------


def brute_force_projection(values: np.ndarray) -> np.ndarray:
    """argmin ||w − v||² over the simplex by a general constrained optimizer (SLSQP)."""
    result = optimize.minimize(
        lambda w: float(((w - values) ** 2).sum()),
        x0=np.full(len(values), 1.0 / len(values)),
        jac=lambda w: 2.0 * (w - values),
        bounds=[(0.0, None)] * len(values),
        constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0}],
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )
    assert result.success
    return result.x


@pytest.mark.parametrize("seed", range(8))
def test_projection_matches_a_constrained_optimizer_and_the_kkt_threshold(seed):
    generator = np.random.default_rng(seed)
    values = generator.normal(0.0, 1.0, size=generator.integers(2, 8))
    projected = project_to_simplex(values)
    np.testing.assert_allclose(projected, brute_force_projection(values), atol=1e-6)
    threshold = optimize.brentq(
        lambda shift: np.maximum(values - shift, 0.0).sum() - 1.0, values.min() - 2.0, values.max()
    )
    np.testing.assert_allclose(projected, np.maximum(values - threshold, 0.0), atol=1e-10)


def test_projection_leaves_simplex_points_unchanged_and_is_idempotent():
    generator = np.random.default_rng(11)
    for _ in range(20):
        point = generator.dirichlet(np.ones(7))
        np.testing.assert_allclose(project_to_simplex(point), point, atol=1e-12)
        once = project_to_simplex(generator.normal(size=7) * 3)
        np.testing.assert_allclose(project_to_simplex(once), once, atol=1e-12)
    np.testing.assert_allclose(project_to_simplex(np.array([0.0, 0.0, 1.0, 0.0])), [0, 0, 1, 0])


def test_projection_by_hand():
    # v = (0.8, 0.6, -0.5): the two positive entries share the excess 0.4 equally.
    np.testing.assert_allclose(project_to_simplex(np.array([0.8, 0.6, -0.5])), [0.6, 0.4, 0.0])
    # A constant vector projects onto the uniform distribution whatever its level.
    np.testing.assert_allclose(project_to_simplex(np.full(4, -3.0)), np.full(4, 0.25))


def test_truncate_and_normalize_by_hand():
    np.testing.assert_allclose(truncate_and_normalize(np.array([0.8, 0.6, -0.5])), [0.8 / 1.4, 0.6 / 1.4, 0.0])
    np.testing.assert_allclose(truncate_and_normalize(np.array([-1.0, -2.0])), [0.5, 0.5])
    with pytest.raises(ValueError):
        post_process(np.array([0.5, 0.5]), "clip")


# --- INV_M and the k-RR closed form -----------------------------------------------------------


def test_inverse_mechanism_recovers_theta_from_exact_report_frequencies():
    k = len(THETA_SIX)
    channels = [krr_matrix(k, 0.5), krr_matrix(k, 2.0), geometric_matrix(k, 0.7), geometric_matrix(k, 1.5)]
    users = [1000, 3000, 2500, 500]
    expected_counts = sum(n_j * (THETA_SIX @ A_j) for A_j, n_j in zip(channels, users, strict=True))
    for post in ("projection", "truncate"):
        estimate = inverse_mechanism_estimate(channels, users, expected_counts, post_processing=post)
        np.testing.assert_allclose(estimate, THETA_SIX, atol=1e-10)
    # Average channel: the user-weighted mean, computed entry by entry.
    manual = (1000 * channels[0] + 3000 * channels[1] + 2500 * channels[2] + 500 * channels[3]) / 7000
    np.testing.assert_allclose(average_channel(channels, users), manual, atol=1e-15)


def test_inverse_mechanism_takes_the_least_squares_solution_for_a_tall_average_channel():
    generator = np.random.default_rng(3)
    theta = generator.dirichlet(np.ones(4))
    channels = [generator.dirichlet(np.ones(7), size=4) for _ in range(3)]
    users = [10, 20, 30]
    counts = sum(n_j * (theta @ A_j) for A_j, n_j in zip(channels, users, strict=True))
    np.testing.assert_allclose(inverse_mechanism_estimate(channels, users, counts), theta, atol=1e-10)


def test_inverse_mechanism_rejects_mixed_output_alphabets_and_points_to_gibu():
    with pytest.raises(ValueError, match="GIBU"):
        inverse_mechanism_estimate([krr_matrix(4, 1.0), np.full((4, 3), 1 / 3)], [5, 5], np.ones(4))


def test_krr_closed_form_equals_inverse_mechanism_on_all_krr_data():
    generator = np.random.default_rng(5)
    k = len(THETA_SIX)
    epsilons = np.array([0.3, 1.0, 2.5, 4.0])
    users = np.array([400, 900, 300, 1400])
    channels = [krr_matrix(k, e) for e in epsilons]
    counts = sum(mixture_report_counts(generator, THETA_SIX, channels, users))
    per_user_epsilons = np.repeat(epsilons, users)
    for post in ("projection", "truncate"):
        general = inverse_mechanism_estimate(channels, users, counts, post_processing=post)
        grouped = krr_closed_form_estimate(epsilons, k, counts, user_counts=users, post_processing=post)
        per_user = krr_closed_form_estimate(per_user_epsilons, k, counts, post_processing=post)
        np.testing.assert_allclose(grouped, general, atol=1e-12)
        np.testing.assert_allclose(per_user, general, atol=1e-12)


def test_krr_closed_form_by_hand_for_two_values():
    # k = 2, one user group with ε = ln 3: q = 1/(3 + 1) = 0.25, θ̂_0 = (0.7 − 0.25)/(1 − 0.5) = 0.9.
    estimate = krr_closed_form_estimate(np.array([np.log(3.0)]), 2, np.array([70, 30]))
    np.testing.assert_allclose(estimate, [0.9, 0.1])


# --- IBU_M and GIBU ----------------------------------------------------------------------------


@pytest.mark.parametrize("channel_builder", [krr_matrix, geometric_matrix])
def test_ibu_converges_to_theta_on_exact_report_frequencies(channel_builder):
    channel = channel_builder(len(THETA_SIX), 1.2)
    result = iterative_bayesian_update(channel, THETA_SIX @ channel, tolerance=1e-13, max_iterations=200_000)
    assert isinstance(result, EstimationResult)
    assert result.converged and result.final_change <= 1e-13
    np.testing.assert_allclose(result.estimate, THETA_SIX, atol=1e-7)


def test_ibu_reports_non_convergence_at_the_iteration_cap():
    channel = geometric_matrix(len(THETA_SIX), 0.4)
    result = iterative_bayesian_update(channel, THETA_SIX @ channel, tolerance=1e-14, max_iterations=3)
    assert result.iterations == 3 and not result.converged
    assert result.final_change > 1e-14


def test_gibu_converges_to_theta_on_exact_expected_counts_of_a_mixture():
    k = len(THETA_SIX)
    channels = [krr_matrix(k, 0.8), geometric_matrix(k, 1.0), geometric_matrix(k, 2.0), krr_matrix(k, 3.0)]
    users = [2000, 1000, 500, 1500]
    expected = [n_j * (THETA_SIX @ A_j) for A_j, n_j in zip(channels, users, strict=True)]
    likelihoods, counts = channel_report_groups(channels, expected)
    assert likelihoods.shape == (4 * k, k)
    result = generalized_iterative_bayesian_update(likelihoods, counts, tolerance=1e-13, max_iterations=200_000)
    assert result.converged
    np.testing.assert_allclose(result.estimate, THETA_SIX, atol=1e-7)


def test_gibu_equals_ibu_when_every_user_has_the_same_mechanism():
    generator = np.random.default_rng(8)
    channel = geometric_matrix(len(THETA_SIX), 0.9)
    counts = sample_report_counts(generator, THETA_SIX, channel, 5000)
    ibu = iterative_bayesian_update(channel, counts, tolerance=1e-12, max_iterations=50_000)
    gibu = generalized_iterative_bayesian_update(*channel_report_groups([channel], [counts]),
                                                 tolerance=1e-12, max_iterations=50_000)
    assert ibu.iterations == gibu.iterations
    np.testing.assert_allclose(gibu.estimate, ibu.estimate, atol=1e-12)


def test_gibu_on_grouped_users_equals_gibu_with_one_group_per_user():
    generator = np.random.default_rng(9)
    k = 5
    channels = [krr_matrix(k, 1.0), geometric_matrix(k, 0.5), generator.dirichlet(np.ones(3), size=k)]
    theta = generator.dirichlet(np.ones(k) * 2)
    per_user_rows, mechanism_counts = [], []
    for channel in channels:
        secrets = generator.choice(k, size=150, p=theta)
        reports = np.array([generator.choice(channel.shape[1], p=channel[x]) for x in secrets])
        per_user_rows.append(channel[:, reports].T)
        mechanism_counts.append(np.bincount(reports, minlength=channel.shape[1]))
    grouped_rows, grouped_counts = channel_report_groups(channels, mechanism_counts)
    assert len(grouped_counts) <= 5 + 5 + 3
    for acceleration in ("none", "squarem"):
        ungrouped = generalized_iterative_bayesian_update(np.concatenate(per_user_rows), np.ones(450),
                                                          tolerance=1e-12, max_iterations=20_000,
                                                          acceleration=acceleration)
        grouped = generalized_iterative_bayesian_update(grouped_rows, grouped_counts, tolerance=1e-12,
                                                        max_iterations=20_000, acceleration=acceleration)
        np.testing.assert_allclose(grouped.estimate, ungrouped.estimate, atol=1e-9)
        if acceleration == "none":
            assert grouped.iterations == ungrouped.iterations


def _gibu_log_likelihood(rows: np.ndarray, counts: np.ndarray, theta: np.ndarray) -> float:
    return float(counts @ np.log(rows @ theta)) / float(counts.sum())


def test_squarem_reaches_the_plain_em_fixed_point_in_fewer_steps():
    generator = np.random.default_rng(21)
    k = 40
    channels = [geometric_matrix(k, alpha) for alpha in (0.95, 0.8, 0.6)] + [krr_matrix(k, 0.5)]
    theta = generator.dirichlet(np.ones(k))
    counts = [sample_report_counts(generator, theta, channel, 4000) for channel in channels]
    rows, group_counts = channel_report_groups(channels, counts)
    plain = generalized_iterative_bayesian_update(rows, group_counts, tolerance=1e-11, max_iterations=200_000,
                                                  acceleration="none")
    accelerated = generalized_iterative_bayesian_update(rows, group_counts, tolerance=1e-11,
                                                        max_iterations=200_000, acceleration="squarem")
    assert plain.converged and accelerated.converged
    assert accelerated.iterations < plain.iterations / 2
    assert _gibu_log_likelihood(rows, group_counts, accelerated.estimate) >= (
        _gibu_log_likelihood(rows, group_counts, plain.estimate) - 1e-9
    )
    np.testing.assert_allclose(accelerated.estimate, plain.estimate, atol=1e-5)


def test_squarem_iterates_never_decrease_the_likelihood_and_stay_distributions():
    generator = np.random.default_rng(22)
    k = 12
    channels = [geometric_matrix(k, 0.9), krr_matrix(k, 0.3)]
    counts = [sample_report_counts(generator, generator.dirichlet(np.ones(k)), channel, 500) for channel in channels]
    rows, group_counts = channel_report_groups(channels, counts)
    previous = -np.inf
    for cap in range(1, 60):
        result = generalized_iterative_bayesian_update(rows, group_counts, tolerance=0.0, max_iterations=cap)
        assert np.all(result.estimate >= 0) and np.isclose(result.estimate.sum(), 1.0)
        likelihood = _gibu_log_likelihood(rows, group_counts, result.estimate)
        assert likelihood >= previous - 1e-12
        previous = likelihood


def test_gibu_is_invariant_to_rescaling_a_likelihood_row():
    generator = np.random.default_rng(10)
    rows = generator.random((6, 4)) + 0.05
    counts = generator.integers(1, 50, size=6).astype(float)
    scaled = rows * generator.uniform(0.1, 10.0, size=(6, 1))
    first = generalized_iterative_bayesian_update(rows, counts, tolerance=1e-12)
    second = generalized_iterative_bayesian_update(scaled, counts, tolerance=1e-12)
    np.testing.assert_allclose(first.estimate, second.estimate, atol=1e-12)


def complementary_cyclic_pair() -> tuple[np.ndarray, np.ndarray]:
    """``A`` (cyclic, invertible) and ``A′ = 2U − A`` (also invertible) with ``(A + A′)/2 = U``.

    ``U`` is the non-informative channel with every entry ``1/4``: every secret produces the
    same report distribution under the average mechanism.
    """
    profile = np.array([0.45, 0.30, 0.15, 0.10])
    first = np.array([np.roll(profile, x) for x in range(4)])
    second = 0.5 - first
    return first, second


def krr_row_swapped_pair() -> tuple[np.ndarray, np.ndarray]:
    """The paper's two-value case: k-RR ``A`` and ``A′`` = ``A`` with its rows swapped."""
    first = krr_matrix(2, 2.0)
    return first, first[::-1].copy()


@pytest.mark.parametrize("pair_builder", [complementary_cyclic_pair, krr_row_swapped_pair])
def test_counter_example_ibu_on_the_average_fails_where_gibu_recovers(pair_builder):
    first, second = pair_builder()
    k = first.shape[0]
    assert np.linalg.matrix_rank(first) == k and np.linalg.matrix_rank(second) == k
    average = average_channel([first, second], [1, 1])
    assert np.allclose(average, average[0])
    theta = np.array([0.55, 0.25, 0.15, 0.05])[:k] if k == 4 else np.array([0.8, 0.2])
    theta = theta / theta.sum()
    uniform = np.full(k, 1.0 / k)
    generator = np.random.default_rng(12)
    per_mechanism = mixture_report_counts(generator, theta, [first, second], [20_000, 20_000])
    ibu = iterative_bayesian_update(average, per_mechanism[0] + per_mechanism[1])
    np.testing.assert_allclose(ibu.estimate, uniform, atol=1e-12)
    gibu = generalized_iterative_bayesian_update(*channel_report_groups([first, second], per_mechanism))
    assert gibu.converged
    assert l1(gibu.estimate, theta) < 0.06
    assert l1(ibu.estimate, theta) > 0.5


def test_gibu_with_rappor_likelihood_rows_recovers_theta():
    generator = np.random.default_rng(13)
    k = 5
    theta = np.array([0.4, 0.25, 0.2, 0.1, 0.05])
    epsilons = np.repeat([1.0, 2.0, 4.0], 8000)
    secrets = generator.choice(k, size=len(epsilons), p=theta)
    flip = 1.0 / (1.0 + np.exp(epsilons / 2.0))
    one_hot = np.eye(k, dtype=bool)[secrets]
    reports = one_hot ^ (generator.random((len(epsilons), k)) < flip[:, None])
    likelihood_rows = np.exp(epsilons[:, None] * reports)
    result = generalized_iterative_bayesian_update(likelihood_rows, np.ones(len(epsilons)), tolerance=1e-10)
    assert result.converged
    assert l1(result.estimate, theta) < 0.05
    assert l1(np.full(k, 1 / k), theta) > 0.4


# --- RAP_M -----------------------------------------------------------------------------------


def test_rappor_estimate_recovers_theta_from_exact_expected_bit_sums():
    theta = np.array([0.5, 0.2, 0.15, 0.1, 0.05])
    epsilons = np.array([0.5, 1.0, 3.0])
    users = np.array([300, 500, 200])
    flips = 1.0 / (1.0 + np.exp(epsilons / 2.0))
    bit_sums = sum(n_j * (rho + theta * (1 - 2 * rho)) for n_j, rho in zip(users, flips, strict=True))
    for post in ("projection", "truncate"):
        grouped = rappor_estimate(bit_sums, 1000, epsilons, user_counts=users, post_processing=post)
        per_user = rappor_estimate(bit_sums, 1000, np.repeat(epsilons, users), post_processing=post)
        np.testing.assert_allclose(grouped, theta, atol=1e-12)
        np.testing.assert_allclose(per_user, theta, atol=1e-12)
    with pytest.raises(ValueError):
        rappor_estimate(bit_sums, 999, epsilons, user_counts=users)


# --- consistency -----------------------------------------------------------------------------


def gibu_mean_error(users_total: int, assumed_scale: float) -> float:
    """Mean L1 error of GIBU over seeds; the estimator is told each ε times ``assumed_scale``."""
    k = len(THETA_SIX)
    epsilons = [0.5, 1.0, 2.0, 1.5]
    builders = [krr_matrix, geometric_matrix, krr_matrix, geometric_matrix]
    true_channels = [build(k, e) for build, e in zip(builders, epsilons, strict=True)]
    assumed = [build(k, e * assumed_scale) for build, e in zip(builders, epsilons, strict=True)]
    errors = []
    for seed in range(4):
        generator = np.random.default_rng(100 + seed)
        counts = mixture_report_counts(generator, THETA_SIX, true_channels, [users_total // 4] * 4)
        result = generalized_iterative_bayesian_update(*channel_report_groups(assumed, counts),
                                                       tolerance=1e-9, max_iterations=50_000)
        errors.append(l1(result.estimate, THETA_SIX))
    return float(np.mean(errors))


def test_gibu_error_falls_with_n_and_a_misspecified_epsilon_does_not():
    errors = [gibu_mean_error(n, 1.0) for n in (1_000, 10_000, 100_000)]
    assert errors[0] > errors[1] > errors[2]
    # Sampling error shrinks like 1/sqrt(n): a factor 10 over two decades; ask for 4.
    assert errors[2] < errors[0] / 4
    # Negative control: channels built with every ε 30% too small leave a bias (about 0.14 in
    # L1 here) that more data does not remove.
    biased = gibu_mean_error(100_000, 0.7)
    assert biased > 3 * errors[2]
