"""The ldp release pipeline end to end: Spark local[2] vs the local engine, 10^5..10^7 reports.

Issue 4, "Performance": 10^7 reports over 20 distinct mechanisms on k = 100, end to end on Spark
``local[2]``, goal under 2 minutes; GIBU's time after grouping independent of n. And the peers'
homogeneous cases (``benchmarks/ldp_peers.py``) through the whole pipeline on Spark.

    .venv/bin/python benchmarks/ldp_pipeline_scaling.py           # full run (about 20 minutes)
    .venv/bin/python benchmarks/ldp_pipeline_scaling.py --quick   # about 3 minutes

1. Goal case: secrets binomial(99, 1/2); 20 mechanisms, 10 k-RR with ε evenly in [0.5, 5] and 10
   truncated geometric on 0..99 with ε evenly in [0.1, 1], equal shares; the clients are played
   by ``transforms.ldp.simulation.simulate_reports`` (keyed randomness) and the reports written
   once per n as Parquet in the layout of ``privlake simulate-ldp``. Each release —
   ``run_ldp_release`` with ``estimator.method: gibu`` and the config's defaults — runs in its own
   child process (one SparkContext per process; the engine starts inside the release, as with
   ``privlake run``). Timed: the release call only (interpreter start-up, imports and data
   generation excluded), with the stage timings and the evaluation against the truth from the
   release's operator-only record (``ReleaseOutcome.internal``; the public manifest carries
   neither) and a finer breakdown taken by wrapping the pipeline module's own functions in the
   child (reading and checking on the engine, the GX gate on its metrics, engine start, driver-side estimation). Each release goes into
   a lake of its own, made first as an operator makes one (``harness.benchmark_lake``: a test lake,
   the benchmark's secret being a test secret, with a large budget for the dataset; outside the
   timed part, in the parent). The published estimate is read back from the lake and compared
   across engines and with the estimator on the simulator's own counts.
2. GIBU after grouping: ``transforms.ldp.release_estimate.estimate_from_report_counts`` timed on
   the counted statistics of every n (median of repeats), in child processes with
   ``OPENBLAS_NUM_THREADS=1`` and with OpenBLAS left to its default thread count.
3. The peers' homogeneous cases through the pipeline on Spark: k-RR k = 100 ε = 1 (INV_M closed
   form, GIBU) and basic RAPPOR k = 20 ε = 1 (RAP_M), on the very reports of the peers
   benchmark's first repetition (same keyed secrets and simulation), so the pipeline's EMD must
   equal the one recorded there. The Spark seconds are written into a copy of
   ``benchmarks/results/ldp_peers.json`` (``spark_end_to_end_seconds``, per estimator) inside this
   benchmark's results; ``ldp_peers.*`` are left untouched.

Every child process runs with ``OPENBLAS_NUM_THREADS=1`` (and OMP/MKL) unless it is the
default-threads variant of part 2. Writes ``benchmarks/results/ldp_pipeline_scaling.{json,md}``
(``_quick`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from benchmarks import harness

PEERS_RESULTS = harness.RESULTS / "ldp_peers.json"
GX_GATE = "GX input gate on the engine's metrics"
SECRET_HEX = "5c" * 32
RELEASE = "bench/ldp-pipeline-scaling"
DATASET = "bench"
K = 100
GOAL_SECONDS = 120.0
GOAL_USERS = 10_000_000
KRR_EPSILONS = (0.5, 5.0)
GEOMETRIC_EPSILONS = (0.1, 1.0)
MECHANISMS_PER_FAMILY = 10
FULL = {
    "goal_sizes": (100_000, 1_000_000, 10_000_000),
    "goal_engines": ("spark", "local"),
    "peer_cases": (
        ("krr", 100_000, "inv_m"), ("krr", 100_000, "gibu"),
        ("krr", 1_000_000, "inv_m"), ("krr", 1_000_000, "gibu"),
        ("krr", 10_000_000, "inv_m"), ("krr", 10_000_000, "gibu"),
        ("rappor", 100_000, "rap_m"), ("rappor", 1_000_000, "rap_m"),
    ),
    "estimator_repeats": 5,
}
QUICK = {
    "goal_sizes": (100_000,),
    "goal_engines": ("spark", "local"),
    "peer_cases": (("krr", 100_000, "inv_m"),),
    "estimator_repeats": 3,
    "estimator_sizes": (100_000, 1_000_000),
}
PEER_EPSILON = 1.0
PEER_ALPHABET = {"krr": 100, "rappor": 20}
PEER_ESTIMATOR_NAMES = {"inv_m": "INV_M projection", "gibu": "GIBU", "rap_m": "RAP_M projection"}


# ----------------------------------------------------------------------------- data


def goal_mechanisms() -> dict[str, Any]:
    """The goal case's 20 named mechanisms (the names ``privlake simulate-ldp`` would give)."""
    from transforms.ldp.mechanisms import RandomizedResponse, TruncatedGeometric

    named: dict[str, Any] = {}
    for epsilon in np.linspace(*KRR_EPSILONS, MECHANISMS_PER_FAMILY).tolist():
        named[f"krr_eps{epsilon:.4g}"] = RandomizedResponse(epsilon, K)
    for epsilon in np.linspace(*GEOMETRIC_EPSILONS, MECHANISMS_PER_FAMILY).tolist():
        named[f"truncated_geometric_eps{epsilon:.4g}"] = TruncatedGeometric(epsilon, 0, K - 1)
    return named


def write_reports(folder: Path, named: dict[str, Any], simulated: Any, truth: np.ndarray) -> dict[str, str]:
    """The reports table, catalog and truth in the layout ``privlake simulate-ldp`` writes, and
    the simulator's own counts per (mechanism, report) in the catalog's (sorted-name) order."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.ldp.simulation import bit_vector_text
    from transforms.ldp.simulation import report_counts_per_mechanism

    folder.mkdir(parents=True, exist_ok=True)
    names = np.array(list(named), dtype=object)
    reports = bit_vector_text(simulated.reports) if simulated.is_rappor else simulated.reports
    frame = pd.DataFrame(
        {"user_id": np.arange(simulated.n, dtype=np.int64), "mechanism": names[simulated.user_mechanism],
         "report": reports}
    )
    paths = {
        "reports": str(folder / "reports.parquet"),
        "catalog": str(folder / "catalog.json"),
        "truth": str(folder / "truth.parquet"),
    }
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), paths["reports"])
    del frame, reports
    catalog = {name: mechanism.to_spec() for name, mechanism in named.items()}
    Path(paths["catalog"]).write_text(json.dumps({"mechanisms": catalog}, indent=2) + "\n", encoding="utf-8")
    pd.DataFrame({"value": np.arange(truth.size, dtype=np.int64), "probability": truth}).to_parquet(
        paths["truth"], index=False
    )
    if not simulated.is_rappor:
        counts = report_counts_per_mechanism(simulated)
        order = np.argsort(names)
        paths["counts"] = str(folder / "counts.npz")
        np.savez(paths["counts"], *[counts[index] for index in order])
    return paths


def generate_goal_case(n: int, folder: Path) -> tuple[dict[str, str], float]:
    """Simulated reports of the goal case at ``n`` users; returns the paths and the seconds taken."""
    from transforms.core.keyed_randomness import keyed_generator
    from transforms.ldp.simulation import simulate_reports

    start = time.perf_counter()
    secret = bytes.fromhex(SECRET_HEX)
    values = keyed_generator(secret, RELEASE, "data", n).binomial(K - 1, 0.5, size=n).astype(np.int64)
    named = goal_mechanisms()
    simulated = simulate_reports(values, list(named.values()), None, secret, f"{RELEASE}/{n}")
    truth = np.bincount(values, minlength=K) / n
    del values
    paths = write_reports(folder, named, simulated, truth)
    return paths, time.perf_counter() - start


def generate_peer_case(mechanism_name: str, n: int, folder: Path) -> dict[str, str]:
    """The reports of ``benchmarks/ldp_peers.py``'s first repetition of (mechanism, ε = 1, n):
    the same keyed secrets and the same simulation call, so the very same reports."""
    from benchmarks.ldp_peers import BENCHMARK_SECRET, true_secrets
    from benchmarks.ldp_peers import RELEASE as PEERS_RELEASE
    from transforms.ldp.mechanisms import BasicRappor, RandomizedResponse
    from transforms.ldp.simulation import simulate_reports

    k = PEER_ALPHABET[mechanism_name]
    values = true_secrets(k, n, 0)
    if mechanism_name == "krr":
        mechanism: Any = RandomizedResponse(epsilon=PEER_EPSILON, input_size=k)
    else:
        mechanism = BasicRappor(epsilon=PEER_EPSILON, input_size=k)
    release_id = f"{PEERS_RELEASE}/{mechanism_name}/{PEER_EPSILON}/{n}/0"
    simulated = simulate_reports(values, [mechanism], None, BENCHMARK_SECRET, release_id)
    truth = np.bincount(values, minlength=k) / n
    return write_reports(folder, {f"{mechanism_name}_eps{PEER_EPSILON:g}": mechanism}, simulated, truth)


def release_config(paths: dict[str, str], lake: Path, engine: str, method: str, k: int) -> dict:
    return {
        "kind": "ldp",
        "dataset": DATASET,
        "lake": str(lake),
        "input": {"path": paths["reports"], "format": "parquet", "catalog": paths["catalog"]},
        "secrets": {"layout": "line", "first_value": 0, "values": k},
        "estimator": {"method": method},
        "engine": {"name": engine, "spark": {"master": "local[2]"}},
        "evaluation": {"truth_path": paths["truth"]},
    }


# ----------------------------------------------------------------------------- child processes


def blas_report() -> list[dict]:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [
        {"api": entry.get("internal_api"), "threads": entry.get("num_threads")}
        for entry in threadpool_info() if entry.get("user_api") == "blas"
    ]


def measure_release(config_path: Path, release_id: str) -> dict:
    """In the child: one release, timed around ``run_ldp_release`` only; a finer breakdown from
    timing wrappers around the functions the pipeline module calls (no pipeline code changed)."""
    import pipelines.ldp.pipeline as ldp_pipeline
    import pipelines.platform.release as release_run
    from pipelines.platform.lake import Lake
    from schemas.ldp.config import LdpConfig

    config = LdpConfig.model_validate(json.loads(config_path.read_text()))
    breakdown: dict[str, float] = {}
    release_run.start_engine = harness.accumulating(release_run.start_engine, breakdown, "engine start (overlaps)")
    for name, label in (
        ("read_reports_on_engine", "read, check and count on the engine (GX gate on its metrics included)"),
        ("validate_ldp_metrics", GX_GATE),
        ("estimate_from_report_counts", "estimation on the driver"),
        ("estimate_from_bit_sums", "estimation on the driver"),
        ("estimate_from_bit_vector_groups", "estimation on the driver"),
    ):
        setattr(ldp_pipeline, name, harness.accumulating(getattr(ldp_pipeline, name), breakdown, label))
    start = time.perf_counter()
    outcome = ldp_pipeline.run_ldp_release(config, release_id=release_id)
    wall = time.perf_counter() - start
    manifest, internal = outcome.manifest, outcome.internal  # internal: the operator-only record
    with Lake(config.lake) as lake:
        estimate = lake.read_release(release_id).to_pandas().sort_values("value")["probability"].to_list()
    return {
        "wall_seconds": wall,
        "stages": internal["timings"],
        "breakdown": breakdown,
        "estimator": manifest["estimator"],
        "iterations": manifest["iterations"],
        "converged": manifest["converged"],
        "n": manifest["n"],
        "engine": manifest["engine"],
        "evaluation": {key: internal["evaluation"].get(key) for key in ("emd", "l1", "l2")},
        "estimate": estimate,
        "blas": blas_report(),
    }


def measure_estimator(counts_path: Path, catalog_path: Path, repeats: int) -> dict:
    """In the child: GIBU from the counted statistics (the pipeline's defaults), median of repeats."""
    from schemas.ldp.config import EstimatorSettings
    from transforms.ldp.estimators import channel_report_groups
    from transforms.ldp.mechanisms import mechanism_from_spec
    from transforms.ldp.release_estimate import estimate_from_report_counts

    settings = EstimatorSettings()
    catalog = json.loads(catalog_path.read_text())["mechanisms"]
    mechanisms = [mechanism_from_spec(catalog[name]) for name in sorted(catalog)]
    with np.load(counts_path) as stored:
        counts = [stored[f"arr_{index}"] for index in range(len(mechanisms))]
    _, group_counts = channel_report_groups([m.channel_matrix() for m in mechanisms], counts)
    seconds, result = [], None
    for _ in range(repeats + 1):
        start = time.perf_counter()
        result = estimate_from_report_counts(
            mechanisms, counts, "gibu", settings.post_processing, settings.tolerance, settings.max_iterations,
            settings.acceleration,
        )
        seconds.append(time.perf_counter() - start)
    assert result is not None
    timed = seconds[1:]
    median = float(np.median(timed))
    return {
        "groups": int(group_counts.size),
        "iterations": int(result.iterations),
        "converged": bool(result.converged),
        "median_seconds": median,
        "min_seconds": float(np.min(timed)),
        "max_seconds": float(np.max(timed)),
        "first_call_seconds": seconds[0],
        "seconds_per_iteration": median / max(1, result.iterations),
        "repeats": repeats,
        "estimate": result.estimate.tolist(),
        "blas": blas_report(),
    }


def measure_import() -> dict:
    """In the child: the import of Great Expectations, paid once per release process."""
    start = time.perf_counter()
    import great_expectations  # noqa: F401

    return {"great_expectations_import_seconds": time.perf_counter() - start}


def child_environment(single_blas_thread: bool) -> dict[str, str]:
    environment = dict(os.environ)
    for variable in harness.BLAS_VARIABLES:
        environment.pop(variable, None)
    if single_blas_thread:
        environment.update({variable: "1" for variable in harness.BLAS_VARIABLES})
    environment["PYSPARK_PYTHON"] = sys.executable
    environment["PRIVLAKE_TEST_SECRET"] = SECRET_HEX
    return environment


def run_child(arguments: list[str], environment: dict[str, str], log: Path) -> dict:
    """Run this script as a child with ``arguments``; its last stdout line is JSON. Also the peak
    resident memory of its whole process tree (JVM and Python workers included)."""
    command = [sys.executable, str(Path(__file__).resolve()), *arguments]
    report, sampler = harness.run_json_child(command, {**environment, "PRIVLAKE_SPARK_LOG": str(log)})
    report["peak_rss_mib"] = sampler.peak_total / 2**20
    report["load_average_after"] = list(os.getloadavg())
    return report


# ----------------------------------------------------------------------------- the parts


def run_release(paths: dict[str, str], folder: Path, engine: str, method: str, k: int, label: str) -> dict:
    config_path = folder / f"config-{label}.json"
    lake = harness.benchmark_lake(folder / f"lake-{label}", DATASET)
    config_path.write_text(json.dumps(release_config(paths, lake, engine, method, k)))
    return run_child(
        ["--measure", "release", "--config", str(config_path), "--release-id", f"bench-{label}"],
        child_environment(True), folder / f"spark-{label}.log",
    )


def goal_part(sizes: tuple[int, ...], engines: tuple[str, ...], estimator_sizes: tuple[int, ...], repeats: int,
              folder: Path, log: Callable[[str], None]) -> dict:
    runs, estimator_runs, generation = [], [], {}
    for n in sorted(set(sizes) | set(estimator_sizes)):
        data_folder = folder / f"goal-{n}"
        paths, seconds = generate_goal_case(n, data_folder)
        generation[str(n)] = seconds
        log(f"goal n={n:.0e}: reports written in {seconds:.1f} s")
        for threads in ("1", "default"):
            entry = run_child(
                ["--measure", "estimator", "--counts", paths["counts"], "--catalog", paths["catalog"],
                 "--repeats", str(repeats)],
                child_environment(threads == "1"), folder / "estimator.log",
            )
            entry.update(n=n, openblas_num_threads=threads)
            estimator_runs.append(entry)
            log(f"  GIBU after grouping, OPENBLAS_NUM_THREADS={threads}: {entry['median_seconds']:.3f} s "
                f"({entry['iterations']} iterations, {entry['groups']} groups)")
        if n not in sizes:
            continue
        for engine in engines:
            entry = run_release(paths, data_folder, engine, "gibu", K, f"goal-{n}-{engine}")
            entry.update(n=n, engine_name=engine)
            runs.append(entry)
            log(f"  {engine}: {entry['wall_seconds']:.1f} s end to end; stages {entry['stages']}")
        for kind in ("reports", "counts"):
            Path(paths[kind]).unlink(missing_ok=True)
    return {"runs": runs, "gibu_after_grouping": estimator_runs, "generation_seconds": generation}


def check_goal(goal: dict) -> dict:
    """Engines agree, agree with the estimator on the simulator's counts; the 2-minute verdict;
    GIBU's time after grouping against n."""
    checks: dict[str, Any] = {"engine_agreement": [], "verdicts": {}}
    single = {entry["n"]: entry for entry in goal["gibu_after_grouping"] if entry["openblas_num_threads"] == "1"}
    by_n: dict[int, dict[str, dict]] = {}
    for run in goal["runs"]:
        by_n.setdefault(run["n"], {})[run["engine_name"]] = run
    for n, engines in sorted(by_n.items()):
        row: dict[str, Any] = {"n": n}
        reference = np.asarray(single[n]["estimate"]) if n in single else None
        for engine, run in engines.items():
            estimate = np.asarray(run["estimate"])
            if reference is not None:
                row[f"{engine}_vs_simulator_counts_max_abs_difference"] = float(np.max(np.abs(estimate - reference)))
        if {"spark", "local"} <= set(engines):
            row["spark_vs_local_max_abs_difference"] = float(
                np.max(np.abs(np.asarray(engines["spark"]["estimate"]) - np.asarray(engines["local"]["estimate"])))
            )
        checks["engine_agreement"].append(row)
    spark = {run["n"]: run for run in goal["runs"] if run["engine_name"] == "spark"}
    if spark:
        largest = max(spark)
        seconds = spark[largest]["wall_seconds"]
        checks["verdicts"]["two_minutes"] = {
            "n": largest, "spark_seconds": seconds, "goal_seconds": GOAL_SECONDS,
            "met": (seconds < GOAL_SECONDS) if largest == GOAL_USERS else None,
        }
    if len(single) > 1:
        times = {n: entry["median_seconds"] for n, entry in single.items()}
        per_iteration = {n: entry["seconds_per_iteration"] for n, entry in single.items()}
        groups = {n: entry["groups"] for n, entry in single.items()}
        iterations = {n: entry["iterations"] for n, entry in single.items()}
        checks["verdicts"]["gibu_after_grouping_independent_of_n"] = {
            "median_seconds_by_n": times,
            "seconds_per_iteration_by_n": per_iteration,
            "groups_by_n": groups,
            "iterations_by_n": iterations,
            "largest_over_smallest_time": max(times.values()) / min(times.values()),
            "largest_over_smallest_time_per_iteration": max(per_iteration.values()) / min(per_iteration.values()),
            "n_ratio": max(times) / min(times),
        }
    return checks


def peers_part(cases: tuple[tuple[str, int, str], ...], folder: Path, log: Callable[[str], None]) -> list[dict]:
    results = []
    current: tuple[str, int] | None = None
    paths: dict[str, str] = {}
    for mechanism_name, n, method in cases:
        if current != (mechanism_name, n):
            if current is not None:
                Path(paths["reports"]).unlink(missing_ok=True)
            paths = generate_peer_case(mechanism_name, n, folder / f"peer-{mechanism_name}-{n}")
            current = (mechanism_name, n)
        label = f"peer-{mechanism_name}-{n}-{method}"
        entry = run_release(paths, folder / f"peer-{mechanism_name}-{n}", "spark", method,
                            PEER_ALPHABET[mechanism_name], label)
        entry.update(mechanism=mechanism_name, epsilon=PEER_EPSILON, n=n, method=method,
                     peers_estimator_name=PEER_ESTIMATOR_NAMES[method])
        entry.pop("estimate")
        results.append(entry)
        log(f"peer case {mechanism_name} eps=1 n={n:.0e} {method}: {entry['wall_seconds']:.1f} s on Spark; "
            f"EMD {entry['evaluation']['emd']:.4f}; stages {entry['stages']}")
    return results


def peers_copy(peer_results: list[dict]) -> dict | None:
    """``ldp_peers.json`` with ``spark_end_to_end_seconds`` filled in (per estimator) where this
    run measured it, and the pipeline's EMD next to the one the peers benchmark recorded."""
    if not PEERS_RESULTS.exists():
        return None
    document = json.loads(PEERS_RESULTS.read_text())
    merged = copy.deepcopy(document)
    for case in merged["cases"]:
        measured = [
            entry for entry in peer_results
            if entry["mechanism"] == case["mechanism"] and entry["n"] == case["n"]
            and abs(entry["epsilon"] - case["epsilon"]) < 1e-12
        ]
        if not measured:
            continue
        case["spark_end_to_end_seconds"] = {entry["peers_estimator_name"]: entry["wall_seconds"] for entry in measured}
        first_run = case["runs"][0]["ours"]["estimators"] if case.get("runs") else {}
        case["spark_end_to_end"] = {
            entry["peers_estimator_name"]: {
                "seconds": entry["wall_seconds"],
                "stages": entry["stages"],
                "pipeline_emd": entry["evaluation"]["emd"],
                "peers_benchmark_emd_repetition_0": first_run.get(entry["peers_estimator_name"], {}).get("emd"),
                "note": "release only: read the reports' Parquet, validate, count on Spark local[2], estimate, "
                        "publish to the lake (the clients are not included)",
            }
            for entry in measured
        }
    return merged


# ----------------------------------------------------------------------------- report


def machine() -> dict:
    return {**harness.machine_basics(), "numpy": np.__version__}


def counting_stage(stages: dict[str, float]) -> float | None:
    """The engine pass and the estimator (the stage's name changed from 'count reports')."""
    return stages.get("estimate", stages.get("count reports and estimate", stages.get("count reports")))


def _seconds(value: float | None) -> str:
    return harness.number(value, ".1f", small=".3g")


def goal_table(runs: list[dict]) -> list[str]:
    def row(run: dict) -> tuple:
        stages, parts = run["stages"], run["breakdown"]
        return (
            run["n"], run["engine_name"], f"**{_seconds(run['wall_seconds'])}**", stages.get("list input"),
            f"{_seconds(stages.get('read and check input'))} "
            f"({_seconds(parts.get(GX_GATE))})",
            stages.get("wait for engine"), parts.get("engine start (overlaps)"),
            f"{_seconds(counting_stage(stages))} ({_seconds(parts.get('estimation on the driver'))})",
            stages.get("publish"), run["iterations"], run["peak_rss_mib"], run["load_average_after"][0],
        )

    return harness.table(
        ["n", "engine", "end to end s", "list input", "read, check, count on the engine (GX on metrics)",
         "wait for engine", "engine start (overlaps)", "estimate (of which estimation)", "publish", "iterations",
         "peak MiB", "load after"],
        [row(run) for run in runs],
        align="rl" + "r" * 10,
        formats=[".0e", None, None, _seconds, None, _seconds, _seconds, None, _seconds, None, ".0f", ".1f"],
    )


def gibu_table(entries: list[dict]) -> list[str]:
    return harness.table(
        ["n", "OPENBLAS_NUM_THREADS", "groups", "iterations", "median s", "s / iteration", "min–max s"],
        [(entry["n"], f"{entry['openblas_num_threads']} (BLAS threads "
                      f"{entry['blas'][0]['threads'] if entry['blas'] else '?'})",
          entry["groups"], entry["iterations"], entry["median_seconds"],
          f"{entry['seconds_per_iteration'] * 1e6:.0f} µs", f"{entry['min_seconds']:.4f}–{entry['max_seconds']:.4f}")
         for entry in sorted(entries, key=lambda e: (e["n"], e["openblas_num_threads"]))],
        align="rlrrrrr", formats=[".0e", None, None, None, ".4f", None, None],
    )


def peers_table(report: dict) -> list[str]:
    peers_cases = {(case["mechanism"], case["n"]): case for case in (report.get("ldp_peers_with_spark") or {}).get(
        "cases", []) if abs(case["epsilon"] - PEER_EPSILON) < 1e-12}
    rows = []
    for entry in report["peer_cases"]:
        case = peers_cases.get((entry["mechanism"], entry["n"]), {})
        name = entry["peers_estimator_name"]
        ours = case.get("summary", {}).get("ours", {}).get(name, {})
        recorded = case.get("spark_end_to_end", {}).get(name, {}).get("peers_benchmark_emd_repetition_0")
        peers = case.get("summary", {}).get("peers", {})
        peer_text = ", ".join(f"{peer} {_seconds(values['end_to_end_seconds'])}" for peer, values in peers.items())
        rows.append((
            f"{entry['mechanism']} k={PEER_ALPHABET[entry['mechanism']]}", entry["n"], name,
            f"**{_seconds(entry['wall_seconds'])}**", entry["evaluation"]["emd"], recorded,
            ours.get("end_to_end_seconds"), peer_text or "–",
        ))
    return harness.table(
        ["mechanism", "n", "estimator", "Spark end to end s", "pipeline EMD", "EMD in ldp_peers (rep. 0)",
         "in-process ours (clients + estimation) s", "peers' end to end s"],
        rows, align="lrlrrrrr", formats=[None, ".0e", None, None, ".4f", ".4f", _seconds, None],
    )


def markdown(report: dict) -> str:
    lines = [
        "## LDP release pipeline: end-to-end scaling (Spark local[2] vs local engine)",
        "",
        f"Mode: {report['mode']}. Machine: {report['machine']['processor']} ({report['machine']['cores']} cores, "
        f"shared; load average at start {report['machine']['load_average_at_start'][0]:.1f}). "
        "Each release in its own process with OPENBLAS_NUM_THREADS=1; seconds of the `run_ldp_release` call "
        "(Spark's JVM start included, overlapped with reading and validating the input; interpreter start-up "
        "and data generation excluded). Estimator: the config's defaults (GIBU, SQUAREM, tolerance 1e-8).",
        "",
        "### Goal case: 20 mechanisms (10 k-RR ε∈[0.5, 5], 10 truncated geometric ε∈[0.1, 1]), k = 100, GIBU",
        "",
        *goal_table(report["goal"]["runs"]),
    ]
    spark_runs = [run for run in report["goal"]["runs"] if run["engine_name"] == "spark"]
    if spark_runs:
        largest = max(spark_runs, key=lambda run: run["n"])
        stages, wall = largest["stages"], largest["wall_seconds"]
        shares = {
            "read input": stages.get("read input", 0.0),
            "validate input": stages.get("validate input", 0.0),
            "wait for engine": stages.get("wait for engine", 0.0),
            "count reports and estimate": counting_stage(stages) or 0.0,
        }
        lines += ["", f"Where Spark's {wall:.1f} s go at n = {largest['n']:.0e}: " + ", ".join(
            f"{name} {seconds:.1f} s ({100 * seconds / wall:.0f}%)" for name, seconds in shares.items()
        ) + ". 'load after' is the machine's 1-minute load average (2 cores, shared with other jobs)."]
    checks = report["goal_checks"]
    verdict = checks["verdicts"].get("two_minutes")
    if verdict:
        outcome = {True: "met", False: "NOT met", None: "not measured (largest n run is below 10^7)"}[verdict["met"]]
        lines += ["", f"**Goal (under {GOAL_SECONDS:.0f} s at n = 10^7 on Spark local[2]): {outcome}** — "
                  f"{verdict['spark_seconds']:.1f} s at n = {verdict['n']:.0e} on Spark."]
    lines += ["", "Agreement of the published estimates (max |difference| over the 100 probabilities):", ""]
    for row in checks["engine_agreement"]:
        parts = [f"{key.replace('_max_abs_difference', '').replace('_', ' ')} {value:.1e}"
                 for key, value in row.items() if key != "n"]
        lines.append(f"- n = {row['n']:.0e}: " + "; ".join(parts))
    lines += [
        "",
        "### GIBU after grouping (`estimate_from_report_counts` on the counted statistics)",
        "",
        *gibu_table(report["goal"]["gibu_after_grouping"]),
    ]
    independent = checks["verdicts"].get("gibu_after_grouping_independent_of_n")
    if independent:
        lines += ["", f"Across a {independent['n_ratio']:.0f}× range of n, GIBU's time after grouping varies "
                  f"{independent['largest_over_smallest_time']:.2f}× (per iteration "
                  f"{independent['largest_over_smallest_time_per_iteration']:.2f}×), with OPENBLAS_NUM_THREADS=1."]
    lines += [
        "",
        "### The peers' homogeneous cases (ε = 1) through the pipeline on Spark local[2]",
        "",
        "Same reports as the peers benchmark's first repetition. Peer seconds are theirs from "
        "`ldp_peers.json` (in-process: their clients + their estimator, no file, no engine); ours is the "
        "release only (Parquet in, lake out).",
        "",
        *peers_table(report),
        "",
        "Stage seconds of those runs:",
        "",
    ]
    for entry in report["peer_cases"]:
        stages = ", ".join(f"{key} {_seconds(value)}" for key, value in entry["stages"].items())
        lines.append(f"- {entry['mechanism']} n = {entry['n']:.0e} {entry['method']}: {stages}")
    imports = report.get("imports")
    if imports:
        lines += ["", f"Importing Great Expectations in a fresh process: "
                  f"{imports['great_expectations_import_seconds']:.1f} s (inside 'validate input' of every release)."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 10^5 only, one peer case (about 3 minutes)")
    parser.add_argument("--measure", choices=("release", "estimator", "import"), help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--release-id", help=argparse.SUPPRESS)
    parser.add_argument("--counts", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--catalog", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=5, help=argparse.SUPPRESS)
    parser.add_argument("--render", type=Path, help="only re-render the Markdown of a saved results JSON")
    harness.add_results_option(parser)
    arguments = parser.parse_args()
    if arguments.render:
        saved = json.loads(arguments.render.read_text())
        arguments.render.with_suffix(".md").write_text(markdown(saved) + "\n")
        return
    if arguments.measure == "release":
        print(json.dumps(measure_release(arguments.config, arguments.release_id)))
        return
    if arguments.measure == "estimator":
        print(json.dumps(measure_estimator(arguments.counts, arguments.catalog, arguments.repeats)))
        return
    if arguments.measure == "import":
        print(json.dumps(measure_import()))
        return

    plan = QUICK if arguments.quick else FULL
    started = time.perf_counter()

    def log(text: str) -> None:
        print(f"[{time.perf_counter() - started:6.0f}s] {text}", flush=True)

    report: dict[str, Any] = {
        "description": __doc__.split("\n\n")[0],
        "mode": "quick" if arguments.quick else "full",
        "machine": machine(),
        "benchmark_secret_hex": SECRET_HEX,
        "goal_case": {
            "k": K,
            "secrets": "binomial(99, 1/2) from keyed_generator(secret, release, 'data', n)",
            "mechanisms": {
                "krr": {"count": MECHANISMS_PER_FAMILY, "epsilon": list(KRR_EPSILONS)},
                "truncated_geometric": {"count": MECHANISMS_PER_FAMILY, "epsilon": list(GEOMETRIC_EPSILONS)},
            },
            "shares": "equal",
            "estimator": "gibu, the config's defaults (SQUAREM, tolerance 1e-8, at most 10000 steps)",
        },
    }
    with tempfile.TemporaryDirectory(prefix="privlake-ldp-scaling-") as temporary:
        folder = Path(temporary)
        report["imports"] = run_child(["--measure", "import"], child_environment(True), folder / "import.log")
        report["goal"] = goal_part(
            plan["goal_sizes"], plan["goal_engines"], plan.get("estimator_sizes", plan["goal_sizes"]),
            plan["estimator_repeats"], folder, log,
        )
        report["goal_checks"] = check_goal(report["goal"])
        report["peer_cases"] = peers_part(plan["peer_cases"], folder, log)
    report["ldp_peers_with_spark"] = peers_copy(report["peer_cases"])
    report["wall_seconds"] = time.perf_counter() - started
    for run in report["goal"]["runs"]:
        run["estimate"] = [round(value, 12) for value in run["estimate"]]
    for entry in report["goal"]["gibu_after_grouping"]:
        entry.pop("estimate", None)
    stem = "ldp_pipeline_scaling_quick" if arguments.quick else "ldp_pipeline_scaling"
    text = markdown(report)
    harness.write_json(arguments.results_dir, stem, report, indent=2)
    harness.write_markdown(arguments.results_dir, stem, text + "\n")
    print(text)
    log("done")


if __name__ == "__main__":
    main()
