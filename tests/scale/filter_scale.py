"""The driver-memory measurements of the filter release (issue 15): generated partitioned records
to privatize, a stored encoder and stored filters, and a release run in a child process.

``write_records(folder, n, rows_per_file)`` writes ``n`` records (three features, two labels, each
owner's choice) as hive-partitioned Parquet (``batch=NNNN/part-00000.parquet``), a small training
CSV (2,000 records), the feature spec and a config whose lake is a test lake with a budget; then it
trains the encoder and the filters into the lake (``train-encoder``, ``train-filters``: a release
with ``filters: {artifact: latest}`` reads no training record) with the evaluation off (the
evaluation's bounded sample is not what this measures). Data go under a temporary folder.

``python -m tests.scale.filter_scale CONFIG ENGINE [--traced]`` runs one release in this process and
prints one JSON line: wall seconds, input rows and, with ``--traced``, the peak of Python's traced
allocations plus Arrow's memory pool peak during the release, with the staged and released files
cut at ``TRACED_ROWS_PER_FILE`` records (the test's fragment size) instead of
``STAGED_ROWS_PER_FILE``, so that 10^4 and 10^5 records give tasks of the same size, as 10^6 and
10^7 do by default (the crowd's traced run sizes its tasks the same way).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.scale.harness import child_main, release_figures, start_child, write_config, write_partition

SECRET_HEX = "5ca1ab1e" * 8
FEATURES = {"features": [
    {"name": "height", "type": "numeric", "bounds": [100, 220]},
    {"name": "years", "type": "numeric", "bounds": [0, 60], "integer": True},
    {"name": "colour", "type": "categorical", "categories": ["red", "green", "blue"]},
]}


def _people(rows: int, rng) -> dict:
    import numpy as np

    group = rng.integers(0, 2, rows)
    senior = rng.integers(0, 2, rows)
    return {
        "height": np.clip(rng.normal(160 + 15 * group, 8), 100, 220).round(1),
        "years": np.clip(rng.normal(20 + 20 * senior, 6), 0, 60).round().astype(np.int64),
        "colour": np.where(rng.random(rows) < 0.6 + 0.3 * group, "blue", np.where(rng.random(rows) < 0.5, "red", "green")),
        "group": np.array(["a", "b"])[group],
        "senior": np.array(["no", "yes"])[senior],
        "choice": np.where(rng.random(rows) < 0.3, "hide-senior", "hide-group"),
    }


def write_records(folder: Path, n: int, rows_per_file: int, dataset: str = "scale") -> Path:
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import yaml

    from pipelines.filter.pipeline import train_encoder, train_filters
    from pipelines.platform.config import load_config

    rng = np.random.default_rng(15)
    for index, start in enumerate(range(0, n, rows_per_file)):
        write_partition(folder / "records", "batch", index, pa.table(_people(min(rows_per_file, n - start), rng)))
    pd.DataFrame(_people(2000, rng)).to_csv(folder / "training.csv", index=False)
    (folder / "features.yaml").write_text(yaml.safe_dump(FEATURES))
    config = {
        "kind": "filter", "dataset": dataset, "lake": str(folder / "lake"), "feature_spec": "features.yaml",
        "training": {"path": "training.csv"},
        "input": {"path": "records", "choice_column": "choice"},
        "labels": {"group": {"column": "group", "categories": ["a", "b"]},
                   "senior": {"column": "senior", "categories": ["no", "yes"]}},
        "choices": [{"name": "hide-group", "private": "group", "utility": "senior", "budget": 1.0},
                    {"name": "hide-senior", "private": "senior", "utility": "group", "budget": 1.0}],
        "encoder": {"latent_dimension": 4, "hidden_widths": [16], "training": {"epochs": 2, "batch_size": 256}},
        "filter_training": {"epochs": 2, "batch_size": 256},
        "filters": {"artifact": "latest"},
        "evaluation": {"enabled": False},
    }
    path = write_config(folder, config)
    os.environ.setdefault("PRIVLAKE_TEST_SECRET", SECRET_HEX)
    loaded = load_config(path)
    train_encoder(loaded)
    train_filters(loaded)
    return path


TRACED_ROWS_PER_FILE = 2_500


def measure(config_path: Path, engine_name: str, traced: bool) -> dict:
    """One release in this process (module docstring)."""
    start_child(SECRET_HEX)
    import pipelines.filter.pipeline as filter_pipeline

    if traced:  # files (and tasks) of a fragment's records, as a large input's are of the default size
        filter_pipeline.STAGED_ROWS_PER_FILE = TRACED_ROWS_PER_FILE
    return release_figures(filter_pipeline.run_filter_release, config_path, engine_name, traced)


if __name__ == "__main__":
    child_main(measure, sys.argv[1:])
