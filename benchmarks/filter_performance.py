"""The filter release kind's performance (issue 5, "Performance"): VAE training, filter training,
privatization throughput on Spark ``local[2]`` next to the local engine and the in-process floor.

    .venv/bin/python benchmarks/filter_performance.py            # full run (n = 1e5, 1e6, 2e6)
    .venv/bin/python benchmarks/filter_performance.py --quick    # n = 1e5 only
    .venv/bin/python benchmarks/filter_performance.py --render benchmarks/results/filter_performance.json

Bars of the issue: VAE training on Adult under 5 minutes; filter training per choice on Adult under
30 s on CPU; privatization at least 50,000 records/s on Spark ``local[2]``.

1. **VAE training** (``privlake train-encoder``, i.e. ``train_encoder``) on the full Adult training
   file (``adult-train.csv``, 32,561 rows) with ``examples/filter_adult.yaml``'s feature spec and
   encoder settings (40 epochs, latent dimension 16, hidden widths [128, 128], the defaults).
2. **Filter training** for the example's choice (private sex, utility income, budget 2, β = 1,
   the default ``FilterTraining``: 15 epochs, batch 512, adversary re-fit every 50 steps, all
   32,561 training records). Every release trains its filter anew (keyed by its release id), so
   every release run below is one sample: ``training_seconds`` per choice in the release's
   operator-only record (``ReleaseOutcome.internal``: the figures computed from raw data, stage
   timings and trained filters are not in the public manifest). The example config itself (local
   engine, ``adult-test.csv``, evaluation on) is run once too.
3. **Privatization throughput**: ``adult-test.csv``'s 16,281 rows replicated (row ``i`` of the
   input is row ``i mod 16281``) to n records, written once per n as a typed Parquet file (numbers
   int64, categories and labels text) in a temp dir; the release reads it with the example's
   recode. Each release runs ``run_filter_release`` with the evaluation disabled
   (``evaluation: {enabled: false}``: the evaluation retrains classifiers on a sample and is not
   part of privatizing) in its own child process: Spark ``local[2]`` (the engine is started first,
   as ``privlake run`` does — ``start_engine``: JVM plus a warm-up job importing the worker module —
   timed apart, and passed in) and the local engine (in-process). The engine reads, checks,
   encodes and stages the records (``timings["read input"]``: one ``map_fragments`` task per input
   fragment, ``pipelines/filter/engine_input.py:read_filter_fragment``, writing the staged files),
   then privatizes (``timings["privatize"]``: one ``map_fragments`` task per release file, a task
   function of ``engine_input``: its staged records read, privatized and written). Records/s of the
   privatize stage and of the whole ``run_filter_release`` call. The **floor**, in a third
   child on one thread: ``privatize_features`` + ``decode_features`` on the same records with the
   Spark release's filter (read from its internal record) and release id, in calls of the engines'
   250,000 rows; then the ladder up to what an engine worker runs: ``privatized_rows`` (the batch
   function, pandas in and out), and ``apply_batch_function`` (plus the Arrow ↔ pandas
   conversions). At the smallest n the floor's records are compared with the Spark release read
   back from the lake (must be identical).
4. **Peak memory** of every child: the driver's ``ru_maxrss`` (exact high-water mark), and from
   sampling ``/proc`` every 0.2 s the peak RSS of the whole process tree (driver + JVM + Python
   workers), of the JVM, and of the Python workers together.

Profile (Spark only): the files the release staged (``read_input_on_engine``'s staged files, the
current staging path: written by the engine's input tasks; the driver-side ``stage_records`` this
profile once patched is gone) are kept (hard links), and, after the release, the same
engine replays the privatize stage: (a) read + write without the batch function (the engine's IO,
a JVM scan), (b) the stage as the pipeline runs it (the release's own ``map_fragments`` call, found
by its result schema ``PRIVATIZED_FILES_SCHEMA``, its tasks' outputs redirected: each worker reads
its staged records, privatizes and writes in one pass) with the batch function
(``privatized_at_positions``: ``privatized_rows`` with each record's position) wrapped in a timer
that appends each call's wall and CPU seconds to a file (the worker-side compute), and two variants
written here with the engine's Arrow helpers, kept for comparison (what-ifs from an earlier
design): (c) the batch function and the Parquet write fused in one ``mapInArrow`` fed by a JVM
scan, (d) the workers reading row groups dealt round-robin. The release's own privatize stage is
accounted the same way (its ``map_fragments`` call, collected). During each, the CPU seconds of
the driver, the JVM, the Python workers (exited ones included, through their parents' reaped-children times) and of every other
process on the machine are taken from ``/proc``. The fixed per-process costs (the first
``configure_deterministic_torch``, ``VaeArtifact.from_bytes``) are timed in the floor's fresh
process; the output validation's Great Expectations suites are timed apart from reading the release.

The machine is shared (2 cores): the 1-minute load average before and after each child, and the
CPU seconds other processes used during it (``/proc/stat`` busy time minus our process tree's),
are recorded next to each number. Children run with OPENBLAS/OMP/MKL_NUM_THREADS=1 (torch: one
thread, set by the pipeline), ``PYSPARK_PYTHON`` = ``.venv/bin/python``, ``PRIVLAKE_TEST_SECRET``
fixed. All releases go into one lake, made first as an operator makes one
(``harness.benchmark_lake``: a test lake, since the secret is a test secret, with a large budget
for the example's dataset; outside every timed part). Writes
``benchmarks/results/filter_performance.{json,md}`` (``_quick`` with ``--quick``).
The full run takes about 9 minutes on the shared 2-core machine, ``--quick`` about 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import yaml

from benchmarks import harness
from benchmarks.harness import ROOT

EXAMPLE = ROOT / "examples" / "filter_adult.yaml"
ADULT = harness.DATASETS / "adult"
SECRET_HEX = "f17e" * 16
VENV_PYTHON = str(ROOT / ".venv" / "bin" / "python")
MASTER = "local[2]"
CHOICE = "hide-sex-keep-income"
BARS = {"vae_training_seconds": 300.0, "filter_training_seconds": 30.0, "spark_records_per_second": 50_000.0}
FULL_SIZES = (100_000, 1_000_000, 2_000_000)
QUICK_SIZES = (100_000,)
NUMERIC_COLUMNS = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")


# ----------------------------------------------------------------------------- machine and CPU


def machine() -> dict[str, Any]:
    import torch

    return {
        **harness.machine_basics(), "numpy": np.__version__, "torch": torch.__version__,
        "uptime_at_start": harness.uptime(),
    }


def machine_busy_seconds() -> float:
    """CPU seconds all cores have spent busy since boot (``/proc/stat``: all but idle and iowait)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(value) for value in fields[:8]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- configs and inputs


def example_document() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))


def config_document(lake: Path, input_path: Path | None, engine: str, evaluation: bool) -> dict[str, Any]:
    """The example's config with absolute paths, a temp lake, ``input_path`` (Parquet) as the input
    when given (else the example's ``adult-test.csv``), the engine, and the evaluation on or off."""
    document = example_document()
    document["lake"] = str(lake)
    document["feature_spec"] = str((EXAMPLE.parent / document["feature_spec"]).resolve())  # relative to the config
    document["training"]["path"] = str((EXAMPLE.parent / document["training"]["path"]).resolve())
    if input_path is None:
        document["input"]["path"] = str((EXAMPLE.parent / document["input"]["path"]).resolve())
    else:
        document["input"] = {"path": str(input_path), "format": "parquet", "recode": document["input"]["recode"]}
    document["engine"] = {"name": engine, "spark": {"master": MASTER}}
    if not evaluation:
        document["evaluation"] = {"enabled": False}
    return document


def write_config(folder: Path, name: str, document: dict[str, Any]) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def write_replicated_input(n: int, folder: Path) -> tuple[Path, float]:
    """``adult-test.csv`` read as the pipeline reads it (text), rows replicated to ``n`` (row ``i``
    is row ``i mod 16281``), numbers as int64, written as one Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.platform.input import read_table
    from schemas.filter.config import FilterTableReading

    start = time.perf_counter()
    document = example_document()["input"]
    fields = {key: value for key, value in document.items() if key in FilterTableReading.model_fields}
    reading = FilterTableReading.model_validate({**fields, "path": str(ADULT / "adult-test.csv")})
    frame = read_table(reading, reading.columns or ())
    for column in NUMERIC_COLUMNS:
        frame[column] = frame[column].astype(np.int64)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.take(pa.array(np.arange(n, dtype=np.int64) % table.num_rows))
    path = folder / f"adult-test-x{n}.parquet"
    pq.write_table(table, path, row_group_size=1 << 17)
    return path, time.perf_counter() - start


# ----------------------------------------------------------------------------- child processes


def child_environment() -> dict[str, str]:
    environment = dict(os.environ)
    environment.update({variable: "1" for variable in harness.BLAS_VARIABLES})
    environment["PYSPARK_PYTHON"] = VENV_PYTHON
    environment["PYSPARK_DRIVER_PYTHON"] = VENV_PYTHON
    environment["PRIVLAKE_TEST_SECRET"] = SECRET_HEX
    return environment


def run_child(arguments: list[str], log: Path) -> dict[str, Any]:
    """This script as a child (``--measure ...``); its last stdout line is JSON. Adds the tree's
    peak memory, the load average before and after, and the CPU other processes used meanwhile."""
    command = [VENV_PYTHON, str(Path(__file__).resolve()), *arguments]
    environment = {**child_environment(), "PRIVLAKE_SPARK_LOG": str(log)}
    load_before = list(os.getloadavg())
    busy_before = machine_busy_seconds()
    started = time.perf_counter()
    report, sampler = harness.run_json_child(command, environment)
    elapsed = time.perf_counter() - started
    busy = machine_busy_seconds() - busy_before
    ours = sum(sampler.cpu.values())
    report["memory"] = {
        **report.get("memory", {}),
        "tree_peak_mib": sampler.peak_total / 2**20,
        "jvm_peak_mib": sampler.peak_jvm / 2**20,
        "python_workers_peak_mib": sampler.peak_workers / 2**20,
        "driver_sampled_peak_mib": sampler.peak_root / 2**20,
    }
    report["machine"] = {
        "load_average_before": load_before,
        "load_average_after": list(os.getloadavg()),
        "child_seconds": elapsed,
        "our_cpu_seconds": ours,
        "other_cpu_seconds": max(0.0, busy - ours),
        "other_cores_busy": max(0.0, busy - ours) / elapsed,
    }
    return report


def driver_memory() -> dict[str, float]:
    """The driver's high-water mark, and that of its reaped children."""
    return {
        "driver_ru_maxrss_mib": harness.max_rss_mib(),
        "reaped_children_ru_maxrss_mib": harness.max_rss_mib(children=True),
    }


def measure_encoder(config_path: Path) -> dict[str, Any]:
    """In the child: ``train_encoder`` on the full training file, timed; the VAE fit alone too."""
    import pipelines.filter.pipeline as filter_pipeline
    import transforms.filter.vae as vae
    from pipelines.platform.config import load_config

    config = load_config(config_path)
    inner: dict[str, float] = {}
    # train_encoder imports train_vae from its module when it runs (torch: only training needs it)
    vae.train_vae = harness.accumulating(vae.train_vae, inner, "train_vae")
    start = time.perf_counter()
    summary = filter_pipeline.train_encoder(config)
    wall = time.perf_counter() - start
    return {
        "wall_seconds": wall,
        "train_vae_seconds": inner["train_vae"],
        "stages": summary["timings"],
        "artifact_id": summary["artifact_id"],
        "training_rows": summary["data_fingerprint"]["rows"],
        "training": summary["training"],
        "architecture": summary["architecture"],
        "memory": driver_memory(),
    }


def tree_cpu(root: int) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of ``root`` and each of its descendants, with their names."""
    table = harness.process_table()
    return {pid: (table[pid][1], table[pid][3]) for pid in harness.process_tree(root, table)}


def cpu_accounted(action: Callable[[], Any]) -> tuple[Any, dict]:
    """Run ``action``; its wall seconds and the CPU seconds spent meanwhile by this process (the
    driver), the JVM, the Python workers (Spark's daemon and every worker it forked, exited ones
    included) and every other process on the machine."""
    root = os.getpid()
    before, busy_before, start = tree_cpu(root), machine_busy_seconds(), time.perf_counter()
    result = action()
    wall = time.perf_counter() - start
    after, busy = tree_cpu(root), machine_busy_seconds() - busy_before
    spent = {"driver": 0.0, "jvm": 0.0, "python_workers": 0.0}
    for pid, (name, cpu) in after.items():
        delta = cpu - before.get(pid, (name, 0.0))[1]
        spent["driver" if pid == root else "jvm" if name == "java" else "python_workers"] += delta
    ours = sum(spent.values())
    return result, {"wall_seconds": wall, "cpu_seconds": spent, "our_cpu_seconds": ours,
                    "other_processes_cpu_seconds": max(0.0, busy - ours),
                    "machine_busy_cores": busy / wall if wall else None}


def _worker_calls(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


UNTIMED = "_untimed_privatized_at_positions"


def _timed_batch_function(calls_text: str) -> Callable:
    """``privatized_at_positions`` (``privatized_rows`` on staged records, ``record`` turned from the
    staged ``ROW_ID`` into the record's position) with each call's wall and CPU seconds appended to
    ``calls_text`` (run on the workers). The function is looked up when called (the untimed one,
    :data:`UNTIMED`, once :func:`_timed_privatize_task` has put a timed one in its place in the
    worker's module), so that a reused worker never times a timed function."""

    def timed_rows(batch: Any, value: Any) -> Any:
        from pipelines.filter import engine_input

        privatized_at_positions = getattr(engine_input, UNTIMED, engine_input.privatized_at_positions)
        begin, cpu_begin = time.perf_counter(), time.process_time()
        output = privatized_at_positions(batch, value)
        record = {"pid": os.getpid(), "rows": len(batch), "seconds": time.perf_counter() - begin,
                  "cpu_seconds": time.process_time() - cpu_begin}
        with open(calls_text, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        return output

    return timed_rows


def _call_summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    per_worker: dict[int, float] = {}
    for call in calls:
        per_worker[call["pid"]] = per_worker.get(call["pid"], 0.0) + call["seconds"]
    return {
        "calls": len(calls),
        "rows": sum(call["rows"] for call in calls),
        "wall_seconds_per_worker": sorted(per_worker.values(), reverse=True),
        "wall_seconds_total": sum(per_worker.values()),
        "cpu_seconds_total": sum(call["cpu_seconds"] for call in calls),
        "workers": len(per_worker),
    }


def fused_map_and_write(engine: Any, staged: list[Path], schema: Any, side: Any, out_schema: Any, target: Path,
                        calls_text: str, worker_read: bool) -> list[str]:
    """What-if variants of the privatize stage, written here with the engine's own Arrow helpers
    (no pipeline code changed): the batch function and the Parquet write in one ``mapInArrow``
    (no second JVM -> Python hop, no second Python worker per task); with ``worker_read`` the
    staged files read by the workers themselves (their row groups dealt round-robin to
    ``parallelism`` tasks), so no record passes through the JVM."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark import TaskContext

    from pipelines.engines import arrow

    handle = engine.session.sparkContext.broadcast(side)
    rows_per_call = engine.rows_per_call
    target_text = str(target)
    timed_rows = _timed_batch_function(calls_text)
    tasks = engine.parallelism
    pieces_of_files = [(str(path), group) for path in staged for group in range(pq.ParquetFile(path).num_row_groups)]

    def privatized(pieces: Any) -> Any:
        value = handle.value
        for chunk in arrow.row_chunks(pieces, rows_per_call):
            yield arrow.apply_batch_function(timed_rows, chunk, value, out_schema)

    def write(pieces: Any) -> Any:
        context = TaskContext.get()
        path = arrow.write_parquet_file(privatized(pieces), target_text, arrow.part_file_name(context.partitionId()),
                                        out_schema, attempt=str(context.taskAttemptId()))
        if path is not None:
            yield pa.RecordBatch.from_pydict({"path": [str(path)]})

    def from_jvm(batches: Any) -> Any:
        yield from write(arrow.conform_table(batch, schema) for batch in batches)

    def read_own(task_ids: list[int]) -> Any:
        for index, (path, group) in enumerate(pieces_of_files):
            if index % tasks in task_ids:
                for batch in pq.ParquetFile(path).iter_batches(batch_size=arrow.READ_BATCH_ROWS, row_groups=[group]):
                    yield arrow.conform_table(batch, schema)

    def from_files(batches: Any) -> Any:
        task_ids = [value for batch in batches for value in batch.column(0).to_pylist()]
        yield from write(read_own(task_ids))

    if worker_read:
        frame = engine.session.range(0, tasks, 1, tasks).mapInArrow(from_files, "path string")
    else:
        frame = engine.read_parquet(staged, schema).frame.mapInArrow(from_jvm, "path string")
    try:
        return frame.toArrow().column("path").to_pylist()
    finally:
        handle.destroy()


def _timed_privatize_task(task_function: Callable, calls_text: str) -> Callable:
    """The pipeline's privatize task (``task_function``, from ``pipelines/filter/engine_input.py``)
    with its batch function timed (:func:`_timed_batch_function`): the worker's module gets the timed
    function in place of ``privatized_at_positions``, then runs the task as the release does."""
    timed_rows = _timed_batch_function(calls_text)

    def privatize(task: Any, side: Any) -> Any:
        from pipelines.filter import engine_input

        if not hasattr(engine_input, UNTIMED):
            setattr(engine_input, UNTIMED, engine_input.privatized_at_positions)
        engine_input.privatized_at_positions = timed_rows
        return task_function(task, side)

    return privatize


def replay_privatize_stage(engine: Any, staged: list[Path], stage: dict[str, Any], spec: Any, out_schema: Any,
                           folder: Path) -> dict[str, Any]:
    """After the release, on the same engine and its staged files (``staged``: copies; ``stage``:
    the release's own privatize call, its tasks, task function and side, with its staged files
    linked back where its tasks read them): the privatize stage's IO alone (JVM scan and write);
    the stage again as the pipeline ran it (the same ``map_fragments`` call, each task's output
    redirected) with the batch function timed on the workers; and two hand-written variants
    (``fused_map_and_write``) kept for comparison: the fused pass fed by a JVM scan, and the workers
    reading row groups dealt round-robin."""
    from pipelines.filter.blocks import staged_schema

    schema = staged_schema(spec)
    side = stage["side"].privatization  # the release's PositionedPrivatization
    result: dict[str, Any] = {"task_function": getattr(stage["function"], "__name__", str(stage["function"])),
                              "staged_files": len(staged), "staged_columns": len(schema),
                              "staged_mib": sum(path.stat().st_size for path in staged) / 2**20}
    frame = getattr(engine.read_parquet(staged, schema), "frame", None)
    if frame is not None:
        result["input_partitions"] = int(frame.rdd.getNumPartitions())
    _, result["io_only"] = cpu_accounted(
        lambda: engine.write_parquet(engine.read_parquet(staged, schema), folder / "io-only", schema))
    calls_path = folder / "engine-calls.jsonl"

    def engine_stage() -> Any:
        tasks = [dataclasses.replace(task, output=folder / "instrumented" / f"part-{number:05d}.parquet")
                 for number, task in enumerate(stage["tasks"])]
        return engine.collect(engine.map_fragments(tasks, _timed_privatize_task(stage["function"], str(calls_path)),
                                                   stage["schema"], stage["side"]))

    _, result["engine_stage"] = cpu_accounted(engine_stage)
    result["engine_stage"]["batch_function"] = _call_summary(_worker_calls(calls_path))
    for name, worker_read in (("fused_map_and_write", False), ("worker_read_fused", True)):
        path = folder / f"{name}-calls.jsonl"
        _, result[name] = cpu_accounted(
            lambda name=name, worker_read=worker_read, path=path: fused_map_and_write(
                engine, staged, schema, side, out_schema, folder / name, str(path), worker_read))
        result[name]["batch_function"] = _call_summary(_worker_calls(path))
    return result


def measure_release(config_path: Path, release_id: str, engine_name: str, replay: bool) -> dict[str, Any]:
    """In the child: one release with the engine started first (timed apart) and passed in."""
    import pipelines.filter.pipeline as filter_pipeline
    from pipelines.filter.blocks import output_schema
    from pipelines.filter.engine_input import PRIVATIZED_FILES_SCHEMA
    from pipelines.platform.config import load_config
    from pipelines.platform.release import engine_request, start_engine

    config = load_config(config_path)
    keep = Path(tempfile.mkdtemp(prefix="privlake-filter-replay-"))
    captured: dict[str, Any] = {}
    original_read_input = filter_pipeline.read_input_on_engine

    def capture_staged(*arguments: Any, **keywords: Any) -> Any:
        """The current staging path: the engine's input tasks read, check, encode and stage the
        records (``read_input_on_engine``); its staged files kept (hard links) for the replay."""
        checked = original_read_input(*arguments, **keywords)
        if replay:
            copies = []
            for number, path in enumerate(checked.staged):
                copies.append(keep / f"staged-{number:05d}.parquet")
                os.link(path, copies[-1])
            captured["staged"], captured["originals"] = copies, list(checked.staged)
        return checked

    filter_pipeline.read_input_on_engine = capture_staged
    inner: dict[str, float] = {}
    filter_pipeline.validate_filter_output_metrics = harness.accumulating(
        filter_pipeline.validate_filter_output_metrics, inner, "gx")
    start = time.perf_counter()
    chosen, options = engine_request(config.engine, engine_name, None)
    engine = start_engine(chosen, options, filter_pipeline.FILTER_WORKER_MODULES)
    engine_seconds = time.perf_counter() - start
    stage_accounting: dict[str, Any] = {}
    map_fragments, collect = engine.map_fragments, engine.collect
    privatizing: list[Any] = []

    def marked_map_fragments(items: Any, fn: Any, schema: Any, side: Any = None, **keywords: Any) -> Any:
        """The privatize stage is the ``map_fragments`` call whose rows are
        ``PRIVATIZED_FILES_SCHEMA`` (one per release file written): its call kept for the replay."""
        mapped = map_fragments(items, fn, schema, side, **keywords)
        if schema is PRIVATIZED_FILES_SCHEMA and not privatizing:
            privatizing.append(mapped)
            captured["stage"] = {"tasks": list(items), "function": fn, "schema": schema, "side": side}
        return mapped

    def accounted_collect(dataset: Any, *arguments: Any, **keywords: Any) -> Any:
        """The privatize stage's CPU accounting (its ``map_fragments`` is lazy until collected)."""
        if stage_accounting or not any(dataset is mapped for mapped in privatizing):
            return collect(dataset, *arguments, **keywords)
        rows, accounting = cpu_accounted(lambda: collect(dataset, *arguments, **keywords))
        stage_accounting.update(accounting)
        return rows

    engine.map_fragments, engine.collect = marked_map_fragments, accounted_collect
    try:
        start = time.perf_counter()
        outcome = filter_pipeline.KIND.run(config, release_id=release_id, engine=engine)
        wall = time.perf_counter() - start
        memory_after_release = driver_memory()
        profile = None
        if replay:
            engine.map_fragments, engine.collect = map_fragments, collect
            linked = []
            for copy, original in zip(captured["staged"], map(Path, captured["originals"]), strict=True):
                if not original.exists():  # the release discarded its staging
                    original.parent.mkdir(parents=True, exist_ok=True)
                    os.link(copy, original)
                    linked.append(original)
            spec = filter_pipeline._read_spec(config)
            profile = replay_privatize_stage(
                engine, captured["staged"], captured["stage"], spec,
                output_schema(spec, filter_pipeline._utility_labels(config)), keep,
            )
            for original in linked:
                original.unlink(missing_ok=True)
    finally:
        engine.close()
        shutil.rmtree(keep, ignore_errors=True)
    manifest, internal = outcome.manifest, outcome.internal  # internal: the operator-only record
    choice = next(c for c in internal["choices"] if c["name"] == CHOICE)
    return {
        "engine": manifest["engine"],
        "engine_start_seconds": engine_seconds,
        "wall_seconds": wall,
        "stages": internal["timings"],
        "rows": manifest["rows"],
        "output_validation_success": manifest["validation"]["output"]["success"],
        "evaluation": internal["evaluation"],
        "filter_training_seconds": choice["training_seconds"],
        "filter_training_records": choice["training_records"],
        "filter_distortion": choice["distortion_on_training_records"],
        "filter_final_epoch": choice["final_training_epoch"],
        "epsilon": manifest["epsilon"],
        "profile": profile,
        "privatize_write_accounting": stage_accounting,
        "output_suites_seconds": inner.get("gx"),
        "memory": memory_after_release,
    }


def measure_floor(config_path: Path, release_id: str, compare: bool) -> dict[str, Any]:
    """In the child, one thread: the privatization math on the same records with the release's
    filter, then the ladder up to the engines' batch call (module docstring)."""
    import pyarrow as pa
    from threadpoolctl import threadpool_limits

    from pipelines.engines.arrow import DEFAULT_ROWS_PER_CALL, apply_batch_function
    from pipelines.filter.blocks import (
        PrivatizationSide,
        compact_features,
        feature_columns,
        output_schema,
        privatized_rows,
        staged_schema,
    )
    from pipelines.filter.input import read_feature_spec, read_records
    from pipelines.platform.config import load_config
    from pipelines.platform.internal import OperatorRecords
    from pipelines.platform.lake import Lake
    from pipelines.platform.model_store import ModelStore
    from schemas.filter.config import FilterTableReading
    from transforms.core.keyed_randomness import secret_from_hex
    from transforms.filter.features import decode_features
    from transforms.filter.inference import decode_latents, encode_latents
    from transforms.filter.latent_filter import LinearLatentFilter
    from transforms.filter.privatization import (
        filter_latents,
        noise_width,
        privatize_features,
        record_standard_normals,
    )
    from transforms.filter.vae import (
        VaeArtifact,
        configure_deterministic_torch,
    )

    threadpool_limits(1)
    begin = time.perf_counter()
    configure_deterministic_torch(1)
    first_configure_seconds = time.perf_counter() - begin
    config = load_config(config_path)
    spec = read_feature_spec(config.feature_spec)
    lake = Lake(config.lake)
    manifest = lake.manifest(release_id)
    trained = OperatorRecords(lake).read(release_id)[-1]["record"]["choices"]  # the trained filters: operator-only
    artifact_bytes = ModelStore(lake).load(manifest["model_artifact_id"])
    begin = time.perf_counter()
    model = VaeArtifact.from_bytes(artifact_bytes).model
    from_bytes_seconds = time.perf_counter() - begin
    choice_entry = manifest["choices"][0]
    if [entry["name"] for entry in trained] != [entry["name"] for entry in manifest["choices"]]:
        raise AssertionError("the internal record's choices are not the manifest's")
    filters = [LinearLatentFilter.from_dict(entry["filter"]) for entry in trained]
    secret = secret_from_hex(os.environ["PRIVLAKE_TEST_SECRET"])
    labels = {name: config.labels[name] for name in (choice_entry["private"], choice_entry["utility"])}
    settings = config.input  # the one Parquet file the releases read on their engine, read here as a table file
    reading = FilterTableReading(path=Path(settings.path), format=settings.format or "parquet", header=settings.header,
                                 recode=settings.recode, columns=settings.columns)
    start = time.perf_counter()
    records = read_records(reading, spec, labels)
    read_seconds = time.perf_counter() - start
    features = records.features
    n = features.shape[0]
    positions = np.arange(n, dtype=np.int64)
    choices = np.zeros(n, dtype=np.int64)
    private = records.labels[choice_entry["private"]].astype(np.int64)
    utility = records.labels[choice_entry["utility"]].astype(np.int64)
    chunks = [slice(start, min(n, start + DEFAULT_ROWS_PER_CALL)) for start in range(0, n, DEFAULT_ROWS_PER_CALL)]

    outputs = []
    start = time.perf_counter()
    for rows in chunks:
        decoded = privatize_features(model, features[rows], positions[rows], choices[rows], private[rows], filters,
                                     secret, release_id)
        outputs.append(decode_features(decoded, spec))
    math_seconds = time.perf_counter() - start

    first = chunks[0]
    parts: dict[str, float] = {}
    begin = time.perf_counter()
    mean, log_variance = encode_latents(model, features[first])
    parts["encoder forward (encode_latents)"] = time.perf_counter() - begin
    begin = time.perf_counter()
    normals = record_standard_normals(secret, release_id, positions[first], noise_width(mean.shape[1], filters))
    parts["keyed normals (record_standard_normals)"] = time.perf_counter() - begin
    begin = time.perf_counter()
    latents = filter_latents(mean, log_variance, choices[first], private[first], filters, normals)
    parts["posterior draw + filter (filter_latents)"] = time.perf_counter() - begin
    begin = time.perf_counter()
    decoded = decode_latents(model, latents)
    parts["decoder forward + softmax (decode_latents)"] = time.perf_counter() - begin
    begin = time.perf_counter()
    breakdown_records = decode_features(decoded, spec)
    parts["decode_features (argmax, rescale)"] = time.perf_counter() - begin
    breakdown_rows = first.stop - first.start
    if not breakdown_records.equals(outputs[0]):
        raise AssertionError("the breakdown's records differ from privatize_features' records")

    staged = pa.table(
        {"record": positions, "choice": choices.astype(np.int32), "private": private.astype(np.int32),
         "utility": utility.astype(np.int32),
         **dict(zip(feature_columns(spec), compact_features(features, spec), strict=True))},
        schema=staged_schema(spec),
    )
    utility_label = choice_entry["utility"]
    side = PrivatizationSide(artifact_bytes, manifest["model_artifact_id"], tuple(filters),
                             tuple(entry["name"] for entry in manifest["choices"]),
                             tuple(entry["utility"] for entry in manifest["choices"]),
                             {utility_label: config.labels[utility_label].classes}, secret, release_id)
    out_schema = output_schema(spec, [utility_label])
    frames = [staged.slice(rows.start, rows.stop - rows.start).to_pandas() for rows in chunks]
    start = time.perf_counter()
    for frame in frames:
        privatized_rows(frame, side)
    batch_function_seconds = time.perf_counter() - start
    del frames
    tables = [staged.slice(rows.start, rows.stop - rows.start) for rows in chunks]
    start = time.perf_counter()
    for table in tables:
        apply_batch_function(privatized_rows, table, side, out_schema)
    arrow_seconds = time.perf_counter() - start

    comparison = None
    if compare:
        import pandas as pd

        released = lake.read_release(release_id).to_pandas().sort_values("record", ignore_index=True)
        expected = pd.concat(outputs, ignore_index=True)
        if not np.array_equal(released["record"].to_numpy(), positions):
            raise AssertionError("the release's records are not the input positions 0..n-1")
        differing = [column for column in expected.columns
                     if not np.array_equal(released[column].to_numpy(), expected[column].to_numpy())]
        comparison = {"records": int(len(released)), "columns_compared": list(expected.columns),
                      "differing_columns": differing, "identical": not differing and len(released) == n}
    return {
        "n": n,
        "rows_per_call": DEFAULT_ROWS_PER_CALL,
        "read_and_encode_seconds": read_seconds,
        "first_configure_deterministic_torch_seconds": first_configure_seconds,
        "artifact_from_bytes_seconds": from_bytes_seconds,
        "math_seconds": math_seconds,
        "math_breakdown_rows": breakdown_rows,
        "math_breakdown_seconds": parts,
        "batch_function_seconds": batch_function_seconds,
        "batch_function_with_arrow_seconds": arrow_seconds,
        "comparison_with_spark_release": comparison,
        "memory": driver_memory(),
    }


# ----------------------------------------------------------------------------- the run


def rate(n: int, seconds: float | None) -> float | None:
    return None if not seconds else n / seconds


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """Rates, ratios and the verdicts against the issue's bars."""
    rows = []
    for entry in report["throughput"]:
        n = entry["n"]
        row: dict[str, Any] = {"n": n}
        for engine in ("spark", "local"):
            run = entry.get(engine)
            if run:
                row[f"{engine}_privatize_records_per_second"] = rate(n, run["stages"]["privatize"])
                row[f"{engine}_release_records_per_second"] = rate(n, run["wall_seconds"])
                row[f"{engine}_release_with_engine_start_records_per_second"] = rate(
                    n, run["wall_seconds"] + run["engine_start_seconds"])
        floor = entry.get("floor")
        if floor:
            row["floor_records_per_second"] = rate(n, floor["math_seconds"])
            row["batch_function_records_per_second"] = rate(n, floor["batch_function_seconds"])
            row["batch_function_with_arrow_records_per_second"] = rate(n, floor["batch_function_with_arrow_seconds"])
            for engine in ("spark", "local"):
                if row.get(f"{engine}_privatize_records_per_second"):
                    row[f"{engine}_privatize_over_floor"] = (
                        row[f"{engine}_privatize_records_per_second"] / row["floor_records_per_second"])
        rows.append(row)
    training = [run["filter_training_seconds"] for entry in report["throughput"] for engine in ("spark", "local")
                if (run := entry.get(engine))]
    if report.get("example_release"):
        training.append(report["example_release"]["filter_training_seconds"])
    spark_rates = {row["n"]: row["spark_privatize_records_per_second"] for row in rows
                   if row.get("spark_privatize_records_per_second")}
    largest = max(spark_rates) if spark_rates else None
    verdicts = {
        "vae_training": {"seconds": report["encoder"]["wall_seconds"], "bar_seconds": BARS["vae_training_seconds"],
                         "met": report["encoder"]["wall_seconds"] < BARS["vae_training_seconds"]},
        "filter_training": {"samples": len(training), "median_seconds": float(np.median(training)),
                            "max_seconds": float(np.max(training)), "bar_seconds": BARS["filter_training_seconds"],
                            "met": float(np.max(training)) < BARS["filter_training_seconds"]},
        "spark_privatization": {
            "records_per_second_by_n": {str(n): value for n, value in spark_rates.items()},
            "bar_records_per_second": BARS["spark_records_per_second"],
            "largest_n": largest,
            "met": None if largest is None else spark_rates[largest] >= BARS["spark_records_per_second"],
        },
    }
    return {"rows": rows, "verdicts": verdicts}


def _f(value: float | None, digits: int = 3) -> str:
    """``digits`` significant digits below 10, one decimal below 1000, none from there on."""
    return harness.number(value, ",.1f", small=f".{digits}g", large=",.0f")


def _rate(value: float | None) -> str:
    return harness.number(value, ",.0f")


def _bold(text: str) -> str:
    return f"**{text}**"


def _met(flag: bool | None) -> str:
    return {True: "met", False: "NOT met", None: "not measured"}[flag]


def _load(run: dict[str, Any]) -> str:
    machine_state = run["machine"]
    return f"{machine_state['load_average_before'][0]:.1f}→{machine_state['load_average_after'][0]:.1f} / {machine_state['other_cores_busy']:.2f}"


def bars_table(verdicts: dict[str, Any]) -> list[str]:
    vae, training, spark = verdicts["vae_training"], verdicts["filter_training"], verdicts["spark_privatization"]
    rows = [
        ("VAE training on Adult < 5 min", f"{_f(vae['seconds'])} s", _bold(_met(vae["met"]))),
        ("filter training per choice < 30 s",
         f"median {_f(training['median_seconds'])} s, max {_f(training['max_seconds'])} s over "
         f"{training['samples']} trainings", _bold(_met(training["met"]))),
    ]
    if spark["largest_n"] is not None:
        rows.append((
            "privatization ≥ 50,000 records/s on Spark local[2]",
            f"{_rate(spark['records_per_second_by_n'][str(spark['largest_n'])])} records/s at n = "
            f"{spark['largest_n']:,} (privatize stage)", _bold(_met(spark["met"])),
        ))
    return harness.table(["bar", "measured", "verdict"], rows, align="lll")


def encoder_table(encoder: dict[str, Any]) -> list[str]:
    return harness.table(
        ["rows", "epochs", "latent", "hidden", "train-encoder s", "of which VAE fit s", "read training s",
         "driver peak MiB", "load"],
        [(encoder["training_rows"], encoder["training"].get("config", {}).get("epochs", "?"),
          encoder["architecture"].get("latent_dimension", "?"), str(encoder["architecture"].get("hidden_widths", "?")),
          _bold(_f(encoder["wall_seconds"])), encoder["train_vae_seconds"],
          encoder["stages"].get("read training records"), encoder["memory"]["driver_ru_maxrss_mib"], _load(encoder))],
        align="rrrlrrrrl", formats=[",", None, None, None, None, _f, _f, ".0f", None],
    )


def throughput_table(summary: dict[str, Any], report: dict[str, Any]) -> list[str]:
    return harness.table(
        ["n", "Spark privatize rec/s", "Spark release rec/s", "Spark engine start s", "local privatize rec/s",
         "local release rec/s", "floor rec/s", "batch fn rec/s", "+ Arrow rec/s", "Spark / floor", "local / floor"],
        [(row["n"], _bold(_rate(row.get("spark_privatize_records_per_second"))),
          row.get("spark_release_records_per_second"), (entry.get("spark") or {}).get("engine_start_seconds"),
          row.get("local_privatize_records_per_second"), row.get("local_release_records_per_second"),
          row.get("floor_records_per_second"), row.get("batch_function_records_per_second"),
          row.get("batch_function_with_arrow_records_per_second"), _f(row.get("spark_privatize_over_floor"), 2),
          _f(row.get("local_privatize_over_floor"), 2))
         for row, entry in zip(summary["rows"], report["throughput"], strict=True)],
        align="r" * 11, formats=[",", None, _rate, _f, _rate, _rate, _rate, _rate, _rate, None, None],
    )


STAGES = ("list input", f"train filter {CHOICE}", "wait for engine", "fingerprint input", "read input", "privatize",
          "validate output", "publish")


def stages_table(report: dict[str, Any]) -> list[str]:
    rows = []
    for entry in report["throughput"]:
        for engine in ("spark", "local"):
            run = entry.get(engine)
            if not run:
                continue
            stages = run["stages"]
            cells = [stages.get(name) for name in STAGES]
            cells.insert(len(STAGES) - 1, run.get("output_suites_seconds"))
            other = run["wall_seconds"] - sum(stages.get(name, 0.0) for name in STAGES)
            rows.append((entry["n"], engine, _bold(_f(run["wall_seconds"])), *cells, other, _load(run)))
    return harness.table(
        ["n", "engine", "release s", "list input", "train filter", "wait for engine", "fingerprint input",
         "read input (engine: read, check, encode, stage)", "privatize", "validate output", "of which GX suites",
         "publish", "other", "load"],
        rows, align="rl" + "r" * 11 + "l", formats=[",", None, None, *[_f] * 10, None],
    )


def memory_table(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return harness.table(
        ["run", "driver ru_maxrss", "tree peak (sampled)", "JVM peak", "Python workers peak"],
        [(label, memory["driver_ru_maxrss_mib"], memory["tree_peak_mib"], memory["jvm_peak_mib"],
          memory["python_workers_peak_mib"]) for label, run in runs for memory in (run["memory"],)],
        formats=[None, ".0f", ".0f", ".0f", ".0f"],
    )


def profile_table(n: int, spark_run: dict[str, Any], profile: dict[str, Any]) -> list[str]:
    task = profile.get("task_function", "privatize_file")
    variants = [(f"the release's privatize stage (map_fragments of {task}, collected)",
                 spark_run.get("privatize_write_accounting")),
                ("read + write the staged input, no map (engine IO)", profile["io_only"]),
                (f"the pipeline's stage again (map_fragments of {task}, a task per release file), batch fn timed",
                 profile["engine_stage"]),
                ("variant: fused map and write fed by a JVM scan", profile["fused_map_and_write"]),
                ("variant: workers read row groups dealt round-robin", profile["worker_read_fused"])]
    rows = []
    for label, accounting in variants:
        if not accounting:
            continue
        cpu, calls = accounting["cpu_seconds"], accounting.get("batch_function")
        rows.append((
            label, accounting["wall_seconds"], n / accounting["wall_seconds"], cpu["driver"], cpu["jvm"],
            cpu["python_workers"], calls["cpu_seconds_total"] if calls else None,
            accounting["other_processes_cpu_seconds"],
            f"{_f(calls['wall_seconds_total'])} ({', '.join(_f(v) for v in calls['wall_seconds_per_worker'])})"
            if calls else "–",
        ))
    return harness.table(
        ["variant", "wall s", "rec/s", "driver", "JVM", "Python workers", "of which in the batch fn",
         "other processes (not ours)", "batch fn wall s (per worker)"],
        rows, align="l" + "r" * 7 + "l", formats=[None, _f, _rate, _f, _f, _f, _f, _f, None],
    )


def markdown(report: dict[str, Any]) -> str:
    summary = report["summary"]
    host = report["machine"]
    encoder = report["encoder"]
    example = report.get("example_release")
    samples = ([("example config (local, adult-test, evaluation on)", example)] if example else []) + [
        (f"{engine} n = {entry['n']:,}", entry[engine]) for entry in report["throughput"] for engine in ("spark", "local")
        if entry.get(engine)]
    lines = [
        "## Filter release kind: performance (issue 5)",
        "",
        f"Mode: {report['mode']}. Machine: {host['processor']} ({host['cores']} cores, {host['memory']}, shared "
        f"with other jobs); `uptime` at start: `{host['uptime_at_start']}`; at end: `{report.get('uptime_at_end', '')}`. "
        f"Python {host['python']}, torch {host['torch']}. Every measurement in its own child process with "
        "OPENBLAS/OMP/MKL_NUM_THREADS=1 (torch one thread, set by the pipeline). 'load' columns: 1-minute load "
        "average before→after the child / cores kept busy by *other* processes during it (from /proc/stat).",
        f"Benchmark script wall time: {report['wall_seconds'] / 60:.1f} min.",
        "",
        "### Bars",
        "",
        *bars_table(summary["verdicts"]),
        "",
        "### 1. VAE training (`train_encoder`, full adult-train.csv)",
        "",
        *encoder_table(encoder),
        "",
        "### 2. Filter training per choice (private sex, utility income, budget 2, default FilterTraining)",
        "",
        "Every release trains its filter (keyed by the release id) on all 32,561 training records: one sample "
        "per release run.",
        "",
        *harness.table(
            ["run", "training records", "filter training s", "distortion (budget 2)", "load"],
            [(label, run["filter_training_records"], _bold(_f(run["filter_training_seconds"])),
              run["filter_distortion"], _load(run)) for label, run in samples],
            align="lrrrl", formats=[None, ",", None, ".3f", None],
        ),
    ]
    if example:
        lines += ["", f"The example config end to end (local engine, 16,281 records, evaluation on): "
                  f"{_f(example['wall_seconds'])} s; stages: "
                  + ", ".join(f"{key} {_f(value)}" for key, value in example["stages"].items()) + "."]
    lines += [
        "",
        "### 3. Privatization throughput (evaluation disabled in these runs)",
        "",
        "Input: adult-test.csv rows replicated to n, one Parquet file. 'privatize' = the release's "
        "`timings[\"privatize\"]` in its internal record (one engine task per release file: its staged records "
        "read, privatized and written); "
        "'release' = the whole `run_filter_release` call with the engine already started (its start is the next "
        "column; the local engine's is ~0). Floor = `privatize_features` + `decode_features` in-process on one "
        "thread, calls of 250,000 rows; 'batch fn' = `privatized_rows` on pandas frames; '+ Arrow' = "
        "`apply_batch_function` (Arrow→pandas→batch fn→Arrow), one thread.",
        "",
        *throughput_table(summary, report),
        "",
        "Stage seconds of the releases:",
        "",
        *stages_table(report),
        "",
        "### 4. Peak memory (MiB)",
        "",
        *memory_table([("train-encoder", encoder)] + ([("example release", example)] if example else []) + [
            (f"{engine} n = {entry['n']:,}", entry[engine]) for entry in report["throughput"]
            for engine in ("spark", "local", "floor") if entry.get(engine)]),
        "",
        "### Profile of the Spark privatize stage",
        "",
    ]
    for entry in report["throughput"]:
        floor, spark_run = entry.get("floor"), entry.get("spark")
        if not floor:
            continue
        parts = floor["math_breakdown_seconds"]
        total = sum(parts.values())
        lines.append(f"In-process math at n = {entry['n']:,} (first {floor['math_breakdown_rows']:,} records, one "
                     "thread): " + ", ".join(f"{name} {100 * value / total:.0f}%" for name, value in parts.items())
                     + f" (total {_rate(floor['math_breakdown_rows'] / total)} records/s); reading and encoding the "
                     f"input on the driver: {_rate(entry['n'] / floor['read_and_encode_seconds'])} records/s.")
        if floor.get("comparison_with_spark_release"):
            comparison = floor["comparison_with_spark_release"]
            lines.append("")
            lines.append(f"Floor vs the Spark release at n = {entry['n']:,}: "
                         + ("identical records" if comparison["identical"] else f"DIFFER in {comparison['differing_columns']}")
                         + f" ({comparison['records']:,} records, {len(comparison['columns_compared'])} columns).")
        profile = (spark_run or {}).get("profile")
        if profile:
            lines += ["", f"Spark at n = {entry['n']:,}: staged input {profile['staged_mib']:.0f} MiB in "
                      f"{profile['staged_files']} file(s) of {profile['staged_columns']} columns, "
                      f"{profile.get('input_partitions', '?')} partition(s). CPU seconds by process during each "
                      "variant (same engine, after the release):", "",
                      *profile_table(entry["n"], spark_run, profile)]
        lines.append("")
    if report.get("analysis"):
        lines += ["### Reading", "", *report["analysis"]]
    return "\n".join(lines)


ONE_HOT_STAGING_HISTORY = (
    "Before commit 03d082d (staging with one float32 column per one-hot entry: 110 columns, one staged file), an "
    "earlier run of this script measured the Spark privatize stage at 38,270 records/s (n = 10^6) and 38,488 "
    "records/s (n = 2·10^6), other jobs keeping about 0.85 of the 2 cores busy; there the engine's read + write of "
    "the staged input alone cost the JVM 13.3 CPU-seconds at n = 2·10^6 against 4.1 for a 17-column compact form, "
    "and a staged input under ~8 MiB was read as one partition (one core idle at n = 10^5)."
)


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "–"


def analysis(report: dict[str, Any]) -> list[str]:
    """Sentences computed from the measurements: load during each Spark stage, where the CPU goes,
    the fixed costs, the driver-side stages of the whole release."""
    lines: list[str] = []
    runs = [entry for entry in report["throughput"] if entry.get("spark")]
    for entry in runs:
        spark = entry["spark"]
        stage = spark.get("privatize_write_accounting") or {}
        replay = (spark.get("profile") or {}).get("engine_stage")
        text = (f"- n = {entry['n']:,}: the release's Spark privatize stage ran at "
                f"{_rate(entry['n'] / spark['stages']['privatize'])} records/s while other processes kept "
                f"{stage.get('other_processes_cpu_seconds', 0) / max(stage.get('wall_seconds', 1), 1e-9):.2f} cores busy")
        if replay:
            text += (f"; the same stage replayed on the same engine: {_rate(entry['n'] / replay['wall_seconds'])} "
                     f"records/s with {replay['other_processes_cpu_seconds'] / replay['wall_seconds']:.2f} cores busy "
                     "elsewhere")
        lines.append(text + ".")
    if runs:
        largest = runs[-1]
        replay = (largest["spark"].get("profile") or {}).get("engine_stage")
        floor = largest.get("floor")
        if replay and replay.get("batch_function", {}).get("cpu_seconds_total"):
            cpu = replay["cpu_seconds"]
            batch = replay["batch_function"]["cpu_seconds_total"]
            ours = replay["our_cpu_seconds"]
            outside = cpu["python_workers"] - batch
            text = (f"- Where the CPU goes (replay at n = {largest['n']:,}, {_f(ours)} CPU-seconds of ours): the batch "
                    f"function {_f(batch)} s ({_share(batch, ours)}; {_rate(largest['n'] / batch)} records per "
                    "CPU-second")
            if floor:
                text += f", the one-thread in-process batch function: {_rate(largest['n'] / floor['batch_function_seconds'])}"
            text += (f"), the JVM {_f(cpu['jvm'])} s ({_share(cpu['jvm'], ours)}: scheduling the tasks and collecting "
                     f"their results; the workers read and write the files), the Python workers outside the batch "
                     f"function {_f(outside)} s ({_share(outside, ours)}: reading the staged file, pandas conversion and "
                     "the Parquet write). With 2 cores the ceiling is "
                     f"about {_rate(2 * largest['n'] / ours)} records/s when nothing else runs.")
            lines.append(text)
        profile = largest["spark"].get("profile") or {}
        fused, worker_read = profile.get("fused_map_and_write"), profile.get("worker_read_fused")
        if fused and worker_read and replay:
            lines.append(
                f"- Variants at n = {largest['n']:,} (benchmark code on the same engine): the pipeline's stage (workers "
                f"read their files) costs the JVM {_f(replay['cpu_seconds']['jvm'])} CPU-seconds; the fused pass fed by "
                f"a JVM scan {_f(fused['cpu_seconds']['jvm'])} s ({_rate(largest['n'] / fused['wall_seconds'])} records/s, other "
                f"processes {fused['other_processes_cpu_seconds'] / fused['wall_seconds']:.2f} cores); workers reading "
                f"row groups dealt round-robin: JVM {_f(worker_read['cpu_seconds']['jvm'])} s, "
                f"{_rate(largest['n'] / worker_read['wall_seconds'])} records/s (other processes "
                f"{worker_read['other_processes_cpu_seconds'] / worker_read['wall_seconds']:.2f} cores). The wall-time "
                "differences between these are within the machine's load noise; the CPU split is the robust part.")
    floors = [entry["floor"] for entry in report["throughput"] if entry.get("floor", {}).get(
        "first_configure_deterministic_torch_seconds") is not None]
    if floors:
        configure = float(np.median([floor["first_configure_deterministic_torch_seconds"] for floor in floors]))
        loading = float(np.median([floor["artifact_from_bytes_seconds"] for floor in floors]))
        smallest = report["throughput"][0]
        lines.append(
            f"- Fixed costs (why n = {smallest['n']:,} is slow on Spark): in a fresh process the first "
            f"`configure_deterministic_torch` takes {_f(configure)} s (`torch.use_deterministic_algorithms` imports "
            f"torch._dynamo/_inductor) and `VaeArtifact.from_bytes` {_f(loading)} s; every Spark Python worker pays them "
            "at its first batch (the warm-up job imports `pipelines.filter.blocks` but does not build the model), and "
            "the JVM's first real job after start-up runs slower than the replays (JIT).")
    if report["throughput"]:
        largest = report["throughput"][-1]
        for engine in ("spark", "local"):
            run = largest.get(engine)
            if not run:
                continue
            stages = run["stages"]
            checks = stages.get("read input", 0) + stages.get("validate output", 0)
            lines.append(
                f"- Whole release at n = {largest['n']:,} on {engine}: {_f(run['wall_seconds'])} s, of which reading, "
                f"checking, encoding and staging the input on the engine {_f(stages.get('read input'))} s and the "
                f"output validation {_f(stages.get('validate output'))} s (the released files checked on the engine, "
                f"then the Great Expectations suites on the summed metrics: {_f(run.get('output_suites_seconds'))} s) = "
                f"{_share(checks, run['wall_seconds'])}; filter training "
                f"{_f(stages.get(f'train filter {CHOICE}'))} s; privatize {_f(stages.get('privatize'))} s.")
    lines.append(f"- History: {ONE_HOT_STAGING_HISTORY}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 1e5 only")
    parser.add_argument("--sizes", type=int, nargs="*", help="override the record counts")
    parser.add_argument("--render", type=Path, help="only re-render the Markdown of a saved results JSON")
    parser.add_argument("--measure", choices=("encoder", "release", "floor"), help=argparse.SUPPRESS)
    parser.add_argument("--config", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--release-id", help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--replay", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--compare", action="store_true", help=argparse.SUPPRESS)
    harness.add_results_option(parser)
    arguments = parser.parse_args()
    if arguments.render:
        saved = json.loads(arguments.render.read_text())
        saved["analysis"] = analysis(saved)
        arguments.render.with_suffix(".md").write_text(markdown(saved) + "\n")
        return
    if arguments.measure == "encoder":
        print(json.dumps(measure_encoder(arguments.config)))
        return
    if arguments.measure == "release":
        print(json.dumps(measure_release(arguments.config, arguments.release_id, arguments.engine, arguments.replay)))
        return
    if arguments.measure == "floor":
        print(json.dumps(measure_floor(arguments.config, arguments.release_id, arguments.compare)))
        return

    sizes = tuple(arguments.sizes) if arguments.sizes else QUICK_SIZES if arguments.quick else FULL_SIZES
    started = time.perf_counter()

    def log(text: str) -> None:
        print(f"[{time.perf_counter() - started:6.0f}s] {text} (load {os.getloadavg()[0]:.1f})", flush=True)

    report: dict[str, Any] = {
        "description": __doc__.split("\n\n")[0],
        "mode": "quick" if arguments.quick else "full",
        "machine": machine(),
        "bars": BARS,
        "secret_hex": SECRET_HEX,
        "master": MASTER,
        "throughput": [],
    }
    with tempfile.TemporaryDirectory(prefix="privlake-filter-bench-") as temporary:
        folder = Path(temporary)
        lake = harness.benchmark_lake(folder / "lake", example_document()["dataset"])
        base = write_config(folder, "encoder", config_document(lake, None, "local", True))
        report["encoder"] = run_child(["--measure", "encoder", "--config", str(base)], folder / "encoder.log")
        log(f"train-encoder: {report['encoder']['wall_seconds']:.1f} s")
        report["example_release"] = run_child(
            ["--measure", "release", "--config", str(base), "--release-id", "bench-example", "--engine", "local"],
            folder / "example.log")
        log(f"example release: {report['example_release']['wall_seconds']:.1f} s, filter training "
            f"{report['example_release']['filter_training_seconds']:.1f} s")
        for n in sizes:
            input_path, seconds = write_replicated_input(n, folder)
            log(f"n={n:,}: input written in {seconds:.1f} s ({input_path.stat().st_size / 2**20:.0f} MiB)")
            entry: dict[str, Any] = {"n": n, "input_seconds": seconds, "input_mib": input_path.stat().st_size / 2**20}
            for engine in ("spark", "local"):
                config = write_config(folder, f"{engine}-{n}", config_document(lake, input_path, engine, False))
                arguments_list = ["--measure", "release", "--config", str(config), "--release-id",
                                  f"bench-{engine}-{n}", "--engine", engine]
                if engine == "spark":
                    arguments_list.append("--replay")
                entry[engine] = run_child(arguments_list, folder / f"{engine}-{n}.log")
                run = entry[engine]
                log(f"  {engine}: privatize {run['stages']['privatize']:.1f} s "
                    f"({n / run['stages']['privatize']:,.0f} rec/s), release {run['wall_seconds']:.1f} s, "
                    f"stages {run['stages']}")
            floor_config = folder / f"spark-{n}.yaml"
            floor_arguments = ["--measure", "floor", "--config", str(floor_config), "--release-id", f"bench-spark-{n}"]
            if n == min(sizes):
                floor_arguments.append("--compare")
            entry["floor"] = run_child(floor_arguments, folder / f"floor-{n}.log")
            log(f"  floor: {n / entry['floor']['math_seconds']:,.0f} rec/s; batch fn "
                f"{n / entry['floor']['batch_function_seconds']:,.0f}; + Arrow "
                f"{n / entry['floor']['batch_function_with_arrow_seconds']:,.0f}")
            report["throughput"].append(entry)
            input_path.unlink()
    report["summary"] = summarize(report)
    report["analysis"] = analysis(report)
    report["uptime_at_end"] = harness.uptime()
    report["wall_seconds"] = time.perf_counter() - started
    stem = "filter_performance_quick" if arguments.quick else "filter_performance"
    harness.write_json(arguments.results_dir, stem, report, indent=2)
    text = markdown(report)
    harness.write_markdown(arguments.results_dir, stem, text + "\n")
    print(text)
    log("done")


if __name__ == "__main__":
    main()
