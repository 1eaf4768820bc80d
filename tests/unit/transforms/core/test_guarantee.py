"""PrisCrowd Theorem 2 and composition against hand computation."""

from __future__ import annotations

import math

import pytest

from transforms.core.guarantee import (
    ADVANCED,
    BASIC,
    best_composition,
    choose_t,
    compose_advanced,
    compose_basic,
    plausible_deniability_delta,
    plausible_deniability_epsilon,
)

LN_4 = 1.3862943611198906
E_MINUS_3 = 0.049787068367863944


def test_epsilon_by_hand() -> None:
    # eps0 = 1, gamma = 2, t = 2, R = 3: 1 + ln(1 + (2/2)·3) = 1 + ln 4.
    assert plausible_deniability_epsilon(1.0, 2.0, 2, 3.0) == pytest.approx(1.0 + LN_4, rel=1e-15)
    # R = 1 is Bindschaedler et al.'s Theorem 1: 0.5 + ln(1 + 3/1) = 0.5 + ln 4.
    assert plausible_deniability_epsilon(0.5, 3.0, 1, 1.0) == pytest.approx(0.5 + LN_4, rel=1e-15)
    # eps0 = 0.2, gamma = 1.5, t = 6, R = 2: 0.2 + ln(1.5).
    assert plausible_deniability_epsilon(0.2, 1.5, 6, 2.0) == pytest.approx(
        0.2 + 0.4054651081081644, rel=1e-15
    )


def test_delta_by_hand() -> None:
    assert plausible_deniability_delta(0.5, 10, 4) == pytest.approx(E_MINUS_3, rel=1e-15)
    assert plausible_deniability_delta(1.0, 2, 1) == pytest.approx(0.36787944117144233, rel=1e-15)


def test_formulas_refuse_out_of_range_parameters() -> None:
    with pytest.raises(ValueError):
        plausible_deniability_delta(1.0, 5, 5)
    with pytest.raises(ValueError):
        plausible_deniability_delta(1.0, 5, 0)
    with pytest.raises(ValueError):
        plausible_deniability_epsilon(1.0, 1.0, 1, 1.0)
    with pytest.raises(ValueError):
        plausible_deniability_epsilon(1.0, 2.0, 1, 0.5)
    with pytest.raises(ValueError):
        plausible_deniability_epsilon(0.0, 2.0, 1, 1.0)


def test_choose_t_by_hand() -> None:
    # k - t >= ln(1000) / 1 = 6.91 -> k - t >= 7 -> t = 3 for k = 10.
    assert choose_t(10, 1.0, 1e-3) == 3
    # eps0 = 0.5: k - t >= 13.82 -> 14; k = 20 -> t = 6.
    assert choose_t(20, 0.5, 1e-3) == 6
    # A target of exactly e^-5 admits k - t = 5.
    assert choose_t(6, 1.0, math.exp(-5.0)) == 1
    assert choose_t(9, 1.0, math.exp(-5.0)) == 4
    # A very loose target: the largest t, k - 1.
    assert choose_t(10, 1.0, 0.99) == 9


def test_choose_t_is_the_largest_admissible_t() -> None:
    for k in range(2, 30):
        for epsilon0 in (0.1, 0.5, 1.0, 2.0):
            for target in (1e-2, 1e-5, 1e-9):
                admissible = [t for t in range(1, k) if math.exp(-epsilon0 * (k - t)) <= target]
                if admissible:
                    assert choose_t(k, epsilon0, target) == max(admissible)
                else:
                    with pytest.raises(ValueError, match="smallest k"):
                        choose_t(k, epsilon0, target)


def test_choose_t_error_names_the_smallest_k() -> None:
    with pytest.raises(ValueError, match="the smallest k that would work is 6"):
        choose_t(5, 1.0, math.exp(-5.0))
    with pytest.raises(ValueError, match="the smallest k that would work is 8"):
        choose_t(1, 1.0, 1e-3)
    with pytest.raises(ValueError):
        choose_t(10, 1.0, 0.0)
    with pytest.raises(ValueError):
        choose_t(10, 1.0, 1.0)


def test_basic_composition_by_hand() -> None:
    assert compose_basic(0.3, 1e-6, 10) == pytest.approx((3.0, 1e-5))
    with pytest.raises(ValueError):
        compose_basic(0.3, 1e-6, 0)


def test_advanced_composition_by_hand() -> None:
    # eps = 0.1, T = 100, delta' = 1e-5: sqrt(200 ln 1e5)·0.1 + 100·0.1·(e^0.1 − 1).
    ln_1e5 = 11.512925464970229
    expected = math.sqrt(200.0 * ln_1e5) * 0.1 + 10.0 * 0.10517091807564763
    epsilon, delta = compose_advanced(0.1, 1e-6, 100, 1e-5)
    assert epsilon == pytest.approx(expected, rel=1e-14)
    assert delta == pytest.approx(100 * 1e-6 + 1e-5, rel=1e-14)
    assert epsilon < 100 * 0.1


def test_best_composition_never_reports_advanced_when_worse() -> None:
    for epsilon in (0.001, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0):
        for times in (1, 2, 10, 100, 1000, 10**5):
            for slack in (1e-9, 1e-6, 1e-3):
                basic_epsilon, basic_delta = compose_basic(epsilon, 1e-8, times)
                advanced_epsilon, advanced_delta = compose_advanced(epsilon, 1e-8, times, slack)
                best_epsilon, best_delta, method = best_composition(epsilon, 1e-8, times, slack)
                assert best_epsilon <= basic_epsilon
                if method == ADVANCED:
                    assert advanced_epsilon < basic_epsilon and advanced_delta < 1.0
                    assert (best_epsilon, best_delta) == (advanced_epsilon, advanced_delta)
                else:
                    assert method == BASIC
                    assert (best_epsilon, best_delta) == (basic_epsilon, basic_delta)
                    assert advanced_epsilon >= basic_epsilon or advanced_delta >= 1.0
    assert best_composition(1.0, 1e-8, 1, 1e-6)[2] == BASIC
    assert best_composition(0.01, 1e-8, 10**4, 1e-6)[2] == ADVANCED
