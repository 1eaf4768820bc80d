"""The tabular guarantee (Theorem 1 in parallel composition) and the split of a total budget."""

from __future__ import annotations

import json
import math

import pytest

from transforms.tabular.guarantee import smallest_feasible_k, split_total_epsilon, tabular_guarantee


def test_guarantee_is_the_parallel_composition_of_the_three_parts() -> None:
    guarantee = tabular_guarantee(0.8, 0.9, 0.5, 4.0, 50, 10, max_attempts=1000, released_records=400)
    epsilon_test = 0.5 + math.log(1 + 4.0 / 10)
    delta_test = math.exp(-0.5 * 40)
    assert guarantee["epsilon_test"] == pytest.approx(epsilon_test, rel=1e-15)
    assert guarantee["epsilon"] == pytest.approx(max(0.8, 0.9, epsilon_test), rel=1e-15)
    assert guarantee["delta"] == pytest.approx(delta_test, rel=1e-12)
    parallel = guarantee["composition"]["parallel"]
    assert parallel["structure_learning"] == {"data": "DT", "epsilon": 0.8, "delta": 0.0}
    assert parallel["parameter_learning"]["data"] == "DP" and parallel["privacy_test"]["data"] == "DS"
    whole = guarantee["composition"]["whole_release"]
    tests = whole["privacy_test"]
    assert tests["invocations"] == 1000
    assert tests["basic"]["epsilon"] == pytest.approx(1000 * epsilon_test, rel=1e-12)
    advanced = math.sqrt(
        2 * 1000 * math.log(1 / delta_test)
    ) * epsilon_test + 1000 * epsilon_test * math.expm1(epsilon_test)
    assert tests["advanced"]["epsilon"] == pytest.approx(advanced, rel=1e-12)
    assert tests["epsilon"] == min(tests["basic"]["epsilon"], tests["advanced"]["epsilon"])
    assert whole["epsilon"] == max(0.8, 0.9, tests["epsilon"]) and whole["delta"] == tests["delta"]
    assert "400 released" in tests["covers"]
    json.dumps(guarantee)


def test_a_dominant_learning_epsilon_is_the_headline() -> None:
    guarantee = tabular_guarantee(3.0, 0.5, 0.2, 2.0, 30, 20)
    assert guarantee["epsilon"] == 3.0
    assert "whole_release" not in guarantee["composition"]
    assert guarantee["privacy_unit"].startswith("one record")


@pytest.mark.parametrize(
    "arguments",
    [
        (0.0, 1.0, 0.5, 2.0, 10, 5),
        (1.0, -1.0, 0.5, 2.0, 10, 5),
        (1.0, 1.0, 0.5, 2.0, 10, 10),
        (1.0, 1.0, 0.5, 1.0, 10, 5),
        (1.0, 1.0, 0.0, 2.0, 10, 5),
    ],
)
def test_guarantee_refuses_parameters_out_of_range(arguments: tuple) -> None:
    with pytest.raises(ValueError):
        tabular_guarantee(*arguments)


def feasible(total: float, delta: float, k: int, gamma: float, t: int) -> float | None:
    """The largest ε0 (to 1e-12) for this t, if both constraints hold, computed directly."""
    epsilon0 = total - math.log1p(gamma / t)
    if epsilon0 <= 1e-12:
        return None
    return epsilon0 if math.exp(-epsilon0 * (k - t)) <= delta * (1 + 1e-9) else None


@pytest.mark.parametrize(
    ("total", "delta", "k", "gamma"),
    [(1.0, 1e-6, 50, 4.0), (2.0, 1e-9, 100, 2.0), (0.5, 1e-5, 400, 1.5), (1.0, 1e-3, 20, 3.0)],
)
def test_split_takes_the_largest_admissible_epsilon0(
    total: float, delta: float, k: int, gamma: float
) -> None:
    split = split_total_epsilon(total, delta, k, gamma)
    assert split.epsilon_structure == total and split.epsilon_parameters == total
    assert split.epsilon_test <= total and split.epsilon_test == pytest.approx(total, abs=1e-12)
    assert split.delta_test <= delta
    assert split.epsilon_test == split.epsilon0 + math.log1p(gamma / split.t)
    best = max((t for t in range(1, k) if feasible(total, delta, k, gamma, t) is not None), default=None)
    assert split.t == best
    assert split.epsilon0 == pytest.approx(total - math.log1p(gamma / best), abs=1e-12)
    assert json.loads(json.dumps(split.to_json()))["t"] == best


def test_split_with_an_explicit_t() -> None:
    split = split_total_epsilon(1.0, 1e-6, 100, 4.0, t=20)
    assert split.t == 20 and split.epsilon0 == pytest.approx(1.0 - math.log(1.2), abs=1e-12)
    with pytest.raises(ValueError, match="t=2"):
        split_total_epsilon(1.0, 1e-6, 100, 4.0, t=2)  # ln(1 + 4/2) > 1: no positive ε0
    with pytest.raises(ValueError, match="smaller than k"):
        split_total_epsilon(1.0, 1e-6, 100, 4.0, t=100)


@pytest.mark.parametrize(("total", "delta", "gamma"), [(1.0, 1e-6, 4.0), (0.5, 1e-4, 2.0), (3.0, 1e-8, 10.0)])
def test_infeasible_split_names_the_smallest_k_that_works(total: float, delta: float, gamma: float) -> None:
    smallest = smallest_feasible_k(total, delta, gamma)
    brute = next(k for k in range(2, 5000) if any(feasible(total, delta, k, gamma, t) for t in range(1, k)))
    assert smallest == brute
    split_total_epsilon(total, delta, smallest, gamma)
    with pytest.raises(ValueError, match=f"smallest k that would work is {smallest}"):
        split_total_epsilon(total, delta, smallest - 1, gamma)


def test_the_failure_epsilon_bounds_every_step_of_the_tail_of_the_test_noise() -> None:
    """``P(fail | z) = P(Lap(1/ε0) > z)`` for the integer count excess ``z``: its ratio between
    neighbouring ``z`` is at most ``e^{ε_⊥}`` (``failure_epsilon``), computed here from the Laplace
    tail directly — and attained, so the bound is not loose."""
    import math

    from transforms.tabular.guarantee import failure_epsilon

    for epsilon0 in (0.1, 0.5, math.log(2), 1.0, 3.0):
        def tail(z: int, e0: float = epsilon0) -> float:
            return 0.5 * math.exp(-e0 * z) if z >= 0 else 1.0 - 0.5 * math.exp(e0 * z)

        worst = max(abs(math.log(tail(z) / tail(z + 1))) for z in range(-60, 60))
        assert worst <= failure_epsilon(epsilon0) + 1e-12
        assert worst >= failure_epsilon(epsilon0) - 1e-9


def test_the_whole_release_is_the_learning_with_omega_all_and_unbounded_below_it() -> None:
    from transforms.tabular.guarantee import release_guarantee

    common = dict(epsilon_structure=0.8, epsilon_parameters=0.9, epsilon0=0.5, gamma=4.0, k=50, t=10, delta=1e-6)
    everything = release_guarantee(**common, omega_all=True, max_attempts=20_000, seeds=3_000)
    assert (everything["epsilon"], everything["delta"]) == (0.9, 0.0)
    assert everything["steps"] == [{"mechanism": "pure_dp", "epsilon": 0.9, "delta": 0.0, "count": 1,
                                    "what": "structure and parameter learning (parallel over DT, DP)"}]
    assert everything["per_record"]["epsilon"] == max(0.8, 0.9, 0.5 + math.log1p(4.0 / 10))
    kept = release_guarantee(**common, omega_all=False, max_attempts=20_000, seeds=3_000)
    assert kept["epsilon"] is None and kept["steps"] == [] and "omega: all" in kept["advice"]
    few = release_guarantee(**{**common, "delta": 0.5}, omega_all=False, max_attempts=3, seeds=1_000_000)
    assert few["epsilon"] is not None and few["epsilon"] >= few["per_record"]["epsilon"]
