"""The exponential mechanism (McSherry and Talwar, FOCS 2007) over a finite list of scored candidates.

Issue 3, step 4: each greedy step of structure learning picks one (child, parent set) with
probability ``∝ exp(ε·score/(2Δ))``, where ``Δ`` bounds how much any candidate's score can change
between neighbouring datasets (replace one record). The choice is then ``ε``-differentially
private (McSherry–Talwar 2007; Dwork and Roth 2014, Theorem 3.10).

The draw uses the Gumbel-max trick: ``argmax_i (ε·score_i/(2Δ) + G_i)`` with ``G_i`` independent
standard Gumbel variables has exactly the distribution above (Gumbel 1954; Yellott 1977), without
exponentiating large scores, so it neither overflows nor underflows. The Gumbel draws come from
the caller's generator, which in a release is a keyed stream (``keyed_randomness``). As with every
floating-point implementation, the guarantee is for the ideal real-valued mechanism.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def _checked_arguments(
    scores: Sequence[float] | np.ndarray, sensitivity: float, epsilon: float
) -> np.ndarray:
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError("the exponential mechanism needs a non-empty one-dimensional list of scores")
    if not np.all(np.isfinite(values)):
        raise ValueError("every score must be finite")
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise ValueError(f"the sensitivity must be a finite positive number, got {sensitivity!r}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite positive number, got {epsilon!r}")
    return values


def exponential_mechanism_log_weights(
    scores: Sequence[float] | np.ndarray, sensitivity: float, epsilon: float
) -> np.ndarray:
    """``ε·score/(2Δ)``: the unnormalized log-probabilities of the candidates."""
    values = _checked_arguments(scores, sensitivity, epsilon)
    return values * (epsilon / (2.0 * sensitivity))


def exponential_mechanism_probabilities(
    scores: Sequence[float] | np.ndarray, sensitivity: float, epsilon: float
) -> np.ndarray:
    """The selection probabilities ``exp(ε·s_i/(2Δ)) / Σ_j exp(ε·s_j/(2Δ))`` by a stable log-sum-exp
    (for tests and reports; the draw itself does not need them)."""
    log_weights = exponential_mechanism_log_weights(scores, sensitivity, epsilon)
    shifted = np.exp(log_weights - log_weights.max())
    return shifted / shifted.sum()


def exponential_mechanism_choice(
    scores: Sequence[float] | np.ndarray, sensitivity: float, epsilon: float, rng: np.random.Generator
) -> int:
    """The index of the chosen candidate: ``argmax_i (ε·s_i/(2Δ) + Gumbel_i)``, one Gumbel draw per
    candidate from ``rng``."""
    log_weights = exponential_mechanism_log_weights(scores, sensitivity, epsilon)
    return int(np.argmax(log_weights + rng.gumbel(size=log_weights.size)))
