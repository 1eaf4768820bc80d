"""Crowd release scaling benchmark: Spark (local[2]) with privlake's protection and without it vs
the local engine vs the bare transforms loop (the floor), side by side in one run.

For each size (claims from the built-in generator, 20 claims per object) every variant runs in
its own subprocess so that its peak memory (resident set of the whole process tree, sampled
from /proc: for Spark this includes the JVM and the Python workers) is its own. With
``--repeats N`` every variant runs N times per size (every run in a fresh process and a fresh
lake; odd rounds run the variants in reverse order, so that a drift in the machine's load falls
on both sides of each comparison); the tables show the median wall time.

    .venv/bin/python benchmarks/crowd_scaling.py                            # 1e5, 1e6, 1e7, 3 runs each
    .venv/bin/python benchmarks/crowd_scaling.py --sizes 100000 --repeats 1  # quick

Variants:
  floor  - transforms.crowd.release.synthesize_in_memory on one block (no engine, no lake, no
           validation): the mathematics alone, single process.
  local  - the whole release (read, validate, stage, weights, synthesis, validate, publish)
           through the local engine.
  spark  - the same release on embedded Spark local[2], started for the release (what
           `privlake run CONFIG` does: the JVM starts while the driver validates the input), with
           privlake's default protection: authentication (spark.authenticate), network encryption
           (spark.network.crypto.enabled) and io encryption (spark.io.encryption.enabled) on.
  spark-warm - the same release on a Spark session that is already running and has run a release
           before (a release of WARM_CLAIMS generated claims into a lake of its own: worker processes
           started with the crowd modules imported, the JVM's code paths compiled, the Great
           Expectations context built), as in a scheduler that keeps its session or
           `privlake run A.yaml B.yaml ...` after the first config. The session start and that
           first release are outside the timed part; the whole measured release is inside. Protected.
  spark-unprotected, spark-warm-unprotected - the two Spark variants with protection off: the
           config's engine.spark.conf sets the three settings to false over the engine's defaults
           (pipelines/engines/spark.py, session_settings) and engine.spark.allow_unencrypted is
           true (what a cluster session without them would need; an embedded master is never
           refused, and the session a release starts for itself is not handed the flag:
           pipelines/platform/release.py, engine_request, passes the master and conf only); the
           running session is made with allow_unencrypted=True. Each Spark run reads back the
           settings of the session it ran on (SparkEngine.protection) and fails when they are not
           the ones asked for.
Wall times exclude interpreter start-up, data generation and the operator's lake setup (a test
lake with a budget for the dataset), include everything else.

Settings: those of ``examples/crowd_sample.yaml`` (see SETTINGS) except m = 10 claims per object
(the previous runs' m, so that the synthesis does comparable work per object); the evaluation
section is dropped. The stated whole-release (epsilon, delta) is read from each release's manifest.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import RESULTS, ROOT, machine_basics, run_json_child, table

CLAIMS_PER_OBJECT = 20
CLAIMS_PER_OBJECT_RELEASED = 10
SECRET_HEX = "be" * 32
WARM_CLAIMS = 100_000
"""The release a ``spark-warm`` session runs before the measured one (module docstring)."""
MASTER = "local[2]"
UNPROTECTED = "-unprotected"
VARIANTS = ["floor", "local", "spark", f"spark{UNPROTECTED}", "spark-warm", f"spark-warm{UNPROTECTED}"]
SETTINGS = (
    "Settings of examples/crowd_sample.yaml (k = 12, gamma = 4, epsilon0 = 2, delta = 1e-6, q0 = 0.1, R = 2, "
    "value range [0, 100], at least 20 claims per object; fixed bandwidth h = 5 at precision 0.01; combined "
    "weights: private source qualities with epsilon 0.6 in 3 iterations, local cap R_l = 1.25) with m = 10 "
    "released claims per object (the sample has 3) and no evaluation; generated claims, 20 per object."
)


def generate(claims: int, directory: Path) -> Path:
    from transforms.crowd.sample_data import generate_sample_crowd_data

    objects = claims // CLAIMS_PER_OBJECT
    data = generate_sample_crowd_data(
        objects=objects, claims_per_object=CLAIMS_PER_OBJECT, sources=max(200, objects // 50), seed=7
    )
    path = directory / f"claims_{claims}.parquet"
    data.claims.to_parquet(path, index=False)
    return path


def config_for(path: Path, lake: Path, engine: str, spark_conf: dict[str, str], allow_unencrypted: bool,
               master: str = MASTER) -> dict:
    """The sample example's release config on ``path`` (a file or a partitioned folder; budget,
    evaluation and engine replaced)."""
    import yaml

    document = yaml.safe_load((ROOT / "examples" / "crowd_sample.yaml").read_text())
    document["privacy"].pop("budget", None)  # lake policy, set by the operator (prepare_lake)
    document.pop("evaluation", None)
    document["synthesis"]["claims_per_object"] = CLAIMS_PER_OBJECT_RELEASED
    spark = {"master": master, "conf": spark_conf, "allow_unencrypted": allow_unencrypted}
    return {
        **document,
        "dataset": "bench",
        "lake": str(lake),
        "input": {"path": str(path), "format": "parquet"},
        "engine": {"name": engine, "spark": spark},
    }


def prepare_lake(lake: Path, key: Path) -> None:
    """What an operator does once per lake: a test lake (the benchmark's fixed secret is a test
    secret) with a budget for the dataset. Nothing to do where the lake has no policy."""
    try:
        from pipelines.platform.lake import Lake
        from pipelines.platform.policy import LakePolicy
    except ImportError:
        return
    with Lake(lake) as opened:
        policy = LakePolicy(opened)
        policy.initialize(test=True, key_file=key)
        policy.set_budget("bench", 1e9, 0.5)


def check_session(variant: str, protection: dict) -> dict:
    """The protection a Spark run's session had, as ``SparkEngine.protection`` read it back from the
    running context: refused (the run fails) when it is not what the variant asked for."""
    wanted = not variant.endswith(UNPROTECTED)
    found = {name: protection.get(name) for name in ("authentication", "network_encryption", "io_encryption")}
    if set(found.values()) != {wanted}:
        raise RuntimeError(f"{variant}: the Spark session ran with {found}, not all {wanted}")
    return {**found, "allow_unencrypted": protection.get("allow_unencrypted")}


CLUSTER = "spark-cluster"
"""A variant only ``benchmarks/crowd_scale_out.py`` runs: the release on the standalone cluster whose
master URL ``PRIVLAKE_BENCH_MASTER`` names (started for the release, protected)."""
CLUSTER_WARM = "spark-cluster-warm"
"""``spark-warm`` on that cluster: a session on it already running, that has run a release before."""
ON_CLUSTER = (CLUSTER, CLUSTER_WARM)
MASTER_VARIABLE = "PRIVLAKE_BENCH_MASTER"


def measure(variant: str, path: Path, workdir: Path, repeat: int) -> dict:
    """Runs in the child process: one variant on one input (a file or a partitioned folder),
    prints a JSON line."""
    import pandas as pd

    from pipelines.engines.spark import PROTECTION_SETTINGS
    from schemas.crowd.config import CrowdConfig

    lake = workdir / f"lake_{variant}_{path.stem}_{repeat}"
    protected = not variant.endswith(UNPROTECTED)
    spark_conf = {} if protected else {name: "false" for name in PROTECTION_SETTINGS}
    engine_name = "spark" if variant.startswith("spark") else variant
    master = os.environ[MASTER_VARIABLE] if variant in ON_CLUSTER else MASTER
    warm = variant.startswith("spark-warm") or variant == CLUSTER_WARM
    config = CrowdConfig.model_validate(
        config_for(path, lake, "local" if variant == "floor" else engine_name, spark_conf, not protected, master)
    )
    protection: dict = {}
    if variant == "floor":  # the floor's imports outside the timed part: the mathematics alone
        from pipelines.crowd.pipeline import reference_settings
        from transforms.crowd.release import synthesize_in_memory
    start = time.perf_counter()
    if variant == "floor":
        claims = pd.read_parquet(path, columns=["object_id", "source_id", "value"])
        parameters, bandwidth, weights = reference_settings(config, int(claims.groupby("object_id").size().max()))
        _, result = synthesize_in_memory(
            claims, parameters, secret=bytes.fromhex(SECRET_HEX), release_id="bench", bandwidth=bandwidth,
            weights=weights,
        )
        rows = len(result.claims)
        timings: dict = {}
        stated = None
    else:
        from pipelines.crowd.pipeline import CROWD_WORKER_MODULES, run_crowd_release
        from pipelines.platform.validation import start_gate_worker

        os.environ["PRIVLAKE_TEST_SECRET"] = SECRET_HEX
        start_gate_worker()  # as `privlake run` does: GX imports in its own process meanwhile
        prepare_lake(lake, workdir / f"key_{variant}_{path.stem}_{repeat}")
        engine = None
        if warm:
            from pipelines.engines.spark import SparkEngine
            from pipelines.platform.validation import gx_batch_definition

            engine = SparkEngine(master=master, conf=spark_conf, allow_unencrypted=not protected)
            engine.warm_up(CROWD_WORKER_MODULES)
            gx_batch_definition()
            protection = engine.protection()
            warm_lake = workdir / f"lake_{variant}_warm_{repeat}"
            prepare_lake(warm_lake, workdir / f"key_{variant}_warm_{repeat}")
            warm_config = CrowdConfig.model_validate(
                config_for(generate(WARM_CLAIMS, workdir), warm_lake, engine_name, spark_conf, not protected, master))
            run_crowd_release(warm_config, release_id=f"warm-{variant}", engine=engine)
        elif variant.startswith("spark"):
            # The release starts its own session (pipelines.platform.release.start_engine, in a
            # background thread): read that session's protection back as it starts, with no
            # pipeline code changed.
            import pipelines.platform.release as release_module

            start_engine = release_module.start_engine

            def recording_start(*arguments, **keywords):
                started = start_engine(*arguments, **keywords)
                protection.update(started.protection())
                return started

            release_module.start_engine = recording_start
        start = time.perf_counter()
        outcome = run_crowd_release(config, release_id=f"bench-{variant}", engine=engine)
        rows = outcome.manifest["rows"]
        timings = outcome.internal["timings"]
        stated = [outcome.manifest["epsilon"], outcome.manifest["delta"]]
    wall = time.perf_counter() - start
    if warm:
        engine.close()
    report = {"variant": variant, "wall_seconds": wall, "rows": rows, "timings": timings, "stated_epsilon_delta": stated}
    if variant.startswith("spark"):
        report["protection"] = check_session(variant, protection)
    return report


def summarize(runs: list[dict]) -> list[dict]:
    """One row per size and variant: the median wall time over its runs, their range, the highest
    peak memory, the median CPU seconds and the median of every stage's time; with its wall time
    over the floor's and, for a protected Spark variant, its wall and CPU time over its unprotected
    twin's, at the same size."""
    groups: dict[tuple[int, str], list[dict]] = {}
    for run in runs:
        groups.setdefault((run["claims"], run["variant"]), []).append(run)
    summary = []
    for (claims, variant), group in groups.items():
        walls = [run["wall_seconds"] for run in group]
        wall = statistics.median(walls)
        cpu = statistics.median(run["cpu_seconds"] for run in group)
        stages = {name: statistics.median(run["timings"].get(name, 0.0) for run in group) for name in group[0]["timings"]}
        summary.append({
            "claims": claims, "variant": variant, "runs": len(group), "wall_seconds": wall,
            "wall_seconds_min": min(walls), "wall_seconds_max": max(walls), "claims_per_second": claims / wall,
            "cpu_seconds": cpu,
            "peak_rss_mib": max(run["peak_rss_mib"] for run in group), "rows": group[0]["rows"], "timings": stages,
            "protection": group[0].get("protection"), "stated_epsilon_delta": group[0]["stated_epsilon_delta"],
        })
    medians = {(row["claims"], row["variant"]): row for row in summary}
    for row in summary:
        floor = medians.get((row["claims"], "floor"))
        twin = medians.get((row["claims"], row["variant"] + UNPROTECTED))
        row["over_floor"] = row["wall_seconds"] / floor["wall_seconds"] if floor else None
        row["protected_over_unprotected"] = row["wall_seconds"] / twin["wall_seconds"] if twin else None
        row["protected_over_unprotected_cpu"] = row["cpu_seconds"] / twin["cpu_seconds"] if twin else None
    return summary


def markdown(summary: list[dict]) -> str:
    """The medians as a table, each with its wall time over the floor's and, for protected Spark,
    its wall and CPU time over the same variant's with protection off, at the same size."""
    def ratio(value: float | None) -> str:
        return "–" if value is None else f"{value:.2f}"

    rows = [
        (r["claims"], r["variant"], r["runs"], r["wall_seconds"], f"{r['wall_seconds_min']:.1f}–{r['wall_seconds_max']:.1f}",
         r["claims_per_second"], r["peak_rss_mib"], r["cpu_seconds"], r["over_floor"], r["protected_over_unprotected"],
         r["protected_over_unprotected_cpu"])
        for r in summary
    ]
    return "\n".join(table(
        ["claims", "variant", "runs", "wall s (median)", "range s", "claims/s", "peak MiB", "CPU s", "× floor",
         "protected / unprotected, wall", "protected / unprotected, CPU"],
        rows, align="rlrrrrrrrrr", formats=[",", None, None, ".1f", None, ",.0f", ".0f", ".0f", ratio, ratio, ratio],
    ))


def stage_markdown(summary: list[dict], claims: int) -> str:
    """The Spark variants' stage times (median seconds, the release's own stage timer) at ``claims``."""
    spark = [row for row in summary if row["claims"] == claims and row["variant"].startswith("spark")]
    if not spark:
        return ""
    names = list(dict.fromkeys(name for row in spark for name in row["timings"]))
    rows = [[name, *(row["timings"].get(name, 0.0) for row in spark)] for name in names]
    rows.append(["whole release (wall)", *(row["wall_seconds"] for row in spark)])
    return "\n".join(table(
        ["stage", *(row["variant"] for row in spark)], rows, formats=[None, *([".2f"] * len(spark))],
    ))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--repeats", type=int, default=3, help="runs of every variant per size (median shown)")
    parser.add_argument("--out", type=Path, default=RESULTS / "crowd_scaling.json")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.input, args.workdir, args.repeat)))
        return

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    machine = machine_basics()
    started = time.perf_counter()
    runs = []
    with tempfile.TemporaryDirectory(prefix="privlake-bench-") as temporary:
        workdir = Path(temporary)
        for size in args.sizes:
            path = generate(size, workdir)
            for repeat in range(args.repeats):
                order = args.variants if repeat % 2 == 0 else args.variants[::-1]
                for variant in order:
                    child = [sys.executable, __file__, "--measure", variant, "--input", str(path),
                             "--workdir", str(workdir), "--repeat", str(repeat)]
                    load = os.getloadavg()[0]
                    report, sampler = run_json_child(child)
                    report.update(
                        claims=size, repeat=repeat, load_average_before=load,
                        claims_per_second=size / report["wall_seconds"], peak_rss_mib=sampler.peak_total / 2**20,
                        cpu_seconds=sum(sampler.cpu.values()),
                    )
                    runs.append(report)
                    print(
                        f"{size:>10,} claims  #{repeat}  {variant:22} {report['wall_seconds']:8.1f} s  "
                        f"{report['claims_per_second']:>10,.0f} claims/s  peak {report['peak_rss_mib']:7.0f} MiB  "
                        f"CPU {report['cpu_seconds']:7.1f} s  "
                        f"load {load:.2f}",
                        flush=True,
                    )
            for path_done in workdir.glob("lake_*"):  # a size's lakes are not needed after it: free the disk
                _remove(path_done)
    machine["load_average_at_end"] = list(os.getloadavg())
    machine["benchmark_minutes"] = round((time.perf_counter() - started) / 60, 1)
    summary = summarize(runs)
    text = markdown(summary)
    stages = {size: stage_markdown(summary, size) for size in args.sizes}
    print("\n" + text + "".join(f"\n\n{size:,} claims:\n{lines}" for size, lines in stages.items() if lines))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(
        {"machine": machine, "settings": SETTINGS, "master": MASTER, "repeats": args.repeats, "summary": summary,
         "runs": runs}, indent=2,
    ) + "\n")
    loads = [run["load_average_before"] for run in runs]
    stage_section = "".join(
        f"\n\nStages of the Spark variants at {size:,} claims (median seconds; the release's stage timer, \"wait "
        f"for engine\" is the time the driver waited for the JVM after validating the input):\n\n{lines}"
        for size, lines in stages.items() if lines
    )
    args.out.with_suffix(".md").write_text(
        f"# Crowd kind: scaling\n\nMachine: {machine['processor']}, {machine['cores']} cores, {machine['memory']}; "
        f"load average at start {machine['load_average_at_start']}, at end {machine['load_average_at_end']}, "
        f"1-minute load before each run {min(loads):.2f}–{max(loads):.2f} (median {statistics.median(loads):.2f}); "
        f"{machine['benchmark_minutes']} minutes in all. {SETTINGS} Spark on {MASTER}: protected = privlake's "
        "default session (spark.authenticate, spark.network.crypto.enabled, spark.io.encryption.enabled true), "
        "unprotected = the three false (engine.spark.conf; the config says engine.spark.allow_unencrypted: "
        "true, which an embedded master does not need). "
        f"{args.repeats} run{'s' if args.repeats != 1 else ''} per variant and size, each in its own process (odd rounds in reverse order); "
        "wall s is the median, peak MiB the highest peak of the process tree, CPU s the median CPU time of the "
        "process tree (user + system of the child and every process under it, JVM and Python workers included, "
        "start-up included: less sensitive than wall time to the other work on the machine).\n\n"
        f"{text}{stage_section}\n"
    )


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
