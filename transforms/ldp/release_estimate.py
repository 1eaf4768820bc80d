"""From the sufficient statistics of a pile of free-will reports to the released estimate.

The engines count, in one pass, users per (mechanism, report) — or, for RAPPOR, bit sums per
mechanism (``RAP_M``) or distinct bit vectors per mechanism (``GIBU``). This module turns those
counts into the estimated distribution with the configured estimator (ElSalamouny &
Palamidessi; see ``transforms.ldp.estimators`` for the equations) and describes each
mechanism's worst-case local-DP ε for the manifest. Engine-free; the driver runs it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from transforms.ldp.estimators import (
    DEFAULT_TOLERANCE,
    Acceleration,
    EstimationResult,
    average_channel,
    channel_report_groups,
    generalized_iterative_bayesian_update,
    inverse_mechanism_estimate,
    iterative_bayesian_update,
    krr_closed_form_estimate,
    rappor_estimate,
)
from transforms.ldp.mechanisms import BasicRappor, Mechanism, RandomizedResponse


@dataclass(frozen=True)
class ReleaseEstimate:
    """The estimate and how it was reached (closed forms: 0 iterations, converged)."""

    estimate: np.ndarray
    estimator: str
    iterations: int
    converged: bool
    final_change: float | None


def worst_case_ldp_epsilon(mechanism: Mechanism) -> float:
    """The smallest ε for which the mechanism is ε-LDP over its whole secret alphabet:
    ``max_z ln(max_x A[x,z] / min_x A[x,z])`` (infinite if some report is impossible from some
    secret). For RAPPOR it is the mechanism's ε (``P(b|x)/P(b|x') = e^{ε(b_x − b_x')}``). For
    distance-based mechanisms (truncated and planar geometric) the configured ε is per unit of
    distance; this is the resulting bound between the two farthest secrets."""
    if isinstance(mechanism, BasicRappor):
        return float(mechanism.epsilon)
    channel = mechanism.channel_matrix()
    smallest = channel.min(axis=0)
    if np.any(smallest <= 0.0):
        return math.inf
    return float(np.max(np.log(channel.max(axis=0) / smallest)))


def estimate_from_report_counts(
    mechanisms: Sequence[Mechanism],
    report_counts: Sequence[np.ndarray],
    method: str,
    post_processing: str = "projection",
    tolerance: float = DEFAULT_TOLERANCE,
    max_iterations: int = 10_000,
    acceleration: Acceleration = "squarem",
) -> ReleaseEstimate:
    """The estimate from ``report_counts[j][z]``, the users of mechanism ``j`` who reported ``z``.

    ``gibu``: GIBU on (mechanism, report) groups. ``inv_m``: INV_M on the average mechanism, in
    closed form when every mechanism is k-RR. ``ibu_m``: IBU on the average mechanism.
    """
    user_counts = np.array([float(np.sum(counts)) for counts in report_counts])
    if method == "gibu":
        channels = [mechanism.channel_matrix() for mechanism in mechanisms]
        likelihoods, counts = channel_report_groups(channels, report_counts)
        return _iterative("gibu", generalized_iterative_bayesian_update(
            likelihoods, counts, tolerance, max_iterations, acceleration=acceleration
        ))
    used = user_counts > 0
    used_mechanisms = [m for m, keep in zip(mechanisms, used, strict=True) if keep]
    used_counts = [c for c, keep in zip(report_counts, used, strict=True) if keep]
    total_counts = np.sum(used_counts, axis=0)
    if method == "inv_m":
        if all(isinstance(mechanism, RandomizedResponse) for mechanism in used_mechanisms):
            epsilons = np.array([float(mechanism.epsilon) for mechanism in used_mechanisms])
            estimate = krr_closed_form_estimate(
                epsilons, int(used_mechanisms[0].input_size), total_counts, user_counts[used], post_processing
            )
            return ReleaseEstimate(estimate, "inv_m (k-RR closed form)", 0, True, None)
        channels = [mechanism.channel_matrix() for mechanism in used_mechanisms]
        estimate = inverse_mechanism_estimate(channels, user_counts[used], total_counts, post_processing)
        return ReleaseEstimate(estimate, "inv_m", 0, True, None)
    if method == "ibu_m":
        channels = [mechanism.channel_matrix() for mechanism in used_mechanisms]
        average = average_channel(channels, user_counts[used])
        return _iterative("ibu_m", iterative_bayesian_update(
            average, total_counts, tolerance, max_iterations, acceleration=acceleration
        ))
    raise ValueError(f"estimator {method!r} does not take report counts")


def estimate_from_bit_sums(
    mechanisms: Sequence[BasicRappor],
    bit_sums: np.ndarray,
    user_counts: np.ndarray,
    post_processing: str = "projection",
) -> ReleaseEstimate:
    """RAP_M from ``bit_sums[j, x]`` (reports of mechanism ``j`` with bit ``x`` set) and the
    users of each mechanism."""
    used = np.asarray(user_counts) > 0
    epsilons = np.array([float(mechanism.epsilon) for mechanism in mechanisms])[used]
    totals = np.asarray(bit_sums, dtype=np.int64)[used].sum(axis=0)
    n = int(np.asarray(user_counts)[used].sum())
    estimate = rappor_estimate(totals, n, epsilons, np.asarray(user_counts)[used], post_processing)
    return ReleaseEstimate(estimate, "rap_m", 0, True, None)


def estimate_from_bit_vector_groups(
    mechanisms: Sequence[BasicRappor],
    mechanism_codes: np.ndarray,
    bit_vectors: np.ndarray,
    counts: np.ndarray,
    tolerance: float = DEFAULT_TOLERANCE,
    max_iterations: int = 10_000,
    acceleration: Acceleration = "squarem",
) -> ReleaseEstimate:
    """GIBU on RAPPOR reports grouped by (mechanism, bit vector): ``bit_vectors`` is a (G, k)
    0/1 array, group ``g`` used by ``counts[g]`` users of mechanism ``mechanism_codes[g]``; its
    likelihood row is ``∝ e^{ε·b_x}`` (``BasicRappor.report_likelihood``)."""
    codes = np.asarray(mechanism_codes)
    rows = np.empty(bit_vectors.shape, dtype=np.float64)
    for code in np.unique(codes):
        members = codes == code
        rows[members] = mechanisms[int(code)].report_likelihood(bit_vectors[members].astype(bool))
    return _iterative(
        "gibu", generalized_iterative_bayesian_update(
            rows, np.asarray(counts, np.float64), tolerance, max_iterations, acceleration=acceleration
        )
    )


def _iterative(name: str, result: EstimationResult) -> ReleaseEstimate:
    return ReleaseEstimate(result.estimate, name, result.iterations, result.converged, result.final_change)
