"""The free-will LDP paper's experiments at benchmark size, as figures and a table.

ElSalamouny & Palamidessi, "Reconstruction of the distribution of sensitive data under
free-will privacy" (experiments section), with privlake's client simulation
(``transforms.ldp.simulation``), estimators (``transforms.ldp.estimators``) and metrics
(``transforms.ldp.distribution_metrics``); the same experiments as
``tests/reproduction/test_free_will_findings.py`` (whose mechanisms and set-ups are reused),
with more users, several n and more repetitions:

1. ``linear``: alphabet {0..99}, secrets ~ binomial(99, 1/2), mixtures of k-RR and truncated
   geometric mechanisms at low, the tests', and high ε: EMD of GIBU, INV_M (projection and
   truncate-and-normalize) and IBU_M against n;
2. ``gowalla``: San Francisco Gowalla check-ins on the 16 × 24 grid of 0.5 km cells
   (``../shared/datasets/gowalla_sf``), mixtures of planar geometric mechanisms, with k-RR, and
   with Shokri's optimal mechanism on the grid coarsened to 8 × 12 cells of 1 km: grid EMD (km);
3. ``counter_example``: half the users apply ``A`` (k-RR on k = 10 with ``A[x,x] = 2/k``), half
   ``A′ = 2U − A``, whose average ``U`` is non-informative: IBU_M (and INV_M) against GIBU;
4. ``rappor``: basic one-time RAPPOR on {0..19}, 10 mechanisms with ε spread over [0.1, 1] and
   over [1, 10]: RAP_M (both post-processings) against GIBU;
5. ``consistency``: error against n on log-log axes for every estimator, with the least-squares
   slope of log(mean EMD) on log n (the paper's bounds fall like n^(-1/2)).

    .venv/bin/python benchmarks/ldp_reproduction.py           # full run (about 10 minutes on 2 cores)
    .venv/bin/python benchmarks/ldp_reproduction.py --quick   # about a minute

Every random draw (secrets, mechanism assignment, reports) comes from
``keyed_generator(BENCHMARK_SECRET, RELEASE, purpose, key)``: the run is reproducible. The truth
is the population distribution (binomial pmf, the empirical check-in distribution) that the
secrets are drawn from, as in the paper. BLAS runs on one thread (on the shared 2-core machine a
multi-threaded OpenBLAS slowed GIBU down many times under load).

Writes benchmarks/results/ldp_reproduction.json (all numbers, the secret, the machine),
benchmarks/results/ldp_reproduction.md (tables for the README) and
benchmarks/results/figures/ldp_*.png (``--quick`` writes ``*_quick`` files instead, so that a
quick run never overwrites the full results).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import harness

os.environ.update(harness.one_thread())

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from transforms.core.keyed_randomness import keyed_generator
from transforms.ldp.distribution_metrics import (
    earth_movers_distance_grid,
    earth_movers_distance_line,
    l1_distance,
    l2_distance,
)
from transforms.ldp.estimators import (
    EstimationResult,
    average_channel,
    channel_report_groups,
    generalized_iterative_bayesian_update,
    inverse_mechanism_estimate,
    iterative_bayesian_update,
    rappor_estimate,
)
from transforms.ldp.mechanisms import (
    BasicRappor,
    Mechanism,
    PlanarGeometric,
    RandomizedResponse,
    ShokriOptimal,
    TruncatedGeometric,
    sample_from_channel,
)
from transforms.ldp.simulation import (
    gibu_groups,
    rappor_bit_sums,
    simulate_reports,
    total_report_counts,
    user_counts_per_mechanism,
)

BENCHMARK_SECRET_HEX = "5e" * 32
BENCHMARK_SECRET = bytes.fromhex(BENCHMARK_SECRET_HEX)
RELEASE = "bench/ldp-reproduction"
GRID_ROWS, GRID_COLUMNS, CELL_SIDE_KM = harness.GOWALLA_ROWS, harness.GOWALLA_COLUMNS, harness.GOWALLA_CELL_KM

MATRIX_ESTIMATORS = ("GIBU", "INV_M projection", "INV_M truncate", "IBU_M")
RAPPOR_ESTIMATORS = ("GIBU", "RAP_M projection", "RAP_M truncate")
COUNTER_ESTIMATORS = ("GIBU", "IBU_M", "INV_M projection")
COLORS = {
    "GIBU": "tab:blue", "INV_M projection": "tab:orange", "INV_M truncate": "tab:green",
    "IBU_M": "tab:red", "RAP_M projection": "tab:orange", "RAP_M truncate": "tab:green",
}

Distance = Callable[[np.ndarray, np.ndarray], float]


@dataclass(frozen=True)
class Sizes:
    """Numbers of users and repetitions of each experiment."""

    linear: tuple[int, ...]
    linear_repetitions: int
    gowalla: tuple[int, ...]
    gowalla_repetitions: int
    counter_example: tuple[int, ...]
    counter_repetitions: int
    rappor: tuple[int, ...]
    rappor_repetitions: int


FULL = Sizes(
    linear=(1_000, 10_000, 100_000, 1_000_000), linear_repetitions=10,
    gowalla=(10_000, 100_000, 1_000_000), gowalla_repetitions=5,
    counter_example=(1_000, 10_000, 100_000, 1_000_000), counter_repetitions=10,
    rappor=(1_000, 10_000, 100_000), rappor_repetitions=5,
)
QUICK = Sizes(
    linear=(1_000, 10_000, 100_000), linear_repetitions=3,
    gowalla=(1_000, 10_000), gowalla_repetitions=2,
    counter_example=(1_000, 10_000, 100_000), counter_repetitions=3,
    rappor=(1_000, 10_000), rappor_repetitions=2,
)


def machine() -> dict:
    return {**harness.machine_basics(), "numpy": np.__version__, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS")}


def stream(purpose: str, key: tuple) -> np.random.Generator:
    return keyed_generator(BENCHMARK_SECRET, RELEASE, purpose, key)


def release_id(*parts: object) -> str:
    return "/".join([RELEASE, *(str(part) for part in parts)])


def scores(truth: np.ndarray, estimate: np.ndarray | EstimationResult, distance: Distance) -> dict:
    entry: dict = {}
    if isinstance(estimate, EstimationResult):
        entry = {"iterations": estimate.iterations, "converged": estimate.converged}
        estimate = estimate.estimate
    entry.update(
        emd=distance(truth, estimate), l1=l1_distance(truth, estimate), l2=l2_distance(truth, estimate)
    )
    return entry


def matrix_mechanism_run(
    truth: np.ndarray,
    values: np.ndarray,
    mechanisms: Sequence[Mechanism],
    channels: Sequence[np.ndarray],
    release: str,
    distance: Distance,
) -> dict[str, dict]:
    """One simulated release: every user gets a mechanism of the mix (uniformly), sanitizes;
    then GIBU, INV_M (both post-processings) and IBU_M (on the average mechanism)."""
    simulated = simulate_reports(values, list(mechanisms), None, BENCHMARK_SECRET, release)
    users = user_counts_per_mechanism(simulated)
    counts = total_report_counts(simulated)
    estimates = {
        "GIBU": generalized_iterative_bayesian_update(*gibu_groups(simulated, channels)),
        "INV_M projection": inverse_mechanism_estimate(channels, users, counts, "projection"),
        "INV_M truncate": inverse_mechanism_estimate(channels, users, counts, "truncate"),
        "IBU_M": iterative_bayesian_update(average_channel(channels, users), counts),
    }
    return {name: scores(truth, estimate, distance) for name, estimate in estimates.items()}


def aggregate(runs: list[dict[str, dict]]) -> dict[str, dict]:
    """Mean and standard deviation of every metric over the repetitions, per estimator."""
    summary = {}
    for name in runs[0]:
        entries = [run[name] for run in runs]
        summary[name] = {
            f"{metric}_{statistic}": float(function([entry[metric] for entry in entries]))
            for metric in ("emd", "l1", "l2")
            for statistic, function in (("mean", np.mean), ("std", np.std))
        }
        if "iterations" in entries[0]:
            summary[name]["iterations_max"] = int(max(entry["iterations"] for entry in entries))
            summary[name]["converged_all"] = bool(all(entry["converged"] for entry in entries))
    return summary


def sweep(
    users: Sequence[int], repetitions: int, one_run: Callable[[int, int], dict[str, dict]], label: str
) -> dict:
    """``one_run(n, repetition)`` for every n and repetition; raw runs and their summary."""
    result: dict = {}
    for n in users:
        started = time.perf_counter()
        runs = [one_run(n, repetition) for repetition in range(repetitions)]
        result[str(n)] = {"runs": runs, "summary": aggregate(runs), "seconds": time.perf_counter() - started}
        means = ", ".join(f"{name} {entry['emd_mean']:.4g}" for name, entry in result[str(n)]["summary"].items())
        print(f"  {label} n={n:.0e}: EMD {means} [{result[str(n)]['seconds']:.1f}s]", flush=True)
    return result


LINEAR_SIZE = 100
LINEAR_THETA = stats.binom.pmf(np.arange(LINEAR_SIZE), LINEAR_SIZE - 1, 0.5)


def linear_mixtures() -> dict[str, tuple[Mechanism, ...]]:
    def mix(krr: tuple[float, float], geometric: tuple[float, float]) -> tuple[Mechanism, ...]:
        return tuple(RandomizedResponse(epsilon=epsilon, input_size=LINEAR_SIZE) for epsilon in krr) + tuple(
            TruncatedGeometric(epsilon=epsilon, lower=0, upper=LINEAR_SIZE - 1) for epsilon in geometric
        )

    return {
        "low ε: k-RR 0.5, 1; geometric 0.1, 0.25": mix((0.5, 1.0), (0.1, 0.25)),
        "tests' mix: k-RR 2, 4; geometric 0.5, 1": mix((2.0, 4.0), (0.5, 1.0)),
        "high ε: k-RR 4, 6; geometric 1, 2": mix((4.0, 6.0), (1.0, 2.0)),
    }


def linear_experiment(sizes: Sizes) -> dict:
    print("1. linear alphabet {0..99}, binomial(99, 1/2)", flush=True)
    result = {}
    for index, (label, mechanisms) in enumerate(linear_mixtures().items()):
        channels = [mechanism.channel_matrix() for mechanism in mechanisms]

        def one_run(n: int, repetition: int, index: int = index, mechanisms=mechanisms, channels=channels) -> dict:
            values = stream("data", ("linear", index, n, repetition)).binomial(LINEAR_SIZE - 1, 0.5, size=n)
            return matrix_mechanism_run(
                LINEAR_THETA, values, mechanisms, channels, release_id("linear", index, n, repetition),
                earth_movers_distance_line,
            )

        result[label] = {
            "mechanisms": [mechanism.to_spec() for mechanism in mechanisms],
            "by_n": sweep(sizes.linear, sizes.linear_repetitions, one_run, label),
        }
    return result


def coarsened_distribution(cells: np.ndarray, coarsening: int) -> np.ndarray:
    rows, columns = GRID_ROWS // coarsening, GRID_COLUMNS // coarsening
    fine_row, fine_column = np.divmod(cells, GRID_COLUMNS)
    coarse = (fine_row // coarsening) * columns + fine_column // coarsening
    return np.bincount(coarse, minlength=rows * columns) / coarse.size


def gowalla_mixtures(cells: np.ndarray) -> dict[str, tuple[int, tuple[Mechanism, ...]]]:
    """Mixtures on the grid, each with its coarsening (1: the 16 x 24 grid of 0.5 km cells)."""
    size = GRID_ROWS * GRID_COLUMNS
    planar = tuple(
        PlanarGeometric(epsilon=epsilon, rows=GRID_ROWS, columns=GRID_COLUMNS, cell_side=CELL_SIDE_KM)
        for epsilon in (0.5, 1.0, 2.0)
    )
    rows, columns, side = GRID_ROWS // 2, GRID_COLUMNS // 2, 2 * CELL_SIDE_KM
    prior = coarsened_distribution(cells, 2)
    shokri = (
        PlanarGeometric(epsilon=1.0, rows=rows, columns=columns, cell_side=side),
        PlanarGeometric(epsilon=2.0, rows=rows, columns=columns, cell_side=side),
        RandomizedResponse(epsilon=3.0, input_size=rows * columns),
        ShokriOptimal(quality_loss_bound=1.0, prior=tuple(prior), rows=rows, columns=columns, cell_side=side),
    )
    return {
        "planar geometric ε 0.5, 1, 2 /km": (1, planar),
        "planar geometric ε 0.5, 1, 2 /km + k-RR ε 4": (1, planar + (RandomizedResponse(epsilon=4.0, input_size=size),)),
        "8 × 12 cells of 1 km: planar 1, 2 /km, k-RR 3, Shokri (loss ≤ 1 km)": (2, shokri),
    }


def gowalla_experiment(sizes: Sizes) -> tuple[dict, dict]:
    print("2. Gowalla San Francisco, 16 x 24 grid of 0.5 km cells", flush=True)
    cells = harness.gowalla_cells()
    result, maps = {}, {}
    for index, (label, (coarsening, mechanisms)) in enumerate(gowalla_mixtures(cells).items()):
        rows, columns = GRID_ROWS // coarsening, GRID_COLUMNS // coarsening
        side = CELL_SIDE_KM * coarsening
        theta = coarsened_distribution(cells, coarsening)
        channels = [mechanism.channel_matrix() for mechanism in mechanisms]

        def distance(truth: np.ndarray, estimate: np.ndarray, rows=rows, columns=columns, side=side) -> float:
            return earth_movers_distance_grid(truth, estimate, rows, columns, side)

        def one_run(
            n: int, repetition: int, index=index, theta=theta, mechanisms=mechanisms, channels=channels,
            distance=distance,
        ) -> dict:
            values = stream("data", ("gowalla", index, n, repetition)).choice(theta.size, size=n, p=theta)
            return matrix_mechanism_run(
                theta, values, mechanisms, channels, release_id("gowalla", index, n, repetition), distance
            )

        result[label] = {
            "grid": {"rows": rows, "columns": columns, "cell_side_km": side},
            "mechanisms": [_short_spec(mechanism) for mechanism in mechanisms],
            "by_n": sweep(sizes.gowalla, sizes.gowalla_repetitions, one_run, label),
        }
        if index == 1:
            maps = gowalla_maps(theta, mechanisms, channels, max(sizes.gowalla))
    return result, maps


def _short_spec(mechanism: Mechanism) -> dict:
    spec = mechanism.to_spec()
    if "prior" in spec:
        spec["prior"] = "the check-in distribution on the grid"
    return spec


def gowalla_maps(theta: np.ndarray, mechanisms, channels, n: int) -> dict:
    """One release's estimates on the full grid, for the heat maps."""
    values = stream("data", ("gowalla-map", n)).choice(theta.size, size=n, p=theta)
    simulated = simulate_reports(values, list(mechanisms), None, BENCHMARK_SECRET, release_id("gowalla-map", n))
    users = user_counts_per_mechanism(simulated)
    counts = total_report_counts(simulated)
    return {
        "n": n,
        "truth": theta,
        "GIBU": generalized_iterative_bayesian_update(*gibu_groups(simulated, channels)).estimate,
        "INV_M projection": inverse_mechanism_estimate(channels, users, counts, "projection"),
        "IBU_M": iterative_bayesian_update(average_channel(channels, users), counts).estimate,
    }


COUNTER_SIZE = 10
COUNTER_THETA = stats.binom.pmf(np.arange(COUNTER_SIZE), COUNTER_SIZE - 1, 0.3)


def counter_example_channels() -> tuple[np.ndarray, np.ndarray]:
    """``A``: k-RR on k = 10 with ``e^ε = 2(k−1)/(k−2)`` so that ``A[x,x] = 2/k``; ``A′ = 2U − A``
    (report any value but the secret, uniformly). Their average is the all-``1/k`` channel."""
    epsilon = float(np.log(2 * (COUNTER_SIZE - 1) / (COUNTER_SIZE - 2)))
    first = RandomizedResponse(epsilon=epsilon, input_size=COUNTER_SIZE).channel_matrix()
    second = np.clip(2.0 / COUNTER_SIZE - first, 0.0, None)
    return first, second / second.sum(axis=1, keepdims=True)


def counter_example_experiment(sizes: Sizes) -> dict:
    print("3. counter-example: A and A' whose average is non-informative", flush=True)
    first, second = counter_example_channels()
    uninformed = earth_movers_distance_line(COUNTER_THETA, np.full(COUNTER_SIZE, 1.0 / COUNTER_SIZE))

    def one_run(n: int, repetition: int) -> dict:
        values = stream("data", ("counter", n, repetition)).choice(COUNTER_SIZE, size=n, p=COUNTER_THETA)
        half = n // 2
        first_counts = np.bincount(
            sample_from_channel(first, values[:half], stream("sanitize", ("counter", n, repetition, 0))),
            minlength=COUNTER_SIZE,
        )
        second_counts = np.bincount(
            sample_from_channel(second, values[half:], stream("sanitize", ("counter", n, repetition, 1))),
            minlength=COUNTER_SIZE,
        )
        users = [half, n - half]
        estimates = {
            "GIBU": generalized_iterative_bayesian_update(
                *channel_report_groups([first, second], [first_counts, second_counts])
            ),
            "IBU_M": iterative_bayesian_update(average_channel([first, second], users), first_counts + second_counts),
            "INV_M projection": inverse_mechanism_estimate(
                [first, second], users, first_counts + second_counts, "projection"
            ),
        }
        return {
            name: scores(COUNTER_THETA, estimate, earth_movers_distance_line) for name, estimate in estimates.items()
        }

    return {
        "theta": "binomial(9, 0.3) on {0..9}",
        "uninformed_emd": uninformed,
        "by_n": sweep(sizes.counter_example, sizes.counter_repetitions, one_run, "counter-example"),
    }


RAPPOR_SIZE = 20
RAPPOR_THETA = stats.binom.pmf(np.arange(RAPPOR_SIZE), RAPPOR_SIZE - 1, 0.5)
RAPPOR_REGIMES = {"ε in [0.1, 1]": (0.1, 1.0), "ε in [1, 10]": (1.0, 10.0)}


def rappor_experiment(sizes: Sizes) -> dict:
    print("4. RAPPOR on {0..19}, 10 mechanisms", flush=True)
    result = {}
    for index, (label, (lowest, highest)) in enumerate(RAPPOR_REGIMES.items()):
        mechanisms = [
            BasicRappor(epsilon=float(epsilon), input_size=RAPPOR_SIZE)
            for epsilon in np.linspace(lowest, highest, 10)
        ]

        def one_run(n: int, repetition: int, index: int = index, mechanisms=mechanisms) -> dict:
            values = stream("data", ("rappor", index, n, repetition)).binomial(RAPPOR_SIZE - 1, 0.5, size=n)
            simulated = simulate_reports(
                values, mechanisms, None, BENCHMARK_SECRET, release_id("rappor", index, n, repetition)
            )
            bit_sums, epsilons, users = rappor_bit_sums(simulated)
            estimates = {
                "GIBU": generalized_iterative_bayesian_update(*gibu_groups(simulated)),
                "RAP_M projection": rappor_estimate(bit_sums, simulated.n, epsilons, users, "projection"),
                "RAP_M truncate": rappor_estimate(bit_sums, simulated.n, epsilons, users, "truncate"),
            }
            return {
                name: scores(RAPPOR_THETA, estimate, earth_movers_distance_line)
                for name, estimate in estimates.items()
            }

        result[label] = {
            "epsilons": [float(mechanism.epsilon) for mechanism in mechanisms],
            "by_n": sweep(sizes.rappor, sizes.rappor_repetitions, one_run, f"RAPPOR {label}"),
        }
    return result


def log_log_slope(by_n: dict, estimator: str) -> float:
    """Least-squares slope of log(mean EMD) on log n (−1/2 for the paper's rate)."""
    sizes = np.array([float(n) for n in by_n])
    errors = np.array([by_n[n]["summary"][estimator]["emd_mean"] for n in by_n])
    return float(np.polyfit(np.log(sizes), np.log(errors), 1)[0])


def consistency(report: dict) -> dict:
    experiments = {
        f"linear, {label}": entry["by_n"] for label, entry in report["linear"].items()
    } | {
        f"Gowalla, {label}": entry["by_n"] for label, entry in report["gowalla"].items()
    } | {
        f"RAPPOR, {label}": entry["by_n"] for label, entry in report["rappor"].items()
    } | {"counter-example": report["counter_example"]["by_n"]}
    return {
        label: {estimator: log_log_slope(by_n, estimator) for estimator in next(iter(by_n.values()))["summary"]}
        for label, by_n in experiments.items()
    }


def plot_sweep(axis, by_n: dict, estimators: Sequence[str], title: str, unit: str) -> list:
    """Mean EMD ± one standard deviation against n, log-log; returns the plotted handles."""
    sizes = np.array([int(n) for n in by_n])
    handles = []
    for estimator in estimators:
        means = np.array([by_n[str(n)]["summary"][estimator]["emd_mean"] for n in sizes])
        deviations = np.array([by_n[str(n)]["summary"][estimator]["emd_std"] for n in sizes])
        handles.append(
            axis.errorbar(
                sizes, means, yerr=np.minimum(deviations, 0.95 * means), label=estimator,
                color=COLORS.get(estimator), marker="o", markersize=3, capsize=3, linewidth=1.2,
            )
        )
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("number of users n")
    axis.set_ylabel(f"EMD to the truth{unit}")
    axis.set_title(title, fontsize=9)
    axis.grid(True, which="both", alpha=0.3)
    return handles


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (the ``bench`` extra: only the figures need it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot

    return matplotlib.pyplot


def save(figure, folder: Path, name: str, suffix: str, tight: bool = True) -> str:
    """``figure`` as ``folder/figures/ldp_{name}{suffix}.png``; its path as the report links it."""
    path = folder / "figures" / f"ldp_{name}{suffix}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    if tight:
        figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot().close(figure)
    return harness.shown_path(path)


def figures(report: dict, maps: dict, suffix: str, folder: Path) -> dict[str, str]:
    plt = pyplot()
    paths = {}
    for key, estimators, unit in (
        ("linear", MATRIX_ESTIMATORS, ""), ("gowalla", MATRIX_ESTIMATORS, " (km)"),
        ("rappor", RAPPOR_ESTIMATORS, ""),
    ):
        entries = report[key]
        figure, axes = plt.subplots(1, len(entries), figsize=(5 * len(entries), 4), squeeze=False)
        for axis, (label, entry) in zip(axes[0], entries.items(), strict=True):
            plot_sweep(axis, entry["by_n"], estimators, label, unit)
        axes[0][0].legend(fontsize=8)
        figure.suptitle(
            {
                "linear": "Linear alphabet {0..99}, binomial(99, 1/2): mean ± s.d. over repetitions",
                "gowalla": "Gowalla San Francisco (16 × 24 cells of 0.5 km): mean ± s.d. over repetitions",
                "rappor": "Basic RAPPOR on {0..19}, 10 mechanisms: mean ± s.d. over repetitions",
            }[key],
            fontsize=10,
        )
        paths[key] = save(figure, folder, key, suffix)

    figure, axis = plt.subplots(figsize=(6, 4))
    counter = report["counter_example"]
    plot_sweep(
        axis, counter["by_n"], ("INV_M projection", "IBU_M", "GIBU"),
        "Counter-example: the average mechanism is uniform\nIBU_M and INV_M stay on the uniform answer", "",
    )
    axis.axhline(counter["uninformed_emd"], color="gray", linestyle="--", label="uniform answer")
    axis.legend(fontsize=8)
    paths["counter_example"] = save(figure, folder, "counter_example", suffix)

    slopes = report["consistency"]
    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
    for axis, (key, label) in zip(
        axes,
        (
            ("linear", "tests' mix: k-RR 2, 4; geometric 0.5, 1"),
            ("gowalla", "planar geometric ε 0.5, 1, 2 /km + k-RR ε 4"),
            ("rappor", "ε in [1, 10]"),
        ),
        strict=True,
    ):
        by_n = report[key][label]["by_n"]
        estimators = RAPPOR_ESTIMATORS if key == "rappor" else MATRIX_ESTIMATORS
        handles = plot_sweep(axis, by_n, estimators, f"{key}: {label}", " (km)" if key == "gowalla" else "")
        sizes = np.array([int(n) for n in by_n])
        anchor = by_n[str(sizes[0])]["summary"]["GIBU"]["emd_mean"]
        (reference,) = axis.plot(sizes, anchor * np.sqrt(sizes[0] / sizes), "k:")
        slope_key = {"linear": "linear", "gowalla": "Gowalla", "rappor": "RAPPOR"}[key] + f", {label}"
        axis.legend(
            handles + [reference],
            [f"{name} (slope {slopes[slope_key][name]:.2f})" for name in estimators] + ["∝ n^(-1/2)"],
            fontsize=7,
        )
    figure.suptitle("Consistency: error against n, log-log, with least-squares slopes", fontsize=10)
    paths["consistency"] = save(figure, folder, "consistency", suffix)

    if maps:
        panels = ("truth", "GIBU", "INV_M projection", "IBU_M")
        figure, axes = plt.subplots(1, len(panels), figsize=(15, 3.3), layout="constrained")
        top = 1.5 * float(np.max(maps["truth"]))
        for axis, name in zip(axes, panels, strict=True):
            grid = np.asarray(maps[name]).reshape(GRID_ROWS, GRID_COLUMNS)[:, ::-1]
            image = axis.imshow(grid, cmap="viridis", vmin=0.0, vmax=top)
            if name != "truth":
                emd = earth_movers_distance_grid(maps["truth"], maps[name], GRID_ROWS, GRID_COLUMNS, CELL_SIDE_KM)
                name = f"{name}: EMD {emd:.3f} km"
            axis.set_title(name, fontsize=9)
            axis.set_xticks([])
            axis.set_yticks([])
        figure.colorbar(image, ax=list(axes), shrink=0.9, label="probability (clipped)")
        figure.suptitle(
            "Gowalla SF check-ins (north up, west left), planar geometric 0.5/1/2 per km + k-RR 4, "
            f"n = {maps['n']:.0e}, one release",
            fontsize=10,
        )
        paths["gowalla_maps"] = save(figure, folder, "gowalla_maps", suffix, tight=False)
    return paths


def _cell(summary: dict, name: str, digits: int = 4) -> str:
    entry = summary.get(name)
    if entry is None:
        return "–"
    flag = "" if entry.get("converged_all", True) else "*"
    return f"{entry['emd_mean']:.{digits}f} ± {entry['emd_std']:.{digits}f}{flag}"


def sweep_table(first_column: str, experiments: dict, estimators: Sequence[str]) -> list[str]:
    """One row per (experiment, n): mean ± s.d. of each estimator's EMD."""
    return harness.table(
        [first_column, "n", *estimators],
        [(label, int(n), *(_cell(at_n["summary"], name) for name in estimators))
         for label, entry in experiments.items() for n, at_n in entry["by_n"].items()],
        formats=[None, ".0e", *[None] * len(estimators)],
    )


def markdown(report: dict, paths: dict[str, str]) -> str:
    sizes = report["sizes"]
    counter = report["counter_example"]
    slope_columns = MATRIX_ESTIMATORS + RAPPOR_ESTIMATORS[1:]
    lines = [
        "## Reproduction of the free-will LDP findings (ElSalamouny & Palamidessi)",
        "",
        "EMD between the true distribution and each estimate: mean ± standard deviation over the "
        "repetitions (r); `*` marks an iterative estimator that reached the 10,000-iteration cap "
        "in at least one repetition before its tolerance (L1 change ≤ 1e-10). Every user picks a "
        f"mechanism of the mix uniformly. Generated by `benchmarks/ldp_reproduction.py` ({report['mode']} run, "
        f"{report['wall_seconds'] / 60:.1f} min on {report['machine']['cores']} cores).",
        "",
        f"### 1. Linear alphabet {{0..99}}, binomial(99, 1/2) (r = {sizes['linear_repetitions']})",
        "",
        f"![linear]({paths['linear']})",
        "",
        *sweep_table("mixture", report["linear"], MATRIX_ESTIMATORS),
        "",
        f"### 2. Gowalla San Francisco, 16 × 24 cells of 0.5 km; EMD in km (r = {sizes['gowalla_repetitions']})",
        "",
        f"![gowalla]({paths['gowalla']})",
        "",
        *([f"![gowalla maps]({paths['gowalla_maps']})", ""] if "gowalla_maps" in paths else []),
        *sweep_table("mixture", report["gowalla"], MATRIX_ESTIMATORS),
        "",
        "### 3. Counter-example: half the users apply A, half A′ = 2U − A (average: uniform U) "
        f"(r = {sizes['counter_repetitions']})",
        "",
        f"![counter-example]({paths['counter_example']})",
        "",
        f"EMD of the uninformed uniform answer: {counter['uninformed_emd']:.4f}.",
        "",
        *harness.table(
            ["n", *COUNTER_ESTIMATORS],
            [(int(n), *(_cell(at_n["summary"], name) for name in COUNTER_ESTIMATORS))
             for n, at_n in counter["by_n"].items()],
            align="r" * (1 + len(COUNTER_ESTIMATORS)), formats=[".0e", *[None] * len(COUNTER_ESTIMATORS)],
        ),
        "",
        f"### 4. Basic RAPPOR on {{0..19}}, 10 mechanisms (r = {sizes['rappor_repetitions']})",
        "",
        f"![rappor]({paths['rappor']})",
        "",
        *sweep_table("ε range", report["rappor"], RAPPOR_ESTIMATORS),
        "",
        "### 5. Consistency: least-squares slope of log(mean EMD) on log n (the paper's rate: −0.5)",
        "",
        f"![consistency]({paths['consistency']})",
        "",
        *harness.table(
            ["experiment", *slope_columns],
            [(label, *(slopes.get(name) for name in slope_columns)) for label, slopes in report["consistency"].items()],
            formats=[None, *[".2f"] * len(slope_columns)],
        ),
        "",
        "### Findings, checked on the means",
        "",
        *(f"- {finding}" for finding in report["findings"]),
    ]
    return "\n".join(lines)


def findings(report: dict) -> list[str]:
    """The paper's qualitative claims, each checked on this run's means (largest n)."""
    notes = []

    def largest(by_n: dict) -> tuple[str, dict]:
        n = max(by_n, key=int)
        return n, by_n[n]["summary"]

    for key, unit in (("linear", ""), ("gowalla", " km")):
        for label, entry in report[key].items():
            for n, at_n in entry["by_n"].items():
                summary = at_n["summary"]
                gibu = summary["GIBU"]["emd_mean"]
                worse = [name for name in ("INV_M projection", "INV_M truncate") if summary[name]["emd_mean"] < gibu]
                if worse:
                    notes.append(
                        f"{key}, {label}, n = {int(n):.0e}: GIBU ({gibu:.4f}{unit}) is NOT at most "
                        + ", ".join(f"{name} ({summary[name]['emd_mean']:.4f}{unit})" for name in worse)
                    )
            n, summary = largest(entry["by_n"])
            notes.append(
                f"{key}, {label}, n = {int(n):.0e}: GIBU {summary['GIBU']['emd_mean']:.4f}{unit}, "
                f"INV_M projection {summary['INV_M projection']['emd_mean']:.4f}{unit}, "
                f"INV_M truncate {summary['INV_M truncate']['emd_mean']:.4f}{unit}, "
                f"IBU_M {summary['IBU_M']['emd_mean']:.4f}{unit}"
            )
    counter = report["counter_example"]
    n, summary = largest(counter["by_n"])
    notes.append(
        f"counter-example, n = {int(n):.0e}: IBU_M {summary['IBU_M']['emd_mean']:.4f} and INV_M "
        f"{summary['INV_M projection']['emd_mean']:.4f} against the uniform answer's "
        f"{counter['uninformed_emd']:.4f}; GIBU {summary['GIBU']['emd_mean']:.4f}"
    )
    for label, entry in report["rappor"].items():
        n, summary = largest(entry["by_n"])
        ratio = summary["GIBU"]["emd_mean"] / min(
            summary["RAP_M projection"]["emd_mean"], summary["RAP_M truncate"]["emd_mean"]
        )
        notes.append(
            f"RAPPOR {label}, n = {int(n):.0e}: GIBU / best RAP_M EMD = {ratio:.2f}"
        )
    return notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer users and repetitions (about a minute)")
    harness.add_results_option(parser)
    arguments = parser.parse_args()
    sizes = QUICK if arguments.quick else FULL
    suffix = "_quick" if arguments.quick else ""
    started = time.perf_counter()
    report: dict = {
        "description": __doc__.split("\n\n")[0],
        "mode": "quick" if arguments.quick else "full",
        "machine": machine(),
        "benchmark_secret_hex": BENCHMARK_SECRET_HEX,
        "release_id_prefix": RELEASE,
        "randomness": "keyed_generator(secret, release, purpose, key); data purpose 'data' keyed by "
        "(experiment, mixture, n, repetition); simulation release ids under the prefix",
        "sizes": sizes.__dict__,
        "seconds": {},
    }
    for key, experiment in (
        ("linear", linear_experiment), ("counter_example", counter_example_experiment),
        ("rappor", rappor_experiment),
    ):
        clock = time.perf_counter()
        report[key] = experiment(sizes)
        report["seconds"][key] = time.perf_counter() - clock
    clock = time.perf_counter()
    report["gowalla"], maps = gowalla_experiment(sizes)
    report["seconds"]["gowalla"] = time.perf_counter() - clock
    report["gowalla_map_estimates"] = maps
    report["consistency"] = consistency(report)
    report["findings"] = findings(report)
    paths = figures(report, maps, suffix, arguments.results_dir)
    report["figures"] = paths
    report["wall_seconds"] = time.perf_counter() - started
    harness.write_json(arguments.results_dir, f"ldp_reproduction{suffix}", report, indent=2, default=harness.json_default)
    text = markdown(report, paths)
    harness.write_markdown(arguments.results_dir, f"ldp_reproduction{suffix}", text + "\n")
    print(text)


if __name__ == "__main__":
    main()
