"""The filter release kind's evaluation at the transforms level (issue 5, "Evaluation"): privacy and
utility of the released records against classifiers trained afresh, raw vs privatized, over budget
sweeps, with and without a label-sensitivity cap, against the Gaussian baseline, mutual information,
two users with opposite choices sharing one VAE, and the training times.

    .venv/bin/python benchmarks/filter_evaluation.py            # full run (10–13 minutes measured)
    .venv/bin/python benchmarks/filter_evaluation.py --quick    # smoke run (about a minute)
    .venv/bin/python benchmarks/filter_evaluation.py --markdown-from benchmarks/results/filter_evaluation.json

Protocol (Chen, Navidi, Rajagopal, "Generating private data with user customization"; no engine,
no pipeline: ``transforms/filter`` and the shared helpers of ``tests/reproduction/filter_datasets.py``):

1. **Shared VAE** on the training part's features (labels never enter), keyed.
2. **One filter per choice** (``train_latent_filter``) on the training part's posteriors and labels,
   at budget ``b`` (nats of ``D(q_f ‖ q_e)``), label-sensitivity cap ``None``, 1 or 2.
3. **Privatize a disjoint release part**: ``z ~ q_e(z|x)``, ``z̃ = z + Aε + B e_y``, decode, read
   the released records back as a feature matrix (``released_matrix``).
4. **Evaluate**: an adversary (private label) and a utility classifier trained afresh on the first
   half of the released part and scored on the second half (``release_evaluation``), with
   logistic regression (``log``) and histogram gradient boosting (``gb``); "raw" is the same on the
   release part's own features, "VAE only" the round trip with ``A = B = 0``. The Gaussian baseline
   (``z̃ = z + N(0, σ²I)``) has the ``σ`` whose distortion on the training part equals ``b``.
   ``D`` in the tables is the distortion measured on the release part.

Datasets and settings (fixed before the sweeps; ``s`` is the VAE's numeric likelihood scale):

* **Adult**: VAE and filters on all of ``adult-train.csv`` (32,561), release part ``adult-test.csv``
  (16,281, evaluation halves of 8,140/8,141); VAE: the defaults (``VaeTrainingConfig()``: 40
  epochs; ``k = 16``, ``s = 0.03``), filters: ``FilterTrainingConfig`` defaults. Again with
  ``s = 0.1`` (the reproduction test's setting: with short training at ``s = 0.03`` the VAE
  itself drops ``sex``), budgets 1, 4, 16, cap none and 1.
* **Abalone**: a keyed 50/50 split of the 4,177 records (VAE and filters / release); VAE ``k = 16``,
  ``s = 0.03``, 100 epochs (about as many steps as Adult's first epochs); filters 50 epochs of
  batch 128 (the default batch of 512 gives the 1,566 training records three steps an epoch).
* **Digits** (scikit-learn 8×8): a keyed 50/50 split of the 1,797 images; VAE ``k = 16``,
  ``s = 0.3``, 200 epochs; filters 50 epochs of batch 128. ``s = 0.3``: with the default 0.03 the
  posteriors are so narrow (variance ≈ 0.007 in every coordinate) that the budget buys almost no
  noise; the table "digits: VAE likelihood scale" shows the same sweep at ``s`` = 0.03, 0.1, 0.3.

Two users with opposite choices (digits): group 1 privatizes "digit ≥ 5" and keeps parity, group 2
the reverse; each choice's filter is trained on the whole training part; classifiers are trained on
the pooled release and scored per group, next to a single-choice release (everyone with the
group's choice) on the same records.

Every random draw is keyed (fixed benchmark secret); torch runs on one thread, deterministic.
Writes ``benchmarks/results/filter_evaluation.json`` and ``.md``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import harness

os.environ.update(harness.one_thread())

import argparse
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

import numpy as np

from tests.reproduction import filter_datasets as fd
from transforms.core.keyed_randomness import keyed_generator
from transforms.filter.accounting import (
    gaussian_baseline_filter,
    gaussian_baseline_noise_scale,
    gaussian_exact_epsilon,
)
from transforms.filter.evaluation import (
    classifier_scores,
    knn_mutual_information,
)
from transforms.filter.features import decode_features
from transforms.filter.filter_training import FilterTrainingConfig, train_latent_filter
from transforms.filter.inference import decode_latents, encode_latents
from transforms.filter.latent_filter import (
    LinearLatentFilter,
    filter_distortion,
    label_sensitivity,
    privatize_latents,
)
from transforms.filter.vae import (
    VaeTrainingConfig,
    configure_deterministic_torch,
)

SECRET = bytes(range(100, 132))
DELTA = 1e-5
CLASSIFIERS = ("logistic", "gradient_boosting")


# ---------------------------------------------------------------------------------------------
# machine


def machine() -> dict[str, Any]:
    from pipelines.platform.release import code_version

    return {
        **harness.machine_basics(),
        "versions": {name: version(name) for name in ("numpy", "scikit-learn", "torch")},
        "privlake_commit": code_version(),
        "note": "uncommitted work in progress may differ from the commit",
    }


# ---------------------------------------------------------------------------------------------
# set-ups


@dataclass
class Setup:
    """A trained VAE with its training part and release part (both encoded)."""

    name: str
    model: Any
    training: fd.EncodedPart
    release: fd.EncodedPart
    filter_defaults: dict[str, Any]
    vae_seconds: float

    @property
    def latent_dimension(self) -> int:
        return int(self.training.mean.shape[1])


def adult_setup(quick: bool, noise_scale: float = 0.03, name: str = "adult") -> Setup:
    train, test = fd.adult("train"), fd.adult("test")
    release = test.subset(keyed_generator(SECRET, "adult", "release-order", 0).permutation(test.rows))
    if quick:
        train, release = train.subset(np.arange(3000)), release.subset(np.arange(2000))
    config = VaeTrainingConfig(epochs=2) if quick else VaeTrainingConfig()
    model, timing = harness.timed(
        fd.train_shared_vae, train.matrix, fd.ADULT_SPEC, SECRET, name, config, numeric_noise_scale=noise_scale
    )
    return Setup(name, model, fd.encode_part(model, train), fd.encode_part(model, release), {}, timing.wall_seconds)


def split_setup(
    data: fd.LabelledFeatures, epochs: int, noise_scale: float, release_id: str
) -> Setup:
    order = keyed_generator(SECRET, data.name, "split", 0).permutation(data.rows)
    half = data.rows // 2
    training, release = data.subset(order[:half]), data.subset(order[half:])
    model, timing = harness.timed(
        fd.train_shared_vae,
        training.matrix,
        data.spec,
        SECRET,
        release_id,
        VaeTrainingConfig(epochs=epochs),
        numeric_noise_scale=noise_scale,
    )
    return Setup(
        release_id,
        model,
        fd.encode_part(model, training),
        fd.encode_part(model, release),
        {"epochs": 50, "batch_size": 128},
        timing.wall_seconds,
    )


# ---------------------------------------------------------------------------------------------
# one row of a table


def train_filter(
    setup: Setup, private: str, utility: str, budget: float, cap: float | None, key: int = 0
) -> tuple[LinearLatentFilter, float]:
    data = setup.training.data
    config = FilterTrainingConfig(budget=budget, max_sensitivity=cap, **setup.filter_defaults)
    trained, timing = harness.timed(
        train_latent_filter,
        setup.training.mean,
        setup.training.log_variance,
        data.labels[private],
        data.labels[utility],
        len(data.classes[private]),
        len(data.classes[utility]),
        config,
        keyed_generator(SECRET, setup.name, f"filter/{private}/{utility}", (repr(budget), repr(cap), key)),
    )
    return trained.latent_filter, timing.wall_seconds


def scores(matrix: np.ndarray, data: fd.LabelledFeatures, private: str, utility: str) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for classifier in CLASSIFIERS:
        short = "log" if classifier == "logistic" else "gb"
        evaluation = fd.evaluate_release(matrix, data, private, utility, classifier)
        for role in ("adversary", "utility"):
            result[f"{role}_accuracy_{short}"] = evaluation[role]["accuracy"]
            result[f"{role}_auroc_{short}"] = evaluation[role]["auroc"]
            result[f"{role}_mi_bound_{short}"] = evaluation[role]["mutual_information_bound"]
        result["adversary_majority"] = evaluation["adversary"]["majority_rate"]
        result["utility_majority"] = evaluation["utility"]["majority_rate"]
    result["adversary_accuracy"] = max(result["adversary_accuracy_log"], result["adversary_accuracy_gb"])
    result["utility_accuracy"] = max(result["utility_accuracy_log"], result["utility_accuracy_gb"])
    result["mi_bound"] = max(result["adversary_mi_bound_log"], result["adversary_mi_bound_gb"])
    return result


def knn_mi(latents: np.ndarray, labels: np.ndarray, rows: int = 6000) -> float:
    """Ross's estimator on the first ``rows`` records (records are in keyed random order)."""
    return knn_mutual_information(latents[:rows], labels[:rows], neighbours=3)


def release_row(
    setup: Setup,
    private: str,
    utility: str,
    method: str,
    latent_filter: LinearLatentFilter | None,
    budget: float | None = None,
    cap: float | None = None,
    key: int = 0,
    train_seconds: float | None = None,
    with_mi: bool = False,
) -> dict[str, Any]:
    data = setup.release.data
    row: dict[str, Any] = {
        "dataset": setup.name,
        "private": private,
        "utility": utility,
        "method": method,
        "budget": budget,
        "cap": cap,
        "key": key,
        "train_seconds": train_seconds,
    }
    if latent_filter is None:
        row.update(scores(data.matrix, data, private, utility))
        if with_mi:
            row["knn_mi_latent"] = knn_mi(setup.release.mean, data.labels[private])
        return row
    rng = keyed_generator(SECRET, setup.name, f"privatize/{private}", (method, repr(budget), repr(cap), key))
    privatized = fd.privatize_part(setup.model, setup.release, private, latent_filter, rng)
    sensitivity = label_sensitivity(latent_filter)
    row.update(
        {
            "distortion": filter_distortion(latent_filter, setup.release.log_variance, data.labels[private]),
            "sensitivity": None if math.isinf(sensitivity) else sensitivity,
            "epsilon_exact": None
            if sensitivity == 0 or math.isinf(sensitivity)
            else gaussian_exact_epsilon(sensitivity, DELTA),
            "noise_norm": float(np.linalg.norm(latent_filter.noise_matrix)),
            "shift_norm": float(np.linalg.norm(latent_filter.label_shift)),
        }
    )
    row.update(scores(privatized.matrix, data, private, utility))
    if with_mi:
        row["knn_mi_latent"] = knn_mi(privatized.filtered, data.labels[private])
        row["knn_mi_unfiltered_latent"] = knn_mi(privatized.latents, data.labels[private])
    return row


def sweep(
    setup: Setup,
    private: str,
    utility: str,
    budgets: list[float],
    caps: list[float | None],
    extra_gaussian: list[float],
    mi_budgets: set[float],
) -> list[dict[str, Any]]:
    """Raw, VAE only, the filter at every (budget, cap), and the Gaussian baseline at every budget
    (and at ``extra_gaussian`` budgets, to compare at matched privacy)."""
    rows = [
        release_row(setup, private, utility, "raw", None, with_mi=True),
        release_row(
            setup,
            private,
            utility,
            "vae_only",
            fd.identity_filter(setup.latent_dimension, len(setup.release.data.classes[private])),
            budget=0.0,
            with_mi=True,
        ),
    ]
    classes = len(setup.release.data.classes[private])
    for budget in budgets:
        for cap in caps:
            latent_filter, seconds = train_filter(setup, private, utility, budget, cap)
            rows.append(
                release_row(
                    setup, private, utility, "filter", latent_filter, budget, cap,
                    train_seconds=seconds, with_mi=budget in mi_budgets and cap is None,
                )
            )
            print(f"  {setup.name} {private}->{utility} b={budget} cap={cap}: {short(rows[-1])}", flush=True)
    for budget in sorted(set(budgets) | set(extra_gaussian)):
        sigma = gaussian_baseline_noise_scale(setup.training.log_variance, budget)
        baseline = gaussian_baseline_filter(setup.latent_dimension, classes, sigma)
        row = release_row(
            setup, private, utility, "gaussian", baseline, budget, with_mi=budget in mi_budgets
        )
        row["sigma"] = sigma
        rows.append(row)
        print(f"  {setup.name} {private}->{utility} gaussian b={budget}: {short(row)}", flush=True)
    return rows


def short(row: dict[str, Any]) -> str:
    return (
        f"adv {row['adversary_accuracy_log']:.3f}/{row['adversary_accuracy_gb']:.3f} "
        f"(maj {row['adversary_majority']:.3f}) util {row['utility_accuracy_log']:.3f}/"
        f"{row['utility_accuracy_gb']:.3f}"
    )


def repeats(
    setup: Setup, private: str, utility: str, budgets: list[float], caps: list[float | None], keys: int
) -> list[dict[str, Any]]:
    """The same cells under other training and privatization keys, for the spread."""
    rows = []
    for budget in budgets:
        for cap in caps:
            for key in range(1, keys + 1):
                latent_filter, seconds = train_filter(setup, private, utility, budget, cap, key)
                rows.append(
                    release_row(
                        setup, private, utility, "filter", latent_filter, budget, cap, key, seconds
                    )
                )
    return rows


# ---------------------------------------------------------------------------------------------
# two users with opposite choices


def pooled_two_users(setup: Setup, budgets: list[float], caps: list[float | None]) -> list[dict[str, Any]]:
    """Digits: group 1 privatizes ``at_least_5`` and keeps ``parity``, group 2 the reverse (a keyed
    fair coin per record of the release part). Each choice's filter is trained once on the whole
    training part (as in ``tests/reproduction/test_filter_findings.py``); the release pools both
    groups. Adversaries and utility classifiers are trained on the first half of the pooled release
    (both groups) and scored on each group's records of the second half; "single" is the release in
    which every record gets the group's choice, scored on the same records."""
    choices = {1: ("at_least_5", "parity"), 2: ("parity", "at_least_5")}
    release = setup.release.data
    release_group = 1 + keyed_generator(SECRET, "two-users", "group", "release").integers(0, 2, release.rows)
    half = release.rows // 2
    rows: list[dict[str, Any]] = []

    def evaluate(
        matrices: dict[int, np.ndarray], method: str, budget: float | None, cap: float | None
    ) -> None:
        for group, (private, utility) in choices.items():
            matrix = matrices[group]
            test = np.flatnonzero(release_group[half:] == group) + half
            row: dict[str, Any] = {"method": method, "budget": budget, "cap": cap, "group": group,
                                   "private": private, "utility": utility, "test_rows": int(len(test))}
            for role, label in (("adversary", private), ("utility", utility)):
                for classifier in CLASSIFIERS:
                    short_name = "log" if classifier == "logistic" else "gb"
                    result = classifier_scores(
                        matrix[:half], release.labels[label][:half], matrix[test],
                        release.labels[label][test], 2, classifier,
                    )
                    row[f"{role}_accuracy_{short_name}"] = result.accuracy
                    row[f"{role}_auroc_{short_name}"] = result.auroc
                    row[f"{role}_majority"] = result.majority_rate
            row["adversary_accuracy"] = max(row["adversary_accuracy_log"], row["adversary_accuracy_gb"])
            row["utility_accuracy"] = max(row["utility_accuracy_log"], row["utility_accuracy_gb"])
            rows.append(row)

    evaluate({1: release.matrix, 2: release.matrix}, "raw", None, None)
    identity = fd.identity_filter(setup.latent_dimension, 2)
    vae_only = pooled_matrix(setup, {1: identity, 2: identity}, release_group, "vae_only")
    evaluate({1: vae_only, 2: vae_only}, "vae_only", 0.0, None)
    for budget in budgets:
        for cap in caps:
            filters = {
                group: train_filter(setup, private, utility, budget, cap)[0]
                for group, (private, utility) in choices.items()
            }
            pooled = pooled_matrix(setup, filters, release_group, f"pooled/{budget}/{cap}")
            evaluate({1: pooled, 2: pooled}, "pooled", budget, cap)
            single = {
                group: fd.privatize_part(
                    setup.model, setup.release, private, filters[group],
                    keyed_generator(SECRET, "two-users", f"single/{budget}/{cap}", group),
                ).matrix
                for group, (private, _) in choices.items()
            }
            evaluate(single, "single", budget, cap)
            print(f"  two users b={budget} cap={cap}: pooled {rows[-4]['adversary_accuracy']:.3f} "
                  f"{rows[-3]['adversary_accuracy']:.3f} single {rows[-2]['adversary_accuracy']:.3f} "
                  f"{rows[-1]['adversary_accuracy']:.3f}", flush=True)
    return rows


def pooled_matrix(
    setup: Setup, filters: dict[int, LinearLatentFilter], groups: np.ndarray, purpose: str
) -> np.ndarray:
    """Each group privatized with its own filter; rows stay in the release part's order."""
    private = {1: "at_least_5", 2: "parity"}
    matrix = np.zeros_like(setup.release.data.matrix, dtype=np.float32)
    for group, latent_filter in filters.items():
        members = np.flatnonzero(groups == group)
        part = fd.EncodedPart(
            setup.release.data.subset(members), setup.release.mean[members], setup.release.log_variance[members]
        )
        rng = keyed_generator(SECRET, "two-users", purpose, group)
        matrix[members] = fd.privatize_part(setup.model, part, private[group], latent_filter, rng).matrix
    return matrix


# ---------------------------------------------------------------------------------------------
# timings


def timings(adult: Setup) -> dict[str, Any]:
    """VAE training on full Adult (default config), filter training per choice on full Adult
    (default config; with and without the cap), and in-process privatization throughput."""
    train = adult.training.data
    result: dict[str, Any] = {"vae_full_adult_default_config": {"wall_seconds": adult.vae_seconds,
                                                                "rows": train.rows, "epochs": 40}}
    for cap in (None, 1.0):
        _, timing = harness.timed(
            train_latent_filter,
            adult.training.mean,
            adult.training.log_variance,
            train.labels["sex"],
            train.labels["income"],
            2,
            2,
            FilterTrainingConfig(budget=4.0, max_sensitivity=cap),
            keyed_generator(SECRET, "timing", "filter", 0),
        )
        result[f"filter_full_adult_cap_{cap}"] = {
            "wall_seconds": timing.wall_seconds, "cpu_seconds": timing.cpu_seconds, "rows": train.rows
        }
    latent_filter, _ = train_filter(adult, "sex", "income", 4.0, None)
    test = adult.release.data

    def privatize_all() -> Any:
        mean, log_variance = encode_latents(adult.model, test.matrix)
        rng = keyed_generator(SECRET, "timing", "privatize", 0)
        filtered = privatize_latents(mean, log_variance, test.labels["sex"], latent_filter, rng)
        return decode_features(decode_latents(adult.model, filtered), fd.ADULT_SPEC)

    _, timing = harness.timed(privatize_all)
    result["privatize_in_process"] = {
        "rows": test.rows, "wall_seconds": timing.wall_seconds, "records_per_second": test.rows / timing.wall_seconds,
        "note": "encode, posterior draw, filter, decode to records; one thread, no engine",
    }
    return result


# ---------------------------------------------------------------------------------------------
# markdown


def number(value: Any, digits: int = 3) -> str:
    """Fixed point with ``digits`` decimals, from 1000 on without decimals; integers as they are."""
    return harness.number(value, f".{digits}f", large=",.0f", integers="")


def rounded(digits: int) -> Callable[[Any], str]:
    return lambda value: number(value, digits)


def cap_text(cap: float | None) -> str:
    return "none" if cap is None else number(cap, 1)


def both(row: dict[str, Any], key: str) -> str:
    """Logistic regression / gradient boosting."""
    return f"{number(row[key + '_log'])} / {number(row[key + '_gb'])}"


def label(row: dict[str, Any]) -> str:
    if row["method"] == "raw":
        return "raw"
    if row["method"] == "vae_only":
        return "VAE only (b = 0)"
    if row["method"] == "gaussian":
        return f"Gaussian σ = {row['sigma']:.3f}"
    return f"filter, cap {cap_text(row['cap'])}"


def sweep_table(rows: list[dict[str, Any]]) -> list[str]:
    first = rows[0]
    ordered = [row for row in rows if row["method"] in ("raw", "vae_only")]
    budgets = sorted({row["budget"] for row in rows if row["method"] in ("filter", "gaussian")})
    for budget in budgets:
        ordered += [row for row in rows if row["method"] == "filter" and row["budget"] == budget]
        ordered += [row for row in rows if row["method"] == "gaussian" and row["budget"] == budget]
    return [
        f"Private `{first['private']}` (majority rate {first['adversary_majority']:.3f}), utility "
        f"`{first['utility']}` (majority rate {first['utility_majority']:.3f}); accuracy and AUROC "
        "of logistic regression / gradient boosting trained afresh on released records, held-out "
        "released records. ε: exact Gaussian ε at δ = 1e-5 of the label sensitivity s.",
        "",
        *harness.table(
            ["b", "release", "D", "s", "ε", "adversary acc log / gb", "adversary AUROC log / gb",
             "utility acc log / gb", "utility AUROC log / gb", "MI bound (nats)", "train s"],
            [(row["budget"], label(row), row.get("distortion"), row.get("sensitivity"), row.get("epsilon_exact"),
              both(row, "adversary_accuracy"), both(row, "adversary_auroc"), both(row, "utility_accuracy"),
              both(row, "utility_auroc"), row["mi_bound"], row.get("train_seconds")) for row in ordered],
            align="rlrrrllllrr",
            formats=[rounded(2), None, rounded(2), rounded(2), rounded(1), None, None, None, None, rounded(3),
                     rounded(1)],
        ),
    ]


def matched_privacy(rows: list[dict[str, Any]]) -> list[str]:
    """For each filter row, the best utility of any Gaussian row whose (strongest) adversary is at
    least as weak, and the Gaussian row at the same budget."""
    gaussian = [row for row in rows if row["method"] == "gaussian"]

    def best_protecting(row: dict[str, Any]) -> str:
        protecting = [g for g in gaussian if g["adversary_accuracy"] <= row["adversary_accuracy"]]
        if not protecting:
            return "none protects as well"
        best = max(protecting, key=lambda g: g["utility_accuracy"])
        return f"{best['utility_accuracy']:.3f} (b = {number(best['budget'], 2)}, adv {best['adversary_accuracy']:.3f})"

    return harness.table(
        ["b", "cap", "filter adv / util", "Gaussian same b adv / util", "best Gaussian util with adv ≤ filter's"],
        [(row["budget"], cap_text(row["cap"]), f"{row['adversary_accuracy']:.3f} / {row['utility_accuracy']:.3f}",
          f"{same['adversary_accuracy']:.3f} / {same['utility_accuracy']:.3f}", best_protecting(row))
         for row in rows if row["method"] == "filter"
         for same in (next(g for g in gaussian if g["budget"] == row["budget"]),)],
        align="rllll", formats=[rounded(2), None, None, None, None],
    )


def mi_table(rows: list[dict[str, Any]]) -> list[str]:
    return harness.table(
        ["release", "b", "kNN MI of latents (nats)", "kNN MI of the unfiltered draw z",
         "classifier bound on records log / gb"],
        [(label(row), row["budget"], row["knn_mi_latent"], row.get("knn_mi_unfiltered_latent"),
          both(row, "adversary_mi_bound")) for row in rows if "knn_mi_latent" in row],
        align="lrrrl", formats=[None, rounded(2), number, number, None],
    )


def repeat_table(rows: list[dict[str, Any]]) -> list[str]:
    cells: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        cells.setdefault((row["dataset"], row["private"], row["budget"], row["cap"]), []).append(row)

    def spread(members: list[dict[str, Any]], key: str) -> str:
        values = np.array([row[key] for row in members])
        return f"{values.mean():.3f} ± {values.std(ddof=1):.3f}"

    return harness.table(
        ["dataset", "b", "cap", "keys", "adversary acc (strongest) mean ± sd", "utility acc (best) mean ± sd", "s"],
        [(f"{dataset} ({private})", budget, cap_text(cap), len(members), spread(members, "adversary_accuracy"),
          spread(members, "utility_accuracy"), ", ".join(number(row["sensitivity"], 1) for row in members))
         for (dataset, private, budget, cap), members in cells.items()],
        align="lrlrlll", formats=[None, rounded(2), None, None, None, None, None],
    )


def two_user_table(rows: list[dict[str, Any]]) -> list[str]:
    def with_majority(row: dict[str, Any], role: str) -> str:
        return (f"{row[f'{role}_accuracy_log']:.3f} / {row[f'{role}_accuracy_gb']:.3f} "
                f"({row[f'{role}_majority']:.3f})")

    return harness.table(
        ["release", "b", "cap", "group (private → kept)", "test rows", "adversary acc log / gb (majority)",
         "utility acc log / gb (majority)"],
        [(row["method"], row["budget"], "–" if row["method"] in ("raw", "vae_only") else cap_text(row["cap"]),
          f"{row['group']} ({row['private']} → {row['utility']})", row["test_rows"],
          with_majority(row, "adversary"), with_majority(row, "utility")) for row in rows],
        align="lrllrll", formats=[None, rounded(2), None, None, None, None, None],
    )


def timings_table(timing: dict[str, Any]) -> list[str]:
    vae, privatize = timing["vae_full_adult_default_config"], timing["privatize_in_process"]
    return harness.table(
        ["step", "rows", "wall s", "CPU s", "bar"],
        [("VAE training, full Adult, `VaeTrainingConfig()` (40 epochs)", vae["rows"], f"{vae['wall_seconds']:.1f}",
          "–", "< 300 s")]
        + [(f"filter training per choice (sex → income, b = 4, cap {cap}), full Adult, default config",
            entry["rows"], f"{entry['wall_seconds']:.1f}", f"{entry['cpu_seconds']:.1f}", "< 30 s")
           for cap in ("None", "1.0") for entry in (timing[f"filter_full_adult_cap_{cap}"],)]
        + [(f"privatize in process ({privatize['note']})", privatize["rows"], f"{privatize['wall_seconds']:.2f}",
            "–", f"{privatize['records_per_second']:,.0f} records/s")],
        align="lrrrl", formats=[None, ",", None, None, None],
    )


SWEEP_TITLES = {
    "adult": "Adult: private sex, utility income > 50K",
    "adult_s0.1": "Adult with the VAE's numeric likelihood scale s = 0.1 (the test's setting; otherwise the defaults)",
    "abalone": "Abalone: private sex (M/F/I), utility rings > 10",
    "digits_at_least_5": "Digits (a): private digit ≥ 5, utility parity",
    "digits_digit": "Digits (b): private digit value, utility contains a circle (0, 6, 8, 9)",
}


def markdown(report: dict[str, Any]) -> str:
    info = report["machine"]
    lines = [
        "# Filter kind: evaluation (transforms level)",
        "",
        f"Machine: {info['processor']}, {info['cores']} cores, {info['memory']}; load average at start "
        f"{[round(value, 2) for value in info['load_average_at_start']]}, at end "
        f"{[round(value, 2) for value in report['load_average_at_end']]} (shared machine: wall times are "
        f"noisy). torch {info['versions']['torch']}, scikit-learn {info['versions']['scikit-learn']}, one "
        f"thread. Commit {info['privlake_commit']} ({info['note']}). Generated by "
        f"`benchmarks/filter_evaluation.py` in {report['run_seconds']:.0f} s on {report['generated']}.",
        "",
        "Protocol: the module docstring of `benchmarks/filter_evaluation.py`. Adversary and utility "
        "classifiers are trained afresh on released records (never the ones of filter training) and "
        "scored on held-out released records. \"strongest\" = the better of the two classifiers.",
        "",
        "## Timings",
        "",
        *timings_table(report["timings"]),
    ]
    for key, title in SWEEP_TITLES.items():
        rows = report["sweeps"][key]
        lines += ["", f"## {title}", "", *sweep_table(rows), "", "### Gaussian baseline at matched privacy", "",
                  *matched_privacy(rows), "", "### Mutual information with the private label", "",
                  *mi_table(rows)]
    lines += ["", "## Digits: VAE likelihood scale s (private digit, utility circle, no cap)", ""]
    for scale, rows in report["digits_scale"].items():
        lines += [f"### s = {scale}", "", *sweep_table(rows), ""]
    lines += ["## Spread over training/privatization keys", "", *repeat_table(report["repeats"]), ""]
    lines += ["## Two users with opposite choices, one VAE, pooled release (digits)", "",
              *two_user_table(report["two_users"]), ""]
    lines += ["## Findings (computed from the tables above)", "", *report["findings"], ""]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# findings


def findings(report: dict[str, Any]) -> list[str]:
    """Plain statements with the numbers they rest on (no thresholds tuned here)."""
    out = []
    for key, rows in report["sweeps"].items():
        raw = next(row for row in rows if row["method"] == "raw")
        vae = next(row for row in rows if row["method"] == "vae_only")
        filters = [row for row in rows if row["method"] == "filter" and row["cap"] is None]
        largest = max(filters, key=lambda row: row["budget"])
        gaussian = [row for row in rows if row["method"] == "gaussian" and row["budget"] in
                    {f["budget"] for f in filters}]
        better_privacy = sum(
            f["adversary_accuracy"] < g["adversary_accuracy"]
            for f in filters for g in gaussian if g["budget"] == f["budget"]
        )
        better_utility = sum(
            f["utility_accuracy"] > g["utility_accuracy"]
            for f in filters for g in gaussian if g["budget"] == f["budget"]
        )
        out.append(
            f"- {key}: strongest adversary raw {raw['adversary_accuracy']:.3f}, VAE only "
            f"{vae['adversary_accuracy']:.3f}, filter at the largest b = {number(largest['budget'], 2)} "
            f"{largest['adversary_accuracy']:.3f} (majority {raw['adversary_majority']:.3f}); best utility raw "
            f"{raw['utility_accuracy']:.3f}, VAE only {vae['utility_accuracy']:.3f}, filter at that b "
            f"{largest['utility_accuracy']:.3f}. Uncapped filter vs Gaussian at equal b: better privacy at "
            f"{better_privacy}/{len(filters)} budgets, better utility at {better_utility}/{len(filters)}."
        )
        for cap in sorted({row["cap"] for row in rows if row["method"] == "filter" and row["cap"] is not None}):
            capped = {row["budget"]: row for row in rows if row["method"] == "filter" and row["cap"] == cap}
            differences = [
                (capped[f["budget"]]["adversary_accuracy"] - f["adversary_accuracy"],
                 capped[f["budget"]]["utility_accuracy"] - f["utility_accuracy"])
                for f in filters if f["budget"] in capped
            ]
            out.append(
                f"  - cap {cap}: adversary accuracy minus uncapped per budget "
                f"{', '.join(f'{d[0]:+.3f}' for d in differences)}; utility minus uncapped "
                f"{', '.join(f'{d[1]:+.3f}' for d in differences)}."
            )
    return out


# ---------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown-from", type=Path, help="rewrite the .md from an existing JSON")
    parser.add_argument("--quick", action="store_true", help="smoke run: few budgets, short VAEs")
    harness.add_results_option(parser)
    arguments = parser.parse_args()
    if arguments.markdown_from:
        report = json.loads(arguments.markdown_from.read_text())
        report["findings"] = findings(report)
        harness.write_markdown(arguments.results_dir, "filter_evaluation", markdown(report))
        return
    configure_deterministic_torch(1)
    started = time.perf_counter()
    report: dict[str, Any] = {"machine": machine(), "secret": "bytes(range(100, 132))", "delta": DELTA}

    quick = arguments.quick

    def plan(full: list[float], short: list[float]) -> list[float]:
        return short if quick else full

    print("adult", flush=True)
    adult = adult_setup(quick)
    print(f"  VAE {adult.vae_seconds:.1f} s", flush=True)
    report["timings"] = timings(adult)
    sweeps: dict[str, list[dict[str, Any]]] = {}
    caps: list[float | None] = [None, 1.0] if quick else [None, 1.0, 2.0]
    sweeps["adult"] = sweep(adult, "sex", "income", plan([0.5, 1, 2, 4, 8, 16, 32], [4]), caps,
                            plan([64, 128, 256], [64]), {1, 4, 16})
    repeat_rows = repeats(adult, "sex", "income", plan([4, 16], [4]), [None, 1.0], 2 if quick else 3)
    print("adult, s = 0.1", flush=True)
    adult_loose = adult_setup(quick, noise_scale=0.1, name="adult-s0.1")
    sweeps["adult_s0.1"] = sweep(adult_loose, "sex", "income", plan([1, 4, 16], [4]), [None, 1.0],
                                 plan([64], []), set())

    print("abalone", flush=True)
    abalone = split_setup(fd.abalone(), 10 if quick else 100, 0.03, "abalone")
    sweeps["abalone"] = sweep(abalone, "sex", "rings_over_10", plan([0.01, 0.03, 0.1, 0.3, 1, 3, 10], [1]),
                              [None, 1.0], plan([30, 100], []), {1, 10})

    print("digits", flush=True)
    digits = split_setup(fd.digits(), 20 if quick else 200, 0.3, "digits")
    digit_budgets = plan([1, 4, 16, 64, 256], [16])
    sweeps["digits_at_least_5"] = sweep(digits, "at_least_5", "parity", digit_budgets, caps,
                                        plan([1024], []), {16, 64})
    sweeps["digits_digit"] = sweep(digits, "digit", "circle", digit_budgets, caps, plan([1024], []), {16, 64})
    repeat_rows += repeats(digits, "digit", "circle", plan([64], [16]), [None, 1.0], 2 if quick else 3)
    report["sweeps"] = sweeps
    report["repeats"] = repeat_rows

    print("digits scale", flush=True)
    report["digits_scale"] = {}
    for scale in (0.03, 0.1):
        scaled = split_setup(fd.digits(), 20 if quick else 200, scale, f"digits-s{scale}")
        report["digits_scale"][str(scale)] = sweep(
            scaled, "digit", "circle", plan([4, 16, 64, 256, 1024], [16]), [None], [], set()
        )
    report["digits_scale"]["0.3"] = [
        row for row in sweeps["digits_digit"] if row["method"] in ("raw", "vae_only") or row["cap"] is None
    ]

    print("two users", flush=True)
    report["two_users"] = pooled_two_users(digits, plan([16, 64], [16]), [None, 1.0])

    report["findings"] = findings(report)
    report["run_seconds"] = time.perf_counter() - started
    report["load_average_at_end"] = list(os.getloadavg())
    report["generated"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    stem = "filter_evaluation_quick" if quick else "filter_evaluation"
    harness.write_json(arguments.results_dir, stem, report, indent=1, allow_nan=False, default=str)
    harness.write_markdown(arguments.results_dir, stem, markdown(report))
    print(f"done in {report['run_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
