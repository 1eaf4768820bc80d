"""The synthesis draws follow their distributions (KS and chi-square, with negative controls).

Every draw comes from the release's keyed streams with a fixed test secret, so each test is
deterministic; the thresholds are honest (true law: p > 0.001; a 30% wrong scale: p < 1e-6,
where ~20,000 draws put the wrong-scale KS statistic several times above its critical value).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from transforms.core.keyed_randomness import keyed_generator
from transforms.core.plausible_deniability import noisy_threshold
from transforms.crowd.synthesis import (
    KERNEL_COLUMN,
    SEED_COLUMN,
    THRESHOLD_COLUMN,
    SynthesisParameters,
    candidate_uniforms,
    choose_seeds,
    draw_candidates,
    kernel_draws,
    synthesis_round_generator,
)

SECRET = bytes.fromhex("c3" * 32)
DRAWS = 20_000
PASSES = 1e-3
REJECTED = 1e-6


def round_uniforms(object_id: int, rounds: int, batch: int) -> np.ndarray:
    """The uniforms the synthesis of ``object_id`` would use over ``rounds`` rounds."""
    return np.concatenate(
        [
            candidate_uniforms(synthesis_round_generator(SECRET, "stats", object_id, r), batch)
            for r in range(rounds)
        ]
    )


@pytest.mark.parametrize("epsilon0", [0.3, 1.0, 4.0])
def test_noisy_threshold_is_k_plus_laplace(epsilon0: float) -> None:
    k = 7
    noise = noisy_threshold(k, epsilon0, keyed_generator(SECRET, "stats", "threshold", 1), DRAWS) - k
    scale = 1.0 / epsilon0
    assert stats.kstest(noise, stats.laplace(scale=scale).cdf).pvalue > PASSES
    assert stats.kstest(noise, stats.laplace(scale=1.3 * scale).cdf).pvalue < REJECTED
    assert stats.kstest(noise, stats.laplace(scale=scale / 1.3).cdf).pvalue < REJECTED
    assert stats.kstest(noise, stats.laplace(loc=0.3 * scale, scale=scale).cdf).pvalue < REJECTED


def test_synthesis_thresholds_are_k_plus_laplace() -> None:
    parameters = SynthesisParameters(
        claims_per_object=5,
        k=4,
        gamma=2.0,
        epsilon0=0.8,
        precision=0.01,
        max_attempts_per_object=10,
        batch_size=500,
    )
    uniforms = round_uniforms(11, DRAWS // 500, 500)
    draws = draw_candidates(uniforms, np.array([0.0, 1.0]), np.array([0.5, 0.5]), 1.0, parameters)
    noise = draws.thresholds - parameters.k
    assert stats.kstest(noise, stats.laplace(scale=1.25).cdf).pvalue > PASSES
    assert stats.kstest(noise, stats.laplace(scale=1.3 * 1.25).cdf).pvalue < REJECTED


@pytest.mark.parametrize(("seed_value", "bandwidth"), [(0.0, 1.0), (42.5, 0.03), (-1e4, 250.0)])
def test_kernel_draws_are_normal_around_the_seed(seed_value: float, bandwidth: float) -> None:
    parameters = SynthesisParameters(
        claims_per_object=5,
        k=1,
        gamma=2.0,
        epsilon0=1.0,
        precision=1e-12,
        max_attempts_per_object=10,
        batch_size=400,
    )
    uniforms = round_uniforms(12, DRAWS // 400, 400)
    draws = draw_candidates(uniforms, np.array([seed_value]), np.array([1.0]), bandwidth, parameters)
    assert np.all(draws.seed_index == 0)
    for sample in (draws.unrounded_values, draws.values):
        assert stats.kstest(sample, stats.norm(seed_value, bandwidth).cdf).pvalue > PASSES
        assert stats.kstest(sample, stats.norm(seed_value, 1.3 * bandwidth).cdf).pvalue < REJECTED
        assert stats.kstest(sample, stats.norm(seed_value, bandwidth / 1.3).cdf).pvalue < REJECTED
    direct = kernel_draws(seed_value, bandwidth, uniforms[:, KERNEL_COLUMN])
    np.testing.assert_array_equal(direct, draws.unrounded_values)


def test_seed_choice_frequencies_follow_the_combined_weights() -> None:
    weights = np.array([0.04, 0.11, 0.15, 0.2, 0.5])
    uniforms = round_uniforms(13, DRAWS // 200, 200)
    seeds = choose_seeds(uniforms[:, SEED_COLUMN], weights)
    observed = np.bincount(seeds, minlength=weights.size)
    assert stats.chisquare(observed, DRAWS * weights).pvalue > PASSES
    perturbed = np.array([0.06, 0.11, 0.15, 0.2, 0.48])
    assert stats.chisquare(observed, DRAWS * perturbed).pvalue < REJECTED
    unnormalized = choose_seeds(uniforms[:, SEED_COLUMN], 3.0 * weights)
    np.testing.assert_array_equal(unnormalized, seeds)


def test_the_three_uniform_columns_are_independent() -> None:
    """Seed choice, kernel draw and threshold use different uniforms: no rank correlation."""
    uniforms = round_uniforms(14, DRAWS // 100, 100)
    for left, right in [
        (SEED_COLUMN, KERNEL_COLUMN),
        (SEED_COLUMN, THRESHOLD_COLUMN),
        (KERNEL_COLUMN, THRESHOLD_COLUMN),
    ]:
        assert stats.spearmanr(uniforms[:, left], uniforms[:, right]).pvalue > PASSES
    assert stats.kstest(uniforms.ravel(), "uniform").pvalue > PASSES
