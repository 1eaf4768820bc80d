"""The driver-memory measurements of the ldp release (issue 15): generated partitioned reports, a
release run in a child process, and what the child measures.

``write_reports(folder, n, rows_per_file)`` writes ``n`` reports (unique integer user ids, four
mechanisms over 16 secrets, reports uniform in their alphabet) as hive-partitioned Parquet
(``day=NN/part-00000.parquet``, ``rows_per_file`` each) with the mechanism catalog beside it, and a
config whose lake is a test lake with a budget for the dataset. Data go under a temporary folder,
never into the repository.

``python -m tests.scale.ldp_scale CONFIG ENGINE [--traced BUCKET_BYTES]`` runs one release in this
process and prints one JSON line: the release's wall seconds and ``n``; with ``--traced``, the peak
of Python's traced allocations (NumPy and pandas buffers included) plus Arrow's memory pool peak
during the release, with the duplicate check's buckets sized for ``BUCKET_BYTES`` of input (so that a
small input already spreads over many buckets, as a large one does with the default).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.scale.harness import child_main, start_child, timed_release, write_config, write_partition

CATALOG = {
    "krr_low": {"type": "krr", "epsilon": 0.5, "input_size": 16},
    "krr_mid": {"type": "krr", "epsilon": 1.0, "input_size": 16},
    "krr_high": {"type": "krr", "epsilon": 2.0, "input_size": 16},
    "geometric": {"type": "truncated_geometric", "epsilon": 0.5, "lower": 0, "upper": 15},
}


def write_reports(folder: Path, n: int, rows_per_file: int, dataset: str = "scale") -> Path:
    """The reports, the catalog and a config (its path returned) under ``folder``."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(15)
    names = pa.array(sorted(CATALOG), pa.string())
    reports = folder / "reports"
    for index, start in enumerate(range(0, n, rows_per_file)):
        rows = min(rows_per_file, n - start)
        table = pa.table({
            "user_id": pa.array(np.arange(start, start + rows, dtype=np.int64)),
            "mechanism": pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, len(CATALOG), rows, dtype=np.int32)),
                                                        names),
            "report": pa.array(rng.integers(0, 16, rows, dtype=np.int64)),
        })
        write_partition(reports, "day", index, table)
    (folder / "catalog.json").write_text(json.dumps(CATALOG))
    config = {
        "kind": "ldp", "dataset": dataset, "lake": str(folder / "lake"),
        "input": {"path": "reports", "catalog": "catalog.json"},
        "secrets": {"layout": "line", "values": 16},
        "estimator": {"method": "gibu"},
    }
    return write_config(folder, config)


def measure(config_path: Path, engine_name: str, bucket_bytes: int | None) -> dict:
    """One release in this process (module docstring)."""
    start_child()
    import pipelines.platform.repeated_keys as repeated_keys
    from pipelines.ldp.pipeline import run_ldp_release

    if bucket_bytes is not None:
        repeated_keys.BUCKET_INPUT_BYTES = bucket_bytes
    outcome, figures = timed_release(run_ldp_release, config_path, engine_name, "scale-1", bucket_bytes is not None)
    return {"n": outcome.manifest["n"], "status": outcome.status, **figures}


if __name__ == "__main__":
    child_main(measure, sys.argv[1:], bucket_bytes=True)
