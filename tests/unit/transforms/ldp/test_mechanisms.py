"""LDP mechanisms (ElSalamouny & Palamidessi, free-will privacy) against hand formulas, brute
force and their privacy promises; sanitize against the channel matrix by chi-square."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from transforms.core.keyed_randomness import keyed_generator
from transforms.ldp import mechanisms as mechanisms_module
from transforms.ldp.mechanisms import (
    BasicRappor,
    PlanarGeometric,
    RandomizedResponse,
    ShokriOptimal,
    TruncatedGeometric,
    adversary_expected_error,
    expected_quality_loss,
    grid_distances,
    mechanism_from_spec,
    planar_truncation_radius,
    sample_from_channel,
)

DRAWS = 20_000
ACCEPT_P = 1e-3
REJECT_P = 1e-6
SKEWED_PRIOR = (0.3, 0.05, 0.1, 0.2, 0.15, 0.2)


def _mechanisms() -> list:
    return [
        RandomizedResponse(1.0, 5),
        TruncatedGeometric(0.5, 3, 12),
        PlanarGeometric(0.8, 4, 5, 1.0),
        PlanarGeometric(1.6, 3, 4, 0.5),
        BasicRappor(1.2, 4),
        ShokriOptimal(0.6, SKEWED_PRIOR, 2, 3, 1.0),
    ]


def _chi_square_p(reports: np.ndarray, expected_row: np.ndarray) -> float:
    counts = np.bincount(reports, minlength=expected_row.size).astype(float)
    expected = expected_row * reports.size
    impossible = expected_row <= 0.0
    if counts[impossible].any():
        return 0.0
    counts, expected = counts[~impossible], expected[~impossible]
    if counts.size == 1:
        return 1.0
    small = expected < 5.0
    if small.any():
        counts = np.r_[counts[~small], counts[small].sum()]
        expected = np.r_[expected[~small], expected[small].sum()]
    return float(stats.chisquare(counts, expected).pvalue)


def _sanitize_p_values(mechanism, reference: np.ndarray, secrets: list[int], seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return [
        _chi_square_p(mechanism.sanitize(np.full(DRAWS, secret), rng), reference[secret])
        for secret in secrets
    ]


@pytest.mark.parametrize("mechanism", _mechanisms(), ids=lambda m: m.name)
def test_channel_rows_are_distributions(mechanism) -> None:
    channel = mechanism.channel_matrix()
    assert channel.shape == (mechanism.input_size, mechanism.output_size)
    assert channel.dtype == np.float64
    assert np.all(channel >= 0.0)
    np.testing.assert_allclose(channel.sum(axis=1), 1.0, rtol=0, atol=1e-12)


def test_randomized_response_by_hand() -> None:
    # e^ε = 3, k = 4: keep 3/6, each other value 1/6.
    channel = RandomizedResponse(math.log(3.0), 4).channel_matrix()
    expected = np.full((4, 4), 1.0 / 6.0)
    np.fill_diagonal(expected, 0.5)
    np.testing.assert_allclose(channel, expected, rtol=1e-14)


def test_truncated_geometric_by_hand() -> None:
    # α = 1/2 on [2, 5]; interior (1−α)/(1+α) = 1/3, boundaries α^d/(1+α) = (2/3)·α^d.
    channel = TruncatedGeometric(math.log(2.0), 2, 5).channel_matrix()
    expected = np.array(
        [
            [2 / 3, 1 / 6, 1 / 12, 1 / 12],
            [1 / 3, 1 / 3, 1 / 6, 1 / 6],
            [1 / 6, 1 / 6, 1 / 3, 1 / 3],
            [1 / 12, 1 / 12, 1 / 6, 2 / 3],
        ]
    )
    np.testing.assert_allclose(channel, expected, rtol=1e-14)


def test_truncated_geometric_is_clamped_two_sided_geometric() -> None:
    mechanism = TruncatedGeometric(0.7, -3, 4)
    alpha = math.exp(-0.7)
    brute = np.zeros((8, 8))
    for secret in range(8):
        for noise in range(-400, 401):
            brute[secret, min(max(secret + noise, 0), 7)] += (1 - alpha) / (1 + alpha) * alpha ** abs(noise)
    np.testing.assert_allclose(mechanism.channel_matrix(), brute, rtol=1e-12)


def _planar_brute_force(decay: float, rows: int, columns: int, radius: int) -> np.ndarray:
    channel = np.zeros((rows * columns, rows * columns))
    total = 0.0
    for a in range(-radius, radius + 1):
        for b in range(-radius, radius + 1):
            total += math.exp(-decay * math.hypot(a, b))
    for secret in range(rows * columns):
        row, column = divmod(secret, columns)
        for a in range(-radius, radius + 1):
            for b in range(-radius, radius + 1):
                cell = min(max(row + a, 0), rows - 1) * columns + min(max(column + b, 0), columns - 1)
                channel[secret, cell] += math.exp(-decay * math.hypot(a, b)) / total
    return channel


def test_planar_geometric_matches_brute_force_lattice_sum() -> None:
    # ε·s = 1.5: the mass beyond radius 40 is ~e^{-60}, far below float resolution.
    brute = _planar_brute_force(1.5, 3, 2, 40)
    np.testing.assert_allclose(
        PlanarGeometric(1.5, 3, 2, 1.0).channel_matrix(), brute, rtol=1e-11, atol=1e-15
    )
    np.testing.assert_allclose(
        PlanarGeometric(3.0, 3, 2, 0.5).channel_matrix(), brute, rtol=1e-11, atol=1e-15
    )


def test_planar_truncation_radius_leaves_negligible_mass() -> None:
    decay = 0.3
    radius = planar_truncation_radius(decay)
    offsets = np.arange(-3 * radius, 3 * radius + 1)
    weights = np.exp(-decay * np.hypot(offsets[:, None], offsets[None, :]))
    inner = np.abs(offsets) <= radius
    kept = weights[np.ix_(inner, inner)].sum()
    assert (weights.sum() - kept) / weights.sum() < 1e-12
    # and the radius is not wildly oversized: half of it would leave too much out.
    half = np.abs(offsets) <= radius // 2
    assert (weights.sum() - weights[np.ix_(half, half)].sum()) / weights.sum() > 1e-12


def test_randomized_response_ldp_ratio_is_exactly_e_epsilon() -> None:
    channel = RandomizedResponse(1.3, 6).channel_matrix()
    ratios = channel.max(axis=0) / channel.min(axis=0)
    np.testing.assert_allclose(ratios, math.exp(1.3), rtol=1e-12)


def test_truncated_geometric_ldp() -> None:
    epsilon, mechanism = 0.4, TruncatedGeometric(0.4, 0, 9)
    channel = mechanism.channel_matrix()
    neighbour_ratios = np.maximum(channel[1:] / channel[:-1], channel[:-1] / channel[1:])
    assert neighbour_ratios.max() <= math.exp(epsilon) * (1 + 1e-12)
    np.testing.assert_allclose(neighbour_ratios.max(), math.exp(epsilon), rtol=1e-12)
    assert (channel.max(axis=0) / channel.min(axis=0)).max() <= math.exp(epsilon * 9) * (1 + 1e-12)


@pytest.mark.parametrize(("epsilon", "cell_side"), [(0.8, 1.0), (1.6, 0.5), (0.3, 2.0)])
def test_planar_geometric_geo_indistinguishability(epsilon: float, cell_side: float) -> None:
    mechanism = PlanarGeometric(epsilon, 4, 5, cell_side)
    channel = mechanism.channel_matrix()
    bound = np.exp(epsilon * grid_distances(4, 5, cell_side))
    ratios = channel[:, None, :] / channel[None, :, :]
    assert np.all(ratios <= bound[:, :, None] * (1 + 1e-9))


def test_rappor_ldp_ratio() -> None:
    channel = BasicRappor(0.9, 4).channel_matrix()
    np.testing.assert_allclose((channel.max(axis=0) / channel.min(axis=0)).max(), math.exp(0.9), rtol=1e-12)


def test_rappor_probability_and_likelihood_against_enumeration() -> None:
    epsilon, size = 1.7, 4
    mechanism = BasicRappor(epsilon, size)
    flip = 1.0 / (1.0 + math.exp(epsilon / 2.0))
    reports = np.array(list(itertools.product([False, True], repeat=size)))
    brute = np.ones((reports.shape[0], size))
    for n, report in enumerate(reports):
        for secret in range(size):
            for bit in range(size):
                brute[n, secret] *= (1 - flip) if report[bit] == (bit == secret) else flip
    np.testing.assert_allclose(brute.sum(axis=0), 1.0, rtol=1e-12)
    np.testing.assert_allclose(mechanism.report_probability(reports), brute, rtol=1e-12)
    likelihood = mechanism.report_likelihood(reports)
    proportionality = brute / likelihood
    np.testing.assert_allclose(
        proportionality, np.broadcast_to(proportionality[:, :1], brute.shape), rtol=1e-12
    )


def test_rappor_bit_flip_frequency() -> None:
    mechanism, rng = BasicRappor(1.0, 4), np.random.default_rng(11)
    reports = mechanism.sanitize(np.full(DRAWS, 2), rng)
    assert reports.shape == (DRAWS, 4) and reports.dtype == np.bool_
    flips = (reports != (np.arange(4) == 2)).sum(axis=0)
    flip = 1.0 / (1.0 + math.exp(0.5))
    wrong_flip = 1.0 / (1.0 + math.exp(0.65))
    for count in flips:
        assert stats.binomtest(int(count), DRAWS, flip).pvalue > ACCEPT_P
    assert stats.binomtest(int(flips.sum()), 4 * DRAWS, wrong_flip).pvalue < REJECT_P


def test_rappor_reports_match_channel() -> None:
    rng = np.random.default_rng(12)
    correct, wrong = BasicRappor(1.2, 4), BasicRappor(1.2 * 1.3, 4)
    reference = correct.channel_matrix()
    weights = 1 << np.arange(4)
    for secret in (0, 3):
        codes = (correct.sanitize(np.full(DRAWS, secret), rng) * weights).sum(axis=1)
        assert _chi_square_p(codes, reference[secret]) > ACCEPT_P
        wrong_codes = (wrong.sanitize(np.full(DRAWS, secret), rng) * weights).sum(axis=1)
        assert _chi_square_p(wrong_codes, reference[secret]) < REJECT_P


@pytest.mark.parametrize(
    ("correct", "wrong", "secrets"),
    [
        (RandomizedResponse(1.0, 5), RandomizedResponse(1.3, 5), [0, 4]),
        (TruncatedGeometric(0.5, 3, 12), TruncatedGeometric(0.65, 3, 12), [0, 4, 9]),
        (PlanarGeometric(0.8, 4, 5, 1.0), PlanarGeometric(1.04, 4, 5, 1.0), [0, 7, 19]),
    ],
    ids=["krr", "truncated_geometric", "planar_geometric"],
)
def test_sanitize_matches_channel_and_rejects_wrong_epsilon(correct, wrong, secrets: list[int]) -> None:
    reference = correct.channel_matrix()
    assert min(_sanitize_p_values(correct, reference, secrets, seed=5)) > ACCEPT_P
    assert max(_sanitize_p_values(wrong, reference, secrets, seed=6)) < REJECT_P


def test_sanitize_mixed_secrets_in_one_call() -> None:
    mechanism, rng = TruncatedGeometric(1.0, 0, 5), np.random.default_rng(3)
    secrets = rng.integers(0, 6, size=6 * DRAWS)
    reports = mechanism.sanitize(secrets, rng)
    channel = mechanism.channel_matrix()
    for secret in range(6):
        assert _chi_square_p(reports[secrets == secret], channel[secret]) > ACCEPT_P


def test_sample_from_channel_and_shokri_sanitize() -> None:
    mechanism, rng = ShokriOptimal(0.6, SKEWED_PRIOR, 2, 3, 1.0), np.random.default_rng(8)
    channel = mechanism.channel_matrix()
    for secret in range(6):
        assert _chi_square_p(mechanism.sanitize(np.full(DRAWS, secret), rng), channel[secret]) > ACCEPT_P
    shifted = np.roll(RandomizedResponse(1.0, 5).channel_matrix(), 1, axis=1)
    reports = sample_from_channel(shifted, np.full(DRAWS, 2), rng)
    assert _chi_square_p(reports, RandomizedResponse(1.0, 5).channel_matrix()[2]) < REJECT_P


def test_adversary_error_and_quality_loss_against_loops() -> None:
    rng = np.random.default_rng(4)
    channel = rng.dirichlet(np.ones(6), size=6)
    prior, distances = np.array(SKEWED_PRIOR), grid_distances(2, 3, 0.5)
    error = sum(
        min(sum(prior[x] * channel[x, z] * distances[guess, x] for x in range(6)) for guess in range(6))
        for z in range(6)
    )
    loss = sum(prior[x] * channel[x, z] * distances[x, z] for x in range(6) for z in range(6))
    assert adversary_expected_error(channel, prior, distances) == pytest.approx(error, rel=1e-12)
    assert expected_quality_loss(channel, prior, distances) == pytest.approx(loss, rel=1e-12)
    assert distances[0, 5] == pytest.approx(0.5 * math.sqrt(5.0), rel=1e-14)


@pytest.mark.parametrize("bound", [0.2, 0.6, 1.0])
def test_shokri_optimal_beats_a_trivial_mechanism_under_the_same_bound(bound: float) -> None:
    prior, distances = np.array(SKEWED_PRIOR), grid_distances(2, 3, 1.0)
    channel = ShokriOptimal(bound, SKEWED_PRIOR, 2, 3, 1.0).channel_matrix()
    np.testing.assert_allclose(channel.sum(axis=1), 1.0, atol=1e-12)
    assert expected_quality_loss(channel, prior, distances) <= bound + 1e-7
    centre = int(np.argmin(distances @ prior))
    centre_loss = float(prior @ distances[:, centre])
    share = min(1.0, bound / centre_loss)
    trivial = (1.0 - share) * np.eye(6)
    trivial[:, centre] += share
    assert expected_quality_loss(trivial, prior, distances) <= bound + 1e-12
    optimal_error = adversary_expected_error(channel, prior, distances)
    assert optimal_error >= adversary_expected_error(trivial, prior, distances) - 1e-9
    assert optimal_error <= centre_loss + 1e-9


def test_shokri_limits() -> None:
    prior, distances = np.array(SKEWED_PRIOR), grid_distances(2, 3, 1.0)
    prior_only_error = float(np.min(distances @ prior))
    loose = ShokriOptimal(100.0, SKEWED_PRIOR, 2, 3, 1.0).channel_matrix()
    assert adversary_expected_error(loose, prior, distances) == pytest.approx(prior_only_error, abs=1e-8)
    tight = ShokriOptimal(0.0, SKEWED_PRIOR, 2, 3, 1.0).channel_matrix()
    np.testing.assert_allclose(tight, np.eye(6), atol=1e-8)


@pytest.mark.parametrize("mechanism", _mechanisms(), ids=lambda m: m.name)
def test_spec_round_trip(mechanism) -> None:
    spec = mechanism.to_spec()
    rebuilt = mechanism_from_spec(json.loads(json.dumps(spec)))
    assert rebuilt == mechanism
    assert rebuilt.to_spec() == spec
    np.testing.assert_array_equal(rebuilt.channel_matrix(), mechanism.channel_matrix())


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "laplace", "epsilon": 1.0},
        {"type": "krr", "epsilon": 1.0},
        {"type": "krr", "epsilon": 1.0, "input_size": 4, "extra": 1},
        {"type": "krr", "epsilon": 0.0, "input_size": 4},
        {"type": "krr", "epsilon": -1.0, "input_size": 4},
        {"type": "krr", "epsilon": float("inf"), "input_size": 4},
        {"type": "rappor", "epsilon": 1.0, "input_size": 1},
        {"type": "truncated_geometric", "epsilon": 1.0, "lower": 5, "upper": 5},
        {"type": "planar_geometric", "epsilon": 1.0, "rows": 2, "columns": 2, "cell_side": 0.0},
        {"type": "shokri_optimal", "quality_loss_bound": 1.0, "prior": [0.5, 0.4], "rows": 1, "columns": 2},
        {"epsilon": 1.0},
    ],
)
def test_bad_specs_are_refused(spec: dict) -> None:
    with pytest.raises(ValueError):
        mechanism_from_spec(spec)


def test_sanitize_refuses_secrets_outside_the_alphabet() -> None:
    with pytest.raises(ValueError):
        RandomizedResponse(1.0, 3).sanitize(np.array([0, 3]), np.random.default_rng(0))
    with pytest.raises(ValueError):
        BasicRappor(1.0, 3).report_likelihood(np.zeros((2, 4), dtype=bool))


TEST_SECRET = bytes(range(32))
MANY_DRAWS = 200_000


def _keyed(key: int) -> np.random.Generator:
    return keyed_generator(TEST_SECRET, "test-release", "ldp/test", key)


def test_randomized_response_large_alphabet_across_chunks_and_wrong_epsilon() -> None:
    assert MANY_DRAWS > 3 * mechanisms_module.CLIENT_CHUNK_USERS
    correct, wrong = RandomizedResponse(1.0, 100), RandomizedResponse(1.3, 100)
    reference = correct.channel_matrix()
    for key, secret in enumerate((0, 57, 99)):
        reports = correct.sanitize(np.full(MANY_DRAWS, secret), _keyed(key))
        assert reports.dtype == np.int64
        assert _chi_square_p(reports, reference[secret]) > ACCEPT_P
        wrong_reports = wrong.sanitize(np.full(MANY_DRAWS, secret), _keyed(10 + key))
        assert _chi_square_p(wrong_reports, reference[secret]) < REJECT_P


def test_randomized_response_mixed_secrets_and_two_values() -> None:
    mechanism = RandomizedResponse(0.7, 7)
    secrets = np.random.default_rng(4).integers(0, 7, size=7 * DRAWS)
    reports = mechanism.sanitize(secrets, _keyed(1))
    channel = mechanism.channel_matrix()
    for secret in range(7):
        assert _chi_square_p(reports[secrets == secret], channel[secret]) > ACCEPT_P
    binary, secrets = RandomizedResponse(0.4, 2), np.arange(DRAWS) % 2
    kept = binary.sanitize(secrets, _keyed(2)) == secrets
    assert stats.binomtest(int(kept.sum()), DRAWS, binary.keep_probability).pvalue > ACCEPT_P
    assert (
        stats.binomtest(int(kept.sum()), DRAWS, RandomizedResponse(0.6, 2).keep_probability).pvalue < REJECT_P
    )


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0, 38.0, 60.0])
@pytest.mark.parametrize("size", [2, 3, 100])
def test_randomized_response_threshold_rounds_towards_privacy(epsilon: float, size: int) -> None:
    threshold = mechanisms_module._randomized_response_threshold(epsilon, size)
    assert 0 <= threshold < 2**64
    change = Fraction(size - 1) / (Fraction(math.exp(epsilon)) + (size - 1))
    realized_keep = Fraction(threshold, 2**64)
    assert realized_keep <= 1 - change
    assert 1 - change - realized_keep < Fraction(1, 2**63)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 4.0, 40.0, 80.0])
def test_rappor_threshold_rounds_towards_privacy(epsilon: float) -> None:
    threshold = mechanisms_module._rappor_flip_threshold(epsilon)
    flip = 1 / (1 + Fraction(math.exp(epsilon / 2)))
    realized = Fraction(threshold, 2**32)
    assert 0 < threshold <= 2**31
    assert flip <= realized < flip + Fraction(1, 2**32)


def test_huge_epsilon_keeps_the_secret_without_overflow() -> None:
    secrets = np.arange(1000) % 5
    assert np.array_equal(RandomizedResponse(60.0, 5).sanitize(secrets, _keyed(3)), secrets)
    flipped = BasicRappor(90.0, 5).sanitize(secrets, _keyed(4))
    assert np.array_equal(flipped, np.eye(5, dtype=bool)[secrets])


def test_sanitize_does_not_depend_on_the_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = np.random.default_rng(9).integers(0, 5, size=1001)
    krr, rappor = RandomizedResponse(1.5, 5), BasicRappor(1.5, 5)
    default_krr, default_rappor = krr.sanitize(secrets, _keyed(5)), rappor.sanitize(secrets, _keyed(6))
    monkeypatch.setattr(mechanisms_module, "CLIENT_CHUNK_USERS", 7)
    monkeypatch.setattr(mechanisms_module, "_RAPPOR_CHUNK_BITS", 30)
    assert np.array_equal(krr.sanitize(secrets, _keyed(5)), default_krr)
    assert np.array_equal(rappor.sanitize(secrets, _keyed(6)), default_rappor)
    assert not np.array_equal(krr.sanitize(secrets, _keyed(7)), default_krr)


def test_rappor_joint_reports_across_chunks_match_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mechanisms_module, "_RAPPOR_CHUNK_BITS", 50)
    correct, wrong = BasicRappor(1.2, 5), BasicRappor(1.2 * 1.3, 5)
    reference = correct.channel_matrix()
    weights = 1 << np.arange(5)
    secrets = np.random.default_rng(10).integers(0, 5, size=5 * DRAWS + 1)
    reports = correct.sanitize(secrets, _keyed(8))
    wrong_reports = wrong.sanitize(secrets, _keyed(9))
    for secret in (0, 2, 4):
        holders = secrets == secret
        assert _chi_square_p((reports[holders] * weights).sum(axis=1), reference[secret]) > ACCEPT_P
        assert _chi_square_p((wrong_reports[holders] * weights).sum(axis=1), reference[secret]) < REJECT_P
