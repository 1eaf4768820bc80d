"""Reproduction of PrisCrowd's findings (Huai et al., IJCAI 2019, Section 5) with the release as
it is now proven private (issue 13): public bandwidth, differentially private source qualities,
ratio-capped local weights, the fallback and exactly ``m`` claims per object — on the built-in
generator and on the real Population data, computed by the same transforms the engines run
(``transforms.crowd.release``).

Thresholds are the paper's qualitative claims where they still hold, nothing tuned: combined
weights learn a density closer to the truth than uniform and global-only weights where sources are
heterogeneous and some are outlying; the ISE falls with the number of synthetic claims ``m`` and
flattens; the method beats the ``Basic`` Laplace baseline. Every figure is an average over several
objects, datasets and secrets, and every bound keeps three standard deviations beyond the worst of
ten keys (``tests/reproduction/margins.py``; the spreads in each test's docstring).

Settings (the sample example's, ``examples/crowd_sample.yaml``): ``k = 12``, ``γ = 4``,
``ε0 = 2``, ``q0 = 0.1``, weight ratio cap 2 (local 1.25), source qualities from 3 iterations
sharing ε = 0.6, fixed bandwidth 5.0 on the public range [0, 100] at precision 0.01.

Recorded, not asserted: on Population (``k = 3``, ``ε0 = 12``, ``m = 3``), combined weights' truth
MAE over uniform's is 0.97–1.02 and over global's 0.97–1.01 on ten keys — no separable difference
(the MAE there is carried by a few objects).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.reproduction.margins import Claim, Figures, check_claims, key_secret
from transforms.crowd.baselines import basic_laplace_release
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.density_metrics import per_object_truth_estimate, truth_mean_absolute_error
from transforms.crowd.evaluation import learned_density_errors, released_claims_errors
from transforms.crowd.global_weights import PrivateSourceQuality
from transforms.crowd.release import WeightSettings, fit_crowd_model, synthesize_in_memory
from transforms.crowd.sample_data import SampleCrowdData, generate_sample_crowd_data
from transforms.crowd.synthesis import SynthesisParameters
from transforms.crowd.value_grid import ValueGrid

pytestmark = pytest.mark.slow

DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
SECRETS = (b"\x11" * 32, b"\x22" * 32)
PRECISION = 0.01
TEST_KEY = 0
BANDWIDTH = 5.0
GRID = ValueGrid(0.0, 100.0, PRECISION)


def secrets(key: int) -> tuple[bytes, bytes]:
    """The two release secrets of measurement key ``key`` (key 0: the tests' own)."""
    if key == 0:
        return SECRETS
    return key_secret(1000 + 2 * key, b""), key_secret(1001 + 2 * key, b"")


def data_seeds(key: int) -> tuple[int, int]:
    """The two generated datasets of measurement key ``key`` (key 0: seeds 1 and 2)."""
    return 2 * key + 1, 2 * key + 2


@cache
def generated(seed: int) -> SampleCrowdData:
    return generate_sample_crowd_data(objects=300, claims_per_object=20, sources=100, seed=seed)


def parameters(m: int) -> SynthesisParameters:
    return SynthesisParameters(claims_per_object=m, k=12, gamma=4.0, epsilon0=2.0, grid=GRID,
                               fallback_probability=0.1, max_attempts_per_claim=219, batch_size=2 * m)


def weights(method: str, largest_object: int = 20, secret: bytes = b"") -> WeightSettings:
    """The release's weighting: private source qualities (3 iterations, ε = 0.6) where the method
    uses them."""
    private = None
    if method in ("combined", "global"):
        private = PrivateSourceQuality(iterations=3, epsilon_per_iteration=0.2, largest_object=largest_object,
                                       secret=secret, release_id="reproduction")
    return WeightSettings(method=method, ratio_cap=2.0, local_ratio_cap=1.25, private_global=private)


def mean_ise_against_truth(released: pd.DataFrame, data: SampleCrowdData) -> float:
    """Mean over objects of ISE(KDE of the released claims, the generator's true density)."""
    width = data.public_range[1] - data.public_range[0]
    return released_claims_errors(released, data.true_density, PRECISION, width)[0]


def release(data: SampleCrowdData, method: str, m: int, secret: bytes) -> pd.DataFrame:
    _, result = synthesize_in_memory(
        data.claims, parameters(m), secret=secret, release_id="reproduction", bandwidth=BANDWIDTH,
        weights=weights(method),
    )
    return result.claims


@cache
def generator_errors(method: str, m: int, key: int) -> tuple[float, float]:
    """(mean ISE, truth MAE) averaged over the key's two generated datasets x two secrets."""
    ises, maes = [], []
    for seed in data_seeds(key):
        data = generated(seed)
        for secret in secrets(key):
            released = release(data, method, m, secret)
            ises.append(mean_ise_against_truth(released, data))
            truth = data.truth.set_index("object_id")["truth"]
            maes.append(truth_mean_absolute_error(per_object_truth_estimate(released, "median"), truth))
    return float(np.mean(ises)), float(np.mean(maes))


def release_key_caches() -> None:
    for cached in (generated, generator_errors, model_density_ise, population_truth_error):
        cached.cache_clear()


def test_generator_has_outlying_sources():
    kinds = generated(1).sources["kind"].value_counts()
    assert kinds.get("outlier", 0) >= 5 and kinds.get("reliable", 0) >= 20


@cache
def model_density_ise(method: str, key: int) -> float:
    """Mean ISE of the learned density f_i = Σ_s c_is K_h(·, x_is) (step 3) against the truth."""
    errors = []
    for seed in data_seeds(key):
        data = generated(seed)
        model = fit_crowd_model(data.claims, parameters(10), bandwidth=BANDWIDTH,
                                weights=weights(method, secret=secrets(key)[0]))
        errors.append(learned_density_errors(model.block, model.seed_weights, model.bandwidths, data.true_density))
    return float(np.mean(np.concatenate(errors)))


def learned_density(key: int) -> Figures:
    combined = model_density_ise("combined", key)
    return {
        f"learned_density.combined_over_{baseline}_ise": combined / model_density_ise(baseline, key)
        for baseline in ("uniform", "global")
    }


@pytest.mark.parametrize("baseline", ["uniform", "global"])
def test_combined_weights_learn_a_density_closer_to_the_truth(baseline):
    """ISE of the learned densities (public bandwidth, private source qualities), combined over
    baseline: 0.952–0.969 over uniform (sd 0.005), 0.961–0.966 over global (sd 0.002) on ten keys
    of two generated datasets. (With the data-fitted bandwidth and exact global weights of the old
    release: 0.735–0.759 and 0.746–0.771.)"""
    figures = learned_density(TEST_KEY)
    check_claims(tuple(c for c in CLAIMS if baseline in c.figure), "learned_density", figures)


def released_truth(key: int) -> Figures:
    combined = generator_errors("combined", 10, key)[1]
    return {
        f"released_truth.combined_over_{baseline}_mae": combined / generator_errors(baseline, 10, key)[1]
        for baseline in ("uniform", "global")
    }


@pytest.mark.parametrize("baseline", ["uniform", "global"])
def test_combined_weights_release_claims_that_recover_the_truth_better(baseline):
    """Truth MAE of the released claims (m = 10), combined over each baseline. Over ten keys (two
    generated datasets x two secrets each): combined over uniform 0.953–0.996 (sd 0.015), over
    global 0.960–1.004 (sd 0.014) — better on nearly every key, but by less than three standard
    deviations on the worst, so the bound allows key noise (1.07 and 1.06): the test guards against
    combined weights becoming clearly worse."""
    figures = released_truth(TEST_KEY)
    check_claims(tuple(c for c in CLAIMS if baseline in c.figure), "released_truth", figures)


def ise_by_m(key: int) -> Figures:
    ises = [generator_errors("combined", m, key)[0] for m in (5, 10, 20, 40)]
    return {
        "ise_by_m.m10_over_m5": ises[1] / ises[0],
        "ise_by_m.m20_over_m10": ises[2] / ises[1],
        "ise_by_m.m40_over_m20": ises[3] / ises[2],
        "ise_by_m.last_gain_over_first_gain": (ises[2] - ises[3]) / (ises[0] - ises[1]),
    }


def test_ise_falls_with_m_and_flattens():
    """Ten keys: ISE(m = 10)/ISE(5) 0.56–0.66, ISE(20)/ISE(10) 0.86–0.89, ISE(40)/ISE(20) 0.93–0.96
    (sd 0.009); the last gain is 0.07–0.11 of the first (sd 0.013)."""
    check_claims(CLAIMS, "ise_by_m", ise_by_m(TEST_KEY))


def basic_laplace(key: int) -> Figures:
    method_ise, method_mae = generator_errors("combined", 10, key)
    figures = {}
    for epsilon in (0.1, 1.0):
        basic_ises, basic_maes = [], []
        for seed in data_seeds(key):
            data = generated(seed)
            block = ClaimsBlock.from_frame(data.claims)
            for secret in secrets(key):
                released = basic_laplace_release(block, epsilon, data.public_range, secret, "reproduction")
                basic_ises.append(mean_ise_against_truth(released, data))
                truth = data.truth.set_index("object_id")["truth"]
                basic_maes.append(truth_mean_absolute_error(per_object_truth_estimate(released, "median"), truth))
        figures[f"basic_laplace.method_over_basic_ise_eps{epsilon:g}"] = method_ise / np.mean(basic_ises)
        figures[f"basic_laplace.method_over_basic_mae_eps{epsilon:g}"] = method_mae / np.mean(basic_maes)
    return figures


def test_method_beats_basic_laplace():
    """Ten keys: the method's ISE is 0.50–0.57 of Basic's at ε = 0.1 and 1 (sd 0.018); its truth MAE
    0.015–0.021 (ε = 0.1) and 0.15–0.20 (ε = 1) of Basic's. (Basic at ε = 1 per claim is far more
    private per claim than this release's ε ≈ 16; the comparison is the paper's.)"""
    check_claims(CLAIMS, "basic_laplace", basic_laplace(TEST_KEY))


@cache
def population_truth_error(method: str, key: int) -> float:
    claims = pd.read_csv(DATASETS / "crowd_population" / "claims.csv")
    claims = claims.groupby(["object_id", "source_id"], as_index=False)["value"].mean()
    truth = pd.read_csv(DATASETS / "crowd_population" / "truth.csv").set_index("object_id")["truth"]
    grid = ValueGrid(0.0, 20_000_000.0, 100.0)
    errors = []
    for secret in secrets(key):
        params = SynthesisParameters(claims_per_object=3, k=3, gamma=2.0, epsilon0=12.0, grid=grid,
                                     fallback_probability=0.1, max_attempts_per_claim=219, batch_size=6)
        _, result = synthesize_in_memory(
            claims, params, secret=secret, release_id="reproduction", bandwidth=2000.0,
            weights=weights(method, largest_object=int(claims.groupby("object_id").size().max())),
        )
        errors.append(truth_mean_absolute_error(per_object_truth_estimate(result.claims, "median"), truth))
    return float(np.mean(errors))


def population(key: int) -> Figures:
    """Measured and recorded, not asserted (see the module docstring): Population's truth MAE is
    carried by a few objects whose released claims come from outlying claims, so its ratio between
    weightings swings from key to key."""
    combined = population_truth_error("combined", key)
    return {
        f"population.combined_over_{baseline}_mae": combined / population_truth_error(baseline, key)
        for baseline in ("uniform", "global")
    }


FIGURES = {
    "learned_density": learned_density,
    "released_truth": released_truth,
    "ise_by_m": ise_by_m,
    "basic_laplace": basic_laplace,
    "population": population,
}

CLAIMS = (
    Claim("learned_density.combined_over_uniform_ise", "<=", 1.0, "combined weights learn a closer density"),
    Claim("learned_density.combined_over_global_ise", "<=", 1.0, "combined weights learn a closer density"),
    Claim("released_truth.combined_over_uniform_mae", "<=", 1.07, "better on every key measured, within key noise"),
    Claim("released_truth.combined_over_global_mae", "<=", 1.06, "better on every key measured, within key noise"),
    Claim("ise_by_m.m10_over_m5", "<=", 1.0, "ISE falls with m"),
    Claim("ise_by_m.m20_over_m10", "<=", 1.0, "ISE falls with m"),
    Claim("ise_by_m.m40_over_m20", "<=", 1.0, "ISE falls with m"),
    Claim("ise_by_m.last_gain_over_first_gain", "<=", 0.5, "and flattens"),
    Claim("basic_laplace.method_over_basic_ise_eps0.1", "<=", 1.0, "beats Basic at ε = 0.1"),
    Claim("basic_laplace.method_over_basic_mae_eps0.1", "<=", 1.0, "beats Basic at ε = 0.1"),
    Claim("basic_laplace.method_over_basic_ise_eps1", "<=", 1.0, "beats Basic at ε = 1"),
    Claim("basic_laplace.method_over_basic_mae_eps1", "<=", 1.0, "beats Basic at ε = 1"),
)
