"""A change in object B moves object A's release by no more than the accounted amount (issue 13,
"Cross-object").

The only path from B's claims to A's release is the source qualities ``g``, and the release reads
them from *noisy* per-source loss sums (``PrivateSourceQuality``). The check is exact, by coupling,
on the real in-memory release (``fit_crowd_model``, the same functions the engines run):

1. run the release on ``D`` with its keyed noise ``z_t`` and record the exact sums ``c_t`` of
   every private iteration ``t``;
2. run it on ``D′`` (one claim of B moved) with the noise ``z′_t = c_t + z_t − c′_t``, so the
   noisy sums — and everything computed from them — coincide;
3. every object other than B must then have bitwise the same seed weights (so the same law of its
   released claims, ``released_claim_law``): nothing else of B reaches it; and the coupled noise
   must be at most ``e^{ε_G}`` less likely, ``Σ_t (|z′_t|₁ − |z_t|₁)/b ≤ ε_G``, where ``ε_G`` is
   what the guarantee charges for the source qualities (its ``pure_dp`` steps).

Together, for every event ``E`` of A's output: ``P_D(E) = Σ_z P(z) 1[A(c + z) ∈ E] ≤ e^{ε_G}
Σ_z P(z′) 1[A(c′ + z′) ∈ E] = e^{ε_G} P_D′(E)`` — exact, not sampled, over 107 neighbours (every
claim of B moved to every tenth grid value), both directions by symmetry of ``|·|``. Measured: the
worst coupled log-ratio is 0.071 of the charged 1.0 (real loss sums move far less than the
worst case, which ``test_private_source_quality.py`` searches for).

Negative control: the noise-free fixed point the release used before (issue 13, item 2) — with
``g`` from the exact sums, the coupling cannot hold A still: A's weights move."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

import transforms.crowd.global_weights as global_weights_module
from transforms.core.discrete_laplace import discrete_laplace_scale
from transforms.crowd.global_weights import PrivateSourceQuality, update_source_quality
from transforms.crowd.guarantee import CrowdMechanism, crowd_guarantee
from transforms.crowd.release import WeightSettings, fit_crowd_model
from transforms.crowd.synthesis import SynthesisParameters, released_claim_law
from transforms.crowd.value_grid import ValueGrid

SECRET = bytes.fromhex("c4" * 32)
GRID = ValueGrid(0.0, 100.0, 1.0)
BANDWIDTH = 3.0
PARAMETERS = SynthesisParameters(claims_per_object=3, k=5, gamma=4.0, epsilon0=2.0, grid=GRID,
                                 fallback_probability=0.1, max_attempts_per_claim=40, batch_size=4)
ITERATIONS, EPSILON_PER_ITERATION = 2, 0.5
A, B, C = 0, 1, 2
CLAIMS = pd.DataFrame(
    [(A, s, v) for s, v in zip(range(0, 10), (38, 40, 41, 39, 40, 44, 40, 70, 39, 42), strict=True)]
    + [(B, s, v) for s, v in zip(range(2, 12), (60, 61, 59, 60, 5, 62, 60, 58, 61, 95), strict=True)]
    + [(C, s, v) for s, v in zip(range(0, 12, 2), (20, 21, 19, 20, 80, 22), strict=True)],
    columns=["object_id", "source_id", "value"],
).astype({"value": float})


def private_weights() -> WeightSettings:
    private = PrivateSourceQuality(iterations=ITERATIONS, epsilon_per_iteration=EPSILON_PER_ITERATION,
                                   largest_object=10, secret=SECRET, release_id="cross-object")
    return WeightSettings(method="combined", ratio_cap=4.0, local_ratio_cap=2.0, private_global=private)


@dataclass
class Coupling:
    """What one coupled pair of runs saw, per private iteration: the exact sums and the noise."""

    sums_d: list[np.ndarray]
    noise_d: list[np.ndarray]
    sums_neighbour: list[np.ndarray]
    noise_neighbour: list[np.ndarray]


@contextmanager
def coupled_noise(monkeypatch: pytest.MonkeyPatch, coupling: Coupling, replay: bool):
    """Record the exact sums the update reads and the noise it draws (``replay=False``), or draw
    the noise that makes the noisy sums those of the recorded run (``replay=True``)."""
    real_sums, real_noise = PrivateSourceQuality.exact_sums, global_weights_module.sample_discrete_laplace
    seen = coupling.sums_neighbour if replay else coupling.sums_d

    def exact_sums(self, source_sums):
        source_ids, coarse, objects = real_sums(self, source_sums)
        seen.append(coarse.copy())
        return source_ids, coarse, objects

    def noise(scale, size, rng):
        if not replay:
            coupling.noise_d.append(real_noise(scale, size, rng))
            return coupling.noise_d[-1]
        t = len(coupling.sums_neighbour) - 1
        coupling.noise_neighbour.append(coupling.sums_d[t] + coupling.noise_d[t] - coupling.sums_neighbour[t])
        return coupling.noise_neighbour[-1]

    with monkeypatch.context() as patch:
        patch.setattr(PrivateSourceQuality, "exact_sums", exact_sums)
        patch.setattr(global_weights_module, "sample_discrete_laplace", noise)
        yield


def coupled_models(monkeypatch: pytest.MonkeyPatch, neighbour: pd.DataFrame):
    coupling = Coupling([], [], [], [])
    with coupled_noise(monkeypatch, coupling, replay=False):
        model_d = fit_crowd_model(CLAIMS, PARAMETERS, bandwidth=BANDWIDTH, weights=private_weights())
    with coupled_noise(monkeypatch, coupling, replay=True):
        model_neighbour = fit_crowd_model(neighbour, PARAMETERS, bandwidth=BANDWIDTH, weights=private_weights())
    return model_d, model_neighbour, coupling


def neighbours() -> list[pd.DataFrame]:
    rows = np.flatnonzero(CLAIMS["object_id"].to_numpy() == B)
    result = []
    for row in rows:
        for value in np.arange(0.0, 101.0, 10.0):
            if value != CLAIMS.loc[row, "value"]:
                changed = CLAIMS.copy()
                changed.loc[row, "value"] = value
                result.append(changed)
    return result


def weights_outside_b(model) -> np.ndarray:
    block = model.block
    keep = np.repeat(block.object_ids != B, np.diff(block.offsets))
    return model.seed_weights[keep]


def charged_source_quality_epsilon() -> float:
    """ε of the source qualities as the release's guarantee charges it (its pure-DP steps)."""
    mechanism = CrowdMechanism(k=PARAMETERS.k, gamma=PARAMETERS.gamma, epsilon0=PARAMETERS.epsilon0,
                               weight_ratio_cap=4.0, local_influence=4.0, fallback_probability=0.1,
                               claims_per_object=3, max_attempts_per_claim=40, smallest_object=6,
                               global_iterations=ITERATIONS, global_epsilon_per_iteration=EPSILON_PER_ITERATION)
    steps = crowd_guarantee(mechanism, 0.05)["steps"]
    return sum(step["epsilon"] * step["count"] for step in steps if step["mechanism"] == "pure_dp")


def test_b_reaches_a_only_through_the_noisy_sums_and_no_further_than_charged(monkeypatch) -> None:
    charged = charged_source_quality_epsilon()
    assert charged == pytest.approx(ITERATIONS * EPSILON_PER_ITERATION)
    scale = float(discrete_laplace_scale(EPSILON_PER_ITERATION, private_weights().private_global.sensitivity()))
    a_values = CLAIMS.loc[CLAIMS["object_id"] == A, "value"].to_numpy()
    worst_log_ratio, moved_sums = 0.0, 0
    for neighbour in neighbours():
        model_d, model_neighbour, coupling = coupled_models(monkeypatch, neighbour)
        assert len(coupling.sums_d) == len(coupling.sums_neighbour) == ITERATIONS
        np.testing.assert_array_equal(weights_outside_b(model_d), weights_outside_b(model_neighbour))
        a_rows = slice(0, len(a_values))
        law_d = released_claim_law(a_values, model_d.seed_weights[a_rows], BANDWIDTH, PARAMETERS)[1]
        law_neighbour = released_claim_law(a_values, model_neighbour.seed_weights[a_rows], BANDWIDTH, PARAMETERS)[1]
        np.testing.assert_array_equal(law_d, law_neighbour)
        log_ratio = sum(
            abs(float(np.abs(z_neighbour).sum() - np.abs(z).sum())) / scale
            for z, z_neighbour in zip(coupling.noise_d, coupling.noise_neighbour, strict=True)
        )
        worst_log_ratio = max(worst_log_ratio, log_ratio)
        moved_sums += any(np.any(c != c2) for c, c2 in zip(coupling.sums_d, coupling.sums_neighbour, strict=True))
    assert worst_log_ratio <= charged
    assert moved_sums >= 90, "the neighbours must actually move the source sums for the check to mean anything"
    assert worst_log_ratio > 0.01 * charged, "some neighbour must cost a visible part of the budget"


def test_the_noise_free_source_qualities_leak_b_into_a(monkeypatch) -> None:
    """The known-bad variant: ``g`` from the exact sums (the old fixed point). The coupled noise
    can no longer hold A still."""
    monkeypatch.setattr(PrivateSourceQuality, "update", lambda self, sums, iteration: update_source_quality(sums))
    moved = 0
    for neighbour in neighbours()[:20]:
        model_d, model_neighbour, _ = coupled_models(monkeypatch, neighbour)
        moved += not np.array_equal(weights_outside_b(model_d), weights_outside_b(model_neighbour))
    assert moved >= 10
