"""The local engine's ``read_groups_streaming`` (issue 15): group files read only when a job
iterates them, maps over them computed file by file and never held, ``persist`` holding them —
with the same results as ``read_groups``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.engines.arrow import write_group_files
from pipelines.engines.local import LazyPartitions, LocalEngine

SCHEMA = pa.schema([pa.field("key", pa.int64()), pa.field("value", pa.int64())])
CALLS = {"doubled": 0}


def doubled(frame: pd.DataFrame, side: object) -> pd.DataFrame:
    CALLS["doubled"] += 1
    return frame.assign(value=frame["value"] * 2)


def test_streamed_group_files_give_the_same_results_and_are_never_held(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    table = pa.table({"key": rng.integers(0, 50, 2_000), "value": rng.integers(0, 9, 2_000)}, schema=SCHEMA)
    files = write_group_files(table, "key", tmp_path / "groups", 5)
    engine = LocalEngine(parallelism=3, rows_per_call=64)
    held = engine.map_groups(engine.read_groups(files, "key", SCHEMA), "key", doubled, SCHEMA)
    CALLS["doubled"] = 0
    streamed = engine.map_groups(engine.read_groups_streaming(files, "key", SCHEMA), "key", doubled, SCHEMA,
                                 keeps_groups=True)
    assert isinstance(streamed.partitions, LazyPartitions) and CALLS["doubled"] == 0, "nothing computed yet"
    expected = engine.sum_by_key(held, "key", ["value"])
    pd.testing.assert_frame_equal(engine.sum_by_key(streamed, "key", ["value"]), expected)
    first = CALLS["doubled"]
    assert first > 0
    pd.testing.assert_frame_equal(engine.sum_by_key(streamed, "key", ["value"]), expected)
    assert CALLS["doubled"] == 2 * first, "recomputed per use, not held"
    kept = engine.persist(streamed)
    assert isinstance(kept.partitions, list) and CALLS["doubled"] == 3 * first
    assert engine.count(kept) == 2_000 and CALLS["doubled"] == 3 * first
    written = engine.write_groups(streamed, "key", tmp_path / "out", SCHEMA)
    again = engine.collect(engine.read_groups_streaming(written, "key", SCHEMA))
    assert int(again["value"].sum()) == 2 * int(pa.compute.sum(table["value"]).as_py())
    assert engine.count(engine.read_groups_streaming([], "key", SCHEMA)) == 0
