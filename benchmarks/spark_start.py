"""The Spark engine's start with and without the driver's class archive, side by side in one run
(issue 15: the fixed start every release pays; ``pipelines/engines/spark_class_archive.py``).

    .venv/bin/python benchmarks/spark_start.py               # 5 runs each, alternating
    .venv/bin/python benchmarks/spark_start.py --repeats 9

Each run is a fresh process that starts ``local[2]`` as a release does (``SparkEngine``, protection
on) and runs the release's first kind of job (an Arrow map over a shuffle and a sort, whose Python
workers import the crowd kind's worker modules: ``SparkEngine.warm_up``). Measured: the session's
start, that first job, and the same job once more (the warm floor). ``without`` sets
``PRIVLAKE_SPARK_CLASS_ARCHIVE`` empty; ``with`` uses the installation's archive, built first if it
is missing. Runs alternate (with, without, without, with, ...), so that a drift in the machine's
load falls on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import RESULTS, machine_basics, run_json_child, table, write_json, write_markdown

VARIANTS = ("with archive", "without archive")


def measure() -> dict:
    """In the child: one start, timed."""
    from pipelines.crowd.pipeline import CROWD_WORKER_MODULES
    from pipelines.engines.spark import SparkEngine

    started = time.perf_counter()
    engine = SparkEngine(master="local[2]")
    session = time.perf_counter()
    engine.warm_up(CROWD_WORKER_MODULES)
    first = time.perf_counter()
    engine.warm_up(CROWD_WORKER_MODULES)
    again = time.perf_counter()
    options = dict(engine.session.sparkContext.getConf().getAll()).get("spark.driver.extraJavaOptions", "")
    engine.close()
    return {"session_seconds": session - started, "first_job_seconds": first - session,
            "warm_job_seconds": again - first, "archive": "SharedArchiveFile" in options}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.measure:
        print(json.dumps(measure()))
        return
    from pipelines.engines import spark_class_archive

    if spark_class_archive.usable_archive() is None:
        archive = spark_class_archive.archive_path()
        if archive is None or spark_class_archive.main(["build", str(archive)]) != 0:
            raise SystemExit("no class archive could be built: nothing to compare")
    machine = machine_basics()
    runs = []
    for repeat in range(arguments.repeats):
        for variant in VARIANTS if repeat % 2 == 0 else reversed(VARIANTS):
            environment = {**os.environ, "PYSPARK_PYTHON": sys.executable}
            if variant == "without archive":
                environment[spark_class_archive.ARCHIVE_VARIABLE] = ""
            report, _ = run_json_child([sys.executable, __file__, "--measure"], environment)
            if report["archive"] != (variant == "with archive"):
                raise SystemExit(f"{variant}: the session's driver options say archive={report['archive']}")
            runs.append({"variant": variant, **report})
    rows = []
    for variant in VARIANTS:
        mine = [run for run in runs if run["variant"] == variant]
        medians = {name: statistics.median(run[name] for run in mine)
                   for name in ("session_seconds", "first_job_seconds", "warm_job_seconds")}
        rows.append({"variant": variant, "runs": len(mine), **medians,
                     "start_seconds": medians["session_seconds"] + medians["first_job_seconds"]})
    without = rows[1]["start_seconds"]
    for row in rows:
        row["over_without"] = row["start_seconds"] / without
    write_json(RESULTS, "spark_start", {"machine": machine, "runs": runs, "summary": rows})
    lines = table(["variant", "runs", "session s", "first job s", "session + first job s", "× without",
                   "the job again s"],
                  [(r["variant"], r["runs"], r["session_seconds"], r["first_job_seconds"], r["start_seconds"],
                    r["over_without"], r["warm_job_seconds"]) for r in rows],
                  align="lrrrrrr", formats=[None, None, ".2f", ".2f", ".2f", ".2f", ".2f"])
    text = ("# Spark `local[2]` start: the driver's class archive (issue 15)\n\n"
            f"Machine: {machine['processor']}, {machine['cores']} cores, {machine['memory']}; load average at start "
            f"{machine['load_average_at_start'][0]:.2f}. Medians of {arguments.repeats} alternating runs, each a fresh "
            "process (`benchmarks/spark_start.py`).\n\n" + "\n".join(lines) + "\n")
    write_markdown(RESULTS, "spark_start", text)
    print(text)


if __name__ == "__main__":
    main()
