"""The accountant's privacy-loss distributions (``transforms/core/privacy_loss.py``) against exact
answers: small compositions of (ε, δ)-DP steps enumerated outcome by outcome, Gaussian
compositions in closed form (Balle and Wang 2018, Theorem 8), and ``dp_accounting`` as an oracle
on mixed, larger compositions. The accountant must never be below the exact ε (pessimistic) and
stay close to it; a known-bad variant that rounds losses down is caught by the same check."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from transforms.core import privacy_loss as pld


def exact_delta(steps: list[tuple[float, float]], epsilon: float) -> float:
    """δ(ε) of the composition of the (ε_i, δ_i) dominating pairs, by enumerating the 2^k finite
    outcomes (losses ±ε_i) and the mass at +∞."""
    finite = math.prod(1 - d for _, d in steps)
    total = 1.0 - finite
    for signs in itertools.product((1, -1), repeat=len(steps)):
        probability, loss = finite, 0.0
        for sign, (e, _) in zip(signs, steps, strict=True):
            probability *= (1 / (1 + math.exp(-e))) if sign > 0 else (1 / (1 + math.exp(e)))
            loss += sign * e
        if loss > epsilon:
            total += probability * -math.expm1(epsilon - loss)
    return total


def exact_epsilon(delta_of, delta: float) -> float:
    """The smallest ε ≥ 0 with δ(ε) ≤ delta, by bisection on a non-increasing δ(ε)."""
    if delta_of(0.0) <= delta:
        return 0.0
    low, high = 0.0, 1.0
    while delta_of(high) > delta:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if delta_of(middle) > delta else (low, middle)
    return high


def gaussian_delta(s: float, epsilon: float) -> float:
    """δ(ε) of N(0, 1) against N(s, 1) (Balle and Wang 2018, Theorem 8)."""
    phi = lambda x: 0.5 * math.erfc(-x / math.sqrt(2))  # noqa: E731
    return phi(s / 2 - epsilon / s) - math.exp(epsilon) * phi(-s / 2 - epsilon / s)


def composed(steps: list[tuple[float, float]]) -> pld.PrivacyLossDistribution:
    result = pld.from_privacy_parameters(*steps[0])
    for step in steps[1:]:
        result = result.compose(pld.from_privacy_parameters(*step))
    return result


SMALL_COMPOSITIONS = [
    [(1.0, 0.0)],
    [(0.5, 0.0), (0.5, 0.0), (0.5, 0.0)],
    [(0.3, 1e-6), (1.2, 0.0), (0.05, 0.0), (0.7, 2e-6)],
    [(0.1, 0.0)] * 8,
    [(0.25, 1e-7), (0.4, 0.0), (0.9, 0.0), (0.01, 0.0), (0.6, 1e-7), (0.33, 0.0)],
]


@pytest.mark.parametrize("steps", SMALL_COMPOSITIONS, ids=lambda steps: f"{len(steps)}-steps")
def test_small_compositions_are_never_below_the_exact_answer_and_close_to_it(steps) -> None:
    ours = composed(steps)
    for epsilon in np.linspace(0, sum(e for e, _ in steps), 25):
        assert ours.delta_for_epsilon(float(epsilon)) >= exact_delta(steps, float(epsilon)) - 1e-15
    for delta in (1e-3, 1e-5, 1e-6, 1e-8):
        if 1 - math.prod(1 - d for _, d in steps) > delta:  # the mass at +∞ alone exceeds delta
            assert ours.epsilon_for_delta(delta) == math.inf
            continue
        truth = exact_epsilon(lambda e: exact_delta(steps, e), delta)
        found = ours.epsilon_for_delta(delta)
        assert truth - 1e-9 <= found <= truth + len(steps) * pld.GRID + 1e-9, (delta, truth, found)


def test_a_variant_that_rounds_losses_down_is_caught() -> None:
    """The check above can fail: the same pairs with their losses rounded *down* to the grid give
    an ε below the truth."""
    steps = [(0.33333, 0.0)] * 3

    def rounded_down(epsilon: float) -> pld.PrivacyLossDistribution:
        low, high = math.floor(-epsilon / pld.GRID), math.floor(epsilon / pld.GRID)
        mass = np.zeros(high - low + 1)
        mass[0], mass[-1] = 1 / (1 + math.exp(epsilon)), 1 / (1 + math.exp(-epsilon))
        return pld.PrivacyLossDistribution(low, mass, 0.0)

    down = rounded_down(steps[0][0]).self_compose(3)
    truth = exact_epsilon(lambda e: exact_delta(steps, e), 1e-5)
    assert down.epsilon_for_delta(1e-5) < truth - 1e-9 <= composed(steps).epsilon_for_delta(1e-5)


@pytest.mark.parametrize(("s", "count"), [(0.05, 1), (0.5, 1), (1.0, 4), (2.0, 3), (0.3, 40)])
def test_gaussian_compositions_match_the_closed_form_from_above(s: float, count: int) -> None:
    ours = pld.from_gaussian(s).self_compose(count) if count > 1 else pld.from_gaussian(s)
    joint = s * math.sqrt(count)  # k Gaussian steps are one with s·√k
    for delta in (1e-3, 1e-6, 1e-9):
        truth = exact_epsilon(lambda e, joint=joint: gaussian_delta(joint, e), delta)
        found = ours.epsilon_for_delta(delta)
        assert truth - 1e-9 <= found <= truth + (count + 1) * pld.GRID, (delta, truth, found)


def test_mixed_compositions_agree_with_dp_accounting_from_above() -> None:
    """Random mixes of pure, approximate and Gaussian steps, some repeated hundreds of times (the
    FFT path), composed as the accountant composes them (``transforms/core/accounting.py``: the
    Gaussians merged exactly into one with ``√(Σ s²)``): not below ``dp_accounting``'s pessimistic
    PLD of the same pairs (to a relative 10⁻⁸: both overstate the truth, each rounding its own
    way; the truth itself is checked above by enumeration), and within 2·10⁻³ plus one grid step
    per composed step of it at δ ≥ 10⁻⁷ (each step's ``±ε`` is rounded up by less than a grid step; the two
    accountants place their grids differently)."""
    from dp_accounting.pld import privacy_loss_distribution as oracle
    from dp_accounting.pld.common import DifferentialPrivacyParameters

    from transforms.core.accounting import (
        APPROXIMATE_DP,
        GAUSSIAN,
        PURE_DP,
        PrivacyStep,
        _grouped,
        _step_distribution,
    )

    rng = np.random.default_rng(16)
    for _ in range(6):
        steps, theirs, squares, count_all = [], None, 0.0, 0
        for _ in range(int(rng.integers(1, 4))):
            count = int(rng.choice([1, 3, 50, 300]))
            count_all += count
            if rng.random() < 0.3:
                s = float(rng.uniform(0.05, 0.8))
                squares += count * s * s
                steps.append(PrivacyStep(GAUSSIAN, 50.0, 0.5, count, sensitivity_over_sigma=s))
                continue
            epsilon = float(rng.uniform(0.01, 0.5))
            delta = float(rng.choice([0.0, 1e-9]))
            steps.append(PrivacyStep(APPROXIMATE_DP if delta else PURE_DP, epsilon, delta, count))
            other = oracle.from_privacy_parameters(DifferentialPrivacyParameters(epsilon, delta),
                                                   value_discretization_interval=pld.GRID).self_compose(count)
            theirs = other if theirs is None else theirs.compose(other)
        if squares:
            joint = oracle.from_gaussian_mechanism(1.0, sensitivity=math.sqrt(squares), pessimistic_estimate=True,
                                                   value_discretization_interval=pld.GRID)
            theirs = joint if theirs is None else theirs.compose(joint)
        parts = [_step_distribution(*group) for group in _grouped(steps)]
        ours = parts[0]
        for part in parts[1:]:
            ours = ours.compose(part)
        for delta in (1e-3, 1e-5, 1e-7):
            expected = theirs.get_epsilon_for_delta(delta)
            found = ours.epsilon_for_delta(delta)
            if expected == math.inf:
                assert found == math.inf
            else:  # both overstate the truth; they may differ in the ninth digit where they round differently
                assert expected * (1 - 1e-8) <= found <= expected + 2e-3 + count_all * pld.GRID, (delta, expected, found)


def test_long_self_compositions_stay_small_and_fast() -> None:
    """Ten thousand steps: repeated squaring with the tails cut keeps the grid short; what the FFT
    bound and the cut tails add at +∞ stays far below any δ a budget uses."""
    many = pld.from_privacy_parameters(0.01, 0.0).self_compose(10_000)
    assert len(many.mass) < 200_000
    assert many.infinity_mass < 1e-8  # measured 7.8e-10: the FFT error bounds of 20 convolutions
    truth = exact_epsilon(lambda e: gaussian_delta(0.01 * math.sqrt(10_000), e), 1e-6)  # the CLT's Gaussian, for scale
    assert 0.5 * truth < many.epsilon_for_delta(1e-6) < 2 * truth


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        pld.from_privacy_parameters(-1.0)
    with pytest.raises(ValueError):
        pld.from_gaussian(0.0)
    with pytest.raises(ValueError):
        pld.from_privacy_parameters(1.0).self_compose(0)
    with pytest.raises(ValueError):
        pld.from_privacy_parameters(1.0).epsilon_for_delta(1.0)
