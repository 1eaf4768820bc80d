"""Crowd release utility (issue 29): the default mechanism ``histogram`` against the baselines and
PrisCrowd at EQUAL whole-release ε, in one run, side by side.

    .venv/bin/python benchmarks/crowd_utility.py            # everything (about 10 minutes on 2 cores)
    .venv/bin/python benchmarks/crowd_utility.py --quick    # 2 secrets, 1 generator data set (a check)
    .venv/bin/python benchmarks/crowd_utility.py --render   # the Markdown again from the JSON

Data (read in place, never copied into the project):

* the built-in generator (``transforms/crowd/sample_data.py``; true densities and truths known):
  4 data sets x 300 objects x 20 claims, 100 sources, range [0, 100], precision 0.01;
* Emotion (``crowd_emotion/answer.csv``, question/worker/answer; range [-100, 100]; precision 1;
  ``truth.csv``), suppression floor 10 claims as ``examples/crowd_emotion.yaml``;
* Population (``crowd_population/claims.csv``, duplicates resolved by the mean per (object, source);
  range [0, 2e7]; precision 100; ``truth.csv``): the histogram on the public log grid
  (``value_transform: log``, ``LogDensityGrid``); the baselines on the linear range and, for
  fairness, also in ``t = log10(1 + x)`` space (range [0, log10(1 + 2e7)]), released values mapped back.

Settings: ε ∈ {0.5, 1, 2, 4, 8}, δ = 1e-6 (the source unit and PrisCrowd; the claim-unit histogram
and the baselines are pure ε-DP), unit one claim's value, m = 20 released claims per object for
every method, secrets ``bytes([i]) * 32`` for i = 1..10, release id ``utility``.

Methods per (data, ε):

* **histogram** — the example config (``examples/crowd_*.yaml``) with ``privacy.epsilon = ε``: its
  stated guarantee (``pipelines.crowd.pipeline.guarantee_for``) and parameters
  (``density_parameters``), run in memory with ``synthesize_density_block``;
* **Basic Laplace** — every claim clipped plus Laplace((hi − lo)/ε), then ``resampled`` to m;
* **noisy histogram** — 20 equal bins, Laplace(2/ε) counts, m draws (``noisy_histogram_release``);
* **PrisCrowd** — ``synthesis.mechanism: priscrowd`` with uniform weights (the smallest weight
  ratio, R = ρ = 1, and no private source qualities to pay for: the cheapest guarantee), the
  previous example's public bandwidth, m = 20, and the (k, γ, ε0, q0) of a small grid of public
  parameters whose stated whole-release ε (``guarantee_for`` at δ = 1e-6) is smallest; feasible at
  a target ε iff that smallest ε is ≤ the target. When infeasible the table says so and gives the
  MAE at its smallest feasible ε;
* **raw median** (the floor; not private) and the **uniform guess** (m claims uniform on the public
  range, stratified: the histogram mechanism with no information, ε = 0).

Metrics: truth MAE of the per-object median of the released claims (clipped to the public range:
free post-processing; an object a method did not release is estimated by the range's midpoint —
Population: the log range's midpoint); Population instead: mean |log10((med + 1)/(truth + 1))| and
the median relative error |med − truth|/truth (objects with claims and truth > 0). ISE (generator only): of
the KDE of an object's released claims (robust Silverman bandwidth, floor 0.01, the same rule for
every method: ``evaluation.released_claims_errors``) against its true density. Figures: mean ± sd
over secrets (generator: per secret the mean over its data sets).

Source unit: ε = 4, δ = 1e-6, L ∈ {5, 10}, generator and Emotion: ``bound_source_contributions``
(keyed by the secret), then the histogram at ``per_object_epsilon`` (through the config's
guarantee), Basic and the noisy histogram at that same per-object ε_0 (each a pure ε_0-DP step per
object a source reaches: the same L-fold composition).

Speed: µs per released claim of the histogram and of PrisCrowd in memory on a generator data set of
5,000 objects x 20 claims (10^5 claims), in the same run, one thread.

Deterministic: fixed generator seeds, keyed randomness; only the timings vary.
Writes ``benchmarks/results/crowd_utility.json`` and ``crowd_utility.md``.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness

os.environ.update(harness.one_thread())  # before any numerical import

import numpy as np
import pandas as pd

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
DELTA = 1e-6
M = 20
SECRETS = [bytes([i]) * 32 for i in range(1, 11)]
GENERATOR_SEEDS = (1, 2, 3, 4)
RELEASE_ID = "utility"
DATASET_NAMES = ("generator", "emotion", "population")
EXAMPLES = {"generator": "crowd_sample.yaml", "emotion": "crowd_emotion.yaml", "population": "crowd_population.yaml"}
SOURCE_UNIT_EPSILON = 4.0
SOURCE_UNIT_BOUNDS = (5, 10)
GOAL_EPSILON = 4.0
GOAL_FACTOR = {"generator": 2.0, "emotion": 1.25, "population": 2.0}
SPEED_OBJECTS = 5_000
SPEED_SEED = 7
UNIFORM_PURPOSE = "benchmark/uniform-guess"

PRISCROWD_BANDWIDTH = {"generator": 5.0, "emotion": 15.0, "population": 2000.0}
"""The previous example configs' public bandwidths (``git show 42ba8ea:examples/crowd_*.yaml``)."""
PRISCROWD_GRID = {
    # Small grids around the optimum of a wider search (k = 2..n, γ ∈ {1.1, 1.5, 2, 4},
    # ε0 ∈ {0.25 .. 6}, q0 ∈ {0.05 .. 0.6} on the generator): the whole-release ε falls with k
    # near the smallest object's n, with γ near 1 and with q0 large; ε0 trades ε against δ.
    "generator": {"k": (19, 20), "gamma": (1.1, 1.5), "epsilon0": (0.5, 1.0, 2.0), "q0": (0.4, 0.6), "floor": 20},
    "emotion": {"k": (9, 10), "gamma": (1.1, 1.5), "epsilon0": (1.0, 2.0, 4.0), "q0": (0.4, 0.6), "floor": 10},
    "population": {"k": (2, 3), "gamma": (1.1, 1.5), "epsilon0": (8.0, 12.0, 20.0), "q0": (0.4, 0.6), "floor": None},
}
"""``floor``: ``privacy.min_claims_per_object`` (None: k)."""
PREVIOUS_EXAMPLE_PRISCROWD = {"k": 12, "gamma": 4.0, "epsilon0": 2.0, "R": 2.0, "q0": 0.1, "floor": 20,
                              "global_epsilon": 0.6, "iterations": 3, "local_ratio_cap": 1.25}
"""The previous ``examples/crowd_sample.yaml`` (commit 42ba8ea, combined weights) at m = 20: speed only."""


# ----------------------------------------------------------------------------- data


@dataclass
class Data:
    """One evaluation data set: claims, truth, optional true densities, the public range."""

    name: str
    kind: str
    claims: pd.DataFrame
    truth: pd.Series
    public_range: tuple[float, float]
    precision: float
    true_density: Any = None

    @property
    def width(self) -> float:
        return self.public_range[1] - self.public_range[0]


def generator_data(seed: int, objects: int = 300) -> Data:
    from transforms.crowd.sample_data import generate_sample_crowd_data

    data = generate_sample_crowd_data(objects=objects, claims_per_object=20, sources=100, seed=seed)
    truth = data.truth.set_index("object_id")["truth"]
    densities = data.true_density_mixtures()
    return Data(f"generator-{seed}", "generator", data.claims, truth, tuple(map(float, data.public_range)), 0.01,
                densities.__getitem__)


def load_data(kind: str, quick: bool = False) -> list[Data]:
    """The data sets of ``kind``; the truth is kept for the objects that have claims (Population: and
    truth > 0, where a relative error is defined)."""
    if kind == "generator":
        return [generator_data(seed) for seed in (GENERATOR_SEEDS[:1] if quick else GENERATOR_SEEDS)]
    if kind == "emotion":
        claims = pd.read_csv(harness.DATASETS / "crowd_emotion" / "answer.csv").rename(
            columns={"question": "object_id", "worker": "source_id", "answer": "value"})
        truth = pd.read_csv(harness.DATASETS / "crowd_emotion" / "truth.csv").set_index("question")["truth"]
        truth = truth[truth.index.isin(claims["object_id"])]
        return [Data("emotion", kind, claims[["object_id", "source_id", "value"]], truth.astype(float),
                     (-100.0, 100.0), 1.0)]
    claims = pd.read_csv(harness.DATASETS / "crowd_population" / "claims.csv")
    claims = claims.groupby(["object_id", "source_id"], as_index=False)["value"].mean()  # duplicates: mean
    truth = pd.read_csv(harness.DATASETS / "crowd_population" / "truth.csv").set_index("object_id")["truth"]
    truth = truth[truth.index.isin(claims["object_id"]) & (truth > 0)]
    return [Data("population", kind, claims, truth.astype(float), (0.0, 20_000_000.0), 100.0)]


# ----------------------------------------------------------------------------- configs


def example_document(kind: str) -> dict[str, Any]:
    import yaml

    document = yaml.safe_load((harness.ROOT / "examples" / EXAMPLES[kind]).read_text())
    document["privacy"].pop("budget", None)  # lake policy, not the release's
    return copy.deepcopy(document)


def histogram_config(kind: str, epsilon: float, bound: int | None = None) -> Any:
    """The example config at ``privacy.epsilon = epsilon`` (and the source unit with ``L = bound``)."""
    from schemas.crowd.config import CrowdConfig

    document = example_document(kind)
    privacy = document["privacy"]
    privacy["epsilon"] = float(epsilon)
    document["synthesis"]["claims_per_object"] = M
    if bound is not None:
        privacy.update({"unit": "source", "max_objects_per_source": bound, "delta": DELTA})
        privacy.pop("min_claims_per_object", None)  # a bounded object keeps a few claims: release them all
    return CrowdConfig.model_validate(document)


def priscrowd_config(kind: str, k: int, gamma: float, epsilon0: float, q0: float, floor: int | None,
                     *, weights: dict[str, Any] | None = None, ratio_cap: float = 1.0) -> Any:
    """``synthesis.mechanism: priscrowd`` on the example's data settings, m = 20, uniform weights
    unless ``weights`` says otherwise."""
    from schemas.crowd.config import CrowdConfig

    document = example_document(kind)
    low, high = document["privacy"]["value_range"]
    document["privacy"] = {"k": k, "gamma": gamma, "epsilon0": epsilon0, "delta": DELTA, "weight_ratio_cap": ratio_cap,
                           "value_range": [low, high], "fallback_probability": q0,
                           **({"min_claims_per_object": floor} if floor else {})}
    synthesis = document["synthesis"]
    document["synthesis"] = {"mechanism": "priscrowd", "claims_per_object": M, "precision": synthesis["precision"],
                             "bandwidth": {"method": "fixed", "value": PRISCROWD_BANDWIDTH[kind]}}
    document["weights"] = weights or {"method": "uniform"}
    return CrowdConfig.model_validate(document)


def priscrowd_search(kind: str) -> dict[str, Any]:
    """The grid point whose stated whole-release ε (m = 20, δ = 1e-6) is smallest, and every point tried."""
    from pipelines.crowd.pipeline import guarantee_for
    from pipelines.platform.errors import PrivlakeError

    grid = PRISCROWD_GRID[kind]
    tried = []
    for k, gamma, epsilon0, q0 in itertools.product(grid["k"], grid["gamma"], grid["epsilon0"], grid["q0"]):
        config = priscrowd_config(kind, k, gamma, epsilon0, q0, grid["floor"])
        try:
            epsilon = float(guarantee_for(config)["epsilon"])
        except PrivlakeError:
            epsilon = math.inf
        tried.append({"k": k, "gamma": gamma, "epsilon0": epsilon0, "q0": q0, "floor": grid["floor"] or k,
                      "epsilon": epsilon})
    best = min(tried, key=lambda entry: entry["epsilon"])
    return {"best": best, "tried": len(tried), "grid": {key: list(v) if isinstance(v, tuple) else v
                                                        for key, v in grid.items()}}


# ----------------------------------------------------------------------------- releases


def block_of(claims: pd.DataFrame) -> Any:
    from transforms.crowd.claims_block import ClaimsBlock

    return ClaimsBlock.from_frame(claims)


def histogram_release(data: Data, config: Any, secret: bytes, claims: pd.DataFrame | None = None) -> pd.DataFrame:
    from pipelines.crowd.pipeline import density_parameters, guarantee_for
    from transforms.crowd.private_density import synthesize_density_block

    parameters = density_parameters(config, guarantee_for(config))
    frame = data.claims if claims is None else claims
    clipped = frame.assign(value=np.clip(frame["value"].to_numpy(np.float64), *data.public_range))
    return synthesize_density_block(block_of(clipped), parameters, secret, RELEASE_ID).claims


LOG_LOW = 0.0


def log_range(data: Data) -> tuple[float, float]:
    return (LOG_LOW, math.log10(1.0 + data.public_range[1] - data.public_range[0]))


def to_log(data: Data, claims: pd.DataFrame) -> pd.DataFrame:
    clipped = np.clip(claims["value"].to_numpy(np.float64), *data.public_range)
    return claims.assign(value=np.log10(1.0 + clipped - data.public_range[0]))


def from_log(data: Data, released: pd.DataFrame) -> pd.DataFrame:
    with np.errstate(over="ignore"):
        values = data.public_range[0] + np.power(10.0, released["value"].to_numpy(np.float64)) - 1.0
    return released.assign(value=values)


def basic_release(data: Data, epsilon: float, secret: bytes, claims: pd.DataFrame | None = None,
                  log: bool = False) -> pd.DataFrame:
    from transforms.crowd.baselines import basic_laplace_release, resampled

    frame = data.claims if claims is None else claims
    if log:
        frame = to_log(data, frame)
    released = basic_laplace_release(block_of(frame), epsilon, log_range(data) if log else data.public_range,
                                     secret, RELEASE_ID)
    released = resampled(released, M, secret, RELEASE_ID)
    return from_log(data, released) if log else released


def noisy_histogram(data: Data, epsilon: float, secret: bytes, claims: pd.DataFrame | None = None,
                    log: bool = False) -> pd.DataFrame:
    from transforms.crowd.baselines import noisy_histogram_release

    frame = data.claims if claims is None else claims
    if log:
        frame = to_log(data, frame)
    released = noisy_histogram_release(block_of(frame), epsilon, log_range(data) if log else data.public_range, M,
                                       secret, RELEASE_ID)
    return from_log(data, released) if log else released


def uniform_release(data: Data, secret: bytes) -> pd.DataFrame:
    """m stratified uniform claims on the public range per object (no information; log-uniform on
    Population's log grid, as the histogram with every count zero)."""
    from transforms.core.keyed_randomness import keyed_generator

    objects = np.sort(data.claims["object_id"].unique())
    parts = []
    low, high = log_range(data) if data.kind == "population" else data.public_range
    for object_id in objects:
        rng = keyed_generator(secret, RELEASE_ID, UNIFORM_PURPOSE, object_id)
        values = low + (high - low) * (np.arange(1, M + 1) - rng.random()) / M
        parts.append(pd.DataFrame({"object_id": object_id, "claim_index": np.arange(M, dtype=np.int32),
                                   "value": rng.permutation(values)}))
    released = pd.concat(parts, ignore_index=True)
    return from_log(data, released) if data.kind == "population" else released


def priscrowd_release(data: Data, config: Any, secret: bytes) -> pd.DataFrame:
    from pipelines.crowd.pipeline import reference_settings
    from transforms.crowd.release import synthesize_in_memory

    largest = int(data.claims.groupby("object_id").size().max())
    parameters, bandwidth, weights = reference_settings(config, largest)
    _, result = synthesize_in_memory(data.claims, parameters, secret=secret, release_id=RELEASE_ID,
                                     bandwidth=bandwidth, weights=weights)
    return result.claims


# ----------------------------------------------------------------------------- metrics


def midpoint(data: Data) -> float:
    if data.kind == "population":
        return data.public_range[0] + 10.0 ** (log_range(data)[1] / 2) - 1.0
    return 0.5 * (data.public_range[0] + data.public_range[1])


def estimates(data: Data, released: pd.DataFrame) -> tuple[pd.Series, int]:
    """Per truth object: the median of its released claims clipped to the range (the midpoint when
    not released), and how many truth objects were released."""
    from transforms.crowd.density_metrics import per_object_truth_estimate

    estimate = per_object_truth_estimate(released, "median").clip(*data.public_range)
    joined = estimate.reindex(data.truth.index)
    released_count = int(joined.notna().sum())
    return joined.fillna(midpoint(data)), released_count


def truth_figures(data: Data, estimate: pd.Series) -> dict[str, float]:
    truth = data.truth.to_numpy(np.float64)
    value = estimate.to_numpy(np.float64)
    if data.kind != "population":
        return {"truth_mae": float(np.mean(np.abs(value - truth)))}
    positive = truth > 0
    return {"log_error": float(np.mean(np.abs(np.log10((value + 1.0) / (truth + 1.0))))),
            "median_relative_error": float(np.median(np.abs(value[positive] - truth[positive]) / truth[positive])),
            "truth_mae": float(np.mean(np.abs(value - truth)))}


def release_metrics(data: Data, released: pd.DataFrame) -> dict[str, float]:
    estimate, released_count = estimates(data, released)
    result = {**truth_figures(data, estimate), "objects_released": float(released_count)}
    if data.true_density is not None:
        from transforms.crowd.evaluation import released_claims_errors

        result["ise"] = released_claims_errors(released, data.true_density, data.precision, data.width)[0]
    return result


def raw_figures(data: Data, claims: pd.DataFrame | None = None) -> dict[str, float]:
    from transforms.crowd.density_metrics import per_object_truth_estimate

    frame = data.claims if claims is None else claims
    estimate = per_object_truth_estimate(frame, "median").clip(*data.public_range).reindex(data.truth.index)
    result = {**truth_figures(data, estimate.fillna(midpoint(data))), "objects_released": float(estimate.notna().sum())}
    if data.true_density is not None and claims is None:
        from transforms.crowd.evaluation import released_claims_errors

        indexed = frame.assign(claim_index=frame.groupby("object_id").cumcount())
        result["ise"] = released_claims_errors(indexed, data.true_density, data.precision, data.width)[0]
    return result


def summarize(per_secret: list[dict[str, float]]) -> dict[str, Any]:
    """Mean and sd (ddof 1) over secrets of every figure."""
    result: dict[str, Any] = {"secrets": len(per_secret)}
    for key in per_secret[0]:
        values = np.array([entry[key] for entry in per_secret], dtype=np.float64)
        result[key] = float(np.mean(values))
        result[f"{key}_sd"] = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return result


def over(datasets: list[Data], secrets: list[bytes], run: Any) -> dict[str, Any]:
    """``run(data, secret) -> metrics``, averaged over the data sets per secret, summarized over secrets."""
    per_secret = []
    for secret in secrets:
        entries = [run(data, secret) for data in datasets]
        per_secret.append({key: float(np.mean([e[key] for e in entries])) for key in entries[0]})
    return summarize(per_secret)


# ----------------------------------------------------------------------------- one data kind (a worker)


def kind_report(kind: str, quick: bool) -> dict[str, Any]:
    """Every row of one data kind (run in a worker process)."""
    os.environ.update(harness.one_thread())
    start = time.perf_counter()
    datasets = load_data(kind, quick)
    secrets = SECRETS[:2] if quick else SECRETS
    log = kind == "population"
    rows: dict[str, dict[str, Any]] = {}
    for epsilon in EPSILONS:
        key = f"{epsilon:g}"
        config = histogram_config(kind, epsilon)
        from pipelines.crowd.pipeline import guarantee_for

        stated = guarantee_for(config)
        entry = {
            "histogram": {"stated": {"epsilon": stated["epsilon"], "delta": stated["delta"]},
                          **over(datasets, secrets, lambda d, s, c=config: release_metrics(d, histogram_release(d, c, s)))},
            "basic": over(datasets, secrets, lambda d, s, e=epsilon: release_metrics(d, basic_release(d, e, s))),
            "noisy_histogram": over(datasets, secrets,
                                    lambda d, s, e=epsilon: release_metrics(d, noisy_histogram(d, e, s))),
        }
        if log:
            entry["basic_log"] = over(datasets, secrets,
                                      lambda d, s, e=epsilon: release_metrics(d, basic_release(d, e, s, log=True)))
            entry["noisy_histogram_log"] = over(
                datasets, secrets, lambda d, s, e=epsilon: release_metrics(d, noisy_histogram(d, e, s, log=True)))
        rows[key] = entry
        print(f"  {kind:10} ε = {key:4} {time.perf_counter() - start:7.1f} s", file=sys.stderr, flush=True)

    search = priscrowd_search(kind)
    best = search["best"]
    priscrowd: dict[str, Any] = {"search": search, "weights": "uniform"}
    if math.isfinite(best["epsilon"]):
        config = priscrowd_config(kind, best["k"], best["gamma"], best["epsilon0"], best["q0"],
                                  PRISCROWD_GRID[kind]["floor"])
        priscrowd["datasets"] = [d.name for d in datasets]
        priscrowd["at_smallest_epsilon"] = over(datasets, secrets,
                                                lambda d, s, c=config: release_metrics(d, priscrowd_release(d, c, s)))
    priscrowd["feasible"] = {f"{e:g}": bool(best["epsilon"] <= e) for e in EPSILONS}
    print(f"  {kind:10} PrisCrowd (smallest ε {best['epsilon']:.1f}) {time.perf_counter() - start:7.1f} s",
          file=sys.stderr, flush=True)

    floors = {
        "raw_median": summarize([{k: float(np.mean([raw_figures(d)[k] for d in datasets]))
                                  for k in raw_figures(datasets[0])}]),
        "uniform_guess": over(datasets, secrets, lambda d, s: release_metrics(d, uniform_release(d, s))),
    }
    report: dict[str, Any] = {"rows": rows, "priscrowd": priscrowd, "floors": floors,
                              "objects_with_truth": int(np.mean([len(d.truth) for d in datasets])),
                              "objects": int(np.mean([d.claims["object_id"].nunique() for d in datasets])),
                              "claims": int(np.mean([len(d.claims) for d in datasets])),
                              "datasets": [d.name for d in datasets]}
    if kind in ("generator", "emotion"):
        report["source_unit"] = source_unit_rows(datasets, secrets, kind)
    report["wall_seconds"] = time.perf_counter() - start
    print(f"  {kind:10} done {report['wall_seconds']:7.1f} s", file=sys.stderr, flush=True)
    return report


def source_unit_rows(datasets: list[Data], secrets: list[bytes], kind: str) -> dict[str, Any]:
    from pipelines.crowd.pipeline import guarantee_for
    from transforms.crowd.contribution_bound import bound_source_contributions

    rows = {}
    for bound in SOURCE_UNIT_BOUNDS:
        config = histogram_config(kind, SOURCE_UNIT_EPSILON, bound)
        stated = guarantee_for(config)
        epsilon0 = float(stated["per_object"]["epsilon"])
        cache: dict[tuple[str, bytes], pd.DataFrame] = {}

        def bounded(data: Data, secret: bytes, bound: int = bound, cache: dict = cache) -> pd.DataFrame:
            if (data.name, secret) not in cache:
                cache[(data.name, secret)] = bound_source_contributions(data.claims, bound, secret, RELEASE_ID)
            return cache[(data.name, secret)]

        def kept(data: Data, secret: bytes) -> dict[str, float]:
            frame = bounded(data, secret)
            return {"claims_per_object": len(frame) / data.claims["object_id"].nunique(),
                    "objects_with_claims": float(frame["object_id"].nunique()),
                    **{f"raw_{k}": v for k, v in raw_figures(data, frame).items() if k != "objects_released"}}

        rows[str(bound)] = {
            "bound": bound, "stated": {"epsilon": stated["epsilon"], "delta": stated["delta"]},
            "per_object_epsilon": epsilon0,
            "bounded": over(datasets, secrets, kept),
            "histogram": over(datasets, secrets, lambda d, s, c=config: release_metrics(
                d, histogram_release(d, c, s, bounded(d, s)))),
            "basic": over(datasets, secrets, lambda d, s, e=epsilon0: release_metrics(
                d, basic_release(d, e, s, bounded(d, s)))),
            "noisy_histogram": over(datasets, secrets, lambda d, s, e=epsilon0: release_metrics(
                d, noisy_histogram(d, e, s, bounded(d, s)))),
        }
        print(f"  {kind:10} source unit L = {bound}", file=sys.stderr, flush=True)
    return rows


# ----------------------------------------------------------------------------- speed


def speed_report(quick: bool) -> dict[str, Any]:
    """µs per released claim on one generator data set of 5,000 x 20 claims (10^5), one thread."""
    from pipelines.crowd.pipeline import guarantee_for

    data = generator_data(SPEED_SEED, objects=500 if quick else SPEED_OBJECTS)
    secret = SECRETS[0]
    released_claims = data.claims["object_id"].nunique() * M
    result: dict[str, Any] = {"claims": len(data.claims), "objects": int(data.claims["object_id"].nunique()),
                              "released_claims": int(released_claims), "m": M}

    def timed(label: str, function: Any, stated: float) -> None:
        function()  # warm: imports, caches (not timed)
        begin = time.perf_counter()
        released = function()
        seconds = time.perf_counter() - begin
        result[label] = {"seconds": seconds, "us_per_released_claim": 1e6 * seconds / len(released),
                         "released": len(released), "stated_epsilon": stated}
        print(f"  speed {label:28} {seconds:7.2f} s", file=sys.stderr, flush=True)

    config = histogram_config("generator", GOAL_EPSILON)
    timed("histogram", lambda: histogram_release(data, config, secret), GOAL_EPSILON)
    timed("histogram_noise_only", lambda: histogram_noise(data, secret), GOAL_EPSILON)
    best = priscrowd_search("generator")["best"]
    uniform = priscrowd_config("generator", best["k"], best["gamma"], best["epsilon0"], best["q0"],
                               PRISCROWD_GRID["generator"]["floor"])
    result["priscrowd_uniform_parameters"] = best
    timed("priscrowd_uniform", lambda: priscrowd_release(data, uniform, secret), guarantee_for(uniform)["epsilon"])
    previous = PREVIOUS_EXAMPLE_PRISCROWD
    combined = priscrowd_config(
        "generator", previous["k"], previous["gamma"], previous["epsilon0"], previous["q0"], previous["floor"],
        weights={"method": "combined", "global": {"epsilon": previous["global_epsilon"],
                                                  "iterations": previous["iterations"]},
                 "local": {"ratio_cap": previous["local_ratio_cap"]}},
        ratio_cap=previous["R"])
    result["priscrowd_combined_parameters"] = previous
    timed("priscrowd_combined", lambda: priscrowd_release(data, combined, secret), guarantee_for(combined)["epsilon"])
    return result


def histogram_noise(data: Data, secret: bytes) -> np.ndarray:
    """The histogram's exact discrete-Laplace draws alone (same bins, same keyed streams), for the
    speed breakdown; one entry per released claim (m per object) so that the cost is per claim."""
    from transforms.core.discrete_laplace import sample_discrete_laplace
    from transforms.core.keyed_randomness import keyed_generator
    from transforms.crowd.private_density import NOISE_PURPOSE, bins_for, noise_scale
    from transforms.crowd.synthesis import object_id_key

    scale = noise_scale(GOAL_EPSILON)
    grid_size = round((data.public_range[1] - data.public_range[0]) / data.precision) + 1
    counts = data.claims.groupby("object_id").size()
    for object_id, claims in counts.items():
        rng = keyed_generator(secret, RELEASE_ID, NOISE_PURPOSE, object_id_key(object_id))
        sample_discrete_laplace(scale, bins_for(int(claims), GOAL_EPSILON, grid_size), rng)
    return np.empty(len(counts) * M)


# ----------------------------------------------------------------------------- goals


def primary(kind: str) -> str:
    return "log_error" if kind == "population" else "truth_mae"


def goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The pass/fail rows (means over secrets)."""
    result = []
    for kind in DATASET_NAMES:
        entry = report["datasets"][kind]
        metrics = [primary(kind)] + (["median_relative_error"] if kind == "population" else []) + \
            (["ise"] if kind == "generator" else [])
        families = [("baselines", ("basic", "noisy_histogram"))]
        if kind == "population":
            families = [("linear baselines", ("basic", "noisy_histogram")),
                        ("all baselines incl. log space", ("basic", "noisy_histogram", "basic_log",
                                                           "noisy_histogram_log"))]
        for metric in metrics:
            for family, names in families:
                for key, row in entry["rows"].items():
                    best_name = min(names, key=lambda name: row[name][metric])
                    ours, best = row["histogram"][metric], row[best_name][metric]
                    result.append({"data": kind, "goal": f"histogram ≤ min({family}), {metric}",
                                   "epsilon": float(key), "histogram": ours, "reference": best,
                                   "reference_name": best_name, "pass": bool(ours <= best)})
        metric = primary(kind)
        ours = entry["rows"][f"{GOAL_EPSILON:g}"]["histogram"][metric]
        raw = entry["floors"]["raw_median"][metric]
        result.append({"data": kind, "goal": f"{metric} ≤ {GOAL_FACTOR[kind]:g}× raw median", "epsilon": GOAL_EPSILON,
                       "histogram": ours, "reference": GOAL_FACTOR[kind] * raw,
                       "reference_name": f"{GOAL_FACTOR[kind]:g}× the raw median's {raw:.3f}",
                       "ratio": ours / raw if raw > 0 else math.inf, "pass": bool(ours <= GOAL_FACTOR[kind] * raw)})
    return result


# ----------------------------------------------------------------------------- Markdown


def cell(entry: dict[str, Any] | None, key: str, spec: str) -> str:
    if entry is None or entry.get(key) is None:
        return harness.MISSING
    sd = entry.get(f"{key}_sd")
    if sd is None or entry.get("secrets", 1) <= 1:
        return format(entry[key], spec)
    return f"{format(entry[key], spec)} ± {format(sd, spec)}"


METHOD_LABELS = {"histogram": "**histogram** (default)", "basic": "Basic Laplace (resampled to m)",
                 "noisy_histogram": "noisy histogram (20 bins)", "basic_log": "Basic Laplace, log10(1+x) space",
                 "noisy_histogram_log": "noisy histogram, log10(1+x) space"}


def metric_columns(kind: str) -> list[tuple[str, str, str]]:
    if kind == "generator":
        return [("truth_mae", "truth MAE", ".2f"), ("ise", "ISE", ".4f")]
    if kind == "emotion":
        return [("truth_mae", "truth MAE", ".2f")]
    return [("log_error", "mean abs log10 error", ".3f"), ("median_relative_error", "median rel. error", ".3f")]


def utility_table(kind: str, entry: dict[str, Any]) -> list[str]:
    columns = metric_columns(kind)
    header = ["ε", "method", "stated whole-release (ε, δ)", *(label for _, label, _ in columns)]
    lines = []
    pris = entry["priscrowd"]
    best = pris["search"]["best"]
    for key, row in entry["rows"].items():
        for method in ("histogram", "basic", "noisy_histogram", "basic_log", "noisy_histogram_log"):
            if method not in row:
                continue
            data = row[method]
            stated = f"({key}, 0)"
            lines.append([key, METHOD_LABELS[method], stated, *(cell(data, m, s) for m, _, s in columns)])
        if pris["feasible"][key]:
            lines.append([key, "PrisCrowd", f"({best['epsilon']:.1f}, 1e-06)",
                          *(cell(pris.get("at_smallest_epsilon"), m, s) for m, _, s in columns)])
        else:
            lines.append([key, "PrisCrowd", f"infeasible (smallest {best['epsilon']:.1f})",
                          *([harness.MISSING] * len(columns))])
    at = pris.get("at_smallest_epsilon")
    if at is not None:
        lines.append([f"{best['epsilon']:.1f}", "PrisCrowd at its smallest feasible ε (uniform weights)",
                      f"({best['epsilon']:.1f}, 1e-06)", *(cell(at, m, s) for m, _, s in columns)])
    floors = entry["floors"]
    lines.append(["–", "raw median (floor, not private)", "none", *(cell(floors["raw_median"], m, s) for m, _, s in columns)])
    lines.append(["0", "uniform guess (m stratified uniform claims)", "(0, 0)",
                  *(cell(floors["uniform_guess"], m, s) for m, _, s in columns)])
    return harness.table(header, lines, align="rll" + "r" * len(columns))


def source_unit_table(kind: str, entry: dict[str, Any]) -> list[str]:
    columns = metric_columns(kind)
    header = ["L", "ε_0 per object", "claims kept / object", "objects with claims", "method",
              *(label for _, label, _ in columns)]
    lines = []
    for key, row in entry["source_unit"].items():
        kept = row["bounded"]
        common = [key, f"{row['per_object_epsilon']:.3f}", f"{kept['claims_per_object']:.2f}",
                  f"{kept['objects_with_claims']:.0f} / {entry['objects']}"]
        for method in ("histogram", "basic", "noisy_histogram"):
            lines.append([*common, METHOD_LABELS[method], *(cell(row[method], m, s) for m, _, s in columns)])
        lines.append([*common, "raw median of the kept claims (floor)",
                      *(cell(kept, f"raw_{m}", s) if f"raw_{m}" in kept else harness.MISSING for m, _, s in columns)])
    return harness.table(header, lines, align="rrrrl" + "r" * len(columns))


def goal_table(rows: list[dict[str, Any]]) -> list[str]:
    header = ["data", "goal", "ε", "histogram", "reference", "pass"]
    lines = []
    for row in rows:
        spec = ".4f" if "ise" in row["goal"] else ".3f"
        reference = f"{format(row['reference'], spec)} ({row['reference_name']})"
        if row.get("ratio") is not None:
            reference += f"; histogram / raw median = {row['ratio']:.2f}×"
        lines.append([row["data"], row["goal"], f"{row['epsilon']:g}", format(row["histogram"], spec), reference,
                      "**pass**" if row["pass"] else "**FAIL**"])
    return harness.table(header, lines, align="llrrrl")


def markdown(report: dict[str, Any]) -> str:
    machine, speed = report["machine"], report["speed"]
    goal_rows = report["goals"]
    failed = [row for row in goal_rows if not row["pass"]]
    failing: dict[str, list[str]] = {}
    for row in failed:
        failing.setdefault(f"{row['data']}: {row['goal']}", []).append(f"{row['epsilon']:g}")
    titles = {"generator": "Generator (4 data sets x 300 objects x 20 claims, range [0, 100])",
              "emotion": "Emotion (700 questions x 10 answers, range [-100, 100])",
              "population": "Population (1,172 objects, 2-40 claims, range [0, 2e7], log grid for the histogram)"}
    lines = [
        "# Crowd kind: the histogram mechanism against the baselines at equal whole-release ε (issue 29)",
        "",
        f"Generated by `benchmarks/crowd_utility.py` on {report['generated']} in {report['wall_seconds']:.0f} s "
        f"({machine['processor']}, {machine['cores']} cores; data kinds in {report['workers']} worker processes, "
        "one thread each; the speed rows alone afterwards).",
        "",
        f"Settings: ε ∈ {{{', '.join(f'{e:g}' for e in EPSILONS)}}}, δ = {DELTA:g}, unit one claim's value, "
        f"m = {M} released claims per object for every method, {report['secrets']} secrets (`bytes([i]) * 32`), "
        "mean ± sd over secrets (generator: per secret the mean over its 4 data sets). The histogram runs the "
        "example config (`examples/crowd_*.yaml`) at `privacy.epsilon = ε`; its stated whole-release guarantee "
        "is pure ε-DP (δ = 0). Basic and the noisy histogram are pure ε-DP for one claim's value as well.",
        "",
        "Truth: the per-object median of the released claims, clipped to the public range; an object a method "
        "does not release is estimated by the range's midpoint. Population: mean |log10((med + 1)/(truth + 1))| "
        "and the median relative error |med − truth|/truth, over the objects with claims and truth > 0. ISE (generator): of the "
        "KDE of an object's released claims (robust Silverman bandwidth, floor 0.01, the same for every method) "
        "against its true density.",
        "",
        "PrisCrowd: `synthesis.mechanism: priscrowd`, uniform weights (R = ρ = 1, no private source "
        "qualities: its cheapest guarantee), the previous example's public bandwidth, m = 20, and the "
        "(k, γ, ε0, q0) of a small grid whose stated whole-release ε at δ = 1e-6 (`guarantee_for`) is smallest. "
        "It is **infeasible at every target ε** on every data set: with m = 20 claim slots per object its "
        "smallest stated ε is "
        + ", ".join(f"{report['datasets'][k]['priscrowd']['search']['best']['epsilon']:.1f} ({k})"
                    for k in DATASET_NAMES)
        + ". Its utility is shown at that smallest ε (every data set, every secret).",
        "",
        "## Goals",
        "",
        f"{len(goal_rows) - len(failed)} of {len(goal_rows)} pass"
        + ("; failing: " + "; ".join(f"{goal} at ε = {', '.join(eps)}" for goal, eps in failing.items()) + "."
           if failed else "."),
        "The baselines compared are Basic and the noisy histogram (Population: the minimum over the linear "
        "versions, and separately over the linear and the log10(1 + x) versions). The raw-median goals at ε = 4: truth MAE (generator, Emotion), "
        "mean |log10((med + 1)/(truth + 1))| (Population: the raw median's median relative error is 0, "
        "as most cities' truth is one of their claims, so a ratio to it is no goal).",
        "",
        *goal_table(goal_rows),
    ]
    for kind in DATASET_NAMES:
        entry = report["datasets"][kind]
        lines += ["", f"## {titles[kind]}", "",
                  f"{entry['claims']:,} claims, {entry['objects']:,} objects, {entry['objects_with_truth']:,} with "
                  f"truth; {entry['wall_seconds']:.0f} s.", "", *utility_table(kind, entry)]
        if "source_unit" in entry:
            lines += ["", f"Source unit at ε = {SOURCE_UNIT_EPSILON:g}, δ = {DELTA:g} (contribution bound L, then "
                      "ε_0 per object by the PLD accountant; Basic and the noisy histogram at the same ε_0; an object left "
                      "without claims is estimated by the range's midpoint, so the uniform guess above is the "
                      "no-information reference):", "",
                      *source_unit_table(kind, entry)]
    hist = speed["histogram"]
    lines += ["", "## Speed", "",
              f"One generator data set of {speed['objects']:,} objects x 20 claims ({speed['claims']:,} claims), "
              f"m = {M} ({speed['released_claims']:,} released claims), in memory, one thread, same run:", ""]
    speed_rows = [["histogram (ε = 4)", f"{hist['stated_epsilon']:.1f}", f"{hist['seconds']:.2f}",
                   f"{hist['us_per_released_claim']:.1f}", "1.0"]]
    for label, name in (("priscrowd_uniform", "PrisCrowd, uniform weights, smallest-ε grid point"),
                        ("priscrowd_combined", "PrisCrowd, combined weights, previous example (k 12, q0 0.1)")):
        entry = speed[label]
        speed_rows.append([name, f"{entry['stated_epsilon']:.1f}", f"{entry['seconds']:.2f}",
                           f"{entry['us_per_released_claim']:.1f}",
                           f"{entry['us_per_released_claim'] / hist['us_per_released_claim']:.1f}"])
    noise = speed["histogram_noise_only"]
    speed_rows.insert(1, ["of which: the exact discrete-Laplace noise alone", "", f"{noise['seconds']:.2f}",
                          f"{noise['us_per_released_claim']:.1f}",
                          f"{noise['us_per_released_claim'] / hist['us_per_released_claim']:.2f}"])
    lines += harness.table(["mechanism", "stated ε (δ 1e-6)", "seconds", "µs per released claim", "× histogram"],
                           speed_rows, align="lrrrr")
    lines += ["", "PrisCrowd's rows run at a far larger stated ε than the histogram's (its attempts pass often at "
              "q0 = 0.6 or k 12 of 20); the timings are of the mechanisms as configured, not at equal ε, which "
              "PrisCrowd cannot reach."]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_results_option(parser)
    parser.add_argument("--quick", action="store_true", help="2 secrets, 1 generator data set, a small speed set")
    parser.add_argument("--render", action="store_true", help="only write the Markdown again from the stored JSON")
    parser.add_argument("--workers", type=int, default=2, help="worker processes for the data kinds (default 2)")
    arguments = parser.parse_args()
    if arguments.render:
        report = json.loads((arguments.results_dir / "crowd_utility.json").read_text())
        harness.write_markdown(arguments.results_dir, "crowd_utility", markdown(report))
        return
    start = time.perf_counter()
    machine = harness.machine_basics()
    with ProcessPoolExecutor(max_workers=arguments.workers) as pool:
        futures = {kind: pool.submit(kind_report, kind, arguments.quick) for kind in DATASET_NAMES}
        datasets = {kind: future.result() for kind, future in futures.items()}
    speed = speed_report(arguments.quick)
    report: dict[str, Any] = {
        "machine": machine,
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": arguments.quick,
        "workers": arguments.workers,
        "secrets": len(SECRETS[:2] if arguments.quick else SECRETS),
        "settings": {"epsilons": list(EPSILONS), "delta": DELTA, "m": M, "release_id": RELEASE_ID,
                     "generator_seeds": list(GENERATOR_SEEDS[:1] if arguments.quick else GENERATOR_SEEDS),
                     "source_unit": {"epsilon": SOURCE_UNIT_EPSILON, "bounds": list(SOURCE_UNIT_BOUNDS)},
                     "goal_epsilon": GOAL_EPSILON, "goal_factors": GOAL_FACTOR},
        "datasets": datasets,
        "speed": speed,
    }
    report["goals"] = goals(report)
    report["wall_seconds"] = time.perf_counter() - start
    report = harness.json_ready(report)
    text = markdown(report)
    print(text)
    harness.write_json(arguments.results_dir, "crowd_utility", report, indent=1)
    harness.write_markdown(arguments.results_dir, "crowd_utility", text)


if __name__ == "__main__":
    main()
