"""Server-side estimators of the distribution of secrets from free-will LDP reports.

ElSalamouny & Palamidessi, "Reconstruction of the distribution of sensitive data under
free-will privacy": every user ``i`` privatizes a secret ``x_i`` drawn from ``θ`` with a
mechanism ``A_i`` of their own choosing (``A_i[x, z] = P(z | x)``) and sends the report
``z_i``. The server estimates ``θ`` from the reports. This module implements the paper's
estimators (method section of issue 4):

* ``INV_M`` (``inverse_mechanism_estimate``): invert the average mechanism
  ``A[n] = (1/n) Σ_i A_i``, with the closed form ``krr_closed_form_estimate`` for all-k-RR
  input;
* ``IBU_M`` (``iterative_bayesian_update``): the iterative Bayesian update run on ``A[n]``;
* ``GIBU`` (``generalized_iterative_bayesian_update``): the iterative Bayesian update that
  keeps every user's own mechanism, on users grouped by (mechanism, report);
* ``RAP_M`` (``rappor_estimate``): the heterogeneous-ε basic one-time RAPPOR estimator.

``INV_M`` and ``RAP_M`` may leave the simplex; both post-processings of the paper are
offered: Euclidean projection onto the simplex (Duchi et al. 2008; Wang & Carreira-Perpiñán
2013) and truncate-and-normalize.

Everything is engine-free numpy: the engines compute the sufficient statistics (counts per
mechanism and report), the estimator runs on the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from threadpoolctl import threadpool_limits

PostProcessing = Literal["projection", "truncate"]
POST_PROCESSINGS: tuple[str, ...] = ("projection", "truncate")


@dataclass(frozen=True)
class EstimationResult:
    """The outcome of an iterative estimator (IBU_M or GIBU).

    Attributes:
        estimate: (k,) estimated distribution of the secrets (non-negative, sums to 1).
        iterations: number of update steps performed.
        converged: whether the L1 change of the last step fell to ``tolerance`` or below
            before ``max_iterations`` was reached.
        final_change: L1 norm of the difference between the last two iterates.
    """

    estimate: np.ndarray
    iterations: int
    converged: bool
    final_change: float


def project_to_simplex(values: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``values`` onto the probability simplex.

    Returns ``argmin_{w ≥ 0, Σ w = 1} ||w − values||₂``, the post-processing of INV_M and
    RAP_M preferred by the paper. Sort-based algorithm (Duchi, Shalev-Shwartz, Singer, Chandra,
    ICML 2008, Fig. 1; Wang & Carreira-Perpiñán 2013, Algorithm 1): sort ``u`` decreasing, let
    ``ρ`` be the largest ``j`` with ``u_j − (Σ_{r≤j} u_r − 1)/j > 0`` and
    ``λ = (Σ_{r≤ρ} u_r − 1)/ρ``; the projection is ``max(values − λ, 0)``. ``O(k log k)``.
    """
    vector = _as_finite_vector(values, "values")
    descending = np.sort(vector)[::-1]
    cumulative = np.cumsum(descending)
    positions = np.arange(1, len(vector) + 1)
    positive = descending - (cumulative - 1.0) / positions > 0
    rho = int(np.nonzero(positive)[0][-1]) + 1
    shift = (cumulative[rho - 1] - 1.0) / rho
    return np.maximum(vector - shift, 0.0)


def truncate_and_normalize(values: np.ndarray) -> np.ndarray:
    """Set negative entries to zero and rescale to sum 1 (the paper's alternative post-processing).

    When no entry is positive there is no information left to normalize; the uniform
    distribution is returned (the same answer the projection gives for a constant vector).
    """
    vector = _as_finite_vector(values, "values")
    clipped = np.maximum(vector, 0.0)
    total = clipped.sum()
    if total <= 0.0:
        return np.full(len(vector), 1.0 / len(vector))
    return clipped / total


def post_process(values: np.ndarray, post_processing: PostProcessing = "projection") -> np.ndarray:
    """Map an unconstrained estimate onto the simplex with the selected post-processing."""
    if post_processing == "projection":
        return project_to_simplex(values)
    if post_processing == "truncate":
        return truncate_and_normalize(values)
    raise ValueError(f"post_processing must be one of {POST_PROCESSINGS}, got {post_processing!r}")


def average_channel(channels: Sequence[np.ndarray], user_counts: Sequence[int]) -> np.ndarray:
    """The average mechanism ``A[n] = (1/n) Σ_i A_i`` of the paper, with ``A_i`` repeated per user.

    ``channels[j]`` is used by ``user_counts[j]`` users; all channels must share one input and
    one output alphabet (INV_M and IBU_M need a single output alphabet — use GIBU otherwise).
    """
    if len(channels) == 0:
        raise ValueError("at least one channel matrix is needed")
    if len(channels) != len(user_counts):
        raise ValueError("channels and user_counts must have the same length")
    matrices = [_as_channel(channel) for channel in channels]
    shape = matrices[0].shape
    if any(matrix.shape != shape for matrix in matrices):
        raise ValueError(
            "INV_M and IBU_M need every mechanism to share one input and one output alphabet; "
            "use GIBU (generalized_iterative_bayesian_update) for mixed alphabets"
        )
    weights = np.asarray(user_counts, dtype=np.float64)
    if weights.ndim != 1 or np.any(weights < 0) or not np.all(np.isfinite(weights)):
        raise ValueError("user_counts must be non-negative finite counts")
    total = weights.sum()
    if total <= 0:
        raise ValueError("user_counts must contain at least one user")
    return np.tensordot(weights / total, np.stack(matrices), axes=1)


def inverse_mechanism_estimate(
    channels: Sequence[np.ndarray],
    user_counts: Sequence[int],
    report_counts: np.ndarray,
    post_processing: PostProcessing = "projection",
) -> np.ndarray:
    """INV_M: solve ``θ A[n] = q[n]`` for the average mechanism, then post-process.

    ``q[n]`` is the observed frequency of every report (``report_counts / n``). When ``A[n]``
    is square and invertible the solution is exact; otherwise (more outputs than secrets, or a
    singular average) the least-squares solution of minimum norm is taken
    (``numpy.linalg.lstsq`` on ``A[n]ᵀ θᵀ = q[n]ᵀ``), which coincides with the inverse whenever
    the inverse exists. The result is mapped onto the simplex by ``post_processing``.
    """
    average = average_channel(channels, user_counts)
    frequencies = _frequencies(report_counts, average.shape[1])
    solution, *_ = np.linalg.lstsq(average.T, frequencies, rcond=None)
    return post_process(solution, post_processing)


def krr_closed_form_estimate(
    epsilons: np.ndarray,
    input_size: int,
    report_counts: np.ndarray,
    user_counts: np.ndarray | None = None,
    post_processing: PostProcessing = "projection",
) -> np.ndarray:
    """INV_M in closed form when every user applies k-RR (each with their own ε).

    A k-RR channel is ``q_i + (1 − k q_i) I`` off a constant ``q_i = 1/(e^{ε_i} + k − 1)``; the
    average of such matrices is again k-RR with ``q̄ = (1/n) Σ_i q_i`` (the paper's ``ε[n]``).
    Inverting it gives ``θ̂_x = (q_x − q̄) / (1 − k q̄)`` with ``q_x`` the observed frequency of
    report ``x``. ``epsilons`` are per user, or per group when ``user_counts`` gives the
    number of users of each ε.
    """
    if input_size < 2:
        raise ValueError("k-RR needs an alphabet of at least two values")
    epsilon_array, weights = _epsilons_and_weights(epsilons, user_counts)
    per_user_off_diagonal = 1.0 / (np.exp(epsilon_array) + input_size - 1)
    mean_off_diagonal = float(np.dot(weights, per_user_off_diagonal) / weights.sum())
    frequencies = _frequencies(report_counts, input_size)
    solution = (frequencies - mean_off_diagonal) / (1.0 - input_size * mean_off_diagonal)
    return post_process(solution, post_processing)


Acceleration = Literal["squarem", "none"]
ACCELERATIONS: tuple[str, ...] = ("squarem", "none")
_LIKELIHOOD_ROUNDING = 1e-13
DEFAULT_TOLERANCE = 1e-8


def _iterate_to_fixed_point(
    step: Callable[[np.ndarray], np.ndarray],
    log_likelihood: Callable[[np.ndarray], float],
    estimate: np.ndarray,
    tolerance: float,
    max_iterations: int,
    acceleration: Acceleration = "squarem",
) -> EstimationResult:
    """Iterate the EM map ``F`` (``step`` then renormalize) to its fixed point; the shared loop
    of IBU_M and GIBU (their updates differ). Stops when one application of ``F`` changes the
    estimate by at most ``tolerance`` (L1) or after ``max_iterations`` applications of ``F``.

    ``squarem``: the squared extrapolation of Varadhan & Roland ("Simple and globally convergent
    methods for accelerating the convergence of any EM algorithm", Scand. J. Stat. 2008, scheme
    S3): from ``θ0``, ``θ1 = F(θ0)``, ``θ2 = F(θ1)``, ``r = θ1 − θ0``, ``v = θ2 − 2θ1 + θ0``,
    ``α = −‖r‖/‖v‖`` (at most −1), ``θ' = θ0 − 2αr + α²v``, then one stabilizing ``F(θ')``.
    The step is kept only if ``θ'`` is a distribution and the log-likelihood did not decrease
    beyond rounding (relative 1e-13; else ``θ2``, a plain EM step), so the iteration stays monotone like EM and converges to
    the same fixed point, typically in far fewer applications of ``F``. ``none``: plain EM.
    BLAS runs single-threaded here: the products are small and iterated thousands of times, and
    threads only contend (measured 14× slower per step on a loaded 2-core machine).
    """
    if acceleration not in ACCELERATIONS:
        raise ValueError(f"acceleration must be one of {ACCELERATIONS}, got {acceleration!r}")
    def apply(current: np.ndarray) -> tuple[np.ndarray, float]:
        updated = step(current)
        updated /= updated.sum()
        return updated, float(np.abs(updated - current).sum())

    with threadpool_limits(limits=1, user_api="blas"):
        estimate, evaluations, change = _em_loop(apply, log_likelihood, estimate, tolerance, max_iterations,
                                                 acceleration)
    return EstimationResult(estimate, evaluations, change <= tolerance, change)


def _em_loop(
    apply: Callable[[np.ndarray], tuple[np.ndarray, float]],
    log_likelihood: Callable[[np.ndarray], float],
    estimate: np.ndarray,
    tolerance: float,
    max_iterations: int,
    acceleration: str,
) -> tuple[np.ndarray, int, float]:
    """The loop of ``_iterate_to_fixed_point``; returns the estimate, the number of applications
    of ``F`` and the L1 change of the last one."""
    evaluations = 0
    change = float("inf")
    current_likelihood: float | None = None

    def evaluate(current: np.ndarray) -> tuple[np.ndarray, float]:
        nonlocal evaluations
        evaluations += 1
        return apply(current)

    while evaluations < max_iterations:
        first, change = evaluate(estimate)
        if change <= tolerance or acceleration == "none" or evaluations >= max_iterations:
            estimate, current_likelihood = first, None
            if change <= tolerance:
                break
            continue
        second, change = evaluate(first)
        second_change = change
        if change <= tolerance or evaluations >= max_iterations:
            estimate, current_likelihood = second, None
            continue
        r = first - estimate
        v = second - first - r
        v_norm = float(np.linalg.norm(v))
        alpha = min(-float(np.linalg.norm(r)) / v_norm, -1.0) if v_norm > 0 else -1.0
        extrapolated = estimate - 2.0 * alpha * r + alpha * alpha * v
        if alpha == -1.0 or not np.all(np.isfinite(extrapolated)) or np.any(extrapolated < 0):
            estimate, current_likelihood = second, None
            continue
        extrapolated /= extrapolated.sum()
        stabilized, change = evaluate(extrapolated)
        if current_likelihood is None:
            current_likelihood = log_likelihood(estimate)
        stabilized_likelihood = log_likelihood(stabilized)
        if stabilized_likelihood >= current_likelihood - _LIKELIHOOD_ROUNDING * max(1.0, abs(current_likelihood)):
            estimate, current_likelihood = stabilized, stabilized_likelihood
        else:
            estimate, current_likelihood = second, None
            change = second_change
    return estimate, evaluations, change


def iterative_bayesian_update(
    channel: np.ndarray,
    report_counts: np.ndarray,
    tolerance: float = DEFAULT_TOLERANCE,
    max_iterations: int = 10_000,
    initial: np.ndarray | None = None,
    acceleration: Acceleration = "squarem",
) -> EstimationResult:
    """IBU_M: the iterative Bayesian update (Agrawal & Aggarwal 2001) on the average mechanism.

    With ``q_z`` the observed report frequencies, one step is
    ``θ'_x = Σ_z q_z θ_x A[x, z] / Σ_w θ_w A[w, z]`` (an EM step for the maximum-likelihood
    ``θ`` under the single channel ``A``). Starts from ``initial`` (uniform by default) and
    stops when the L1 change of a step is at most ``tolerance`` or after ``max_iterations``
    steps; ``acceleration`` as in ``_iterate_to_fixed_point`` (SQUAREM by default).
    Reports with zero observed frequency are skipped (they contribute nothing).
    """
    matrix = _as_channel(channel)
    frequencies = _frequencies(report_counts, matrix.shape[1])
    observed = frequencies > 0
    matrix, frequencies = matrix[:, observed], frequencies[observed]
    if np.any(matrix.sum(axis=0) <= 0):
        raise ValueError("a report with positive count is impossible under the channel")
    estimate = _initial_distribution(initial, matrix.shape[0])
    _check_iteration_controls(tolerance, max_iterations)

    def step(current: np.ndarray) -> np.ndarray:
        report_probabilities = current @ matrix
        ratios = np.divide(frequencies, report_probabilities, out=np.zeros_like(frequencies),
                           where=report_probabilities > 0)
        return current * (matrix @ ratios)

    def log_likelihood(current: np.ndarray) -> float:
        return float(frequencies @ np.log(np.maximum(current @ matrix, np.finfo(float).tiny)))

    return _iterate_to_fixed_point(step, log_likelihood, estimate, tolerance, max_iterations, acceleration)


def generalized_iterative_bayesian_update(
    likelihoods: np.ndarray,
    counts: np.ndarray,
    tolerance: float = DEFAULT_TOLERANCE,
    max_iterations: int = 10_000,
    initial: np.ndarray | None = None,
    acceleration: Acceleration = "squarem",
) -> EstimationResult:
    """GIBU: the iterative Bayesian update that keeps every user's own mechanism.

    The paper's update is ``θ'_x = (1/n) Σ_i θ_x A_i[x, z_i] / Σ_w θ_w A_i[w, z_i]``. Users
    with the same mechanism and the same report contribute identical terms, so they are
    grouped: group ``g`` has the likelihood vector ``ℓ_g[x] = A_i[x, z]`` (``likelihoods[g]``,
    shape (G, k)) and ``counts[g]`` users, and a step is
    ``θ'_x = (1/n) Σ_g c_g θ_x ℓ_g[x] / Σ_w θ_w ℓ_g[w]`` at cost ``O(G·k)``, independent of
    ``n``. Any mechanism signature fits, RAPPOR included: a likelihood row needs only be
    proportional to ``P(report | x)`` over ``x`` (the update is invariant to scaling a row).
    Starts from ``initial`` (uniform by default); stops when the L1 change of a step is at
    most ``tolerance`` or after ``max_iterations`` steps, and reports both; ``acceleration``
    as in ``_iterate_to_fixed_point`` (SQUAREM by default, plain EM with ``"none"``).
    """
    rows = np.asarray(likelihoods, dtype=np.float64)
    weights = np.asarray(counts, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[1] == 0:
        raise ValueError("likelihoods must be a (groups, input_size) array")
    if weights.shape != (rows.shape[0],):
        raise ValueError("counts must have one entry per likelihood row")
    if not (np.all(np.isfinite(rows)) and np.all(np.isfinite(weights))):
        raise ValueError("likelihoods and counts must be finite")
    if np.any(rows < 0) or np.any(weights < 0):
        raise ValueError("likelihoods and counts must be non-negative")
    populated = weights > 0
    rows, weights = rows[populated], weights[populated]
    if len(weights) == 0:
        raise ValueError("GIBU needs at least one user")
    if np.any(rows.sum(axis=1) <= 0):
        raise ValueError("a group's likelihood row is zero: its report is impossible under its mechanism")
    shares = weights / weights.sum()
    estimate = _initial_distribution(initial, rows.shape[1])
    _check_iteration_controls(tolerance, max_iterations)

    def step(current: np.ndarray) -> np.ndarray:
        group_evidence = rows @ current
        return current * (np.divide(shares, group_evidence, out=np.zeros_like(shares),
                                    where=group_evidence > 0) @ rows)

    def log_likelihood(current: np.ndarray) -> float:
        return float(shares @ np.log(np.maximum(rows @ current, np.finfo(float).tiny)))

    return _iterate_to_fixed_point(step, log_likelihood, estimate, tolerance, max_iterations, acceleration)


def channel_report_groups(
    channels: Sequence[np.ndarray], report_counts: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """GIBU's grouped input from per-mechanism report counts.

    ``channels[j]`` is mechanism ``j``'s matrix (k x m_j, output alphabets may differ) and
    ``report_counts[j][z]`` the number of its users who reported ``z``. Every (mechanism,
    report) pair with a positive count becomes one group with likelihood ``channels[j][:, z]``.
    Returns ``(likelihoods (G, k), counts (G,))``.
    """
    if len(channels) != len(report_counts) or len(channels) == 0:
        raise ValueError("channels and report_counts must be non-empty and of the same length")
    matrices = [_as_channel(channel) for channel in channels]
    input_size = matrices[0].shape[0]
    if any(matrix.shape[0] != input_size for matrix in matrices):
        raise ValueError("every mechanism must take the same alphabet of secrets")
    likelihood_blocks, count_blocks = [], []
    for matrix, mechanism_counts in zip(matrices, report_counts, strict=True):
        per_report = np.asarray(mechanism_counts, dtype=np.float64)
        if per_report.shape != (matrix.shape[1],) or np.any(per_report < 0):
            raise ValueError("report counts must be non-negative, one per output of the mechanism")
        observed = np.nonzero(per_report > 0)[0]
        likelihood_blocks.append(matrix[:, observed].T)
        count_blocks.append(per_report[observed])
    return np.concatenate(likelihood_blocks), np.concatenate(count_blocks)


def rappor_estimate(
    report_bit_sums: np.ndarray,
    n: int,
    epsilons: np.ndarray,
    user_counts: np.ndarray | None = None,
    post_processing: PostProcessing = "projection",
) -> np.ndarray:
    """RAP_M: the heterogeneous-ε basic one-time RAPPOR estimator, post-processed like INV_M.

    User ``i`` one-hot encodes the secret and flips every bit with probability
    ``ρ_i = 1/(1 + e^{ε_i/2})``, so ``P(b_x = 1) = ρ_i + θ_x (1 − 2ρ_i)``. Averaging over the
    users, ``E[s_x / n] = ρ̄ + θ_x (1 − 2ρ̄)`` with ``ρ̄ = mean_i ρ_i`` and ``s_x`` the number of
    reports whose bit ``x`` is set; hence ``θ̂_x = (s_x/n − ρ̄) / (1 − 2ρ̄)``. ``epsilons`` are
    per user, or per group when ``user_counts`` gives the number of users of each ε (the
    counts must then total ``n``).
    """
    bit_sums = _as_finite_vector(report_bit_sums, "report_bit_sums")
    if n <= 0:
        raise ValueError("n must be positive")
    if np.any(bit_sums < 0) or np.any(bit_sums > n):
        raise ValueError("every bit sum must lie in [0, n]")
    epsilon_array, weights = _epsilons_and_weights(epsilons, user_counts)
    if not np.isclose(weights.sum(), n):
        raise ValueError("the number of users behind the epsilons must equal n")
    flip_probabilities = 1.0 / (1.0 + np.exp(epsilon_array / 2.0))
    mean_flip = float(np.dot(weights, flip_probabilities) / weights.sum())
    solution = (bit_sums / n - mean_flip) / (1.0 - 2.0 * mean_flip)
    return post_process(solution, post_processing)


def _as_finite_vector(values: np.ndarray, name: str) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float64)
    if vector.ndim != 1 or len(vector) == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array")
    if not np.all(np.isfinite(vector)):
        raise ValueError(f"{name} must be finite")
    return vector


def _as_channel(channel: np.ndarray) -> np.ndarray:
    matrix = np.asarray(channel, dtype=np.float64)
    if matrix.ndim != 2 or 0 in matrix.shape:
        raise ValueError("a channel matrix must be a non-empty 2-D array (secrets x reports)")
    if not np.all(np.isfinite(matrix)) or np.any(matrix < 0):
        raise ValueError("a channel matrix must have finite non-negative entries")
    if not np.allclose(matrix.sum(axis=1), 1.0, atol=1e-9):
        raise ValueError("every row of a channel matrix must sum to 1 (A[x, z] = P(z | x))")
    return matrix


def _frequencies(report_counts: np.ndarray, output_size: int) -> np.ndarray:
    counts = _as_finite_vector(report_counts, "report_counts")
    if len(counts) != output_size:
        raise ValueError(f"report_counts must have one entry per report ({output_size}), got {len(counts)}")
    if np.any(counts < 0) or counts.sum() <= 0:
        raise ValueError("report_counts must be non-negative with at least one report")
    return counts / counts.sum()


def _epsilons_and_weights(
    epsilons: np.ndarray, user_counts: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    epsilon_array = _as_finite_vector(epsilons, "epsilons")
    if np.any(epsilon_array <= 0):
        raise ValueError("every ε must be positive")
    if user_counts is None:
        return epsilon_array, np.ones(len(epsilon_array))
    weights = _as_finite_vector(user_counts, "user_counts")
    if weights.shape != epsilon_array.shape or np.any(weights < 0) or weights.sum() <= 0:
        raise ValueError("user_counts must give a non-negative count per ε, with at least one user")
    return epsilon_array, weights


def _initial_distribution(initial: np.ndarray | None, input_size: int) -> np.ndarray:
    if initial is None:
        return np.full(input_size, 1.0 / input_size)
    start = _as_finite_vector(initial, "initial")
    if len(start) != input_size or np.any(start < 0) or start.sum() <= 0:
        raise ValueError("initial must be a non-negative vector over the secrets with positive mass")
    return start / start.sum()


def _check_iteration_controls(tolerance: float, max_iterations: int) -> None:
    if not tolerance >= 0:
        raise ValueError("tolerance must be non-negative")
    if max_iterations < 1:
        raise ValueError("max_iterations must be at least 1")
