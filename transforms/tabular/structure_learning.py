"""DP structure learning: the greedy construction of the network's order σ and parent sets on ``DT``.

Issue 3, step 4, in the style of PrivBayes (Zhang et al., SIGMOD 2014 / TODS 2017, Algorithm 4,
"GreedyBayes" with the exponential mechanism) under the seed paper's constraints (Bindschaedler,
Shokri, Gunter, VLDB 2017, Section 5: a maximum degree and a complexity cap):

1. The first attribute of σ is drawn uniformly at random (``choose_first_attribute``); this draw
   does not look at the data.
2. While attributes remain, every (remaining attribute ``X``, parent set ``Π`` ⊆ placed
   attributes) allowed by the constraints is a candidate; one exponential-mechanism choice
   (``exponential_mechanism.py``) over the candidates' scores (``structure_scores.py``) appends
   ``X`` to σ with parents ``Π``. Every ``Π`` lies among earlier attributes, so the network is
   acyclic by construction.

Constraints: ``|Π| ≤ max_degree`` and, for a non-empty ``Π``, ``(Π_{P∈Π} |P|) · |X| ≤
complexity_cap``. The empty parent set is always allowed, so an attribute whose domain alone
exceeds the cap is still placed (without parents). A cap below the smallest product of two
attributes' domain sizes with ``max_degree ≥ 1`` allows no parent anywhere: that configuration
is refused (``validate_structure_constraints``) with the numbers.

Candidate sets (limiting the explosion). The number of parent sets grows like
``C(|placed|, max_degree)`` per child, so the candidates of a step are restricted by the score:

* mutual information: only the *maximal* feasible parent sets — those to which no further placed
  attribute can be added within the degree and the cap. ``I(X; Π ∪ {Y}) ≥ I(X; Π)``, so a
  non-maximal set never scores higher than a maximal one that contains it and dropping it loses
  nothing. Without a binding cap these are exactly PrivBayes' sets of size
  ``min(max_degree, |placed|)``.
* merit: every feasible non-empty parent set of size ``≤ max_degree`` (the merit is not monotone
  in ``Π`` — a redundant parent lowers it — and preferring the smaller non-redundant set is the
  point of CFS). For ``|placed| ≫ max_degree`` this is about as many sets as the maximal ones.
* in both, the empty set is a candidate for ``X`` only when no non-empty set is feasible for it.

Privacy and budget split. Steps 2 run ``m − 1`` times on the same ``DT``; each is an
exponential-mechanism choice with ``ε_s/(m − 1)`` and the sensitivity ``Δ`` = the largest
replace-one sensitivity of any candidate's score in that step (computed from ``n = |DT|`` and the
public domain sizes only). The candidate set of a step depends on the data only through the
earlier choices, so by sequential composition, which holds for adaptively chosen mechanisms
(Dwork and Roth 2014, Section 3.5), the whole structure is ``ε_s``-DP on ``DT`` under replace-one
neighbours. A step whose candidates all have sensitivity 0 (e.g. ``max_degree = 0``: every score
is identically 0) chooses uniformly, which is what the mechanism does with equal scores.

Separating counting from choosing. At scale the counts of one step come from one pass over the
data: ``StructureLearningStep.plan`` lists the candidates and the union of the tables they need
(``table_keys``); workers run ``count_tables`` on their partition; partial tables are added
(``merge_count_tables``); the driver runs ``choose_step``. ``learn_structure`` does the same in
memory (the reference for tests and for the in-memory release).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from transforms.tabular.contingency import contingency_counts
from transforms.tabular.exponential_mechanism import private_choice
from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.structure_scores import (
    MUTUAL_INFORMATION,
    TableKey,
    candidate_score,
    check_score_name,
    score_sensitivity,
    score_table_keys,
)


@dataclass(frozen=True)
class Candidate:
    """One candidate of a greedy step: attribute ``child`` with ``parents`` (increasing column
    indices), the public domain sizes involved, and the tables its score needs."""

    child: int
    parents: tuple[int, ...]
    child_domain_size: int
    parent_domain_sizes: tuple[int, ...]
    table_keys: tuple[TableKey, ...]


@dataclass(frozen=True)
class StructureLearningStep:
    """The public plan of one greedy step: what is placed, what remains, the candidates, and the
    contingency tables (``table_keys``) one pass over ``DT`` must count for them."""

    placed: tuple[int, ...]
    remaining: tuple[int, ...]
    score: str
    candidates: tuple[Candidate, ...]

    @classmethod
    def plan(
        cls,
        placed: Sequence[int],
        remaining: Sequence[int],
        domain_sizes: Sequence[int],
        score: str,
        max_degree: int,
        complexity_cap: int,
    ) -> StructureLearningStep:
        candidates = candidate_tables(placed, remaining, domain_sizes, max_degree, complexity_cap, score)
        return cls(tuple(int(a) for a in placed), tuple(int(a) for a in remaining), score, tuple(candidates))

    @property
    def table_keys(self) -> tuple[TableKey, ...]:
        """The distinct tables of all candidates, in first-use order."""
        return tuple(dict.fromkeys(key for candidate in self.candidates for key in candidate.table_keys))


def validate_structure_constraints(
    domain_sizes: Sequence[int],
    max_degree: int,
    complexity_cap: int,
    attribute_names: Sequence[str] | None = None,
) -> None:
    """Refuse a configuration in which no attribute could ever get a parent, and malformed arguments.

    With ``max_degree ≥ 1`` and at least two attributes, the complexity cap must allow the
    smallest product of two different attributes' domain sizes; otherwise a ValueError names the
    two attributes and the numbers.
    """
    sizes = [int(size) for size in domain_sizes]
    if not sizes:
        raise ValueError("structure learning needs at least one attribute")
    if any(size < 1 for size in sizes):
        raise ValueError(f"every domain size must be at least 1, got {sizes}")
    if isinstance(max_degree, bool) or not isinstance(max_degree, int | np.integer) or max_degree < 0:
        raise ValueError(f"max_degree must be a non-negative integer, got {max_degree!r}")
    if (
        isinstance(complexity_cap, bool)
        or not isinstance(complexity_cap, int | np.integer)
        or complexity_cap < 1
    ):
        raise ValueError(f"the complexity cap must be a positive integer, got {complexity_cap!r}")
    if max_degree == 0 or len(sizes) < 2:
        return
    first, second = np.argsort(sizes, kind="stable")[:2]
    smallest = sizes[first] * sizes[second]
    if smallest > complexity_cap:
        names = (
            attribute_names if attribute_names is not None else [str(index) for index in range(len(sizes))]
        )
        raise ValueError(
            f"complexity cap {complexity_cap} is too small for any parent: the smallest product of a child's "
            f"and one parent's domain sizes is {sizes[first]} × {sizes[second]} = {smallest} "
            f"(attributes {names[first]!s} and {names[second]!s}); raise the cap to at least {smallest} "
            f"or set max_degree to 0"
        )


def _feasible_parent_sets(
    child_size: int, placed: Sequence[int], domain_sizes: Sequence[int], max_degree: int, complexity_cap: int
) -> list[tuple[tuple[int, ...], int]]:
    """Every parent set ⊆ placed (increasing indices) within degree and cap, with its parent product;
    the empty set first."""
    feasible: list[tuple[tuple[int, ...], int]] = []

    def extend(start: int, current: tuple[int, ...], product: int) -> None:
        feasible.append((current, product))
        if len(current) == max_degree:
            return
        for position in range(start, len(placed)):
            attribute = placed[position]
            grown = product * int(domain_sizes[attribute])
            if grown * child_size <= complexity_cap:
                extend(position + 1, (*current, attribute), grown)

    extend(0, (), 1)
    return feasible


def _is_maximal(
    parents: tuple[int, ...],
    product: int,
    child_size: int,
    placed: Sequence[int],
    domain_sizes: Sequence[int],
    max_degree: int,
    complexity_cap: int,
) -> bool:
    if len(parents) == max_degree:
        return True
    members = set(parents)
    return all(
        product * int(domain_sizes[attribute]) * child_size > complexity_cap
        for attribute in placed
        if attribute not in members
    )


def candidate_tables(
    placed: Sequence[int],
    remaining: Sequence[int],
    domain_sizes: Sequence[int],
    max_degree: int,
    complexity_cap: int,
    score: str = MUTUAL_INFORMATION,
) -> list[Candidate]:
    """The candidates of one greedy step (see the module docstring for which parent sets), each with
    the attribute tuples whose contingency tables its score needs."""
    check_score_name(score)
    validate_structure_constraints(domain_sizes, max_degree, complexity_cap)
    placed_sorted = sorted(int(attribute) for attribute in placed)
    remaining_list = [int(attribute) for attribute in remaining]
    if not placed_sorted:
        raise ValueError("a greedy step needs at least one placed attribute (the first is drawn uniformly)")
    if set(placed_sorted) & set(remaining_list) or len(set(remaining_list)) != len(remaining_list):
        raise ValueError("placed and remaining attributes must be distinct")
    attribute_count = len(domain_sizes)
    if any(not 0 <= attribute < attribute_count for attribute in (*placed_sorted, *remaining_list)):
        raise ValueError(f"attribute indices must lie in [0, {attribute_count})")
    candidates: list[Candidate] = []
    for child in remaining_list:
        child_size = int(domain_sizes[child])
        feasible = _feasible_parent_sets(child_size, placed_sorted, domain_sizes, max_degree, complexity_cap)
        if score == MUTUAL_INFORMATION:
            chosen = [
                parents
                for parents, product in feasible
                if _is_maximal(
                    parents, product, child_size, placed_sorted, domain_sizes, max_degree, complexity_cap
                )
            ]
        else:
            chosen = [parents for parents, _ in feasible if parents] or [()]
        for parents in chosen:
            candidates.append(
                Candidate(
                    child=child,
                    parents=parents,
                    child_domain_size=child_size,
                    parent_domain_sizes=tuple(int(domain_sizes[parent]) for parent in parents),
                    table_keys=score_table_keys(score, child, parents),
                )
            )
    return candidates


def count_tables(
    codes: np.ndarray, table_keys: Iterable[TableKey], domain_sizes: Sequence[int]
) -> dict[TableKey, np.ndarray]:
    """The worker-side map over one partition: the contingency table (int64) of every key. Tables
    of disjoint partitions add up to the tables of their union (``merge_count_tables``)."""
    return {tuple(key): contingency_counts(codes, key, domain_sizes) for key in table_keys}


def merge_count_tables(partials: Iterable[Mapping[TableKey, np.ndarray]]) -> dict[TableKey, np.ndarray]:
    """Sum partial tables key by key (exact integer addition)."""
    merged: dict[TableKey, np.ndarray] = {}
    for partial in partials:
        for key, table in partial.items():
            if key in merged:
                if merged[key].shape != table.shape:
                    raise ValueError(f"partial tables of {key} have different shapes")
                merged[key] = merged[key] + table
            else:
                merged[key] = np.array(table, dtype=np.int64, copy=True)
    return merged


def structure_epsilon_per_step(epsilon_structure: float, attribute_count: int) -> float:
    """``ε_s/(m − 1)``: the budget of each of the ``m − 1`` exponential-mechanism choices."""
    if not (math.isfinite(epsilon_structure) and epsilon_structure > 0):
        raise ValueError(f"the structure budget must be a finite positive number, got {epsilon_structure!r}")
    if attribute_count < 2:
        raise ValueError("with fewer than two attributes there is no greedy step to spend budget on")
    return epsilon_structure / (attribute_count - 1)


def step_sensitivity(candidates: Sequence[Candidate], n: int, score: str) -> float:
    """``Δ`` of one step: the largest replace-one sensitivity of any candidate's score."""
    return max(
        score_sensitivity(score, n, candidate.child_domain_size, candidate.parent_domain_sizes)
        for candidate in candidates
    )


def choose_step(
    candidates: Sequence[Candidate],
    tables: Mapping[TableKey, np.ndarray],
    n: int,
    score: str,
    epsilon_step: float,
    rng: np.random.Generator,
) -> Candidate:
    """One exponential-mechanism choice among the candidates (driver side), from merged tables.

    ``n`` is the public record count of ``DT``; every table used must count exactly ``n`` records
    (a missing partition would otherwise go unnoticed).
    """
    if not candidates:
        raise ValueError("a greedy step needs at least one candidate")
    check_score_name(score)
    for key in {key for candidate in candidates for key in candidate.table_keys}:
        if key not in tables:
            raise KeyError(f"contingency table {key} missing for the structure step")
        total = int(np.asarray(tables[key]).sum())
        if total != n:
            raise ValueError(f"contingency table {key} counts {total} records, expected n = {n}")
    sensitivity = step_sensitivity(candidates, n, score)
    if sensitivity == 0.0:
        return candidates[int(rng.integers(len(candidates)))]
    scores = [candidate_score(score, candidate.child, candidate.parents, tables) for candidate in candidates]
    return candidates[private_choice(scores, sensitivity, epsilon_step, rng)]


def choose_first_attribute(attribute_count: int, rng: np.random.Generator) -> int:
    """The first attribute of σ, uniformly at random (data-independent)."""
    if attribute_count < 1:
        raise ValueError("structure learning needs at least one attribute")
    return int(rng.integers(attribute_count))


def learn_structure(
    codes: np.ndarray,
    domain_sizes: Sequence[int],
    score: str,
    epsilon_structure: float,
    max_degree: int,
    complexity_cap: int,
    rng: np.random.Generator,
) -> NetworkStructure:
    """The whole greedy build in memory on the coded structure data ``codes`` (``(n, m)`` integers).

    Draw order from ``rng``: the first attribute, then one step's Gumbel draws (or one uniform
    integer) per greedy step — the order a distributed run must follow to give the same network.
    Tables are counted once per key and reused across steps.
    """
    check_score_name(score)
    sizes = tuple(int(size) for size in domain_sizes)
    validate_structure_constraints(sizes, max_degree, complexity_cap)
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] != len(sizes):
        raise ValueError(f"codes must be an (n, {len(sizes)}) matrix, got shape {codes.shape}")
    attribute_count = len(sizes)
    record_count = int(codes.shape[0])
    first = choose_first_attribute(attribute_count, rng)
    if attribute_count == 1:
        return NetworkStructure(order=(first,), parents=((),))
    if record_count < 1:
        raise ValueError("structure learning needs at least one record in DT")
    epsilon_step = structure_epsilon_per_step(epsilon_structure, attribute_count)
    placed = [first]
    remaining = [attribute for attribute in range(attribute_count) if attribute != first]
    parents: list[tuple[int, ...]] = [()] * attribute_count
    tables: dict[TableKey, np.ndarray] = {}
    while remaining:
        step = StructureLearningStep.plan(placed, remaining, sizes, score, max_degree, complexity_cap)
        missing = [key for key in step.table_keys if key not in tables]
        tables.update(count_tables(codes, missing, sizes))
        chosen = choose_step(step.candidates, tables, record_count, score, epsilon_step, rng)
        parents[chosen.child] = chosen.parents
        placed.append(chosen.child)
        remaining.remove(chosen.child)
    return NetworkStructure(order=tuple(placed), parents=tuple(parents))
