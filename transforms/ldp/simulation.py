"""Client-side simulation of free-will LDP reports, and the sufficient statistics the estimators take.

ElSalamouny & Palamidessi, "Reconstruction of the distribution of sensitive data under
free-will privacy": every user ``i`` chooses a mechanism ``A_i`` (and so an ε) and sends one
report ``z_i`` of a secret ``x_i``. For demos, tests and benchmarks ``simulate_reports`` plays
the clients: it assigns each user a mechanism from a configured mix by a keyed draw and runs
the user's secret through that mechanism's own ``sanitize`` (the client code path), with one
keyed generator per mechanism so that the same secret and release id redraw exactly the same
reports (DESIGN.md, "Randomness and noise").

The helpers below turn the simulated reports into the estimators' inputs
(``transforms.ldp.estimators``): report counts per mechanism (``INV_M``, ``IBU_M``), groups of
users with the same mechanism and report (``GIBU``), and bit sums with per-mechanism ε
(``RAP_M``). They are the same sufficient statistics an engine computes in one pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from transforms.core.keyed_randomness import keyed_generator
from transforms.ldp.estimators import channel_report_groups
from transforms.ldp.mechanisms import BasicRappor, Mechanism

ASSIGNMENT_PURPOSE = "ldp/assignment"
SANITIZE_PURPOSE = "ldp/sanitize"
_SHARE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class SimulatedReports:
    """Reports of ``n`` simulated users.

    Attributes:
        mechanisms: the mechanism catalog; users refer to it by index.
        user_mechanism: (n,) index into ``mechanisms`` of each user's mechanism.
        reports: (n,) integer reports when no mechanism is RAPPOR, (n, k) boolean bit vectors
            when every mechanism is RAPPOR (row ``i`` is user ``i``'s report).
    """

    mechanisms: tuple[Mechanism, ...]
    user_mechanism: np.ndarray
    reports: np.ndarray

    @property
    def n(self) -> int:
        return int(self.user_mechanism.size)

    @property
    def is_rappor(self) -> bool:
        return isinstance(self.mechanisms[0], BasicRappor)


def _check_mechanisms(mechanisms: Sequence[Mechanism]) -> tuple[Mechanism, ...]:
    catalog = tuple(mechanisms)
    if not catalog:
        raise ValueError("at least one mechanism is needed")
    input_size = int(catalog[0].input_size)
    if any(int(mechanism.input_size) != input_size for mechanism in catalog):
        raise ValueError("every mechanism must take the same alphabet of secrets (same input_size)")
    rappor = [isinstance(mechanism, BasicRappor) for mechanism in catalog]
    if any(rappor) and not all(rappor):
        raise ValueError(
            "a simulation mixes RAPPOR (bit-vector reports) with integer-report mechanisms; "
            "simulate them separately"
        )
    return catalog


def _check_shares(shares: Sequence[float] | None, count: int) -> np.ndarray:
    if shares is None:
        return np.full(count, 1.0 / count)
    weights = np.asarray(shares, dtype=np.float64)
    if weights.shape != (count,) or not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError(f"mechanism_shares must be {count} non-negative finite numbers")
    if abs(weights.sum() - 1.0) > _SHARE_TOLERANCE:
        raise ValueError("mechanism_shares must sum to 1")
    return weights / weights.sum()


def simulate_reports(
    values: np.ndarray,
    mechanisms: Sequence[Mechanism],
    mechanism_shares: Sequence[float] | None,
    secret: bytes,
    release_id: str,
) -> SimulatedReports:
    """Assign every user a mechanism and sanitize their secret through it (free-will clients).

    User ``i`` (holding ``values[i]``) gets mechanism ``j`` with probability
    ``mechanism_shares[j]`` (uniform over the catalog when ``None``), drawn from the keyed
    stream ``(secret, release_id, "ldp/assignment", 0)``. The users of mechanism ``j``, in
    index order, are sanitized by ``mechanisms[j].sanitize`` with the keyed stream
    ``(secret, release_id, "ldp/sanitize", j)``. Same arguments, same reports.

    With one mechanism every user is assigned to it whatever the assignment draws, so they are
    skipped: the reports are exactly those of the general definition at no assignment cost.
    With several, users are grouped by one stable counting sort of their assignments instead
    of a scan per mechanism; each group keeps index order, so the reports are the same.
    """
    catalog = _check_mechanisms(mechanisms)
    weights = _check_shares(mechanism_shares, len(catalog))
    secrets = np.asarray(values)
    if secrets.ndim != 1 or (secrets.size and not np.issubdtype(secrets.dtype, np.integer)):
        raise ValueError("values must be a one-dimensional integer array of secrets")
    secrets = secrets.astype(np.int64, copy=False)
    input_size = int(catalog[0].input_size)
    if secrets.size and (secrets.min() < 0 or secrets.max() >= input_size):
        raise ValueError(f"every secret must lie in 0..{input_size - 1}")
    if len(catalog) == 1:
        stream = keyed_generator(secret, release_id, SANITIZE_PURPOSE, 0)
        reports = np.asarray(catalog[0].sanitize(secrets, stream))
        return SimulatedReports(catalog, np.zeros(secrets.size, dtype=np.int64), reports)
    assignment_stream = keyed_generator(secret, release_id, ASSIGNMENT_PURPOSE, 0)
    cumulative = np.cumsum(weights)
    cumulative[-1] = 1.0
    user_mechanism = np.searchsorted(cumulative, assignment_stream.random(secrets.size), side="right")
    user_mechanism = np.minimum(user_mechanism, len(catalog) - 1).astype(np.int64)
    if isinstance(catalog[0], BasicRappor):
        reports = np.zeros((secrets.size, input_size), dtype=bool)
    else:
        reports = np.zeros(secrets.size, dtype=np.int64)
    sort_type = np.uint16 if len(catalog) <= np.iinfo(np.uint16).max else np.int64
    order = np.argsort(user_mechanism.astype(sort_type), kind="stable")
    boundaries = np.r_[0, np.cumsum(np.bincount(user_mechanism, minlength=len(catalog)))]
    for index, mechanism in enumerate(catalog):
        members = order[boundaries[index] : boundaries[index + 1]]
        if members.size == 0:
            continue
        stream = keyed_generator(secret, release_id, SANITIZE_PURPOSE, index)
        reports[members] = mechanism.sanitize(secrets[members], stream)
    return SimulatedReports(catalog, user_mechanism, reports)


def user_counts_per_mechanism(simulated: SimulatedReports) -> np.ndarray:
    """(m,) number of users of each mechanism of the catalog."""
    return np.bincount(simulated.user_mechanism, minlength=len(simulated.mechanisms))


def report_counts_per_mechanism(simulated: SimulatedReports) -> list[np.ndarray]:
    """For each mechanism ``j``, the (output_size_j,) counts of its users' reports.

    With ``channel_matrices`` and ``user_counts_per_mechanism`` this is the input of ``INV_M``
    (``inverse_mechanism_estimate``) and, summed over the mechanisms, of ``IBU_M``; with
    ``channel_report_groups`` it is GIBU's. Matrix mechanisms only (RAPPOR has ``2^k`` outputs).
    """
    if simulated.is_rappor:
        raise ValueError("RAPPOR reports are bit vectors: use rappor_bit_sums or gibu_groups")
    return [
        np.bincount(
            simulated.reports[simulated.user_mechanism == index], minlength=int(mechanism.output_size)
        )
        for index, mechanism in enumerate(simulated.mechanisms)
    ]


def total_report_counts(simulated: SimulatedReports) -> np.ndarray:
    """Counts of every report over all users (``n·q[n]``), the input of ``INV_M``/``IBU_M``
    once every mechanism shares one output alphabet."""
    per_mechanism = report_counts_per_mechanism(simulated)
    sizes = {counts.size for counts in per_mechanism}
    if len(sizes) != 1:
        raise ValueError("INV_M and IBU_M need one output alphabet; these mechanisms have several — use GIBU")
    return np.sum(per_mechanism, axis=0)


def channel_matrices(simulated: SimulatedReports) -> list[np.ndarray]:
    """The channel matrix ``A_j`` of every mechanism of the catalog."""
    return [mechanism.channel_matrix() for mechanism in simulated.mechanisms]


def gibu_groups(
    simulated: SimulatedReports, channels: Sequence[np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """GIBU's grouped input ``(likelihoods (G, k), counts (G,))``: one group per distinct
    (mechanism, report) with its users' count.

    Matrix mechanisms: ``channel_report_groups`` on the report counts, the likelihood of report
    ``z`` under mechanism ``j`` being column ``A_j[:, z]`` (``channels`` may pass precomputed
    matrices). RAPPOR: the distinct bit vectors of each mechanism's users, the likelihood row
    being ``report_likelihood`` (``∝ e^{ε·b_x}``, enough since GIBU is invariant to scaling a
    row).
    """
    if not simulated.is_rappor:
        matrices = list(channels) if channels is not None else channel_matrices(simulated)
        return channel_report_groups(matrices, report_counts_per_mechanism(simulated))
    likelihood_blocks, count_blocks = [], []
    for index, mechanism in enumerate(simulated.mechanisms):
        members = simulated.reports[simulated.user_mechanism == index]
        if members.shape[0] == 0:
            continue
        distinct, counts = np.unique(members, axis=0, return_counts=True)
        likelihood_blocks.append(mechanism.report_likelihood(distinct))
        count_blocks.append(counts.astype(np.float64))
    return np.concatenate(likelihood_blocks), np.concatenate(count_blocks)


def rappor_bit_sums(simulated: SimulatedReports) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``RAP_M``'s input: ``(bit_sums (k,), epsilons (m,), user_counts (m,))`` — ``s_x``, the
    number of reports with bit ``x`` set, and the ε and number of users of each mechanism
    (pass to ``rappor_estimate(bit_sums, n, epsilons, user_counts)``)."""
    if not simulated.is_rappor:
        raise ValueError("rappor_bit_sums needs RAPPOR reports")
    epsilons = np.array([float(mechanism.epsilon) for mechanism in simulated.mechanisms])
    return simulated.reports.sum(axis=0).astype(np.int64), epsilons, user_counts_per_mechanism(simulated)
