"""The two scores of a candidate (child, parent set) in DP structure learning, and their sensitivities.

Issue 3, step 4. A candidate is an attribute ``X`` (the child) and a parent set ``Π`` among the
attributes already placed in the order σ. Its score measures how well ``Π`` predicts ``X`` on the
structure data ``DT``; the exponential mechanism (``exponential_mechanism.py``) picks one
candidate per greedy step with probability ``∝ exp(ε·score/(2Δ))``, where ``Δ`` is the score's
sensitivity. All logarithms are natural (nats); every bound below scales with the base, so the
choice of base changes nothing as long as score and sensitivity use the same one.

Neighbouring notion (the whole tabular kind): the number of records ``n`` is public and two
datasets are neighbours when one record is replaced by another. A replacement moves one unit of
count from one cell of a contingency table to another, so ``n`` never changes.

**Mutual information** (PrivBayes, Zhang, Cormode, Procopiuc, Srivastava, Xiao, SIGMOD 2014 and
TODS 2017, Section 4): ``I(X; Π) = Σ p(π, x) log(p(π, x) / (p(π) p(x)))`` from the empirical joint
over ``(*Π, X)``, with ``Π`` read as one variable over the product of the parents' domains. Its
sensitivity under replace-one (PrivBayes' lemma on the sensitivity of ``I``, Lemma 1 of the TODS
paper; PrivBayes' neighbours are the same replace-one notion):

* ``S(I) = (1/n)·log n + ((n−1)/n)·log(n/(n−1))`` if ``X`` or ``Π`` is binary (domain size 2);
* ``S(I) = (2/n)·log((n+1)/2) + ((n−1)/n)·log((n+1)/(n−1))`` otherwise;
* ``0`` if ``X`` or ``Π`` has a single value (then ``I ≡ 0``), and for ``n = 1``.

We checked both bounds by exhaustive enumeration of every table with ``2 ≤ n ≤ 7`` records over
domains up to 4 × 4 and every one-record replacement: the binary bound is attained for every
``n`` and the general bound for odd ``n`` (``tests/unit/transforms/tabular/test_structure_scores.py``
repeats this check on small cases).

**Correlation-based feature-selection merit** (Bindschaedler, Shokri, Gunter, VLDB 2017, Section
5, after Hall's CFS, 1999): for ``k = |Π|`` parents,
``merit = k·r̄_cf / sqrt(k + k(k−1)·r̄_ff) = Σ_i r(X, P_i) / sqrt(k + 2·Σ_{i<j} r(P_i, P_j))``,
rewarding parents correlated with the child and penalizing parents correlated with each other.
The empty parent set scores 0. Hall measures discrete correlation by the symmetric uncertainty
``2·I(X;Y)/(H(X)+H(Y))``; its denominator depends on the data, and one replaced record can move
it from 0 to 1 (two near-constant attributes whose only rare values coincide), so its sensitivity
is 1 and an exponential mechanism over it is close to uniform. We use instead the **public
symmetric uncertainty** ``U(X,Y) = 2·I(X;Y)/(log|X| + log|Y|)`` with the entropies replaced by
their public upper bounds, the logs of the domain sizes. ``0 ≤ U ≤ 1`` because
``I ≤ min(H(X), H(Y)) ≤ (log|X| + log|Y|)/2``, and ``U`` is symmetric, so one table per unordered
pair serves both orientations. Its sensitivity is ``2·S(I)/(log|X| + log|Y|)`` with the pair's
``S(I)`` from the lemma above.

Sensitivity of the merit (our derivation; a provable upper bound, not claimed tight). Write
``A = Σ_i r_ci ∈ [0, k]`` and ``D = sqrt(k + 2·Σ_{i<j} r_ij) ≥ sqrt(k)``, and let ``Δ_ci``,
``Δ_ij`` bound the changes of the pairwise ``U``s. For neighbours,
``|A/D − A'/D'| ≤ |A − A'|/D + A'·|1/D − 1/D'|``;
``|A − A'| ≤ Σ_i Δ_ci``; ``u ↦ u^{-1/2}`` has derivative of magnitude at most ``1/(2·k^{3/2})`` on
``u ≥ k``, so ``|1/D − 1/D'| ≤ 2·Σ_{i<j} Δ_ij / (2·k^{3/2})``; with ``A' ≤ k`` this gives

    ``Δ(merit) ≤ (Σ_i Δ_ci + Σ_{i<j} Δ_ij) / sqrt(k)``,

which for equal pairwise bounds ``Δ_U`` is ``sqrt(k)·(k+1)/2·Δ_U`` (``Δ_U`` itself for one parent).

Counts needed. The mutual information of a candidate needs the one table over ``(*Π, X)``; the
merit needs the pairwise tables ``{X, P_i}`` and ``{P_i, P_j}`` (keys are sorted attribute pairs),
which are the same for all steps, so a pipeline can count every pair once. ``score_table_keys``
says which tables a candidate needs; the tables are ``contingency_counts`` arrays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations

import numpy as np

MUTUAL_INFORMATION = "mutual_information"
CORRELATION_MERIT = "correlation_merit"
SCORE_NAMES: tuple[str, ...] = (MUTUAL_INFORMATION, CORRELATION_MERIT)

TableKey = tuple[int, ...]


def check_score_name(score_name: str) -> None:
    """Refuse a score name other than ``mutual_information`` and ``correlation_merit``."""
    if score_name not in SCORE_NAMES:
        raise ValueError(f"unknown structure score {score_name!r}; expected one of {', '.join(SCORE_NAMES)}")


def mutual_information_score(counts: np.ndarray) -> float:
    """``I(X; Π)`` in nats from the contingency table over ``(*parents, child)`` (child on the last axis).

    The parents' axes are read as one variable (their joint configuration). A table with no
    parent axis (a 1-D table of the child alone) or no records scores 0.
    """
    table = np.asarray(counts, dtype=np.float64)
    if table.ndim < 2:
        return 0.0
    joint = table.reshape(-1, table.shape[-1])
    total = joint.sum()
    if total <= 0:
        return 0.0
    parent_margin = joint.sum(axis=1, keepdims=True)
    child_margin = joint.sum(axis=0, keepdims=True)
    occupied = joint > 0
    expected = (parent_margin * child_margin)[occupied] / total
    information = float(np.sum(joint[occupied] * np.log(joint[occupied] / expected)) / total)
    return max(information, 0.0)


def mutual_information_sensitivity(n: int, child_domain_size: int, parent_domain_size: int) -> float:
    """``S(I)`` under replace-one for ``n`` records (PrivBayes' lemma, see the module docstring).

    ``parent_domain_size`` is the number of joint parent configurations (product of the parents'
    domain sizes); the binary form applies when either side has exactly two values.
    """
    _check_record_count(n)
    if child_domain_size < 1 or parent_domain_size < 1:
        raise ValueError("domain sizes must be at least 1")
    if n == 1 or child_domain_size == 1 or parent_domain_size == 1:
        return 0.0
    if child_domain_size == 2 or parent_domain_size == 2:
        return math.log(n) / n + (n - 1) / n * math.log(n / (n - 1))
    return 2.0 / n * math.log((n + 1) / 2) + (n - 1) / n * math.log((n + 1) / (n - 1))


def public_symmetric_uncertainty(pair_counts: np.ndarray) -> float:
    """``U(X, Y) = 2·I(X;Y) / (log|X| + log|Y|)`` from a 2-D table over a pair; the domain sizes are
    the table's shape (public). 0 when both domains have one value."""
    table = np.asarray(pair_counts)
    if table.ndim != 2:
        raise ValueError("the symmetric uncertainty needs a two-dimensional pair table")
    normalizer = math.log(table.shape[0]) + math.log(table.shape[1])
    if normalizer <= 0:
        return 0.0
    return min(2.0 * mutual_information_score(table) / normalizer, 1.0)


def public_symmetric_uncertainty_sensitivity(
    n: int, first_domain_size: int, second_domain_size: int
) -> float:
    """Replace-one sensitivity of ``U``: ``2·S(I)/(log|X| + log|Y|)`` (0 when ``I ≡ 0``)."""
    information_bound = mutual_information_sensitivity(n, first_domain_size, second_domain_size)
    if information_bound == 0.0:
        return 0.0
    return 2.0 * information_bound / (math.log(first_domain_size) + math.log(second_domain_size))


def correlation_merit_score(
    child_parent_tables: Sequence[np.ndarray], parent_pair_tables: Sequence[np.ndarray]
) -> float:
    """Hall's CFS merit ``Σ_i r_ci / sqrt(k + 2·Σ_{i<j} r_ij)`` with ``r = public_symmetric_uncertainty``.

    ``child_parent_tables`` holds the ``k`` pair tables of the child with each parent and
    ``parent_pair_tables`` the ``k(k−1)/2`` tables of the parent pairs (any orientation: ``U`` is
    symmetric). No parents scores 0.
    """
    parent_count = len(child_parent_tables)
    if len(parent_pair_tables) != parent_count * (parent_count - 1) // 2:
        raise ValueError(
            f"{parent_count} parents need {parent_count * (parent_count - 1) // 2} parent pair tables, "
            f"got {len(parent_pair_tables)}"
        )
    if parent_count == 0:
        return 0.0
    relevance = sum(public_symmetric_uncertainty(table) for table in child_parent_tables)
    redundancy = sum(public_symmetric_uncertainty(table) for table in parent_pair_tables)
    return relevance / math.sqrt(parent_count + 2.0 * redundancy)


def correlation_merit_sensitivity(
    n: int, child_domain_size: int, parent_domain_sizes: Sequence[int]
) -> float:
    """``(Σ_i Δ_U(X, P_i) + Σ_{i<j} Δ_U(P_i, P_j)) / sqrt(k)``: the derived replace-one bound
    (module docstring)."""
    parent_count = len(parent_domain_sizes)
    _check_record_count(n)
    if parent_count == 0:
        return 0.0
    relevance_bound = sum(
        public_symmetric_uncertainty_sensitivity(n, child_domain_size, size) for size in parent_domain_sizes
    )
    redundancy_bound = sum(
        public_symmetric_uncertainty_sensitivity(n, first, second)
        for first, second in combinations(parent_domain_sizes, 2)
    )
    return (relevance_bound + redundancy_bound) / math.sqrt(parent_count)


def pair_key(first: int, second: int) -> TableKey:
    """The canonical key of the pair table of two attributes: the sorted pair."""
    if first == second:
        raise ValueError("a pair table needs two different attributes")
    return (min(first, second), max(first, second))


def score_table_keys(score_name: str, child: int, parents: Sequence[int]) -> tuple[TableKey, ...]:
    """The attribute tuples whose contingency tables the candidate's score needs.

    Mutual information: ``(*parents, child)`` (none for an empty parent set, whose score is 0).
    Merit: the sorted pairs ``(child, P_i)`` then ``(P_i, P_j)`` for ``i < j`` in the listed order.
    """
    check_score_name(score_name)
    parents = tuple(int(parent) for parent in parents)
    if not parents:
        return ()
    if score_name == MUTUAL_INFORMATION:
        return ((*parents, int(child)),)
    return tuple(pair_key(child, parent) for parent in parents) + tuple(
        pair_key(first, second) for first, second in combinations(parents, 2)
    )


def candidate_score(
    score_name: str, child: int, parents: Sequence[int], tables: Mapping[TableKey, np.ndarray]
) -> float:
    """The score of (child, parents) from the tables named by ``score_table_keys``."""
    keys = score_table_keys(score_name, child, parents)
    missing = [key for key in keys if key not in tables]
    if missing:
        raise KeyError(f"contingency tables missing for the score of attribute {child}: {missing}")
    if not keys:
        return 0.0
    if score_name == MUTUAL_INFORMATION:
        return mutual_information_score(tables[keys[0]])
    parent_count = len(parents)
    return correlation_merit_score(
        [tables[key] for key in keys[:parent_count]], [tables[key] for key in keys[parent_count:]]
    )


def score_sensitivity(
    score_name: str, n: int, child_domain_size: int, parent_domain_sizes: Sequence[int]
) -> float:
    """Replace-one sensitivity of the named score for one candidate, from public quantities only:
    the record count ``n`` of ``DT`` and the domain sizes of the child and its parents."""
    check_score_name(score_name)
    if score_name == MUTUAL_INFORMATION:
        if not parent_domain_sizes:
            _check_record_count(n)
            return 0.0
        return mutual_information_sensitivity(n, child_domain_size, math.prod(parent_domain_sizes))
    return correlation_merit_sensitivity(n, child_domain_size, parent_domain_sizes)


def _check_record_count(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"the record count n must be a positive integer, got {n!r}")
