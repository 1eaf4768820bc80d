"""End to end through the installed console script on the real data sets (Emotion, Population),
from the shipped example configs, into a temporary lake."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from schemas.manifest import missing_manifest_keys, operator_keys_in
from tests.lake_setup import prepare_for

PROJECT = Path(__file__).resolve().parents[2]
PRIVLAKE = Path(sys.executable).parent / "privlake"
SECRET = "7e57" * 16


def privlake(*args: str, cwd: Path = PROJECT) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PRIVLAKE_TEST_SECRET": SECRET, "PYSPARK_PYTHON": sys.executable}
    return subprocess.run([str(PRIVLAKE), *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=600)


def example_into(tmp_path: Path, example: str) -> tuple[Path, Path, dict]:
    config = yaml.safe_load((PROJECT / "examples" / example).read_text())
    lake = tmp_path / "lake"
    config["lake"] = str(lake)
    # the example's paths are relative to the examples folder; the copy lives elsewhere
    config["input"]["path"] = str((PROJECT / "examples" / config["input"]["path"]).resolve())
    if config.get("evaluation", {}).get("truth_path"):
        config["evaluation"]["truth_path"] = str((PROJECT / "examples" / config["evaluation"]["truth_path"]).resolve())
    path = tmp_path / example
    path.write_text(yaml.safe_dump(config))
    prepare_for(config)
    return path, lake, config


def published(lake: Path, release_id: str) -> tuple[dict, pd.DataFrame]:
    shown = privlake("show", release_id, "--lake", str(lake), "--json")
    assert shown.returncode == 0, shown.stderr
    manifest = json.loads(shown.stdout)
    out = lake.parent / "export.parquet"
    exported = privlake("export", release_id, "--lake", str(lake), "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    return manifest, pd.read_parquet(out)


@pytest.mark.parametrize(
    ("example", "truth_file", "truth_id"),
    [
        ("crowd_emotion.yaml", "crowd_emotion/truth.csv", "question"),
        ("crowd_population.yaml", "crowd_population/truth.csv", "object_id"),
    ],
)
def test_example_release_end_to_end(tmp_path: Path, example: str, truth_file: str, truth_id: str) -> None:
    config_path, lake, config = example_into(tmp_path, example)
    run = privlake("run", str(config_path), "--release-id", "e2e-1")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "e2e-1"
    assert "Traceback" not in run.stderr

    manifest, rows = published(lake, "e2e-1")
    assert missing_manifest_keys(manifest) == []
    assert manifest["status"] == "published" and manifest["kind"] == "crowd"
    assert manifest["rows"] == len(rows) > 0
    assert {"object_id", "value"} <= set(rows.columns)
    m = config["synthesis"]["claims_per_object"]
    assert rows.groupby("object_id").size().max() <= m
    claims = pd.read_csv(config["input"]["path"])
    object_column = config["input"]["columns"]["object_id"]
    per_object = claims.groupby(object_column).size()
    floor = config["privacy"].get("min_claims_per_object") or config["privacy"].get("k") or 1
    assert set(rows["object_id"]) <= set(per_object[per_object >= floor].index)
    assert manifest["objects_released"] == rows["object_id"].nunique()
    assert rows.groupby("object_id").size().eq(m).all(), "every released object has exactly m claims"
    assert operator_keys_in(manifest) == []
    internal = privlake("show", "e2e-1", "--lake", str(lake), "--internal", "--json")
    assert internal.returncode == 0, internal.stderr
    assert json.loads(internal.stdout)["evaluation"]["truth_objects"] > 0
    release_files = [path for path in (lake / "warehouse" / "releases").rglob("*") if path.is_file()]
    assert release_files
    for path in release_files:  # what a consumer of the release table can read: no raw-data figure
        content = path.read_bytes()
        for key in ("truth_mae", "truth_objects", "pass_rate", "candidate_attempts", "fallback_claims",
                    "input_fingerprint", "clipped_to_value_range", "timings", "started_at"):
            # as a key (followed by a quote, escaped inside the manifest's JSON string); the
            # not-covered list may name the figure in prose
            assert re.search(re.escape(key.encode()) + rb'\\?"', content) is None, f"{key} in {path}"
    truth = pd.read_csv(PROJECT.parent / "shared" / "datasets" / truth_file)
    assert set(truth[truth_id]) & set(rows["object_id"])

    again = privlake("run", str(config_path), "--release-id", "e2e-1")
    assert again.returncode == 0 and "already published" in again.stdout
    listed = json.loads(privlake("releases", "--lake", str(lake), "--json").stdout)
    assert [entry["release_id"] for entry in listed] == ["e2e-1"]
    ledger = privlake("ledger", "--lake", str(lake), "--json")
    assert ledger.returncode == 0


@pytest.mark.spark
def test_emotion_on_embedded_spark_through_the_cli(tmp_path: Path) -> None:
    config_path, lake, _ = example_into(tmp_path, "crowd_emotion.yaml")
    run = privlake("run", str(config_path), "--engine", "spark", "--master", "local[2]")
    assert run.returncode == 0, run.stderr
    assert run.stderr.strip() == "", "Spark's console output must go to its log, not to privlake's stderr"
    release_id = run.stdout.strip().splitlines()[-1]
    manifest, rows = published(lake, release_id)
    assert manifest["engine"] == "spark"
    assert manifest["rows"] == len(rows) > 0


@pytest.mark.spark
def test_bad_input_on_spark_is_one_line_on_stderr(tmp_path: Path) -> None:
    data = tmp_path / "claims.csv"
    data.write_text("question,worker,answer\n1,a,5\n1,b,x\n")
    config = {
        "kind": "crowd",
        "dataset": "bad",
        "lake": str(tmp_path / "lake"),
        "input": {"path": str(data), "columns": {"object_id": "question", "source_id": "worker", "value": "answer"}},
        "privacy": {"k": 2, "gamma": 4.0, "epsilon0": 14.0, "delta": 0.01, "weight_ratio_cap": 4.0,
                    "value_range": [0.0, 10.0]},
        "synthesis": {"mechanism": "priscrowd", "claims_per_object": 5, "bandwidth": {"method": "fixed", "value": 1.0}},
    }
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    prepare_for(config)
    run = privlake("run", str(path), "--engine", "spark", "--master", "local[2]")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [f"privlake: {data}, row 2, column 'answer': value is not a number"]
