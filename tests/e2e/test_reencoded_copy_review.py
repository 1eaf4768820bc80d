"""Copies the adversarial review of issue 32 found publishing, now refused.

A crowd claim's value is printed as its step on the release's grid, ``round(clip(value)/precision)``:
the copy of a CSV input written as Parquet with a float32 value column (every value moved by less
than the precision, the release bit-identical) was published with a fresh budget before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from pipelines.cli import main
from tests.lake_setup import prepare_lake


def test_a_float32_parquet_copy_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    lake = tmp_path / "lake"
    prepare_lake(lake, "first", "second")
    rng = np.random.default_rng(4)
    frame = pd.DataFrame({"object_id": np.repeat(np.arange(200), 8), "source_id": np.tile([f"s{j}" for j in range(8)], 200),
                          "value": np.round(rng.uniform(0, 100, 1600), 2)})
    # no value exact in float32 (hundredths but quarters): every row of the copy moves
    quarter = np.isclose((frame["value"] * 4) % 1, 0) | np.isclose((frame["value"] * 4) % 1, 1)
    frame.loc[quarter, "value"] += 0.01
    original = tmp_path / "claims.csv"
    frame.to_csv(original, index=False)
    copy = tmp_path / "copy" / "claims.parquet"
    copy.parent.mkdir()
    pq.write_table(pa.table({"object_id": frame["object_id"], "source_id": frame["source_id"],
                             "value": pa.array(frame["value"].to_numpy(np.float32))}), copy)
    assert np.all(pq.read_table(copy).column("value").to_numpy().astype(np.float64) != frame["value"].to_numpy())
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", "cd" * 32)

    def release(dataset: str, path: Path) -> int:
        config = tmp_path / f"{dataset}.yaml"
        config.write_text(yaml.safe_dump({
            "kind": "crowd", "dataset": dataset, "lake": str(lake), "input": {"path": str(path)},
            "privacy": {"epsilon": 1.0, "value_range": [0.0, 100.0]},
            "synthesis": {"claims_per_object": 5, "precision": 0.01}}))
        return main(["run", str(config)])

    assert release("first", original) == 0
    capsys.readouterr()
    assert release("second", copy) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'first'" in err[0] and "about 100% of its 1,600 rows" in err[0]
