"""The private choice of one scored candidate in structure learning.

Issue 3, step 4: each greedy step of structure learning picks one (child, parent set) from scores
whose sensitivity is ``Δ`` (replace one record). PrivBayes uses the exponential mechanism (McSherry
and Talwar, FOCS 2007), choosing with probability ``∝ exp(ε·score/(2Δ))``. Here the choice is
made by permute-and-flip (McKenna and Sheldon, NeurIPS 2020), which is ε-differentially private
under the same parameters, never worse in expected score, and sampled exactly: each candidate's
coin ``Bernoulli(exp(−ε (q* − q)/(2Δ)))`` comes from integer comparisons
(``transforms/core/exact_sampling.py``), so no floating-point noise decides the structure
(DESIGN.md, "Randomness and noise"). The draws come from the caller's generator, in a release a
keyed stream.

Choice probabilities, for tests and reports: with ``p_r = exp(−ε (q* − q_r)/(2Δ))`` and a uniform
visiting order, candidate ``r`` is chosen when its coin shows 1 after every earlier coin showed 0:
``P(r) = p_r Σ_{k} e_k(1 − p_{−r}) · k! (n−1−k)! / n!`` with ``e_k`` the elementary symmetric
sums of the other candidates' ``1 − p_j``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from transforms.core.exact_sampling import permute_and_flip


def _checked_arguments(
    scores: Sequence[float] | np.ndarray, sensitivity: float, epsilon: float
) -> np.ndarray:
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError("the private choice needs a non-empty one-dimensional list of scores")
    if not np.all(np.isfinite(values)):
        raise ValueError("every score must be finite")
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise ValueError(f"the sensitivity must be a finite positive number, got {sensitivity!r}")
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite positive number, got {epsilon!r}")
    return values


def private_choice_probabilities(
    scores: Sequence[float] | np.ndarray, sensitivity: float, epsilon: float
) -> np.ndarray:
    """Permute-and-flip's choice probabilities (module docstring), in O(n²) per candidate."""
    values = _checked_arguments(scores, sensitivity, epsilon)
    coins = np.exp(-epsilon * (values.max() - values) / (2.0 * sensitivity))
    n = values.size
    order_weights = np.array([math.factorial(k) * math.factorial(n - 1 - k) / math.factorial(n) for k in range(n)])
    result = np.empty(n)
    for index in range(n):
        elementary = np.zeros(n)
        elementary[0] = 1.0
        for other in np.delete(np.arange(n), index):
            elementary[1:] = elementary[1:] + elementary[:-1] * (1.0 - coins[other])
        result[index] = coins[index] * float(elementary @ order_weights)
    return result


def private_choice(
    scores: Sequence[float] | np.ndarray, sensitivity: float, epsilon: float, rng: np.random.Generator
) -> int:
    """The index of the chosen candidate (permute-and-flip, exact coins)."""
    values = _checked_arguments(scores, sensitivity, epsilon)
    return permute_and_flip(values, sensitivity, epsilon, rng)
