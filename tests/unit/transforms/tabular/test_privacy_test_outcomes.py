"""Exact output distributions of one invocation of the tabular privacy test, under replace-one neighbours.

One invocation (Bindschaedler et al. 2017, Mechanism 1 with Privacy Test 2, as run by
``tabular_release``): pick a seed ``d`` uniformly from ``DS``, generate ``y = M(d)`` by seed-based
synthesis, release ``y`` iff ``k' ≥ k + Lap(1/ε0)``, otherwise output ``⊥``. Its exact output
distribution is

    ``P_D(y) = Σ_d (1/|DS|) · Pr{y = M(d)} · Pr{k'_D(y) ≥ k + Lap(1/ε0)}``,  ``P_D(⊥) = 1 − Σ_y P_D(y)``,

computed here by enumeration on small models: ``Pr{y = M(d)}`` by a plain walk of σ
(``random_models.brute_force_generation_probability``), ``k'`` by the project's ``SeedIndex``
(checked against the definition), the pass probability by the Laplace CDF. For every
replace-one neighbour ``D'`` (``|DS|`` fixed) the largest violation of
``P_{D'}(Y) ≤ e^ε·P_D(Y) + δ`` over all output sets ``Y`` is the hockey-stick sum
``Σ_o max(0, P_{D'}(o) − e^ε·P_D(o))``, which must be ``≤ δ``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tests.unit.transforms.tabular.random_models import (
    brute_force_generation_probability,
    random_codes,
    random_conditionals,
    random_structure,
)
from transforms.tabular.guarantee import privacy_test_epsilon_delta, tabular_guarantee
from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.parameter_learning import ConditionalTables
from transforms.tabular.privacy_test import SeedIndex
from transforms.tabular.seed_synthesis import kept_and_resampled

FAILURE = "⊥"


def pass_probability(k_prime: int, k: int, epsilon0: float) -> float:
    """``Pr{k' ≥ k + L}`` for ``L ~ Laplace(1/ε0)``: the Laplace CDF at ``k' − k``."""
    excess = k_prime - k
    return 1.0 - 0.5 * math.exp(-epsilon0 * excess) if excess >= 0 else 0.5 * math.exp(epsilon0 * excess)


def outcome_distribution(
    seeds: np.ndarray,
    structure: NetworkStructure,
    conditionals: ConditionalTables,
    omega: int,
    k: int,
    epsilon0: float,
) -> dict:
    """Exact ``{y: P_D(y)}`` over released records plus ``{FAILURE: P_D(⊥)}`` for one invocation."""
    sizes = conditionals.domain_sizes
    _, resampled = kept_and_resampled(structure, omega)
    index = SeedIndex.build(seeds, structure, omega, sizes)
    generated: dict[tuple[int, ...], float] = {}
    for seed in seeds:
        for values in itertools.product(*[range(sizes[attribute]) for attribute in resampled]):
            candidate = seed.copy()
            candidate[list(resampled)] = values
            probability = brute_force_generation_probability(candidate, seed, structure, conditionals, omega)
            if probability > 0.0:
                key = tuple(int(v) for v in candidate)
                generated[key] = generated.get(key, 0.0) + probability / seeds.shape[0]
    outcomes: dict = {}
    for candidate, probability in generated.items():
        k_prime = int(index.agreeing_counts(np.array([candidate], dtype=np.int32))[0])
        by_definition = sum(
            brute_force_generation_probability(candidate, other, structure, conditionals, omega) > 0.0
            for other in seeds
        )
        assert k_prime == by_definition
        outcomes[candidate] = probability * pass_probability(k_prime, k, epsilon0)
    outcomes[FAILURE] = 1.0 - sum(outcomes.values())
    return outcomes


def hockey_stick(first: dict, second: dict, epsilon: float, include_failure: bool) -> float:
    """``sup_Y P_second(Y) − e^ε P_first(Y)`` over output sets ``Y`` (with or without ``⊥``)."""
    keys = (set(first) | set(second)) - (set() if include_failure else {FAILURE})
    return sum(max(0.0, second.get(key, 0.0) - math.exp(epsilon) * first.get(key, 0.0)) for key in keys)


def replace_one_worst_cases(k: int, epsilon0: float, cases: int, seed: int) -> list[tuple]:
    """For random small models and seed sets, every replace-one neighbour pair, as
    ``(P_D, P_D')`` outcome distributions."""
    rng = np.random.default_rng(seed)
    sizes = (2, 3, 2)
    pairs = []
    for case in range(cases):
        structure = random_structure(3, 2, rng)
        conditionals = random_conditionals(structure, sizes, rng)
        omega = int(rng.integers(1, 4))
        seeds = random_codes(int(rng.integers(k, 9)), sizes, rng)
        if case % 2:
            seeds[: seeds.shape[0] // 2] = seeds[0]
        original = outcome_distribution(seeds, structure, conditionals, omega, k, epsilon0)
        for position in range(seeds.shape[0]):
            for record in itertools.product(*[range(size) for size in sizes]):
                neighbour = seeds.copy()
                neighbour[position] = record
                replaced = outcome_distribution(neighbour, structure, conditionals, omega, k, epsilon0)
                pairs.append((original, replaced))
    return pairs


def test_released_outcomes_meet_theorem_1_for_replace_one_neighbours() -> None:
    """Pins the docstring argument of ``tabular_guarantee`` (lines 15-19) for outputs y in U: the
    theorem's (ε0 + ln(1 + γ/t), e^{−ε0(k−t)}) holds for replace-one neighbours with a public
    |DS|, both directions, every t. Negative control: without the ln term and with δ/100 the same
    pairs violate the inequality, so the check can fail."""
    k, epsilon0, gamma = 4, 0.7, 2.0
    pairs = replace_one_worst_cases(k, epsilon0, cases=4, seed=5)
    for t in range(1, k):
        epsilon, delta = privacy_test_epsilon_delta(epsilon0, gamma, k, t)
        worst = max(
            max(hockey_stick(a, b, epsilon, False), hockey_stick(b, a, epsilon, False)) for a, b in pairs
        )
        assert worst <= delta
        too_strong = max(hockey_stick(a, b, epsilon0, False) for a, b in pairs)
        assert too_strong > delta / 100


def test_gamma_drops_out_for_seed_based_synthesis() -> None:
    """In this model every seed that can produce y produces it with the same probability, so the
    γ-interval never matters: the replace-one bound for y in U is (ε0 + ln(1 + 1/t), ½·e^{−ε0(k−t)}),
    i.e. Theorem 1 in the limit γ → 1 with half its δ. Passing γ close to 1 to
    ``tabular_guarantee`` (and ``split_total_epsilon``) is therefore sound and gives a smaller ε."""
    k, epsilon0 = 4, 0.7
    pairs = replace_one_worst_cases(k, epsilon0, cases=4, seed=6)
    for t in range(1, k):
        epsilon = epsilon0 + math.log1p(1.0 / t)
        delta = 0.5 * math.exp(-epsilon0 * (k - t))
        worst = max(
            max(hockey_stick(a, b, epsilon, False), hockey_stick(b, a, epsilon, False)) for a, b in pairs
        )
        assert worst <= delta


def test_the_per_invocation_guarantee_covers_released_records_but_not_the_failure_outcome() -> None:
    """Pins a limitation the guarantee states (``tabular_guarantee``'s ``not_covered``): one invocation
    of the test is (ε_test, δ_test)-DP for the records it releases, but the failure outcome ⊥ is not
    covered. DS = 50 copies of A versus 49 copies of A and one B that differs from A on a kept
    attribute: on D every candidate has k' = 50 and fails with probability ½e^{−20}; on D' the seed B
    is picked with probability 1/50 and its candidate (k' = 1) fails almost surely, so
    P_{D'}(⊥) − e^ε·P_D(⊥) ≈ 1/|DS| = 0.02 while δ_test = e^{−10} ≈ 4.5e-5 (k=30, ε0=1, γ=2, t=20).
    Figures derived from failures (attempts, pass rate, batches, a short release) are therefore
    published as outside the guarantee."""
    structure = NetworkStructure(order=(0, 1, 2), parents=((), (0,), (1,)))
    conditionals = ConditionalTables(
        parents=structure.parents,
        domain_sizes=(2, 2, 3),
        tables=(
            np.array([0.5, 0.5]),
            np.array([[0.7, 0.3], [0.4, 0.6]]),
            np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]]),
        ),
    )
    k, epsilon0, gamma, t, omega = 30, 1.0, 2.0, 20, 1
    epsilon, delta = privacy_test_epsilon_delta(epsilon0, gamma, k, t)
    seeds = np.zeros((50, 3), dtype=np.int32)
    neighbour = seeds.copy()
    neighbour[-1] = (1, 1, 0)
    on_d = outcome_distribution(seeds, structure, conditionals, omega, k, epsilon0)
    on_neighbour = outcome_distribution(neighbour, structure, conditionals, omega, k, epsilon0)
    assert hockey_stick(on_d, on_neighbour, epsilon, include_failure=False) <= delta
    assert hockey_stick(on_neighbour, on_d, epsilon, include_failure=False) <= delta
    violation = hockey_stick(on_d, on_neighbour, epsilon, include_failure=True)
    assert violation > 100 * delta
    assert abs(violation - 1 / 50) < 0.005
    guarantee = tabular_guarantee(1.0, 1.0, epsilon0, gamma, k, t, max_attempts=100)
    assert any("fail" in item for item in guarantee["not_covered"])
