"""Crowd release scale-out benchmark (issue 15): 10^7 and 10^8 claims end to end from a
hive-partitioned Parquet folder, on Spark ``local[2]`` and on the loopback standalone cluster,
against the one-process floor, side by side in one run.

    .venv/bin/python benchmarks/crowd_scale_out.py                      # 1e7 and 1e8 (about 1.5 h)
    .venv/bin/python benchmarks/crowd_scale_out.py --sizes 1000000      # a quick look

Input: ``--rows-per-file`` claims a file (default 500,000) under ``day=NNNN/part-0.parquet``
(the folder's partition key is a column the release does not name), 20 claims per object,
``max(200, objects / 50)`` integer sources of fixed quality (each claim's value is its object's
truth plus Gaussian noise of its source's spread, rounded to 0.01 and clipped to [0, 100]); an
object's 20 sources are distinct. Written one file at a time (the generator holds one file), under
``--workdir`` (default: a temporary folder), removed at the end.

Variants (each run in its own process; ``benchmarks/crowd_scaling.py`` measures them):
  floor          the transforms alone in one process on the whole input (no engine, no lake, no
                 validation): ``transforms.crowd.release.synthesize_in_memory``. Only at the sizes of
                 ``--floor-sizes`` (default 10^7: at 10^8 it needs the claims in one process).
  spark          the whole release on embedded Spark ``local[2]`` started for the release, as
                 ``privlake run CONFIG`` does (the JVM starts while the driver lists the input; the
                 Great Expectations gate process starts with it), with privlake's default protection.
  spark-warm     the same on a session already running that has run a release before (a release of
                 ``crowd_scaling.WARM_CLAIMS`` claims; the session's start and that release outside the
                 timed part): a scheduler that keeps its session, ``privlake run A.yaml B.yaml ...``.
  spark-cluster  the release started for itself on the standalone cluster of ``infra/spark_standalone.sh``
                 (a master and two workers of one core and 2 GiB each on loopback, authenticated and
                 encrypted), which the benchmark starts once and stops at the end, by process id.
  spark-cluster-warm  ``spark-warm`` on that cluster: a session on it already running.

The Spark driver maps the installation's class archive when there is one
(``pipelines/engines/spark_class_archive.py``; ``make install`` builds it), as a release does.

Measured per run: wall seconds (the release, from the call to its return), microseconds per claim,
CPU seconds of every process involved, and peak resident memory sampled from ``/proc`` every 0.2 s:
**driver** — the Python driver process alone; **executors** — ``local[2]``: the rest of the child's
process tree (the JVM, which is driver and executor at once, and its Python workers); cluster: per
worker, its executor JVM and that executor's Python workers (the worker daemon excluded), the larger
of the two workers.

Checks (in the JSON and the Markdown; the benchmark reports, it does not fail): time per claim of the
largest size over the smallest within 0.85-1.15 (for a started variant also without the engine's
start: the started run's excess over its running-session twin at the smallest size, ``WARM_TWIN``,
taken off both sizes; the "wait for engine" stage when the twin did not run) and driver peak within
1.2x, per variant; at the
floor's size, ``spark`` at most 1.0x the floor and ``spark-warm`` at most 0.6x (two cores: 0.5x is
the physical limit).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.crowd_scaling import (
    CLAIMS_PER_OBJECT,
    CLUSTER,
    CLUSTER_WARM,
    MASTER_VARIABLE,
    ON_CLUSTER,
    SETTINGS,
)
from benchmarks.harness import RESULTS, ROOT, TreeSampler, machine_basics, table

VARIANTS = ["floor", "spark", "spark-warm", CLUSTER, CLUSTER_WARM]
CLUSTER_SCRIPT = ROOT / "infra" / "spark_standalone.sh"
MEASURE = ROOT / "benchmarks" / "crowd_scaling.py"
TARGETS = {"spark": 1.0, "spark-warm": 0.6}
"""Wall time over the floor's at the floor's size, at most (issue 15)."""
WARM_TWIN = {"spark": "spark-warm", CLUSTER: CLUSTER_WARM}
"""A started variant's running-session twin: their difference at one size is the engine's fixed start."""
PER_CLAIM_BAND = (0.85, 1.15)
DRIVER_GROWTH = 1.2


def write_claims(folder: Path, claims: int, rows_per_file: int) -> int:
    """The generated claims as ``day=NNNN/part-0.parquet`` files (module docstring); their bytes."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    objects = claims // CLAIMS_PER_OBJECT
    sources = max(200, objects // 50)
    spread = np.random.default_rng(7).uniform(1.0, 8.0, sources)
    written = 0
    for index, start in enumerate(range(0, claims, rows_per_file)):
        position = np.arange(start, min(claims, start + rows_per_file), dtype=np.int64)
        object_ids = position // CLAIMS_PER_OBJECT
        scrambled = object_ids * 2654435761  # a fixed spread of objects over truths and sources
        truth = 20.0 + (scrambled % 6000) / 100.0
        # an object's claims come from consecutive sources (distinct: 20 of at least 200)
        source_ids = (scrambled % sources + position % CLAIMS_PER_OBJECT) % sources
        noise = np.random.default_rng([7, index]).normal(0.0, 1.0, len(position))
        values = np.clip(np.round(truth + noise * spread[source_ids], 2), 0.0, 100.0)
        part = folder / f"day={index:04d}"
        part.mkdir(parents=True)
        path = part / "part-0.parquet"
        pq.write_table(pa.table({"object_id": object_ids, "source_id": source_ids, "value": values}), path)
        written += path.stat().st_size
    return written


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    """The loopback standalone cluster, started with its state under ``state`` and stopped by the
    process ids its script recorded."""

    def __init__(self, state: Path):
        self.state = state
        self.environment = {**os.environ, "PRIVLAKE_CLUSTER_STATE": str(state),
                            "PRIVLAKE_CLUSTER_PORT": str(free_port()), "PYSPARK_PYTHON": sys.executable}
        self.master = ""

    def __enter__(self) -> Cluster:
        started = subprocess.run([str(CLUSTER_SCRIPT), "start"], env=self.environment, capture_output=True,
                                 text=True, timeout=300)
        if started.returncode != 0:
            self.__exit__()
            raise RuntimeError(f"the standalone cluster did not start: {started.stderr.strip()}")
        self.master = started.stdout.strip().splitlines()[-1]
        return self

    def __exit__(self, *_: object) -> None:
        subprocess.run([str(CLUSTER_SCRIPT), "stop"], env=self.environment, capture_output=True, timeout=180)

    def worker_pids(self) -> list[int]:
        return [int(path.read_text()) for path in sorted(self.state.glob("worker-*.pid"))]

    def child_environment(self) -> dict[str, str]:
        return {**os.environ, MASTER_VARIABLE: self.master,
                "PRIVLAKE_SPARK_AUTH_SECRET_FILE": str(self.state / "auth.secret")}


def run_variant(variant: str, folder: Path, workdir: Path, repeat: int, cluster: Cluster | None) -> dict:
    """One release in a child process with its memory sampled (module docstring)."""
    command = [sys.executable, str(MEASURE), "--measure", variant, "--input", str(folder), "--workdir", str(workdir),
               "--repeat", str(repeat)]
    on_cluster = variant in ON_CLUSTER and cluster is not None
    environment = cluster.child_environment() if on_cluster else dict(os.environ)
    workers = [TreeSampler(pid).start() for pid in cluster.worker_pids()] if on_cluster else []
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    sampler = TreeSampler(process.pid).start()
    out, err = process.communicate()
    for each in (sampler, *workers):
        each.stop()
    if process.returncode != 0:
        raise RuntimeError(f"{variant} on {folder.name} failed:\n{err[-4000:]}")
    report = json.loads(out.strip().splitlines()[-1])
    executors = max((worker.peak_descendants for worker in workers), default=sampler.peak_descendants)
    if variant == "floor":
        executors = 0
    report.update(
        driver_peak_mib=sampler.peak_root / 2**20, executor_peak_mib=executors / 2**20,
        cpu_seconds=sum(sampler.cpu.values()) + sum(sum(worker.cpu.values()) for worker in workers),
    )
    return report


def summarize(runs: list[dict], sizes: list[int]) -> tuple[list[dict], list[dict]]:
    """One row per size and variant (medians over repeats; peaks the highest) and the checks."""
    groups: dict[tuple[int, str], list[dict]] = {}
    for run in runs:
        groups.setdefault((run["claims"], run["variant"]), []).append(run)
    rows = []
    for (claims, variant), group in groups.items():
        wall = statistics.median(run["wall_seconds"] for run in group)
        rows.append({
            "claims": claims, "variant": variant, "runs": len(group), "wall_seconds": wall,
            "microseconds_per_claim": wall / claims * 1e6,
            "driver_peak_mib": max(run["driver_peak_mib"] for run in group),
            "executor_peak_mib": max(run["executor_peak_mib"] for run in group),
            "cpu_seconds": statistics.median(run["cpu_seconds"] for run in group),
            "timings": {name: statistics.median(run["timings"].get(name, 0.0) for run in group)
                        for name in group[0]["timings"]},
        })
    by = {(row["claims"], row["variant"]): row for row in rows}
    for row in rows:
        floor = by.get((row["claims"], "floor"))
        row["over_floor"] = row["wall_seconds"] / floor["wall_seconds"] if floor else None
    checks = []
    small, large = min(sizes), max(sizes)
    for variant in dict.fromkeys(row["variant"] for row in rows):
        first, last = by.get((small, variant)), by.get((large, variant))
        if first and last and small != large:
            per_claim = last["microseconds_per_claim"] / first["microseconds_per_claim"]
            checks.append({"check": f"{variant}: time per claim, {large:,} / {small:,}", "value": per_claim,
                           "target": f"{PER_CLAIM_BAND[0]}-{PER_CLAIM_BAND[1]}",
                           "met": PER_CLAIM_BAND[0] <= per_claim <= PER_CLAIM_BAND[1]})
            # the same, without the engine's fixed start (a one-time cost, not a per-claim one): the
            # started run's excess over its running twin; the release's first job pays part of the
            # start, so the "wait for engine" stage alone understates it
            twin = by.get((small, WARM_TWIN.get(variant, "")))
            wait = "wait for engine"
            fixed = (first["wall_seconds"] - twin["wall_seconds"] if twin
                     else first["timings"].get(wait) if last["timings"].get(wait) else None)
            if fixed and fixed > 0:  # a twin faster than noise allows names no start to take off
                net = ((last["wall_seconds"] - fixed) / large) / ((first["wall_seconds"] - fixed) / small)
                checks.append({"check": f"{variant}: time per claim without the engine's start "
                                        f"({fixed:.1f} s), {large:,} / {small:,}",
                               "value": net, "target": f"{PER_CLAIM_BAND[0]}-{PER_CLAIM_BAND[1]}",
                               "met": PER_CLAIM_BAND[0] <= net <= PER_CLAIM_BAND[1]})
            if variant != "floor":
                growth = last["driver_peak_mib"] / first["driver_peak_mib"]
                checks.append({"check": f"{variant}: driver peak, {large:,} / {small:,}", "value": growth,
                               "target": f"<= {DRIVER_GROWTH}", "met": growth <= DRIVER_GROWTH})
    for row in rows:
        if row["variant"] in TARGETS and row["over_floor"] is not None:
            target = TARGETS[row["variant"]]
            checks.append({"check": f"{row['variant']} at {row['claims']:,}: wall / floor", "value": row["over_floor"],
                           "target": f"<= {target}", "met": row["over_floor"] <= target})
    return rows, checks


def markdown(machine: dict, rows: list[dict], checks: list[dict], arguments: argparse.Namespace,
             loads: list[float], input_bytes: dict[int, int]) -> str:
    def ratio(value: float | None) -> str:
        return "–" if value is None else f"{value:.2f}"

    main = "\n".join(table(
        ["claims", "variant", "runs", "wall s", "µs / claim", "× floor", "driver peak MiB", "executor peak MiB",
         "CPU s"],
        [(r["claims"], r["variant"], r["runs"], r["wall_seconds"], r["microseconds_per_claim"], r["over_floor"],
          r["driver_peak_mib"], r["executor_peak_mib"] or None, r["cpu_seconds"]) for r in rows],
        align="rlrrrrrrr", formats=[",", None, None, ".1f", ".2f", ratio, ".0f", lambda v: "–" if v is None else f"{v:,.0f}",
                                    ".0f"],
    ))
    verdicts = "\n".join(table(["check", "measured", "target", "met"],
                                [(c["check"], c["value"], c["target"], "yes" if c["met"] else "**no**") for c in checks],
                                align="lrrl", formats=[None, ".2f", None, None]))
    stage_names = list(dict.fromkeys(name for row in rows for name in row["timings"]))
    spark_rows = [row for row in rows if row["variant"] != "floor"]
    stages = "\n".join(table(
        ["stage", *(f"{row['variant']}, {row['claims']:,}" for row in spark_rows)],
        [[name, *(row["timings"].get(name, 0.0) for row in spark_rows)] for name in stage_names]
        + [["whole release (wall)", *(row["wall_seconds"] for row in spark_rows)]],
        formats=[None, *([".1f"] * len(spark_rows))],
    ))
    sizes = ", ".join(f"{claims:,} claims: {size / 2**20:,.0f} MiB in {-(-claims // arguments.rows_per_file)} files"
                      for claims, size in sorted(input_bytes.items()))
    return (
        "# Crowd kind: scale-out (issue 15)\n\n"
        f"Machine: {machine['processor']}, {machine['cores']} cores, {machine['memory']}; 1-minute load before each "
        f"run {min(loads):.2f}–{max(loads):.2f}; {machine['benchmark_minutes']} minutes in all. Input: hive-partitioned "
        f"Parquet ({sizes}). {SETTINGS} {arguments.repeats} run(s) per variant and size, each in its own process. "
        "Driver peak: the Python driver process's own resident memory; executor peak: local[2] — the JVM and its "
        "Python workers, cluster — the larger worker's executor JVM and Python workers (sampled every 0.2 s).\n\n"
        f"{main}\n\n## Checks\n\n{verdicts}\n\n## Stages (seconds, the release's stage timer)\n\n{stages}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000_000, 100_000_000])
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--floor-sizes", type=int, nargs="*", default=[10_000_000],
                        help="sizes the floor runs at (it holds the claims in one process)")
    parser.add_argument("--larger-variants", nargs="+", choices=VARIANTS,
                        help="the variants run at the sizes above the smallest (default: all of --variants)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--rows-per-file", type=int, default=500_000)
    parser.add_argument("--workdir", type=Path, help="where the inputs and lakes go (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=RESULTS / "crowd_scale_out.json")
    parser.add_argument("--render", action="store_true",
                        help="only summarize --out's runs again (its checks and Markdown)")
    arguments = parser.parse_args()
    if arguments.render:
        saved = json.loads(arguments.out.read_text())
        arguments.rows_per_file = saved["rows_per_file"]
        arguments.repeats = max(run["repeat"] for run in saved["runs"]) + 1
        arguments.sizes = sorted({run["claims"] for run in saved["runs"]})
        loads = [run["load_average_before"] for run in saved["runs"]]
        rows, checks = summarize(saved["runs"], arguments.sizes)  # the checks as this code reads them
        text = markdown(saved["machine"], rows, checks, arguments, loads,
                        {int(claims): size for claims, size in saved.get("input_bytes", {}).items()})
        arguments.out.with_suffix(".md").write_text(text)
        arguments.out.write_text(json.dumps({**saved, "summary": rows, "checks": checks}, indent=2) + "\n")
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run still stops its cluster
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    machine = machine_basics()
    started = time.perf_counter()
    runs: list[dict] = []
    loads: list[float] = []
    input_bytes: dict[int, int] = {}
    arguments.workdir and arguments.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="privlake-scale-out-", dir=arguments.workdir) as temporary:
        workdir = Path(temporary)
        cluster = Cluster(workdir / "cluster") if set(ON_CLUSTER) & set(arguments.variants) else None
        try:
            if cluster:
                cluster.__enter__()
            for claims in sorted(arguments.sizes):
                folder = workdir / f"claims_{claims}"
                input_bytes[claims] = write_claims(folder, claims, arguments.rows_per_file)
                for repeat in range(arguments.repeats):
                    order = arguments.variants if repeat % 2 == 0 else arguments.variants[::-1]
                    for variant in order:
                        if variant == "floor" and claims not in arguments.floor_sizes:
                            continue
                        if arguments.larger_variants and claims > min(arguments.sizes) \
                                and variant not in arguments.larger_variants:
                            continue
                        loads.append(os.getloadavg()[0])
                        report = run_variant(variant, folder, workdir, repeat, cluster)
                        report.update(claims=claims, repeat=repeat, load_average_before=loads[-1])
                        runs.append(report)
                        print(f"{claims:>12,} {variant:14} #{repeat} {report['wall_seconds']:8.1f} s  "
                              f"driver {report['driver_peak_mib']:6.0f} MiB  executors {report['executor_peak_mib']:6.0f} MiB  "
                              f"CPU {report['cpu_seconds']:7.1f} s  load {loads[-1]:.2f}", flush=True)
                        for lake in workdir.glob("lake_*"):
                            shutil.rmtree(lake, ignore_errors=True)
                shutil.rmtree(folder, ignore_errors=True)
        finally:
            if cluster:
                cluster.__exit__()
    machine["load_average_at_end"] = list(os.getloadavg())
    machine["benchmark_minutes"] = round((time.perf_counter() - started) / 60, 1)
    rows, checks = summarize(runs, sorted(arguments.sizes))
    text = markdown(machine, rows, checks, arguments, loads, input_bytes)
    print("\n" + text)
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps({"machine": machine, "settings": SETTINGS, "rows_per_file": arguments.rows_per_file,
                                         "input_bytes": input_bytes, "summary": rows, "checks": checks, "runs": runs},
                                        indent=2) + "\n")
    arguments.out.with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
