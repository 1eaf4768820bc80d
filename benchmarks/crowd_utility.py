"""Crowd release utility, side by side: PrisCrowd's combined weights against the global-only,
local-only and uniform ablations and the Basic Laplace baseline, on the built-in generator
(true densities known) and on the real Emotion and Population data (ground truth known).

    .venv/bin/python benchmarks/crowd_utility.py

Prints markdown tables (the README's evaluation section) and writes
benchmarks/results/crowd_utility.json. Deterministic: fixed generator seeds and secrets.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pandas as pd

from benchmarks.harness import DATASETS, add_results_option, table, write_json
from transforms.crowd.baselines import basic_laplace_release
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.density_metrics import per_object_truth_estimate, truth_mean_absolute_error
from transforms.crowd.evaluation import learned_density_errors, released_claims_errors
from transforms.crowd.release import fit_crowd_model, synthesize_in_memory
from transforms.crowd.sample_data import generate_sample_crowd_data
from transforms.crowd.synthesis import SynthesisParameters

SECRETS = [bytes([i]) * 32 for i in (1, 2, 3)]
REAL_DATA_SECRETS = [bytes([i]) * 32 for i in range(1, 31)]
"""Secrets of the real-data figures: enough for a paired comparison between weight methods
(a few objects dominate Population's error, so a handful of secrets is not representative)."""
METHODS = ("combined", "global", "local", "uniform")
PRECISION = 0.01


def parameters(m: int, k: int, precision: float) -> SynthesisParameters:
    return SynthesisParameters(
        claims_per_object=m, k=k, gamma=4.0, epsilon0=2.0, precision=precision,
        max_attempts_per_object=50 * m, batch_size=2 * m,
    )


def released_ise(released: pd.DataFrame, data) -> tuple[float, float]:
    """Mean ISE and SISE of the released claims' KDE against the true density."""
    width = data.public_range[1] - data.public_range[0]
    return released_claims_errors(released, data.true_density, PRECISION, width)


def generator_report() -> dict:
    datasets = [generate_sample_crowd_data(objects=300, claims_per_object=20, sources=100, seed=s) for s in (1, 2, 3, 4)]
    report: dict = {"model_density_ise": {}, "release": {}, "m_sweep": {}, "basic": {}}
    for method in METHODS:
        errors = []
        for data in datasets:
            model = fit_crowd_model(data.claims, method=method, bandwidth_floor=PRECISION, weight_ratio_cap=4.0)
            errors.append(
                learned_density_errors(model.block, model.seed_weights, model.bandwidths, data.true_density)
            )
        report["model_density_ise"][method] = float(np.mean(np.concatenate(errors)))
    for m in (5, 10, 20, 40):
        for method in METHODS if m == 10 else ("combined",):
            ises, maes, rates = [], [], []
            for data in datasets:
                for secret in SECRETS[:2]:
                    _, result = synthesize_in_memory(
                        data.claims, parameters(m, 5, PRECISION), secret=secret, release_id="utility",
                        method=method, bandwidth_floor=PRECISION, weight_ratio_cap=4.0,
                    )
                    ises.append(released_ise(result.claims, data)[0])
                    truth = data.truth.set_index("object_id")["truth"]
                    maes.append(truth_mean_absolute_error(per_object_truth_estimate(result.claims, "median"), truth))
                    rates.append(result.objects["released"].sum() / result.objects["attempts"].sum())
            entry = {"ise": float(np.mean(ises)), "truth_mae": float(np.mean(maes)), "pass_rate": float(np.mean(rates))}
            if m == 10:
                report["release"][method] = entry
            if method == "combined":
                report["m_sweep"][m] = entry["ise"]
    for epsilon in (0.1, 1.0, 10.0):
        ises, maes = [], []
        for data in datasets:
            block = ClaimsBlock.from_frame(data.claims)
            for secret in SECRETS[:2]:
                released = basic_laplace_release(block, epsilon, data.public_range, secret, "utility")
                ises.append(released_ise(released, data)[0])
                truth = data.truth.set_index("object_id")["truth"]
                maes.append(truth_mean_absolute_error(per_object_truth_estimate(released, "median"), truth))
        report["basic"][epsilon] = {"ise": float(np.mean(ises)), "truth_mae": float(np.mean(maes))}
    return report


def real_data_report() -> dict:
    emotion = pd.read_csv(DATASETS / "crowd_emotion" / "answer.csv").rename(
        columns={"question": "object_id", "worker": "source_id", "answer": "value"}
    )
    emotion_truth = pd.read_csv(DATASETS / "crowd_emotion" / "truth.csv").set_index("question")["truth"]
    population = pd.read_csv(DATASETS / "crowd_population" / "claims.csv")
    population = population.groupby(["object_id", "source_id"], as_index=False)["value"].mean()
    population_truth = pd.read_csv(DATASETS / "crowd_population" / "truth.csv").set_index("object_id")["truth"]
    cases = {
        "emotion": (emotion, emotion_truth, parameters(10, 5, 1.0), 2.0),
        "population": (population, population_truth, parameters(5, 2, 1.0), 1.0),
    }
    report: dict = {}
    for name, (claims, truth, params, floor) in cases.items():
        raw = truth_mean_absolute_error(per_object_truth_estimate(claims, "median"), truth)
        report[name] = {"raw_claims_median": float(raw)}
        per_secret = {}
        for method in METHODS:
            maes = []
            for secret in REAL_DATA_SECRETS:
                _, result = synthesize_in_memory(
                    claims, params, secret=secret, release_id="utility", method=method,
                    bandwidth_floor=floor, weight_ratio_cap=4.0,
                )
                maes.append(truth_mean_absolute_error(per_object_truth_estimate(result.claims, "median"), truth))
            per_secret[method] = np.array(maes)
            report[name][method] = float(np.mean(maes))
            report[name][f"{method}_standard_error"] = float(np.std(maes, ddof=1) / np.sqrt(len(maes)))
        for other in ("uniform", "global"):
            difference = per_secret["combined"] - per_secret[other]
            error = float(np.std(difference, ddof=1) / np.sqrt(len(difference)))
            report[name][f"combined_minus_{other}"] = {
                "mean": float(np.mean(difference)),
                "standard_error": error,
                "t": float(np.mean(difference) / error) if error > 0 else None,
                "secrets_where_combined_is_better": int(np.sum(difference < 0)),
                "secrets": len(difference),
            }
    return report


def markdown(generator: dict, real: dict) -> str:
    """The README's evaluation tables (``generator_report`` and ``real_data_report``, or the same
    read back from the JSON)."""
    release_rows = [
        (method, generator["model_density_ise"][method], entry["ise"], entry["truth_mae"], entry["pass_rate"])
        for method, entry in ((method, generator["release"][method]) for method in METHODS)
    ] + [
        (f"Basic, eps = {float(epsilon):g}", "-", entry["ise"], entry["truth_mae"], "1")
        for epsilon, entry in generator["basic"].items()
    ]
    real_rows = [
        (name, entry["raw_claims_median"],
         *(f"{entry[m]:.4g} ± {entry[m + '_standard_error']:.2g}" for m in METHODS))
        for name, entry in real.items()
    ]
    paired_rows = [
        (name, other, f"{paired['mean']:+.4g} ± {paired['standard_error']:.2g}", paired["t"],
         f"{paired['secrets_where_combined_is_better']} of {paired['secrets']}")
        for name, entry in real.items()
        for other in ("uniform", "global")
        for paired in (entry[f"combined_minus_{other}"],)
    ]
    lines = [
        "Generator (4 data sets x 300 objects x 20 claims, 100 sources of which 10% outlying; m = 10, k = 5,",
        "gamma = 4, eps0 = 2, R = 4; 2 secrets each):",
        "",
        *table(
            ["weights", "ISE of learned density f_i", "ISE of released claims", "truth MAE (median)", "pass rate"],
            release_rows, formats=[None, ".4f", ".4f", ".3f", ".2f"],
        ),
        "",
        "ISE of released claims (combined) by m: "
        + ", ".join(f"m = {m}: {value:.4f}" for m, value in generator["m_sweep"].items()),
        "",
        "Real data, truth MAE of the per-object median of released claims (mean ± standard error over "
        f"{len(REAL_DATA_SECRETS)} secrets):",
        "",
        *table(["data", "raw claims", *METHODS], real_rows, formats=[None, ".4g", *[None] * len(METHODS)]),
        "",
        "Paired by secret (combined minus the other; negative = combined better):",
        "",
        *table(["data", "vs", "mean difference ± SE", "t", "secrets where combined is better"], paired_rows,
               align="llrrr", formats=[None, None, None, ".1f", None]),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_results_option(parser)
    arguments = parser.parse_args()
    generator = generator_report()
    real = real_data_report()
    print(markdown(generator, real))
    write_json(arguments.results_dir, "crowd_utility", {"generator": generator, "real": real}, indent=2, default=str)


if __name__ == "__main__":
    main()
