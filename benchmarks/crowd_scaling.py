"""Crowd release scaling benchmark: Spark (local[2]) vs the local engine vs the bare transforms
loop (the floor), side by side in one run.

For each size (claims from the built-in generator, 20 claims per object) every variant runs in
its own subprocess so that its peak memory (resident set of the whole process tree, sampled
from /proc: for Spark this includes the JVM and the Python workers) is its own.

    .venv/bin/python benchmarks/crowd_scaling.py                 # 1e5, 1e6, 1e7
    .venv/bin/python benchmarks/crowd_scaling.py --sizes 100000  # quick

Variants:
  floor  - transforms.crowd.release.synthesize_in_memory on one block (no engine, no lake, no
           validation): the mathematics alone, single process.
  local  - the whole release (read, validate, stage, weights, synthesis, validate, publish)
           through the local engine.
  spark  - the same release on embedded Spark local[2], started for the release (what
           `privlake run CONFIG` does: the JVM starts while the driver validates the input).
  spark-warm - the same release on a Spark session that is already running and warmed up
           (worker processes started, Great Expectations context built), as in a scheduler
           that keeps its session or `privlake run A.yaml B.yaml ...` after the first config.
           The session start is outside the timed part; the whole release is inside.
Wall times exclude interpreter start-up, data generation and the operator's lake setup (a test
lake with a budget for the dataset), include everything else.

Settings: those of ``examples/crowd_sample.yaml`` (k = 12, gamma = 4, epsilon0 = 2, q0 = 0.1,
R = 2, local cap 1.25, public bandwidth 5 on [0, 100] at precision 0.01, private source
qualities in 3 iterations), except m = 10 claims per object (the previous runs' m, so that the
synthesis does comparable work per object); stated (epsilon, delta) = (53.7, 1e-6).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import RESULTS, ROOT, machine_basics, run_json_child, table

CLAIMS_PER_OBJECT = 20
CLAIMS_PER_OBJECT_RELEASED = 10
SECRET_HEX = "be" * 32
SETTINGS = (
    "Settings of examples/crowd_sample.yaml (k = 12, gamma = 4, epsilon0 = 2, q0 = 0.1, R = 2, R_l = 1.25, "
    "h = 5, private source qualities in 3 iterations) with m = 10; generated claims, 20 per object."
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


def config_for(path: Path, lake: Path, engine: str) -> dict:
    """The sample example's release config on ``path`` (budget, evaluation and engine replaced)."""
    import yaml

    document = yaml.safe_load((ROOT / "examples" / "crowd_sample.yaml").read_text())
    document["privacy"].pop("budget", None)  # lake policy, set by the operator (prepare_lake)
    document.pop("evaluation", None)
    document["synthesis"]["claims_per_object"] = CLAIMS_PER_OBJECT_RELEASED
    return {
        **document,
        "dataset": "bench",
        "lake": str(lake),
        "input": {"path": str(path), "format": "parquet"},
        "engine": {"name": engine, "spark": {"master": "local[2]"}},
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


def measure(variant: str, path: Path, workdir: Path) -> dict:
    """Runs in the child process: one variant on one input, prints a JSON line."""
    import pandas as pd

    from schemas.crowd.config import CrowdConfig

    lake = workdir / f"lake_{variant}_{path.stem}"
    engine_name = "spark" if variant == "spark-warm" else variant
    config = CrowdConfig.model_validate(config_for(path, lake, "local" if variant == "floor" else engine_name))
    if variant == "floor":  # the floor's imports outside the timed part: the mathematics alone
        from pipelines.crowd.pipeline import reference_settings
        from transforms.crowd.release import synthesize_in_memory
    start = time.perf_counter()
    if variant == "floor":
        claims = pd.read_parquet(path)
        parameters, bandwidth, weights = reference_settings(config, int(claims.groupby("object_id").size().max()))
        _, result = synthesize_in_memory(
            claims, parameters, secret=bytes.fromhex(SECRET_HEX), release_id="bench", bandwidth=bandwidth,
            weights=weights,
        )
        rows = len(result.claims)
        timings: dict = {}
    else:
        from pipelines.crowd.pipeline import CROWD_WORKER_MODULES, run_crowd_release

        os.environ["PRIVLAKE_TEST_SECRET"] = SECRET_HEX
        prepare_lake(lake, workdir / f"key_{variant}_{path.stem}")
        engine = None
        if variant == "spark-warm":
            from pipelines.engines.spark import SparkEngine
            from pipelines.platform.validation import gx_batch_definition

            engine = SparkEngine(master="local[2]")
            engine.warm_up(CROWD_WORKER_MODULES)
            gx_batch_definition()
        start = time.perf_counter()
        outcome = run_crowd_release(config, release_id=f"bench-{variant}", engine=engine)
        rows = outcome.manifest["rows"]
        timings = outcome.internal["timings"]
    wall = time.perf_counter() - start
    if variant == "spark-warm":
        engine.close()
    return {"variant": variant, "wall_seconds": wall, "rows": rows, "timings": timings}


def markdown(results: list[dict]) -> str:
    """The runs as a table, each with its wall time over the floor's at the same size."""
    floor = {r["claims"]: r["wall_seconds"] for r in results if r["variant"] == "floor"}
    rows = [
        (r["claims"], r["variant"], r["wall_seconds"], r["claims_per_second"], r["peak_rss_mib"],
         r["wall_seconds"] / floor[r["claims"]] if r["claims"] in floor else float("nan"))
        for r in results
    ]
    return "\n".join(table(
        ["claims", "variant", "wall s", "claims/s", "peak MiB", "× floor"], rows,
        align="rlrrrr", formats=[",", None, ".1f", ",.0f", ".0f", lambda ratio: f"{ratio:.2f}"],
    ))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--variants", nargs="+", default=["floor", "local", "spark", "spark-warm"])
    parser.add_argument("--out", type=Path, default=RESULTS / "crowd_scaling.json")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--input", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.input, args.workdir)))
        return

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    machine = machine_basics()
    results = []
    with tempfile.TemporaryDirectory(prefix="privlake-bench-") as temporary:
        workdir = Path(temporary)
        for size in args.sizes:
            path = generate(size, workdir)
            for variant in args.variants:
                child = [sys.executable, __file__, "--measure", variant, "--input", str(path), "--workdir", str(workdir)]
                report, sampler = run_json_child(child)
                report.update(
                    claims=size, claims_per_second=size / report["wall_seconds"], peak_rss_mib=sampler.peak_total / 2**20
                )
                results.append(report)
                print(
                    f"{size:>10,} claims  {variant:10} {report['wall_seconds']:8.1f} s  "
                    f"{report['claims_per_second']:>10,.0f} claims/s  peak {report['peak_rss_mib']:7.0f} MiB",
                    flush=True,
                )
    text = markdown(results)
    print("\n" + text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": machine, "settings": SETTINGS, "runs": results}, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(
        f"# Crowd kind: scaling\n\nMachine: {machine['processor']}, {machine['cores']} cores, {machine['memory']}; "
        f"load average at start {machine['load_average_at_start']}. {SETTINGS}\n\n{text}\n"
    )


if __name__ == "__main__":
    main()
