"""The local engine groups a large input by spilling it to key buckets (``pipelines/engines/local.py``,
issue 15): above ``spill_bytes`` ``cluster_by_key`` writes the rows to bucket files as it reads each
partition and reads a bucket only when a job maps it, so the process never holds the input — and
``map_groups``, ``write_groups`` and a whole release give what they give without spilling."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.engines import local
from pipelines.engines.local import LazyPartitions, LocalEngine

SCHEMA = pa.schema([pa.field("source", pa.string()), pa.field("object", pa.int64()),
                    pa.field("value", pa.float64())])
OUT = pa.schema([pa.field("source", pa.string()), pa.field("rank", pa.int64()), pa.field("running", pa.float64()),
                 pa.field("size", pa.int64())])


def claims(rows: int = 20_000, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"source": [f"s{value:04d}" for value in rng.integers(0, 700, rows)],
                         "object": rng.integers(0, 5_000, rows).astype(np.int64),
                         "value": rng.normal(size=rows).round(3)})


def per_group(frame: pd.DataFrame, side: object) -> pd.DataFrame:
    """A function of whole groups in their row order: rank, running sum and the group's size."""
    grouped = frame.groupby("source", sort=False)
    return pd.DataFrame({"source": frame["source"].to_numpy(),
                         "rank": grouped.cumcount().to_numpy(np.int64),
                         "running": grouped["value"].cumsum().to_numpy(),
                         "size": grouped["value"].transform("size").to_numpy(np.int64)})


def grouped(engine: LocalEngine, frame: pd.DataFrame) -> pd.DataFrame:
    result = engine.map_groups(engine.from_pandas(frame, SCHEMA), "source", per_group, OUT, keeps_groups=True)
    return engine.collect(result).sort_values(["source", "rank"], ignore_index=True)


def test_map_groups_spilled_equals_held() -> None:
    frame = claims()
    held = grouped(LocalEngine(parallelism=3), frame)
    spilling = LocalEngine(parallelism=3, spill_bytes=0)
    clustered = spilling.cluster_by_key(spilling.from_pandas(frame, SCHEMA), "source")
    assert isinstance(clustered.partitions, LazyPartitions), "a large input is not held: its buckets are read on demand"
    assert len(clustered.partitions) > 3
    pd.testing.assert_frame_equal(grouped(spilling, frame), held, check_exact=True)
    for partition in clustered.partitions:  # whole groups, sorted
        keys = partition.column("source").to_pylist()
        assert keys == sorted(keys)
    sources = [set(partition.column("source").to_pylist()) for partition in clustered.partitions]
    assert sum(len(found) for found in sources) == len(set().union(*sources)), "a group in one bucket only"


def test_the_spill_folder_goes_with_its_collection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local.tempfile, "tempdir", str(tmp_path))
    engine = LocalEngine(spill_bytes=0)
    clustered = engine.cluster_by_key(engine.from_pandas(claims(2_000), SCHEMA), "source")
    mapped = engine.map_groups(clustered, "source", per_group, OUT)
    folders = list(tmp_path.glob("privlake-groups-*"))
    assert len(folders) == 1 and any(folders[0].iterdir())
    del clustered
    gc.collect()
    assert folders[0].exists(), "a collection mapped from the buckets still reads them"
    assert engine.count(mapped) == 2_000
    del mapped
    gc.collect()
    assert not folders[0].exists()


def test_write_groups_spilled_gives_whole_sorted_groups(tmp_path: Path) -> None:
    frame = claims(5_000)
    engine = LocalEngine(parallelism=2, spill_bytes=0)
    files = engine.write_groups(engine.from_pandas(frame, SCHEMA), "source", tmp_path / "groups", SCHEMA)
    seen: set[str] = set()
    total = 0
    for path in files:
        keys = pq.read_table(path).column("source").to_pylist()
        assert keys == sorted(keys) and not (set(keys) & seen)
        seen |= set(keys)
        total += len(keys)
    assert total == len(frame)


PROBE = """
import json, sys, tracemalloc
import numpy as np, pandas as pd, pyarrow as pa
from pipelines.engines.local import LocalEngine
from tests.engines.test_local_spill import SCHEMA, OUT, claims, per_group
spill = int(sys.argv[1]); folder = sys.argv[2]
writer = LocalEngine(parallelism=8)
frame = claims(400_000, seed=5)
files = writer.write_groups(writer.from_pandas(frame, SCHEMA), "object", __import__("pathlib").Path(folder), SCHEMA)
input_bytes = int(pa.Table.from_pandas(frame, schema=SCHEMA, preserve_index=False).nbytes)
del frame, writer
engine = LocalEngine(parallelism=2, spill_bytes=spill)
pool = pa.default_memory_pool()
tracemalloc.start()
base_arrow = pool.bytes_allocated()
peak_arrow = 0
streamed = engine.read_groups_streaming(files, "object", SCHEMA)
mapped = engine.map_groups(streamed, "source", per_group, OUT)
rows = 0
for partition in mapped.partitions:
    rows += partition.num_rows
    peak_arrow = max(peak_arrow, pool.bytes_allocated() - base_arrow)
    del partition
traced = tracemalloc.get_traced_memory()[1]
print(json.dumps({"rows": rows, "input_bytes": input_bytes, "traced_peak": traced, "arrow_peak": peak_arrow}))
"""


def probe(spill_bytes: int, folder: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, str(spill_bytes), str(folder)], capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_grouping_a_streamed_input_holds_a_bucket_not_the_input(tmp_path: Path) -> None:
    """A chain from group files through ``map_groups`` by another key: held, the process holds the
    whole input (and its partitioned copy); spilled, a small share of it."""
    held = probe(1 << 40, tmp_path / "held")
    spilled = probe(0, tmp_path / "spilled")
    assert held["rows"] == spilled["rows"] == 400_000
    held_peak = held["traced_peak"] + held["arrow_peak"]
    spilled_peak = spilled["traced_peak"] + spilled["arrow_peak"]
    assert held_peak > held["input_bytes"], held
    assert spilled_peak < 0.35 * spilled["input_bytes"], spilled


def test_a_crowd_release_with_its_contribution_bound_is_the_same_spilled(tmp_path: Path) -> None:
    """The source-level unit's contribution bound groups the claims by source (``map_groups`` by
    ``source_id``), then everything by object: spilling every grouping changes nothing released."""
    from tests.e2e.crowd_cases import (
        assert_same_release,
        conformance_claims,
        conformance_config,
        release_on_engine,
    )

    claims_file = tmp_path / "claims.csv"
    conformance_claims().to_csv(claims_file, index=False)
    results = {}
    for name, spill_bytes in (("held", None), ("spilled", 0)):
        config = conformance_config(claims_file, tmp_path / name, unit="source", max_objects_per_source=5,
                                    epsilon0=6.0)
        with LocalEngine(spill_bytes=spill_bytes) as engine:
            results[name] = release_on_engine(engine, config, "spill-1")
    assert_same_release(results["held"], results["spilled"])
