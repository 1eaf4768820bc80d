"""A black-box distinguishing audit of a release's stated guarantee.

An (ε, δ)-DP mechanism satisfies ``P_D(E) ≤ e^ε P_D'(E) + δ`` for every event ``E`` of its output
and every pair of neighbouring inputs. The audit observes outputs only (releases run through the
command line or the Python API), counts how often each event of a family occurs under ``D`` and
under ``D'``, and declares a violation when the data make the inequality untenable: the one-sided
Clopper–Pearson *lower* bound on ``P_D(E)`` exceeds ``e^ε`` times the *upper* bound on ``P_D'(E)``
plus ``δ``, each bound at level ``α / (2 × events)`` (Bonferroni over the events and the two
bounds), so a correct mechanism is flagged with probability at most ``α`` whatever the family.
Both directions are tested. It also reports the largest ε the observations prove,
``max_E ln((low_D(E) − δ) / high_D'(E))`` — a lower bound on the mechanism's true ε.

The samples must be independent draws of the outputs being compared; for a per-object mechanism
(the crowd kind's released claims) many objects with the same claims give many independent draws
of one object's law. A later ``privlake audit`` command builds on this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class EventCounts:
    """How often one event occurred among the trials of each side."""

    event: str
    hits_first: int
    trials_first: int
    hits_second: int
    trials_second: int


@dataclass(frozen=True)
class Violation:
    event: str
    direction: str
    lower: float
    upper: float


@dataclass(frozen=True)
class AuditResult:
    """The violations found (none for a mechanism that keeps its statement, with probability at
    least ``1 − α``) and the largest ε the observations prove (``0`` when none)."""

    epsilon: float
    delta: float
    alpha: float
    events: int
    violations: tuple[Violation, ...]
    proven_epsilon: float

    @property
    def passed(self) -> bool:
        return not self.violations


def clopper_pearson_lower(hits: int, trials: int, level: float) -> float:
    """One-sided lower confidence bound on a binomial proportion (``P(bound > p) ≤ level``)."""
    return 0.0 if hits == 0 else float(stats.beta.ppf(level, hits, trials - hits + 1))


def clopper_pearson_upper(hits: int, trials: int, level: float) -> float:
    """One-sided upper confidence bound on a binomial proportion."""
    return 1.0 if hits == trials else float(stats.beta.ppf(1 - level, hits + 1, trials - hits))


def audit(counts: Sequence[EventCounts], epsilon: float, delta: float, alpha: float = 0.01) -> AuditResult:
    """Test every event in both directions against ``(epsilon, delta)`` (module docstring)."""
    if not counts:
        raise ValueError("an audit needs at least one event")
    level = alpha / (2 * 2 * len(counts))
    violations, proven = [], 0.0
    for count in counts:
        sides = (
            ("D over D'", count.hits_first, count.trials_first, count.hits_second, count.trials_second),
            ("D' over D", count.hits_second, count.trials_second, count.hits_first, count.trials_first),
        )
        for direction, hits, trials, other_hits, other_trials in sides:
            lower = clopper_pearson_lower(hits, trials, level)
            upper = clopper_pearson_upper(other_hits, other_trials, level)
            if lower > math.exp(epsilon) * upper + delta:
                violations.append(Violation(count.event, direction, lower, upper))
            if lower > delta and upper > 0:
                proven = max(proven, math.log((lower - delta) / upper))
    return AuditResult(epsilon, delta, alpha, len(counts), tuple(violations), proven)


def interval_events(first: np.ndarray, second: np.ndarray, edges: Sequence[float]) -> list[EventCounts]:
    """Every event ``low ≤ value < high`` for ``low < high`` among ``edges``: the counts of the
    samples ``first`` (under ``D``) and ``second`` (under ``D'``)."""
    first, second = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    events = []
    for low_index, low in enumerate(edges):
        for high in edges[low_index + 1:]:
            events.append(EventCounts(
                f"[{low:g}, {high:g})",
                int(np.count_nonzero((first >= low) & (first < high))), first.size,
                int(np.count_nonzero((second >= low) & (second < high))), second.size,
            ))
    return events
