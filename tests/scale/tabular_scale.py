"""The driver-memory measurements of the tabular release (issue 15): generated partitioned records,
a release run in a child process, and what the child measures.

``write_records(folder, n, rows_per_file)`` writes ``n`` census-like records (six attributes: two
numeric, four categorical) as hive-partitioned Parquet (``batch=NNNN/part-00000.parquet``,
``rows_per_file`` each; the partition column is not an attribute) with the schema beside it, and a
config (``omega: all``, 10,000 released records, so that the output stays small while the input
grows) whose lake is a test lake with a budget for the dataset. Data go under a temporary folder.

``python -m tests.scale.tabular_scale CONFIG ENGINE [--traced]`` runs one release in this process
and prints one JSON line: the release's wall seconds and its input rows; with ``--traced``, the peak
of Python's traced allocations (NumPy and pandas buffers included) plus Arrow's memory pool peak
during the release.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.scale.harness import child_main, release_figures, start_child, write_config, write_partition

SCHEMA = {
    "attributes": [
        {"name": "age", "type": "numeric", "bounds": [0, 100], "bins": 10, "integer": True},
        {"name": "sex", "type": "categorical", "categories": ["F", "M"]},
        {"name": "education", "type": "categorical", "categories": ["none", "school", "college", "degree"]},
        {"name": "income", "type": "numeric", "bounds": [0, 200000], "bins": 8},
        {"name": "married", "type": "categorical", "categories": ["no", "yes", "widowed"]},
        {"name": "label", "type": "categorical", "categories": ["low", "high"]},
    ]
}
RELEASED = 10_000
TEST_SECRET = "5ca1e" * 12 + "5ca1"


def write_records(folder: Path, n: int, rows_per_file: int, dataset: str = "scale") -> Path:
    """The records, the schema and a config (its path returned) under ``folder``."""
    import numpy as np
    import pyarrow as pa
    import yaml


    rng = np.random.default_rng(15)
    records = folder / "records"
    for index, start in enumerate(range(0, n, rows_per_file)):
        rows = min(rows_per_file, n - start)
        age = rng.integers(18, 90, rows)
        education = np.minimum(3, rng.poisson(1.0 + (age < 40), rows))
        income = np.clip(rng.gamma(2.0, 8000 * (1 + education), rows), 0, 200000).round(2)

        def labels(values: list[str], codes: np.ndarray) -> pa.DictionaryArray:
            return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(values, pa.string()))

        table = pa.table({
            "age": pa.array(age.astype(np.int64)),
            "sex": labels(["F", "M"], rng.integers(0, 2, rows)),
            "education": labels(["none", "school", "college", "degree"], education),
            "income": pa.array(income),
            "married": labels(["no", "yes", "widowed"], np.where(age > 70, 2, (rng.random(rows) < 0.5).astype(int))),
            "label": labels(["low", "high"], (income + rng.normal(0, 15000, rows) > 40000).astype(int)),
        })
        write_partition(records, "batch", index, table)
    (folder / "schema.yaml").write_text(yaml.safe_dump(SCHEMA))
    config = {
        "kind": "tabular", "dataset": dataset, "lake": str(folder / "lake"),
        "input": {"path": "records", "schema": "schema.yaml"},
        "privacy": {"epsilon": 2.0, "delta": 1e-6, "k": 50, "gamma": 2.0},
        "model": {"max_degree": 2, "complexity_cap": 256},
        "synthesis": {"records": RELEASED},
    }
    return write_config(folder, config)


def measure(config_path: Path, engine_name: str, traced: bool) -> dict:
    """One release in this process (module docstring)."""
    start_child(TEST_SECRET)
    from pipelines.tabular.pipeline import run_tabular_release

    return release_figures(run_tabular_release, config_path, engine_name, traced)


if __name__ == "__main__":
    child_main(measure, sys.argv[1:])
