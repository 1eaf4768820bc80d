"""The filter's records read where they live (issue 15): a shuffled hive-partitioned folder (the
owners' choice as the partition column), a glob of headerless CSV files and an Iceberg snapshot
with a row filter each give, bit for bit, the release of one file holding the same records in
``ROW_ID`` order — on local, Spark and Beam (a record's randomness is keyed by its position in that
order: for one file, its row); a bad value in a later fragment is one line naming that file, row
and column, never the value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import yaml

from pipelines.cli import main
from pipelines.filter.pipeline import run_filter_release, train_encoder
from pipelines.platform.config import load_config
from tests.e2e import sources_conformance as conformance
from tests.e2e.test_filter_release import SECRET_HEX, filter_case, people

ENGINES = [
    "local",
    pytest.param("spark", marks=pytest.mark.spark),
    pytest.param("beam", marks=pytest.mark.beam),
]
COLUMNS = ["height", "years", "colour", "group", "senior", "choice"]


@pytest.fixture(autouse=True)
def _fixed_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)


def case(directory: Path, source: dict) -> Path:
    """``filter_case`` with ``input`` replaced by ``source`` (paths relative to ``directory``)."""
    path = filter_case(directory, two_choices=True)
    config = yaml.safe_load(path.read_text())
    config["input"] = {**source, "choice_column": "choice"}
    config["engine"] = {"name": "local", "parallelism": 3}
    path.write_text(yaml.safe_dump(config))
    return path


def release(config_path: Path, engine_name: str, spark_session: object = None) -> tuple[dict, pd.DataFrame]:
    found, rows = conformance.release_rows(run_filter_release, config_path, engine_name, spark_session, "filter-1",
                                           before=train_encoder)  # keyed: the same encoder in every lake
    return found, rows.sort_values("record", ignore_index=True)


def assert_same_release(found: tuple[dict, pd.DataFrame], expected: tuple[dict, pd.DataFrame]) -> None:
    conformance.assert_same_release(found, expected, ("rows", "epsilon", "delta", "epsilon_rdp", "model_artifact_id",
                                                      "input_rows", "clipped_values", "evaluation"))
    assert [c["records"] for c in found[0]["choices"]] == [c["records"] for c in expected[0]["choices"]]


@pytest.mark.parametrize("engine_name", ENGINES)
def test_a_shuffled_partitioned_folder_gives_the_release_of_one_file(tmp_path: Path, engine_name: str,
                                                                     request: pytest.FixtureRequest) -> None:
    spark = conformance.spark_for(request, engine_name)
    folder = tmp_path / "folder"
    ordered = conformance.partitioned_by(people(700, seed=31), folder / "records", "choice", np.random.default_rng(2))
    (tmp_path / "file").mkdir()
    ordered.to_csv(tmp_path / "file" / "ordered.csv", index=False)
    expected = release(case(tmp_path / "file", {"path": "ordered.csv"}), engine_name, spark)
    found = release(case(folder, {"path": "records"}), engine_name, spark)
    assert found[0]["input_rows"] == 700
    assert_same_release(found, expected)
    # the same records in another order give another release: the test can fail
    ordered.iloc[::-1].to_csv(tmp_path / "file" / "reversed.csv", index=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "reversed.csv").write_bytes((tmp_path / "file" / "reversed.csv").read_bytes())
    other = release(case(tmp_path / "other", {"path": "reversed.csv"}), "local")
    assert not other[1].drop(columns=["record"]).equals(expected[1].drop(columns=["record"]))


@pytest.mark.parametrize("engine_name", ENGINES)
def test_a_glob_of_headerless_csv_files_gives_the_release_of_one_file(tmp_path: Path, engine_name: str,
                                                                      request: pytest.FixtureRequest) -> None:
    spark = conformance.spark_for(request, engine_name)
    text = people(650, seed=32).to_csv(index=False, header=False).replace(",", ", ")
    conformance.text_parts(tmp_path / "glob" / "parts", text, 200, decoy=False)
    (tmp_path / "file").mkdir()
    (tmp_path / "file" / "rows.csv").write_text(text)
    source = {"header": False, "columns": COLUMNS}
    expected = release(case(tmp_path / "file", {"path": "rows.csv", **source}), engine_name, spark)
    found = release(case(tmp_path / "glob", {"path": "parts/rows-*.csv", **source}), engine_name, spark)
    assert found[0]["input_rows"] == 650
    assert_same_release(found, expected)


@pytest.mark.parametrize("engine_name", ENGINES)
def test_an_iceberg_snapshot_with_a_row_filter_gives_the_release_of_those_records(
    tmp_path: Path, engine_name: str, request: pytest.FixtureRequest
) -> None:
    spark = conformance.spark_for(request, engine_name)
    rows = pa.Table.from_pandas(people(1500, seed=33), preserve_index=False)
    source, selected, _ = conformance.filtered_snapshot(tmp_path, rows, 600, "colour = 'blue'")
    assert 300 < len(selected) < 1200 and set(selected["colour"]) == {"blue"}
    expected = release(case(tmp_path / "file", {"path": "records.parquet"}), engine_name, spark)
    found = release(case(tmp_path / "table", source), engine_name, spark)
    assert found[0]["input_rows"] == len(selected)
    assert_same_release(found, expected)


def test_an_unknown_choice_in_a_later_file_is_one_line_naming_it(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    records = people(600, seed=34)
    (tmp_path / "records").mkdir()
    for number, start in enumerate(range(0, 600, 200)):
        part = records.iloc[start:start + 200].copy()
        if number == 2:
            part.iloc[40, part.columns.get_loc("choice")] = "SECRET-CHOICE"
        part.to_csv(tmp_path / "records" / f"part-{number}.csv", index=False)
    config = case(tmp_path, {"path": "records"})
    train_encoder(load_config(config))
    assert main(["run", str(config), "--release-id", "bad-1"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.splitlines() == [error] and "SECRET" not in error, error
    assert (f"{tmp_path / 'records' / 'part-2.csv'}, row 41, column 'choice': unknown choice "
            "(choices: hide-group, hide-senior)") in error, error


def test_a_missing_feature_in_a_later_headerless_file_is_one_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    records = people(600, seed=35)
    (tmp_path / "parts").mkdir()
    for number, start in enumerate(range(0, 600, 300)):
        part = records.iloc[start:start + 300].astype(object)
        if number == 1:
            part.iloc[9, 1] = "NA"  # row 10 of rows-1.csv: a missing years
        part.to_csv(tmp_path / "parts" / f"rows-{number}.csv", index=False, header=False)
    config = case(tmp_path, {"path": "parts/rows-*.csv", "header": False, "columns": COLUMNS})
    train_encoder(load_config(config))
    assert main(["run", str(config), "--release-id", "bad-2"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.splitlines() == [error], error
    # the line a read of that one file on the driver gives (pipelines.filter.input.read_records)
    from pipelines.filter.input import read_feature_spec, read_records
    from pipelines.platform.errors import InputError
    from schemas.filter.config import FilterTableReading

    loaded = load_config(config)
    with pytest.raises(InputError) as caught:
        read_records(FilterTableReading(path=tmp_path / "parts" / "rows-1.csv", header=False, columns=COLUMNS),
                     read_feature_spec(loaded.feature_spec), dict(loaded.labels))
    assert str(caught.value) == f"{tmp_path / 'parts' / 'rows-1.csv'}, row 10, column 'years': value is not a finite number"
    assert error == f"privlake: {caught.value}", error
