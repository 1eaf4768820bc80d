"""The tabular input read where it lives (issue 15): a shuffled hive-partitioned folder, a glob of
headerless CSV files and an Iceberg snapshot with a row filter each give, bit for bit, the release
of one file holding the same records in ``ROW_ID`` order (the fragments' canonical order, rows in
file order) — on local, Spark and Beam; a bad value in a later fragment is one line naming that
fragment's file, row and column, never the value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import yaml

from pipelines.cli import main
from pipelines.tabular.pipeline import run_tabular_release
from tests.e2e import sources_conformance as conformance
from tests.e2e.test_tabular_release import SCHEMA, SECRET_HEX, census_like
from tests.lake_setup import prepare_for

ENGINES = [
    "local",
    pytest.param("spark", marks=pytest.mark.spark),
    pytest.param("beam", marks=pytest.mark.beam),
]
RELEASE_KEYS = ("network", "candidate_attempts", "rows", "split", "epsilon", "delta", "batches", "target_records")
INTERNAL_KEYS = ("input_rows", "clipped_values", "report", "evaluation")


@pytest.fixture(autouse=True)
def _fixed_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)


def write_config(directory: Path, source: dict, omega: object = 4, evaluation: bool = False) -> Path:
    (directory / "schema.yaml").write_text(yaml.safe_dump(SCHEMA))
    config: dict = {
        "kind": "tabular", "dataset": "census", "lake": "lake",
        "input": {**source, "schema": "schema.yaml"},
        "privacy": {"epsilon": 2.0, "delta": 1e-4, "k": 12, "gamma": 2.0},
        "model": {"max_degree": 2, "complexity_cap": 64},
        "synthesis": {"omega": omega, "records": 700, "batch_size": 300},
        "engine": {"parallelism": 3},
    }
    if evaluation:
        census_like(400, seed=3).to_csv(directory / "holdout.csv", index=False)
        config["evaluation"] = {"holdout": {"path": "holdout.csv"}, "target_column": "label",
                                "positive_values": ["high"], "sample_records": 500}
    path = directory / "tabular.yaml"
    path.write_text(yaml.safe_dump(config))
    prepare_for({**config, "lake": str(directory / "lake")}, unit="record")
    return path


def release(config_path: Path, engine_name: str, spark_session: object = None) -> tuple[dict, pd.DataFrame]:
    return conformance.release_rows(run_tabular_release, config_path, engine_name, spark_session, "tab-1")


def assert_same_release(found: tuple[dict, pd.DataFrame], expected: tuple[dict, pd.DataFrame]) -> None:
    conformance.assert_same_release(found, expected, (*RELEASE_KEYS, *INTERNAL_KEYS))


@pytest.mark.parametrize("engine_name", ENGINES)
def test_a_shuffled_partitioned_folder_gives_the_release_of_one_file_in_row_id_order(
    tmp_path: Path, engine_name: str, request: pytest.FixtureRequest
) -> None:
    spark = conformance.spark_for(request, engine_name)
    records = census_like(1200, seed=21)
    # partitioned by a public column (no attribute may pick or order the records: docs/PRIVACY.md, "Input selection")
    records["batch"] = np.random.default_rng(5).choice(["b1", "b2", "b3"], len(records))
    (tmp_path / "folder").mkdir()
    ordered = conformance.partitioned_by(records, tmp_path / "folder" / "records", "batch", np.random.default_rng(4))
    (tmp_path / "file").mkdir()
    ordered = ordered.drop(columns=["batch"])
    ordered.to_csv(tmp_path / "file" / "records.csv", index=False)
    expected = release(write_config(tmp_path / "file", {"path": "records.csv"}, evaluation=True), engine_name, spark)
    found = release(write_config(tmp_path / "folder", {"path": "records"}, evaluation=True), engine_name, spark)
    assert found[0]["input_rows"] == 1200 and found[0]["evaluation"]["input_records_read"] == 500
    assert_same_release(found, expected)
    # a partitioning the records are not in gives another release: the test can fail
    ordered.sample(frac=1.0, random_state=1).to_csv(tmp_path / "file" / "shuffled.csv", index=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "shuffled.csv").write_bytes((tmp_path / "file" / "shuffled.csv").read_bytes())
    other = release(write_config(tmp_path / "other", {"path": "shuffled.csv"}), "local")
    assert not other[1].equals(expected[1])


@pytest.mark.parametrize("engine_name", ENGINES)
def test_a_glob_of_headerless_csv_files_gives_the_release_of_one_file(
    tmp_path: Path, engine_name: str, request: pytest.FixtureRequest
) -> None:
    spark = conformance.spark_for(request, engine_name)
    records = census_like(1100, seed=22)
    text = records.to_csv(index=False, header=False).replace(",", ", ")  # Adult's ", " separators
    conformance.text_parts(tmp_path / "glob" / "parts", text, 250)
    (tmp_path / "file").mkdir()
    (tmp_path / "file" / "records.csv").write_text(text)
    expected = release(write_config(tmp_path / "file", {"path": "records.csv", "header": False}, omega="all"),
                       engine_name, spark)
    found = release(write_config(tmp_path / "glob", {"path": "parts/rows-*.csv", "header": False}, omega="all"),
                    engine_name, spark)
    assert found[0]["input_rows"] == 1100
    assert_same_release(found, expected)


@pytest.mark.parametrize("engine_name", ENGINES)
def test_an_iceberg_snapshot_with_a_row_filter_gives_the_release_of_those_records(
    tmp_path: Path, engine_name: str, request: pytest.FixtureRequest
) -> None:
    spark = conformance.spark_for(request, engine_name)
    records = census_like(2400, seed=23)
    records["region"] = np.random.default_rng(6).choice(["eu", "us"], len(records))  # public: not an attribute
    table_rows = pa.Table.from_pandas(records, preserve_index=False)
    source, selected, fragments = conformance.filtered_snapshot(tmp_path, table_rows, 1000, "region = 'eu'")
    assert fragments == 2
    assert 500 < len(selected) < 2000 and set(selected["region"]) == {"eu"}
    selected.drop(columns=["region"]).to_parquet(tmp_path / "file" / "records.parquet", index=False)
    schema = yaml.safe_load(yaml.safe_dump(SCHEMA))
    expected = release(write_config(tmp_path / "file", {"path": "records.parquet"}), engine_name, spark)
    found = release(write_config(tmp_path / "table", source), engine_name, spark)
    assert found[0]["input_rows"] == len(selected) and schema == SCHEMA
    assert_same_release(found, expected)


def test_a_bad_value_in_a_later_fragment_is_one_line_naming_that_file(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    records = census_like(900, seed=24)
    folder = tmp_path / "records"
    folder.mkdir()
    for number, start in enumerate(range(0, 900, 300)):
        records.iloc[start:start + 300].to_csv(folder / f"part-{number}.csv", index=False)
    text = (folder / "part-2.csv").read_text().splitlines()
    fields = text[7].split(",")
    fields[2] = "SECRET-EDUCATION"  # row 7 of part-2.csv: not one of the categories
    text[7] = ",".join(fields)
    (folder / "part-2.csv").write_text("\n".join(text) + "\n")
    config = write_config(tmp_path, {"path": "records"})
    assert main(["run", str(config), "--release-id", "bad-1"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.splitlines() == [error]
    assert f"{folder / 'part-2.csv'}, row 7, column 'education': value is not one of the schema's categories" in error
    assert "SECRET" not in error and "Traceback" not in error


def test_a_missing_value_in_a_later_headerless_file_is_one_line(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    records = census_like(900, seed=25)
    folder = tmp_path / "parts"
    folder.mkdir()
    for number, start in enumerate(range(0, 900, 450)):
        records.iloc[start:start + 450].to_csv(folder / f"rows-{number}.csv", index=False, header=False)
    lines = (folder / "rows-1.csv").read_text().splitlines()
    fields = lines[99].split(",")
    fields[3] = " NA "  # row 100 of rows-1.csv: a missing income
    lines[99] = ",".join(fields)
    (folder / "rows-1.csv").write_text("\n".join(lines) + "\n")
    config = write_config(tmp_path, {"path": "parts/rows-*.csv", "header": False})
    assert main(["run", str(config), "--release-id", "bad-2"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.splitlines() == [error]
    assert (f"{folder / 'rows-1.csv'}, row 100, column 'income': missing value (blank or a null spelling)"
            in error), error
