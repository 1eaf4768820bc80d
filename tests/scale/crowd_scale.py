"""The driver-memory measurements of the crowd release (issue 15): generated partitioned claims, a
release run in a child process, and what the child measures.

``write_claims(folder, n, rows_per_file)`` writes ``n`` claims (integer object ids, 20 claims an
object from 20 of ``sources`` (default 400) integer sources, values around each object's truth) as hive-partitioned
Parquet (``day=NNNN/part-00000.parquet``, ``rows_per_file`` each) and a config whose lake is a test
lake with a budget for the dataset. Data go under a temporary folder, never into the repository.

``python -m tests.scale.crowd_scale CONFIG ENGINE [--traced BUCKET_BYTES]`` runs one release in
this process and prints one JSON line: the release's wall seconds and its input rows; with
``--traced``, the peak of Python's traced allocations (NumPy and pandas buffers included) plus
Arrow's memory pool peak during the *input pass* (listing, both engine passes, the gate), with the
object buckets sized for ``BUCKET_BYTES`` of input and 2,500 claims a pass-2 task (so that a small
input spreads over as many tasks as a large one does by default).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

CLAIMS_PER_OBJECT = 20
SOURCES = 400


def write_claims(folder: Path, n: int, rows_per_file: int, dataset: str = "scale", sources: int = SOURCES) -> Path:
    """The claims and a config (its path returned) under ``folder``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from tests.lake_setup import prepare_lake

    rng = np.random.default_rng(15)
    claims = folder / "claims"
    for index, start in enumerate(range(0, n, rows_per_file)):
        rows = min(rows_per_file, n - start)
        positions = np.arange(start, start + rows, dtype=np.int64)
        objects = positions // CLAIMS_PER_OBJECT
        source_ids = (objects * 7 + positions % CLAIMS_PER_OBJECT) % sources
        truth = (objects % 50).astype(np.float64) + 20.0
        table = pa.table({
            "object_id": pa.array(objects),
            "source_id": pa.array(source_ids),
            "value": pa.array(np.round(truth + rng.normal(0.0, 3.0, rows), 2)),
        })
        part = claims / f"day={index:04d}"
        part.mkdir(parents=True)
        pq.write_table(table, part / "part-00000.parquet")
    config = {
        "kind": "crowd", "dataset": dataset, "lake": str(folder / "lake"),
        "input": {"path": "claims"},
        "privacy": {"k": 4, "gamma": 4.0, "epsilon0": 4.0, "delta": 0.01, "weight_ratio_cap": 4.0,
                    "value_range": [0.0, 100.0]},
        "synthesis": {"claims_per_object": 2, "precision": 0.01, "bandwidth": {"method": "fixed", "value": 2.0}},
        "weights": {"method": "uniform"},
    }
    path = folder / "crowd.yaml"
    path.write_text(yaml.safe_dump(config))
    prepare_lake(folder / "lake", dataset)
    return path


def measure(config_path: Path, engine_name: str, bucket_bytes: int | None) -> dict:
    """One release (``bucket_bytes`` unset) or, traced, the input pass alone (module docstring)."""
    import os

    from pipelines.platform.validation import start_gate_worker

    start_gate_worker()  # as `privlake run` does: GX runs in its own process
    os.environ.setdefault("PRIVLAKE_TEST_SECRET", "ab" * 32)
    import tracemalloc

    import pyarrow as pa

    import pipelines.crowd.engine_input as engine_input
    from pipelines.crowd.pipeline import PreparedInput, listing_spec, read_claims_on_engine, run_crowd_release
    from pipelines.engines import make_engine
    from pipelines.platform.config import load_config
    from pipelines.platform.sources import list_fragments

    config = load_config(config_path)
    if bucket_bytes is None:
        with make_engine(engine_name) as engine:
            start = time.perf_counter()
            outcome = run_crowd_release(config, release_id="scale-1", engine=engine)
            seconds = time.perf_counter() - start
        return {"seconds": seconds, "rows": outcome.manifest["rows"], "status": outcome.status}
    engine_input.BUCKET_INPUT_BYTES = bucket_bytes
    engine_input.TASK_CLAIMS = 2_500
    staging = config_path.parent / "traced-staging"
    tracemalloc.start()
    arrow_before = pa.default_memory_pool().bytes_allocated()
    with make_engine(engine_name) as engine:
        start = time.perf_counter()
        prepared = PreparedInput(list_fragments(listing_spec(config.input)), "claims", staging)
        checked = read_claims_on_engine(config, prepared, engine)
        seconds = time.perf_counter() - start
    _, traced_peak = tracemalloc.get_traced_memory()
    return {"seconds": seconds, "n": checked.rows, "traced_peak_bytes": traced_peak,
            "arrow_peak_bytes": pa.default_memory_pool().max_memory() - arrow_before}


def main(arguments: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config", type=Path)
    parser.add_argument("engine")
    parser.add_argument("--traced", type=int, default=None, metavar="BUCKET_BYTES")
    options = parser.parse_args(arguments)
    print(json.dumps(measure(options.config, options.engine, options.traced)))


if __name__ == "__main__":
    main(sys.argv[1:])
