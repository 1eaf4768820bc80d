"""Crowd release utility: the corrected (differentially private) PrisCrowd release against the
previous one (commit 3a30a17, before issue 13), side by side, with the (ε, δ) each row states.

    .venv/bin/python benchmarks/crowd_utility.py                    # all (about 10 CPU-minutes)
    .venv/bin/python benchmarks/crowd_utility.py --previous stored   # reuse the stored previous rows
    .venv/bin/python benchmarks/crowd_utility.py --render            # the Markdown again from the JSON

Data (never copied into the project):

* the built-in generator (true densities and truths known): 4 data sets x 300 objects x 20
  claims, 100 sources of which 10% outlying; ISE of the KDE of each object's released claims
  against its true density, and the truth MAE of the per-object median of the released claims;
* Emotion and Population from ``../shared/datasets`` (ground truth known): truth MAE of the
  per-object median of the released claims, next to the raw claims' median and mean (floors).

Rows:

* **corrected, example config** (the headline): the settings of ``examples/crowd_sample.yaml``
  (generator), ``crowd_emotion.yaml`` and ``crowd_population.yaml``, run in memory with exactly
  the release's parameters (``pipelines.crowd.pipeline.reference_settings``) and its stated
  whole-release (ε, δ) (``guarantee_for``: ``transforms/crowd/guarantee.py``);
* sweeps of one knob at a time around the example config: claims per object ``m``, the
  fallback probability ``q0`` and the public bandwidth ``h``; the weighting methods;
* where the utility goes (evaluation only, not private): the corrected mechanism with the
  data-fitted Silverman bandwidth and noise-free source qualities and almost no fallback, then
  the public bandwidth, then noisy qualities, then the example's fallback probability;
* the corrected mechanism at the previous example's knobs (``k``, ``R``, ``m``; public bandwidth,
  ``q0`` of the example), at the smallest δ it can state;
* **previous**: the code of commit 3a30a17 (extracted with ``git archive`` into a temporary
  folder and run in a child process), at its own example settings (what
  ``benchmarks/results/crowd_utility.json`` held) and at the new example's knobs. Its printed
  (ε, δ) was PrisCrowd's Theorem 2 for *one test*, not a bound for the release
  (``docs/PRIVACY.md``, "What was wrong before"); it is shown as such;
* Basic: every claim clipped to the public range plus Laplace noise, at ε = 0.1, 1, 10 and at the
  headline's stated ε (pure ε-DP for one claim's value over the whole release: the same unit).

Spread: every figure is a mean over secrets (generator: the per-secret value is the mean over
the 4 data sets) with its standard deviation over secrets. Fallback share: released claims that
came from the uniform fallback (the ``q0`` draw or the attempt cap), ``BlockSynthesis.objects``'
``fallbacks`` over the released slots. Deterministic: fixed generator seeds and secrets.
Writes ``benchmarks/results/crowd_utility.json`` and ``crowd_utility.md``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness

os.environ.update(harness.one_thread())  # before any numerical import

import numpy as np
import pandas as pd

PREVIOUS_COMMIT = "3a30a17"
GENERATOR_SECRETS = [bytes([i]) * 32 for i in range(1, 11)]
REAL_DATA_SECRETS = [bytes([i]) * 32 for i in range(1, 31)]
"""Real data: 30 secrets (a few very large cities dominate Population's error)."""
GENERATOR_SEEDS = (1, 2, 3, 4)
RELEASE_ID = "utility"
DATASET_NAMES = ("generator", "emotion", "population")
EXAMPLES = {"generator": "crowd_sample.yaml", "emotion": "crowd_emotion.yaml", "population": "crowd_population.yaml"}
BASIC_EPSILONS = (0.1, 1.0, 10.0)
DELTA_LADDER = (1e-3, 1e-2, 1e-1)
"""When the configured δ cannot be reached (the previous knobs), the smallest of these that can."""

PREVIOUS_SETTINGS = {
    # The previous example configs and benchmark (commit 3a30a17): bandwidth fitted per object
    # (Silverman) with this floor; non-private global weights; at most 50 m attempts per object.
    "generator": {"m": 10, "k": 5, "gamma": 4.0, "epsilon0": 2.0, "R": 4.0, "precision": 0.01, "floor": 0.01,
                  "delta_target": 1e-3},
    "emotion": {"m": 10, "k": 5, "gamma": 4.0, "epsilon0": 2.0, "R": 4.0, "precision": 1.0, "floor": 2.0,
                "delta_target": 1e-3},
    "population": {"m": 5, "k": 2, "gamma": 4.0, "epsilon0": 2.0, "R": 4.0, "precision": 1.0, "floor": 1.0,
                   "t": 1},
}
M_SWEEP = {"generator": (3, 5, 10, 20, 40), "emotion": (1, 3, 5, 10), "population": (1, 3, 5, 10)}
Q0_SWEEP = (0.02, 0.05, 0.1, 0.2, 0.4)
BANDWIDTH_SWEEP = {
    "generator": (1.0, 2.5, 5.0, 10.0, 20.0),
    "emotion": (5.0, 10.0, 15.0, 30.0, 60.0),
    "population": (200.0, 2000.0, 20000.0, 200000.0),
}
SMALL_FALLBACK = 0.01
"""q0 of the rows that take the fallback (almost) out: the least that keeps their attempts affordable."""


# ----------------------------------------------------------------------------- data (old and new code)


@dataclass
class Data:
    """One evaluation data set: claims, truth over the evaluated objects, optional true densities."""

    name: str
    claims: pd.DataFrame
    truth: pd.Series
    all_truth: pd.Series
    true_density: Any = None
    width: float | None = None


def load_data(name: str, smallest_object: int) -> list[Data]:
    """The data sets of ``name``; the truth is kept for objects with at least ``smallest_object``
    claims (what the example config releases), ``all_truth`` for every object."""
    from transforms.crowd.sample_data import generate_sample_crowd_data

    if name == "generator":
        result = []
        for seed in GENERATOR_SEEDS:
            data = generate_sample_crowd_data(objects=300, claims_per_object=20, sources=100, seed=seed)
            truth = data.truth.set_index("object_id")["truth"]
            densities = {object_id: data.true_density(object_id) for object_id in truth.index}  # once, not per run
            result.append(Data(f"generator-{seed}", data.claims, truth, truth, densities.__getitem__,
                               data.public_range[1] - data.public_range[0]))
        return result
    if name == "emotion":
        claims = pd.read_csv(harness.DATASETS / "crowd_emotion" / "answer.csv").rename(
            columns={"question": "object_id", "worker": "source_id", "answer": "value"}
        )
        truth = pd.read_csv(harness.DATASETS / "crowd_emotion" / "truth.csv").set_index("question")["truth"]
    else:
        claims = pd.read_csv(harness.DATASETS / "crowd_population" / "claims.csv")
        claims = claims.groupby(["object_id", "source_id"], as_index=False)["value"].mean()  # duplicates: mean
        truth = pd.read_csv(harness.DATASETS / "crowd_population" / "truth.csv").set_index("object_id")["truth"]
    counts = claims.groupby("object_id").size()
    kept = truth[truth.index.isin(counts.index[counts >= smallest_object])]
    return [Data(name, claims, kept, truth)]


def release_metrics(data: Data, released: pd.DataFrame, objects: pd.DataFrame, m: int,
                    precision: float | None) -> dict[str, float]:
    """Utility of one release; the same functions in the old and the new code."""
    from transforms.crowd.density_metrics import per_object_truth_estimate, truth_recovery

    estimate = per_object_truth_estimate(released, "median")
    recovery = truth_recovery(estimate, data.truth)
    shown = objects[~objects["suppressed"].astype(bool)]
    slots = m * len(shown)
    result = {
        "truth_mae": recovery.mean_absolute_error,
        "objects_compared": recovery.objects_compared,
        "truth_mae_all_released": truth_recovery(estimate, data.all_truth).mean_absolute_error,
        "objects_released": int(len(shown)),
        "pass_rate": float(shown["released"].sum() / shown["attempts"].sum()),
        "fallback_share": float(shown["fallbacks"].sum() / slots) if "fallbacks" in shown else 0.0,
        "capped_share": float(shown["capped"].sum() / slots) if "capped" in shown else 0.0,
        "shortfall_share": float(1.0 - shown["released"].sum() / slots),
    }
    if data.true_density is not None:
        from transforms.crowd.evaluation import released_claims_errors

        result["ise"] = released_claims_errors(released, data.true_density, precision, data.width)[0]
    return result


def learned_ise(data: Data, model: Any) -> float:
    from transforms.crowd.evaluation import learned_density_errors

    return float(np.mean(learned_density_errors(model.block, model.seed_weights, model.bandwidths, data.true_density)))


def summarize(per_secret: list[dict[str, float]]) -> dict[str, Any]:
    """Mean and standard deviation over secrets of every figure, and the per-secret values."""
    keys = per_secret[0].keys()
    result: dict[str, Any] = {"secrets": len(per_secret)}
    for key in keys:
        values = np.array([entry[key] for entry in per_secret], dtype=np.float64)
        result[key] = float(np.mean(values))
        result[f"{key}_sd"] = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    result["per_secret"] = {key: [float(entry[key]) for entry in per_secret] for key in ("truth_mae", "ise") if key in keys}
    return result


def over_datasets(datasets: list[Data], secrets: list[bytes],
                  run: Any, learned: Any = None) -> dict[str, Any]:
    """``run(data, secret) -> metrics``, averaged over the data sets per secret, summarized over
    secrets; ``learned(data) -> ISE`` of the model density once per data set (first secret)."""
    per_secret = []
    for secret in secrets:
        entries = [run(data, secret) for data in datasets]
        per_secret.append({key: float(np.mean([e[key] for e in entries])) for key in entries[0]})
    summary = summarize(per_secret)
    if learned is not None:
        summary["learned_ise"] = float(np.mean([learned(data) for data in datasets]))
    return summary


def basic_rows(datasets: list[Data], secrets: list[bytes], epsilons: list[float],
               public_range: tuple[float, float], precision: float) -> dict[str, Any]:
    from transforms.crowd.baselines import basic_laplace_release
    from transforms.crowd.claims_block import ClaimsBlock

    rows = {}
    for epsilon in epsilons:
        def run(data: Data, secret: bytes, epsilon: float = epsilon) -> dict[str, float]:
            block = ClaimsBlock.from_frame(data.claims)
            released = basic_laplace_release(block, epsilon, public_range, secret, RELEASE_ID)
            objects = pd.DataFrame({"object_id": block.object_ids, "claims": block.counts,
                                    "released": block.counts, "attempts": block.counts, "suppressed": False})
            metrics = release_metrics(data, released, objects, 1, precision)
            return {key: metrics[key] for key in ("truth_mae", "ise") if key in metrics}

        rows[f"{epsilon:.6g}"] = {"epsilon": epsilon, "delta": 0.0, **over_datasets(datasets, secrets, run)}
    return rows


def raw_floor(datasets: list[Data]) -> dict[str, float]:
    from transforms.crowd.density_metrics import per_object_truth_estimate, truth_mean_absolute_error

    return {
        f"raw_{method}": float(np.mean([
            truth_mean_absolute_error(per_object_truth_estimate(data.claims, method), data.truth) for data in datasets
        ]))
        for method in ("median", "mean")
    }


# ----------------------------------------------------------------------------- previous code (child process)


def previous_specs(example_knobs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """What the previous code runs: at its own example settings (with its m sweep on the
    generator) and at the new example's knobs (with the m sweep)."""
    specs = []
    for name in DATASET_NAMES:
        own = PREVIOUS_SETTINGS[name]
        specs.append({"dataset": name, "label": "previous settings", "knobs": own, "learned": name == "generator"})
        if name == "generator":
            specs += [{"dataset": name, "label": f"previous settings, m = {m}", "knobs": {**own, "m": m}}
                      for m in (5, 20, 40)]
        knobs = example_knobs[name]
        specs.append({"dataset": name, "label": "example knobs", "knobs": knobs, "learned": name == "generator"})
        specs += [{"dataset": name, "label": f"example knobs, m = {m}", "knobs": {**knobs, "m": m}}
                  for m in M_SWEEP[name] if m != knobs["m"]]
    return specs


def run_previous(specs: list[dict[str, Any]], smallest: dict[str, int]) -> dict[str, Any]:
    """In the child, with the previous commit's ``transforms`` first on ``sys.path``."""
    from transforms.crowd.guarantee import crowd_guarantee
    from transforms.crowd.release import synthesize_in_memory
    from transforms.crowd.synthesis import SynthesisParameters

    datasets = {name: load_data(name, smallest[name]) for name in DATASET_NAMES}
    results = []
    for spec in specs:
        knobs, name = spec["knobs"], spec["dataset"]
        m = knobs["m"]
        parameters = SynthesisParameters(
            claims_per_object=m, k=knobs["k"], gamma=knobs["gamma"], epsilon0=knobs["epsilon0"],
            precision=knobs["precision"], max_attempts_per_object=50 * m, batch_size=2 * m,
        )
        printed = crowd_guarantee(
            k=knobs["k"], gamma=knobs["gamma"], epsilon0=knobs["epsilon0"], weight_ratio_cap=knobs["R"],
            delta_target=knobs.get("delta_target"), t=knobs.get("t"), claims_per_object=m,
            max_attempts_per_object=50 * m,
        )
        models: dict[str, Any] = {}

        def run(data: Data, secret: bytes, parameters=parameters, knobs=knobs, m=m, models=models) -> dict[str, float]:
            model, result = synthesize_in_memory(
                data.claims, parameters, secret=secret, release_id=RELEASE_ID,
                bandwidth_floor=knobs["floor"], weight_ratio_cap=knobs["R"],
            )
            models.setdefault(data.name, model)
            return release_metrics(data, result.claims, result.objects, m, knobs["precision"])

        secrets = GENERATOR_SECRETS if name == "generator" else REAL_DATA_SECRETS
        summary = over_datasets(datasets[name], secrets, run)
        if spec.get("learned"):
            summary["learned_ise"] = float(np.mean([learned_ise(d, models[d.name]) for d in datasets[name]]))
        results.append({
            **spec,
            "printed": {"epsilon": printed["epsilon"], "delta": printed["delta"], "t": printed["t"],
                        "what": "PrisCrowd Theorem 2 for one test (not a bound for the release)",
                        "per_object_composition_epsilon": printed["composition"]["per_object"]["epsilon"]},
            **summary,
        })
    return {"commit": PREVIOUS_COMMIT, "rows": results}


def previous_in_child(specs: list[dict[str, Any]], smallest: dict[str, int], sink: dict[str, Any]) -> None:
    """Extract the previous commit's ``transforms`` and ``schemas`` with ``git archive`` and run
    :func:`run_previous` in a child process; the result (or the error) into ``sink``."""
    try:
        with tempfile.TemporaryDirectory(prefix="privlake-previous-") as folder:
            archive = subprocess.run(["git", "-C", str(harness.ROOT), "archive", PREVIOUS_COMMIT, "transforms", "schemas"],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
            spec_path = Path(folder) / "specs.json"
            spec_path.write_text(json.dumps({"specs": specs, "smallest": smallest}))
            start = time.perf_counter()
            report, _ = harness.run_json_child(
                [sys.executable, __file__, "--previous-code", folder, "--previous-specs", str(spec_path),
                 "--secrets", str(len(REAL_DATA_SECRETS))]
            )
            report["wall_seconds"] = time.perf_counter() - start
            sink["report"] = report
    except Exception as error:  # reported by the main thread
        sink["error"] = error


# ----------------------------------------------------------------------------- corrected code


@dataclass(frozen=True)
class Variant:
    """A configuration around the example config: ``overrides`` (dotted config keys), and for the
    evaluation-only variants a data-fitted bandwidth or noise-free source qualities."""

    group: str
    label: str
    overrides: dict[str, Any] = field(default_factory=dict)
    silverman: bool = False
    exact_qualities: bool = False
    learned: bool = False


def example_config(name: str, overrides: dict[str, Any]) -> Any:
    import yaml

    from schemas.crowd.config import CrowdConfig

    document = yaml.safe_load((harness.ROOT / "examples" / EXAMPLES[name]).read_text())
    document = copy.deepcopy(document)
    document["privacy"].pop("budget", None)  # lake policy, not the release's: irrelevant to utility
    for dotted, value in overrides.items():
        *path, key = dotted.split(".")
        target = document
        for part in path:
            target = target.setdefault(part, {})
        target[key] = value
    return CrowdConfig.model_validate(document)


def stated_guarantee(config: Any, private: bool) -> dict[str, Any]:
    """The whole-release (ε, δ) the release states for ``config``; at the configured δ, else the
    smallest δ of ``DELTA_LADDER`` it can state (the release itself would refuse)."""
    from pipelines.crowd.pipeline import guarantee_for, mechanism_for
    from pipelines.platform.errors import PrivlakeError
    from transforms.crowd.guarantee import whole_release_guarantee

    if not private:
        return {"epsilon": None, "delta": None, "what": "evaluation only: not private"}
    try:
        guarantee = guarantee_for(config)
        return {"epsilon": guarantee["epsilon"], "delta": guarantee["delta"], "what": "whole release",
                "per_claim_epsilon": guarantee["per_claim"]["epsilon"], "t": guarantee["per_claim"]["t"],
                "per_test_theorem_2": guarantee["per_test_theorem_2"]["epsilon"]}
    except PrivlakeError:
        mechanism = mechanism_for(config)
        for delta in DELTA_LADDER:
            try:
                guarantee = whole_release_guarantee(mechanism, delta)
            except ValueError:
                continue
            return {"epsilon": guarantee["epsilon"], "delta": delta,
                    "what": f"whole release; the configured delta {config.privacy.delta:g} is out of reach (refused)"}
        return {"epsilon": None, "delta": None, "what": f"no delta up to {DELTA_LADDER[-1]:g}: refused"}


def variants(name: str, example: Any) -> list[Variant]:
    privacy, synthesis = example.privacy, example.synthesis
    previous = PREVIOUS_SETTINGS[name]
    small_fallback = {"privacy.fallback_probability": SMALL_FALLBACK}
    result = [
        Variant("headline", "example config", learned=True),
        *(Variant("m", f"m = {m}", {"synthesis.claims_per_object": m}) for m in M_SWEEP[name]
          if m != synthesis.claims_per_object),
        *(Variant("q0", f"q0 = {q0:g}", {"privacy.fallback_probability": q0}) for q0 in Q0_SWEEP
          if q0 != privacy.fallback_probability),
        *(Variant("bandwidth", f"h = {h:g}", {"synthesis.bandwidth": {"method": "fixed", "value": h}})
          for h in BANDWIDTH_SWEEP[name] if h != synthesis.bandwidth.value),
        *(Variant("weights", f"{method} weights", {"weights.method": method}, learned=True)
          for method in ("global", "local", "uniform")),
        Variant("cost", "data-fitted h, exact qualities, q0 = 0.01", small_fallback, silverman=True,
                exact_qualities=True, learned=True),
        Variant("cost", "public h, exact qualities, q0 = 0.01", small_fallback, exact_qualities=True, learned=True),
        Variant("cost", "public h, private qualities, q0 = 0.01", small_fallback, learned=True),
        Variant("previous knobs", f"k = {previous['k']}, R = {previous['R']:g}, m = {previous['m']}",
                {"privacy.k": previous["k"], "privacy.weight_ratio_cap": previous["R"],
                 "privacy.gamma": previous["gamma"], "privacy.epsilon0": previous["epsilon0"],
                 "privacy.min_claims_per_object": None, "weights.local.ratio_cap": 2.0,
                 "synthesis.claims_per_object": previous["m"]}),
    ]
    return result


def run_corrected(name: str, datasets: list[Data], variant: Variant, secrets: list[bytes]) -> dict[str, Any]:
    from pipelines.crowd.pipeline import reference_settings
    from transforms.crowd.release import synthesize_in_memory

    config = example_config(name, variant.overrides)
    largest = max(int(d.claims.groupby("object_id").size().max()) for d in datasets)
    parameters, bandwidth, weights = reference_settings(config, largest)
    if variant.exact_qualities:
        weights = replace(weights, private_global=None)
    silverman_floor = PREVIOUS_SETTINGS[name]["floor"] if variant.silverman else None
    models: dict[str, Any] = {}

    def run(data: Data, secret: bytes) -> dict[str, float]:
        model, result = synthesize_in_memory(
            data.claims, parameters, secret=secret, release_id=RELEASE_ID,
            bandwidth=None if variant.silverman else bandwidth, weights=weights, silverman_floor=silverman_floor,
        )
        models.setdefault(data.name, model)
        return release_metrics(data, result.claims, result.objects, parameters.claims_per_object,
                               parameters.grid.precision)

    start = time.perf_counter()
    summary = over_datasets(datasets, secrets, run)
    if variant.learned and datasets[0].true_density is not None:
        summary["learned_ise"] = float(np.mean([learned_ise(d, models[d.name]) for d in datasets]))
    return {
        "group": variant.group, "label": variant.label, "overrides": variant.overrides,
        "bandwidth": "data-fitted (Silverman)" if variant.silverman else bandwidth,
        "m": parameters.claims_per_object, "k": parameters.k, "fallback_probability": parameters.fallback_probability,
        "max_attempts_per_claim": parameters.max_attempts_per_claim,
        "stated": stated_guarantee(config, private=not (variant.silverman or variant.exact_qualities)),
        "wall_seconds": time.perf_counter() - start,
        **summary,
    }


def example_knobs(name: str, example: Any) -> dict[str, Any]:
    """The new example's knobs in the previous code's terms (its bandwidth was always fitted)."""
    privacy = example.privacy
    return {"m": example.synthesis.claims_per_object, "k": privacy.k, "gamma": privacy.gamma,
            "epsilon0": privacy.epsilon0, "R": privacy.weight_ratio_cap, "precision": example.synthesis.precision,
            "floor": max(PREVIOUS_SETTINGS[name]["floor"], example.synthesis.precision),
            "delta_target": privacy.delta}


def corrected_report(name: str, example: Any) -> dict[str, Any]:
    smallest = max(example.privacy.k, example.privacy.min_claims_per_object or 0)
    datasets = load_data(name, smallest)
    secrets = GENERATOR_SECRETS if name == "generator" else REAL_DATA_SECRETS
    rows = []
    for variant in variants(name, example):
        row = run_corrected(name, datasets, variant, secrets)
        rows.append(row)
        print(f"  {name:10} {variant.group:14} {variant.label:44} {row['wall_seconds']:6.1f} s", file=sys.stderr, flush=True)
    headline = rows[0]
    epsilons = sorted({*BASIC_EPSILONS, round(headline["stated"]["epsilon"], 2)})
    low, high = example.privacy.value_range
    return {
        "example": EXAMPLES[name],
        "objects_evaluated": int(np.mean([len(d.truth) for d in datasets])),
        "smallest_released_object": smallest,
        "rows": rows,
        "basic": basic_rows(datasets, secrets, epsilons, (low, high), example.synthesis.precision),
        **raw_floor(datasets),
    }


# ----------------------------------------------------------------------------- Markdown


def cell(entry: dict[str, Any], key: str, spec: str) -> str:
    if entry.get(key) is None:
        return harness.MISSING
    return f"{format(entry[key], spec)} ± {format(entry[key + '_sd'], spec)}"


def stated_cell(stated: dict[str, Any]) -> str:
    if stated.get("epsilon") is None:
        return stated.get("what", harness.MISSING)
    text = f"({stated['epsilon']:.1f}, {stated['delta']:.0e})"
    return text if stated["what"] == "whole release" else text + " ¹"


def printed_cell(printed: dict[str, Any]) -> str:
    return f"per test ({printed['epsilon']:.2f}, {printed['delta']:.1e}) ²"


def value_spec(name: str) -> str:
    return ",.0f" if name == "population" else ".2f"


def figure_columns(name: str) -> list[str]:
    return (["ISE released", "truth MAE"] if name == "generator" else ["truth MAE"])


def figure_cells(name: str, entry: dict[str, Any]) -> list[str]:
    spec = value_spec(name)
    cells = [cell(entry, "ise", ".4f")] if name == "generator" else []
    return cells + [cell(entry, "truth_mae", spec)]


def headline_table(name: str, report: dict[str, Any], previous: dict[str, Any]) -> list[str]:
    rows_by = {(r["group"], r["label"]): r for r in report["rows"]}
    old = {r["label"]: r for r in previous["rows"] if r["dataset"] == name}
    headline = rows_by[("headline", "example config")]
    spec = value_spec(name)
    learned = ["ISE learned f_i"] if name == "generator" else []
    header = ["release", "m", "stated (ε, δ)", "objects estimated", *learned, *figure_columns(name), "fallback share",
              "pass rate"]
    evaluated = report["objects_evaluated"]
    lines = []

    def add(label: str, entry: dict[str, Any], stated: str, m: Any, previous: bool = False) -> None:
        fallback = f"{entry['fallback_share']:.2f}"
        if previous:  # no fallback; an object could be released with fewer than m claims
            fallback = "none" + (f" (short {entry['shortfall_share']:.3f})" if entry["shortfall_share"] >= 5e-4 else "")
        learned_cell = [harness.number(entry.get("learned_ise"), ".4f")] if learned else []
        lines.append([label, m, stated, f"{entry['objects_compared']:.0f}", *learned_cell, *figure_cells(name, entry),
                      fallback, f"{entry['pass_rate']:.2f}"])

    prev_own = old["previous settings"]
    add(f"previous, previous settings (k = {prev_own['knobs']['k']}, R = {prev_own['knobs']['R']:g})", prev_own,
        printed_cell(prev_own["printed"]), prev_own["knobs"]["m"], previous=True)
    prev_example = old["example knobs"]
    add("previous, example knobs", prev_example, printed_cell(prev_example["printed"]), prev_example["knobs"]["m"],
        previous=True)
    add("**corrected, example config**", headline, stated_cell(headline["stated"]), headline["m"])
    knobs = next(r for r in report["rows"] if r["group"] == "previous knobs")
    add(f"corrected, previous knobs ({knobs['label']})", knobs, stated_cell(knobs["stated"]), knobs["m"])
    for key, basic in report["basic"].items():
        lines.append([f"Basic Laplace, ε = {float(key):g}", "all", f"({float(key):g}, 0)", evaluated,
                      *([harness.MISSING] if learned else []), *figure_cells(name, basic), harness.MISSING,
                      harness.MISSING])
    no_ise = [harness.MISSING] * (len(learned) + (name == "generator"))
    lines.append(["raw claims, median (floor)", "all", "none", evaluated, *no_ise, f"{report['raw_median']:{spec}}",
                  harness.MISSING, harness.MISSING])
    if name != "population":  # Population's mean is carried by vandalized claims (up to 6.6e18)
        lines.append(["raw claims, mean", "all", "none", evaluated, *no_ise, f"{report['raw_mean']:{spec}}",
                      harness.MISSING, harness.MISSING])
    return harness.table(header, lines, align="lrl" + "r" * (len(header) - 3), formats=[None, None, None, ","]
                         + [None] * (len(header) - 4))


def sweep_table(name: str, report: dict[str, Any], previous: dict[str, Any]) -> list[str]:
    headline = report["rows"][0]
    old = {r["knobs"]["m"]: r for r in previous["rows"]
           if r["dataset"] == name and r["label"].startswith("example knobs")}
    header = ["knob", "stated (ε, δ)", *figure_columns(name), "fallback share", "pass rate",
              *(f"previous: {c}" for c in figure_columns(name))]
    lines = []
    for group in ("m", "q0", "bandwidth"):
        entries = [r for r in report["rows"] if r["group"] == group] + [headline]
        key = {"m": lambda r: r["m"], "q0": lambda r: r["fallback_probability"],
               "bandwidth": lambda r: r["bandwidth"]}[group]
        for entry in sorted(entries, key=key):
            label = {"m": f"m = {entry['m']}", "q0": f"q0 = {entry['fallback_probability']:g}",
                     "bandwidth": f"h = {entry['bandwidth']:g}"}[group]
            if entry is headline:
                label = f"**{label}** (example)"
            previous_cells = [harness.MISSING] * len(figure_columns(name))
            if group == "m" and entry["m"] in old:
                previous_cells = figure_cells(name, old[entry["m"]])
            lines.append([label, stated_cell(entry["stated"]), *figure_cells(name, entry),
                          f"{entry['fallback_share']:.2f}", f"{entry['pass_rate']:.2f}", *previous_cells])
    return harness.table(header, lines, align="ll" + "r" * (len(header) - 2))


def cost_table(name: str, report: dict[str, Any]) -> list[str]:
    rows = [r for r in report["rows"] if r["group"] in ("cost", "weights")] + [report["rows"][0]]
    order = {"cost": 0, "headline": 1, "weights": 2}
    rows.sort(key=lambda r: order[r["group"]])
    learned = name == "generator"
    header = ["variant", "stated (ε, δ)", *(["ISE learned f_i"] if learned else []), *figure_columns(name),
              "fallback share", "pass rate"]
    lines = []
    for entry in rows:
        label = "**example config** (combined weights)" if entry["group"] == "headline" else entry["label"]
        lines.append([label, stated_cell(entry["stated"]),
                      *([f"{entry['learned_ise']:.4f}"] if learned else []),
                      *figure_cells(name, entry), f"{entry['fallback_share']:.2f}", f"{entry['pass_rate']:.2f}"])
    return harness.table(header, lines, align="ll" + "r" * (len(header) - 2))


def markdown(report: dict[str, Any]) -> str:
    previous = report["previous"]
    machine = report["machine"]
    lines = [
        "# Crowd kind: utility of the corrected release against the previous one",
        "",
        f"Machine: {machine['processor']}, {machine['cores']} cores; load average at start "
        f"{machine['load_average_at_start']}. One thread per process. Generated by `benchmarks/crowd_utility.py` "
        f"in {report['wall_seconds']:.0f} s on {report['generated']} (the previous code, commit "
        f"{previous['commit']}, in a child process: {previous.get('wall_seconds', float('nan')):.0f} s).",
        "",
        f"Figures: mean ± standard deviation over secrets (generator: {report['secrets']['generator']} secrets, "
        f"each the mean over 4 data sets of 300 objects; real data: {report['secrets']['real']} secrets). ISE: of the KDE of an object's released claims against "
        "its true density. Truth MAE: of the per-object median of the released claims. Fallback share: released "
        "claims drawn uniformly on the public grid (the q0 draw or the attempt cap).",
        "",
        "¹ the configured δ = 1e-6 cannot be reached at these knobs (a release refuses); the smallest δ of "
        "1e-3, 1e-2, 1e-1 it can state. ² what the previous release printed: PrisCrowd's Theorem 2 for one "
        "test with fixed weights, not a bound for the release (its bandwidth was fitted to each object, its "
        "source weights pooled every object without noise, and failed tests were not covered).",
    ]
    titles = {"generator": "Generator (`examples/crowd_sample.yaml` settings)",
              "emotion": "Emotion (`examples/crowd_emotion.yaml`)",
              "population": "Population (`examples/crowd_population.yaml`)"}
    for name in DATASET_NAMES:
        entry = report["datasets"][name]
        lines += ["", f"## {titles[name]}", "",
                  f"Objects evaluated: {entry['objects_evaluated']} (those with at least "
                  f"{entry['smallest_released_object']} claims, which the example config releases).", "",
                  *headline_table(name, entry, previous), "",
                  "One knob at a time around the example config (previous: the previous code at the example's "
                  "knobs, same m):", "",
                  *sweep_table(name, entry, previous), "",
                  "Where the utility goes (rows without a guarantee are evaluation only), and the weighting methods:",
                  "", *cost_table(name, entry)]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_results_option(parser)
    parser.add_argument("--previous", choices=["run", "stored"], default="run",
                        help="run the previous code (git archive of commit 3a30a17) or reuse the stored rows")
    parser.add_argument("--secrets", type=int, default=None,
                        help="use only the first N secrets (a quick check; the stored results use all)")
    parser.add_argument("--render", action="store_true",
                        help="only write the Markdown again from the stored crowd_utility.json")
    parser.add_argument("--previous-code", help=argparse.SUPPRESS)
    parser.add_argument("--previous-specs", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.secrets:
        del GENERATOR_SECRETS[arguments.secrets:], REAL_DATA_SECRETS[arguments.secrets:]
    if arguments.previous_code:
        sys.path.insert(0, arguments.previous_code)
        request = json.loads(Path(arguments.previous_specs).read_text())
        print(json.dumps(harness.json_ready(run_previous(request["specs"], request["smallest"]))))
        return

    if arguments.render:
        report = json.loads((arguments.results_dir / "crowd_utility.json").read_text())
        harness.write_markdown(arguments.results_dir, "crowd_utility", markdown(report))
        return
    start = time.perf_counter()
    machine = harness.machine_basics()
    examples = {name: example_config(name, {}) for name in DATASET_NAMES}
    smallest = {name: max(c.privacy.k, c.privacy.min_claims_per_object or 0) for name, c in examples.items()}
    sink: dict[str, Any] = {}
    child = None
    if arguments.previous == "run":
        specs = previous_specs({name: example_knobs(name, c) for name, c in examples.items()})
        child = threading.Thread(target=previous_in_child, args=(specs, smallest, sink))
        child.start()
    else:
        sink["report"] = json.loads((arguments.results_dir / "crowd_utility.json").read_text())["previous"]
    datasets = {name: corrected_report(name, examples[name]) for name in DATASET_NAMES}
    if child is not None:
        child.join()
    if "error" in sink:
        raise sink["error"]
    report = {
        "machine": machine,
        "generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "wall_seconds": time.perf_counter() - start,
        "cpu_seconds": time.process_time() + sum(os.times()[2:4]),
        "secrets": {"generator": len(GENERATOR_SECRETS), "real": len(REAL_DATA_SECRETS)},
        "datasets": datasets,
        "previous": sink["report"],
    }
    report = harness.json_ready(report)
    text = markdown(report)
    print(text)
    harness.write_json(arguments.results_dir, "crowd_utility", report, indent=1)
    harness.write_markdown(arguments.results_dir, "crowd_utility", text)


if __name__ == "__main__":
    main()
