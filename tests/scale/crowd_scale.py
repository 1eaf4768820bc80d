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

import sys
import time
from pathlib import Path

from tests.scale.harness import (
    child_main,
    peak_memory,
    start_child,
    timed_release,
    write_config,
    write_partition,
)

CLAIMS_PER_OBJECT = 20
SOURCES = 400
TEST_SECRET = "ab" * 32


def write_claims(folder: Path, n: int, rows_per_file: int, dataset: str = "scale", sources: int = SOURCES) -> Path:
    """The claims and a config (its path returned) under ``folder``."""
    import numpy as np
    import pyarrow as pa


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
        write_partition(claims, "day", index, table)
    config = {
        "kind": "crowd", "dataset": dataset, "lake": str(folder / "lake"),
        "input": {"path": "claims"},
        "privacy": {"k": 4, "gamma": 4.0, "epsilon0": 4.0, "delta": 0.01, "weight_ratio_cap": 4.0,
                    "value_range": [0.0, 100.0]},
        "synthesis": {"mechanism": "priscrowd", "claims_per_object": 2, "precision": 0.01, "bandwidth": {"method": "fixed", "value": 2.0}},
        "weights": {"method": "uniform"},
    }
    return write_config(folder, config)


def measure(config_path: Path, engine_name: str, bucket_bytes: int | None) -> dict:
    """One release (``bucket_bytes`` unset) or, traced, the input pass alone (module docstring)."""
    start_child(TEST_SECRET)
    import pipelines.crowd.engine_input as engine_input
    from pipelines.crowd.pipeline import PreparedInput, listing_spec, read_claims_on_engine, run_crowd_release
    from pipelines.engines import make_engine
    from pipelines.platform.config import load_config
    from pipelines.platform.sources import list_fragments

    if bucket_bytes is None:
        outcome, figures = timed_release(run_crowd_release, config_path, engine_name, "scale-1", traced=False)
        return {"seconds": figures["seconds"], "rows": outcome.manifest["rows"], "status": outcome.status}
    config = load_config(config_path)
    engine_input.BUCKET_INPUT_BYTES = bucket_bytes
    engine_input.TASK_CLAIMS = engine_input.DRIVER_TASK_CLAIMS = 2_500
    staging = config_path.parent / "traced-staging"
    figures: dict = {}
    with peak_memory(figures):
        with make_engine(engine_name) as engine:
            start = time.perf_counter()
            prepared = PreparedInput(list_fragments(listing_spec(config.input)), "claims", staging)
            checked = read_claims_on_engine(config, prepared, engine)
            figures["seconds"] = time.perf_counter() - start
    return {"n": checked.rows, **figures}


if __name__ == "__main__":
    child_main(measure, sys.argv[1:], bucket_bytes=True)
