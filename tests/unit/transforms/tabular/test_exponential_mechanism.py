"""The private choice (permute-and-flip) against its exact choice probabilities (chi-square), with
negative controls: the common factor-2 mistake (``exp(ε·s/Δ)``) must be rejected by the same test,
and so must the exponential mechanism's law, which permute-and-flip replaces."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tests.unit.transforms.core.test_exact_sampling import permute_and_flip_probabilities
from transforms.core.keyed_randomness import keyed_generator
from transforms.tabular.exponential_mechanism import private_choice, private_choice_probabilities

SECRET = bytes(range(32))
SCORES = np.array([0.0, 0.5, 1.0, 1.5, 3.0])


def selection_counts(
    scores: np.ndarray, sensitivity: float, epsilon: float, draws: int, key: str
) -> np.ndarray:
    rng = keyed_generator(SECRET, "em-test", "choice", key)
    choices = [private_choice(scores, sensitivity, epsilon, rng) for _ in range(draws)]
    return np.bincount(choices, minlength=scores.size)


def chi_square_p_value(observed: np.ndarray, probabilities: np.ndarray) -> float:
    expected = probabilities * observed.sum()
    return float(stats.chisquare(observed, expected).pvalue)


def exponential_mechanism_law(scores: np.ndarray, sensitivity: float, epsilon: float) -> np.ndarray:
    weights = np.array([math.exp(epsilon * s / (2 * sensitivity)) for s in scores])
    return weights / weights.sum()


def enumerated_law(scores: np.ndarray, sensitivity: float, epsilon: float) -> np.ndarray:
    """Permute-and-flip's law by enumerating every visiting order (independent of the module's
    closed form; the enumeration the exact-sampling tests use)."""
    return permute_and_flip_probabilities(np.asarray(scores, dtype=float), sensitivity, epsilon)


def test_selection_frequencies_follow_permute_and_flip() -> None:
    counts = selection_counts(SCORES, 0.5, 1.0, 20000, "main")
    assert chi_square_p_value(counts, enumerated_law(SCORES, 0.5, 1.0)) > 1e-3
    wrong_law = enumerated_law(SCORES, 0.5, 2.0)  # exp(ε·s/Δ): the missing factor 2
    assert chi_square_p_value(counts, wrong_law) < 1e-6
    assert chi_square_p_value(counts, exponential_mechanism_law(SCORES, 0.5, 1.0)) < 1e-6


def test_probabilities_match_the_enumeration_and_ignore_a_common_shift() -> None:
    np.testing.assert_allclose(private_choice_probabilities(SCORES, 0.5, 1.0), enumerated_law(SCORES, 0.5, 1.0))
    np.testing.assert_allclose(
        private_choice_probabilities(SCORES + 1e4, 0.5, 1.0), enumerated_law(SCORES, 0.5, 1.0), rtol=1e-9
    )


def test_huge_scores_neither_overflow_nor_change_the_law() -> None:
    huge = np.array([1e300, 1e300 - 1e290, 0.0])
    probabilities = private_choice_probabilities(huge, 1e-3, 10.0)
    assert np.all(np.isfinite(probabilities)) and probabilities[0] == pytest.approx(1.0)
    rng = keyed_generator(SECRET, "em-test", "huge", 0)
    assert all(private_choice(huge, 1e-3, 10.0, rng) == 0 for _ in range(50))


def test_equal_scores_give_a_uniform_choice() -> None:
    counts = selection_counts(np.zeros(6), 1.0, 1.0, 6000, "uniform")
    assert chi_square_p_value(counts, np.full(6, 1 / 6)) > 1e-3


def test_same_stream_same_choices() -> None:
    first = selection_counts(SCORES, 1.0, 1.0, 200, "repeat")
    second = selection_counts(SCORES, 1.0, 1.0, 200, "repeat")
    np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize(
    ("scores", "sensitivity", "epsilon", "message"),
    [
        ([], 1.0, 1.0, "non-empty"),
        ([1.0, math.nan], 1.0, 1.0, "finite"),
        ([1.0, 2.0], 0.0, 1.0, "sensitivity"),
        ([1.0, 2.0], 1.0, -1.0, "epsilon"),
        ([1.0, 2.0], 1.0, math.inf, "epsilon"),
    ],
)
def test_bad_arguments_are_refused(
    scores: list[float], sensitivity: float, epsilon: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        private_choice(scores, sensitivity, epsilon, np.random.default_rng(0))
