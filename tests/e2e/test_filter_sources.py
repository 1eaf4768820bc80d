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
import pyarrow.parquet as pq
import pytest
import yaml

from pipelines.cli import main
from pipelines.engines import make_engine
from pipelines.filter.pipeline import run_filter_release, train_encoder
from pipelines.platform.config import load_config
from pipelines.platform.lake import Lake
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
    config = load_config(config_path)
    train_encoder(config)  # keyed: the same encoder in every lake
    engine = make_engine("spark", spark_session=spark_session) if engine_name == "spark" else make_engine(engine_name)
    with engine:
        outcome = run_filter_release(config, release_id="filter-1", engine=engine)
    rows = Lake(config_path.parent / "lake").read_release("filter-1").to_pandas()
    return {**outcome.manifest, **outcome.internal}, rows.sort_values("record", ignore_index=True)


def assert_same_release(found: tuple[dict, pd.DataFrame], expected: tuple[dict, pd.DataFrame]) -> None:
    pd.testing.assert_frame_equal(found[1], expected[1], check_exact=True)
    for key in ("rows", "epsilon", "delta", "epsilon_rdp", "model_artifact_id", "input_rows", "clipped_values",
                "evaluation"):
        assert found[0][key] == expected[0][key], key
    assert [c["records"] for c in found[0]["choices"]] == [c["records"] for c in expected[0]["choices"]]


@pytest.mark.parametrize("engine_name", ENGINES)
def test_a_shuffled_partitioned_folder_gives_the_release_of_one_file(tmp_path: Path, engine_name: str,
                                                                     request: pytest.FixtureRequest) -> None:
    spark = request.getfixturevalue("spark_session") if engine_name == "spark" else None
    records = people(700, seed=31)
    pieces = []
    for choice in sorted(records["choice"].unique()):
        chosen = records[records["choice"] == choice].drop(columns=["choice"])
        for number, part in enumerate(np.array_split(np.arange(len(chosen)), 3)):
            pieces.append((f"choice={choice}/part-{number}.parquet", chosen.iloc[part]))
    folder = tmp_path / "folder"
    for index in np.random.default_rng(2).permutation(len(pieces)):
        name, frame = pieces[index]
        (folder / "records" / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), folder / "records" / name)
    ordered = pd.concat([frame.assign(choice=name.split("/")[0].split("=")[1]) for name, frame in sorted(pieces)])
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
    spark = request.getfixturevalue("spark_session") if engine_name == "spark" else None
    text = people(650, seed=32).to_csv(index=False, header=False).replace(",", ", ")
    lines = text.splitlines(keepends=True)
    (tmp_path / "glob" / "parts").mkdir(parents=True)
    for number, start in enumerate(range(0, len(lines), 200)):
        (tmp_path / "glob" / "parts" / f"rows-{number}.csv").write_text("".join(lines[start:start + 200]))
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
    from pipelines.platform.sources import list_fragments, read_fragment
    from schemas.sources import SourceSpec

    spark = request.getfixturevalue("spark_session") if engine_name == "spark" else None
    rows = pa.Table.from_pandas(people(1500, seed=33), preserve_index=False)
    (tmp_path / "table").mkdir()
    with Lake(tmp_path / "table" / "input-lake") as lake:
        lake.catalog.create_namespace("db")
        table = lake.catalog.create_table("db.people", schema=rows.schema)
        table.append(rows.slice(0, 600))
        table.append(rows.slice(600, 600))
        snapshot = table.current_snapshot().snapshot_id
        table.append(rows.slice(1200))  # after the snapshot: not read
    spec = SourceSpec(table="db.people", lake=tmp_path / "table" / "input-lake", snapshot_id=snapshot,
                      row_filter="colour = 'blue'")
    selected = pa.concat_tables([read_fragment(fragment) for fragment in list_fragments(spec)]).to_pandas()
    assert 300 < len(selected) < 1200 and set(selected["colour"]) == {"blue"}
    (tmp_path / "file").mkdir()
    selected.drop(columns=["ROW_ID"]).to_parquet(tmp_path / "file" / "records.parquet", index=False)
    expected = release(case(tmp_path / "file", {"path": "records.parquet"}), engine_name, spark)
    found = release(case(tmp_path / "table", {"table": "db.people", "lake": "input-lake", "snapshot_id": snapshot,
                                              "row_filter": "colour = 'blue'"}), engine_name, spark)
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
