"""The synthesis draws follow their distributions (chi-square and binomial tests, with negative
controls).

Every draw comes from the release's keyed streams (``synthesis_round_generator`` and
``keyed_generator``) with a fixed test secret, so each test is deterministic. The thresholds are
honest: at the true law ``p > α = 10⁻³``; at a law 30% off (a bandwidth, a weight, a probability
multiplied or divided by 1.3) ``p < 10⁻⁶``. Sample sizes are stated per test; they put the 30%
errors many standard deviations away.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import stats

from transforms.core.exact_sampling import threshold_noise_cdf, threshold_test_passes
from transforms.core.keyed_randomness import keyed_generator
from transforms.core.plausible_deniability import noisy_threshold
from transforms.crowd.rounded_kernel import (
    exact_truncated_kernel_draws,
    truncated_kernel_draws,
    truncated_log_probability,
)
from transforms.crowd.synthesis import (
    RoundDraws,
    SynthesisParameters,
    choose_seeds,
    synthesis_round_generator,
)
from transforms.crowd.value_grid import ValueGrid

SECRET = bytes.fromhex("c3" * 32)
DRAWS = 20_000
PASSES = 1e-3
REJECTED = 1e-6
GRID = ValueGrid(0.0, 100.0, 1.0)


def parameters(batch_size: int, grid: ValueGrid = GRID, fallback_probability: float = 0.1) -> SynthesisParameters:
    return SynthesisParameters(claims_per_object=1, k=2, gamma=2.0, epsilon0=1.0, grid=grid,
                               fallback_probability=fallback_probability, max_attempts_per_claim=5,
                               batch_size=batch_size)


def round_draws(object_id: int, rounds: int, batch: int, **overrides) -> list[RoundDraws]:
    """The draws the synthesis of ``object_id`` would use over its first ``rounds`` rounds."""
    return [RoundDraws.draw(synthesis_round_generator(SECRET, "stats", object_id, r), parameters(batch, **overrides))
            for r in range(rounds)]


def chi_square_pvalue(observed: np.ndarray, law: np.ndarray) -> float:
    """Chi-square of counts against a law on the same cells: cells with an expected count of at
    least 5, the others pooled into one cell (when they hold any mass)."""
    expected = law / law.sum() * observed.sum()
    keep = expected >= 5
    f_obs, f_exp = observed[keep], expected[keep]
    if expected[~keep].sum() > 0:
        f_obs = np.append(f_obs, observed[~keep].sum())
        f_exp = np.append(f_exp, expected[~keep].sum())
    return float(stats.chisquare(f_obs, f_exp * f_obs.sum() / f_exp.sum()).pvalue)


def ceiling_laplace_frequencies(noise: np.ndarray, scale: float, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Observed and expected counts of ``⌈L⌉`` over the integers with expected count ≥ 5 (tails pooled)."""
    law = stats.laplace(loc=shift, scale=scale)
    values = np.arange(-200, 201)
    expected = (law.cdf(values) - law.cdf(values - 1)) * noise.size
    keep = expected >= 5
    observed = np.array([np.sum(noise == value) for value in values[keep]] + [np.sum(~np.isin(noise, values[keep]))])
    expected = np.append(expected[keep], noise.size - expected[keep].sum())
    return observed, expected * observed.sum() / expected.sum()


@pytest.mark.parametrize("epsilon0", [0.3, 1.0, 4.0])
def test_noisy_threshold_is_k_plus_the_ceiling_of_laplace(epsilon0: float) -> None:
    """The threshold is an integer: only ``⌈L⌉`` matters against an integer count. Chi-square at the
    true law passes; a 30% wrong scale or a shift by 0.3 scale is rejected."""
    k = 7
    noise = noisy_threshold(k, epsilon0, keyed_generator(SECRET, "stats", "threshold", 1), DRAWS) - k
    assert noise.dtype == np.int64
    scale = 1.0 / epsilon0
    assert stats.chisquare(*ceiling_laplace_frequencies(noise, scale)).pvalue > PASSES
    for wrong in (ceiling_laplace_frequencies(noise, 1.3 * scale), ceiling_laplace_frequencies(noise, scale / 1.3),
                  ceiling_laplace_frequencies(noise, scale, 0.3 * scale)):
        assert stats.chisquare(*wrong).pvalue < REJECTED


@pytest.mark.parametrize(
    ("seed_value", "bandwidth"),
    [(50.0, 5.0), (0.0, 5.0), (100.0, 5.0), (2.0, 30.0), (99.5, 0.4), (37.25, 2.5)],
)
def test_truncated_kernel_draws_follow_the_truncated_rounded_kernel(seed_value: float, bandwidth: float) -> None:
    """20,000 exact draws from one seed (kernel words of the synthesis' round streams) on the grid
    0, 1, …, 100: chi-square against ``exp(truncated_log_probability)`` for seeds in the middle, at
    both ends (where the truncation matters) and between grid values; the laws with the bandwidth
    30% larger or smaller are rejected. The exact draw equals the float proposal on every one of
    them (the refinement is for words within 2^-44 of a cell edge)."""
    (draws,) = round_draws(int(seed_value * 100), 1, DRAWS)
    values = exact_truncated_kernel_draws(np.full(DRAWS, seed_value), bandwidth, GRID, draws.kernel_words,
                                          lambda flat: np.random.default_rng(flat))
    proposals = truncated_kernel_draws(np.full(DRAWS, seed_value), bandwidth, GRID,
                                       draws.kernel_words.astype(np.float64) * 2.0**-64)
    np.testing.assert_array_equal(values, proposals)
    positions = np.rint((values - GRID.low) / GRID.precision).astype(np.int64)
    np.testing.assert_array_equal(GRID.values(positions), values)
    assert positions.min() >= 0 and positions.max() < GRID.size
    observed = np.bincount(positions, minlength=GRID.size)
    y = GRID.all_values()

    def law(h: float) -> np.ndarray:
        return np.exp(truncated_log_probability(y, seed_value, h, GRID))

    assert chi_square_pvalue(observed, law(bandwidth)) > PASSES
    assert chi_square_pvalue(observed, law(1.3 * bandwidth)) < REJECTED
    assert chi_square_pvalue(observed, law(bandwidth / 1.3)) < REJECTED


def test_seed_choice_frequencies_follow_the_weights() -> None:
    """50,000 seed uniforms of the round streams: chi-square of the chosen seeds against the
    weights; every law with one weight 30% larger or smaller (renormalized) is rejected."""
    weights = np.array([0.04, 0.11, 0.15, 0.2, 0.5])
    uniforms = np.concatenate([d.seed_uniform for d in round_draws(13, 10, 5_000)])
    seeds = choose_seeds(uniforms, weights)
    observed = np.bincount(seeds, minlength=weights.size)
    assert observed.sum() == 50_000
    assert chi_square_pvalue(observed, weights) > PASSES
    for index in range(weights.size):
        for factor in (1.3, 1 / 1.3):
            wrong = weights.copy()
            wrong[index] *= factor
            assert chi_square_pvalue(observed, wrong) < REJECTED, (index, factor)
    np.testing.assert_array_equal(choose_seeds(uniforms, 3.0 * weights), seeds)
    with_zero = np.array([0.3, 0.0, 0.7])
    assert not np.any(choose_seeds(uniforms, with_zero) == 1)


def test_seed_choice_broadcasts_over_objects() -> None:
    """``(objects, B)`` uniforms against ``(objects, n)`` weights: row by row the same as one at a time."""
    uniforms = np.stack([d.seed_uniform for d in round_draws(14, 4, 300)])
    weights = np.random.default_rng(3).uniform(0.1, 1.0, (4, 6))
    together = choose_seeds(uniforms, weights)
    for row in range(4):
        np.testing.assert_array_equal(together[row], choose_seeds(uniforms[row], weights[row]))


@pytest.mark.parametrize("q0", [0.05, 0.25])
def test_the_fallback_coin_has_probability_q0(q0: float) -> None:
    """100,000 fallback coins over 10 rounds of one object: binomial test at ``q0``; ``1.3 q0`` and
    ``q0 / 1.3`` are rejected."""
    coins = np.concatenate([d.fallback for d in round_draws(21, 10, 10_000, fallback_probability=q0)])
    assert coins.dtype == bool and coins.size == 100_000
    heads = int(coins.sum())
    assert stats.binomtest(heads, coins.size, q0).pvalue > PASSES
    assert stats.binomtest(heads, coins.size, 1.3 * q0).pvalue < REJECTED
    assert stats.binomtest(heads, coins.size, q0 / 1.3).pvalue < REJECTED


def test_the_fallback_positions_are_uniform_on_the_grid() -> None:
    """The grid positions of the ~25,000 fallback candidates among 100,000 (``q0 = 0.25``) on a grid
    of 41 values: chi-square against the uniform law passes; a law 30% heavier on either half of
    the grid is rejected."""
    grid = ValueGrid(-10.0, 10.0, 0.5)
    draws = round_draws(22, 10, 10_000, grid=grid, fallback_probability=0.25)
    positions = np.concatenate([d.fallback_position[d.fallback] for d in draws])
    assert 24_000 < positions.size < 26_000
    assert positions.min() >= 0 and positions.max() == grid.size - 1
    values = grid.values(positions)
    assert values.min() == grid.low and values.max() == grid.high
    observed = np.bincount(positions, minlength=grid.size)
    assert chi_square_pvalue(observed, np.ones(grid.size)) > PASSES
    lower = np.arange(grid.size) < grid.size // 2
    assert chi_square_pvalue(observed, np.where(lower, 1.3, 1.0)) < REJECTED
    assert chi_square_pvalue(observed, np.where(lower, 1.0, 1.3)) < REJECTED


def test_the_round_draws_are_independent_columns() -> None:
    """Fallback coin, grid position, seed uniform, kernel uniform and test word of the same
    candidate: no rank correlation between any two (20,000 candidates), and the uniforms are
    uniform."""
    draws = round_draws(23, 4, 5_000, fallback_probability=0.5)
    columns = {
        "fallback": np.concatenate([d.fallback for d in draws]).astype(float),
        "position": np.concatenate([d.fallback_position for d in draws]).astype(float),
        "seed": np.concatenate([d.seed_uniform for d in draws]),
        "kernel": np.concatenate([d.kernel_words for d in draws]).astype(float) * 2.0**-64,
        "bits": np.concatenate([d.test_bits for d in draws]).astype(float),
    }
    names = list(columns)
    for left, right in ((a, b) for i, a in enumerate(names) for b in names[i + 1:]):
        assert stats.spearmanr(columns[left], columns[right]).pvalue > PASSES, (left, right)
    for name in ("seed", "kernel"):
        assert stats.kstest(columns[name], "uniform").pvalue > PASSES
    assert stats.kstest(columns["bits"] * 2.0**-64, "uniform").pvalue > PASSES


def laplace_cdf(excess: int, epsilon0: float) -> float:
    """``P(L ≤ excess)`` for ``L ~ Laplace(1/ε0)``, written out here."""
    return 0.5 * math.exp(epsilon0 * excess) if excess <= 0 else 1.0 - 0.5 * math.exp(-epsilon0 * excess)


def refine_streams(purpose: str, calls: list[int] | None = None):
    def refine(position: int) -> np.random.Generator:
        if calls is not None:
            calls.append(position)
        return keyed_generator(SECRET, "stats", purpose, position)

    return refine


@pytest.mark.parametrize("excess", [-3, -1, 0, 1, 4])
def test_threshold_test_pass_frequencies_are_the_noise_cdf(excess: int) -> None:
    """100,000 test words of a keyed stream, ``ε0 = 0.7``: binomial test of the passes at
    ``P(⌈Lap(1/ε0)⌉ ≤ excess)`` (which ``threshold_noise_cdf`` gives); the pass probability or
    the fail probability 30% off is rejected. No word comes near enough to ``P`` to need more bits."""
    epsilon0, n = 0.7, 100_000
    probability = laplace_cdf(excess, epsilon0)
    assert float(threshold_noise_cdf(excess, epsilon0)) == pytest.approx(probability, rel=1e-15)
    bits = keyed_generator(SECRET, "stats", "test-bits", excess).integers(0, 2**64, size=n, dtype=np.uint64)
    calls: list[int] = []
    passes = threshold_test_passes(np.full(n, excess), epsilon0, bits, refine_streams("refine", calls))
    assert passes.dtype == bool and passes.shape == (n,) and calls == []
    # the decision is the comparison u < P of the uniform whose bits these are
    np.testing.assert_array_equal(passes, bits.astype(np.float64) * 2.0**-64 < probability)
    count = int(passes.sum())
    assert stats.binomtest(count, n, probability).pvalue > PASSES
    wrong = [probability / 1.3, 1 - (1 - probability) / 1.3]
    wrong += [p for p in (1.3 * probability, 1 - 1.3 * (1 - probability)) if 0 < p < 1]
    for p in wrong:
        assert stats.binomtest(count, n, p).pvalue < REJECTED, p


def test_threshold_test_passes_elementwise_with_mixed_excess() -> None:
    """A 2-D batch of mixed excesses decides each entry as the same test alone would."""
    rng = keyed_generator(SECRET, "stats", "mixed", 0)
    excess = rng.integers(-5, 6, size=(50, 40))
    bits = rng.integers(0, 2**64, size=(50, 40), dtype=np.uint64)
    together = threshold_test_passes(excess, 1.3, bits, refine_streams("refine-mixed"))
    alone = [bool(threshold_test_passes(excess.ravel()[i:i + 1], 1.3, bits.ravel()[i:i + 1],
                                        refine_streams("refine-mixed"))[0]) for i in range(excess.size)]
    assert together.shape == (50, 40) and together.ravel().tolist() == alone


def test_a_probability_of_exactly_one_half_is_decided_by_refinement() -> None:
    """Excess 0 passes with probability exactly ½: the word ``2^63`` (u ∈ [½, ½ + 2^-64)) never
    passes and ``2^63 − 1`` (u ∈ [½ − 2^-64, ½)) always does, whatever the refine stream; both are
    too close to ½ for the float comparison and go through the refinement."""
    n = 300
    for word, expected in ((2**63, False), (2**63 - 1, True)):
        calls: list[int] = []
        passes = threshold_test_passes(np.zeros(n, dtype=np.int64), 0.9, np.full(n, word, dtype=np.uint64),
                                       refine_streams(f"half-{word}", calls))
        assert sorted(calls) == list(range(n)), "every word must be refined"
        assert passes.tolist() == [expected] * n
    # outside the float comparison's bracket (relative 2^-44 of P plus 2^-52: about 2^19 words
    # around ½) the 64 bits decide alone; inside it they are refined
    for word, expected in ((2**63 + 2**20, False), (2**63 - 2**20, True)):
        calls = []
        passes = threshold_test_passes(np.zeros(4, dtype=np.int64), 0.9, np.full(4, word, dtype=np.uint64),
                                       refine_streams("far", calls))
        assert calls == [] and passes.tolist() == [expected] * 4
    for word, expected in ((2**63 + 2**18, False), (2**63 - 2**18, True)):
        calls = []
        passes = threshold_test_passes(np.zeros(4, dtype=np.int64), 0.9, np.full(4, word, dtype=np.uint64),
                                       refine_streams("near", calls))
        assert calls == [0, 1, 2, 3] and passes.tolist() == [expected] * 4


@pytest.mark.parametrize("excess", [-2, 2])
def test_the_refinement_passes_with_the_fractional_part_of_the_probability(excess: int) -> None:
    """The word ``⌊P·2^64⌋`` holds ``P``: it passes iff the refined uniform is below ``P``, so over
    4,000 refine streams its pass frequency is the fractional part ``P·2^64 − ⌊P·2^64⌋`` (0.42 and
    0.58 for ``ε0 = 0.75``, excess ∓2; ``P`` by mpmath at 300 bits). The fraction 30% off either
    way is rejected."""
    epsilon0, n = 0.75, 4_000
    with mpmath.workprec(300):
        rate = mpmath.mpf(epsilon0)
        exact = 0.5 * mpmath.exp(rate * excess) if excess <= 0 else 1 - 0.5 * mpmath.exp(-rate * excess)
        scaled = exact * mpmath.mpf(2) ** 64
        word = int(mpmath.floor(scaled))
        fraction = float(scaled - word)
    assert 0.3 < fraction < 0.7
    calls: list[int] = []
    passes = threshold_test_passes(np.full(n, excess), epsilon0, np.full(n, word, dtype=np.uint64),
                                   refine_streams(f"fraction{excess}", calls))
    assert sorted(calls) == list(range(n))
    count = int(passes.sum())
    assert stats.binomtest(count, n, fraction).pvalue > PASSES
    assert stats.binomtest(count, n, 1.3 * fraction).pvalue < REJECTED
    assert stats.binomtest(count, n, fraction / 1.3).pvalue < REJECTED
    # the neighbouring words are decided whatever the stream: below P passes, above fails
    below = threshold_test_passes(np.full(50, excess), epsilon0, np.full(50, word - 1, dtype=np.uint64),
                                  refine_streams("below"))
    above = threshold_test_passes(np.full(50, excess), epsilon0, np.full(50, word + 1, dtype=np.uint64),
                                  refine_streams("above"))
    assert below.all() and not above.any()


def test_the_exact_kernel_draw_decides_a_word_on_a_cell_edge_by_refinement() -> None:
    """A word placed exactly at a cell edge's CDF value cannot be decided from 64 bits: the
    refinement extends the uniform from its own stream. Over 2,000 such streams the draw falls on
    either side of the edge with frequencies equal to where the edge cuts the word's interval. The
    seed lies below the range's centre, so the sampler runs the mirrored kernel: its CDF is
    ``G(e) = 1 − F(e)``, decreasing, and a uniform below ``G(11.5)`` draws 12."""
    import mpmath

    seed, bandwidth, edge = 10.3, 3.0, 11.5  # the edge between the cells of 11 and 12
    with mpmath.workprec(200):
        h, x = mpmath.mpf(bandwidth), mpmath.mpf(seed)
        low = mpmath.ncdf((mpmath.mpf(GRID.low) - mpmath.mpf(0.5) - x) / h)
        high = mpmath.ncdf((mpmath.mpf(GRID.high) + mpmath.mpf(0.5) - x) / h)
        cdf = 1 - (mpmath.ncdf((mpmath.mpf(edge) - x) / h) - low) / (high - low)
        scaled = cdf * mpmath.mpf(2) ** 64
        word = int(mpmath.floor(scaled))
        below_edge = float(scaled - word)  # share of the word's interval left of the edge
    values = [
        float(exact_truncated_kernel_draws(np.float64(seed), np.float64(bandwidth), GRID,
                                           np.array([word], dtype=np.uint64),
                                           lambda _, n=number: np.random.default_rng(10_000 + n))[0])
        for number in range(2_000)
    ]
    assert set(values) <= {11.0, 12.0}
    assert stats.binomtest(values.count(12.0), len(values), below_edge).pvalue > PASSES
    assert 0.05 < below_edge < 0.95, "the edge must cut the interval for the test to mean anything"
