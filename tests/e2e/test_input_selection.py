"""Input selection on a protected column is refused (issue 15 review, F1 and F2;
``pipelines/platform/selection.py``).

Through the CLI (``privlake run``): a release whose ``input.row_filter`` names a column its kind
treats as private (crowd: the column mapped to ``value``, claim and source unit; tabular: any
attribute of the schema; filter: a choice's private label; ldp: the report), whose path or glob
picks files by such a column (``answer=high/``), or whose partition folders give such a column
(the reviewer's F1 layout ``records/group=a/``, ``group=b/`` with ``group`` a private label) ends
with one line naming the key and the column, exit 2 (a configuration error), publishes nothing and
is not charged: the row filter and the path are refused before anything is reserved, the
partition folders when the input is listed (before any row is read; a reservation made from the
config is given back). The same inputs selected by a public column run.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import yaml

from pipelines.cli import main
from pipelines.platform.errors import ConfigError
from pipelines.platform.lake import Lake
from pipelines.platform.ledger import PrivacyLedger
from pipelines.platform.selection import path_partition_keys, refuse_private_selection, row_filter_columns
from schemas.sources import SourceSpec
from tests.e2e.conftest import TEST_SECRET_HEX, small_claims
from tests.e2e.conftest import write_config as crowd_config
from tests.e2e.test_filter_release import filter_case, people
from tests.e2e.test_tabular_release import census_like, tabular_case
from tests.lake_setup import prepare_for

GUIDE = 'select rows by public columns only (docs/PRIVACY.md, "Input selection")'


@pytest.fixture(autouse=True)
def _fixed_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", TEST_SECRET_HEX)


def iceberg_table(lake_folder: Path, frame: pd.DataFrame) -> int:
    """``frame`` as the table ``db.records`` of a lake at ``lake_folder``; its snapshot id."""
    rows = pa.Table.from_pandas(frame, preserve_index=False)
    with Lake(lake_folder) as lake:
        lake.catalog.create_namespace("db")
        table = lake.catalog.create_table("db.records", schema=rows.schema)
        table.append(rows)
        return table.current_snapshot().snapshot_id


def table_input(directory: Path, frame: pd.DataFrame, row_filter: str) -> dict:
    snapshot = iceberg_table(directory / "input-lake", frame)
    return {"table": "db.records", "lake": str(directory / "input-lake"), "snapshot_id": snapshot,
            "row_filter": row_filter}


def rewrite(path: Path, **changes: object) -> Path:
    config = yaml.safe_load(path.read_text())
    config.update(changes)
    path.write_text(yaml.safe_dump(config))
    return path


def assert_refused(config: Path, release_id: str, capsys: pytest.CaptureFixture[str], *expected: str,
                   reserved: bool = False) -> str:
    """Exit 2, one line holding ``expected``, nothing published; not charged (with ``reserved``:
    a reservation made before the refusal was given back, else none was made)."""
    capsys.readouterr()
    assert main(["run", str(config), "--release-id", release_id]) == 2
    error = capsys.readouterr().err.strip()
    assert error.splitlines() == [error], error
    for text in (*expected, GUIDE):
        assert text in error, error
    document = yaml.safe_load(config.read_text())
    with Lake(Path(document["lake"])) as lake:
        assert not lake.is_published(release_id)
        event = PrivacyLedger(lake).latest_event(document["dataset"], release_id)
    if reserved:
        assert event is None or event["status"] == "refunded", event
    else:
        assert event is None, f"refused before reserving: {event}"
    return error


# ---- the parser and the path segments ----------------------------------------------------------


def test_the_row_filter_columns_are_every_reference_of_the_expression() -> None:
    assert row_filter_columns("value >= 50") == ["value"]
    assert row_filter_columns("not (region = 'eu' or day in ('1', '2')) and answer is null") == \
        ["region", "day", "answer"]
    assert row_filter_columns("name like 'x%' or score is nan") == ["name", "score"]
    assert row_filter_columns("\"my col\" = 1") == ["my col"]
    assert row_filter_columns("true") == []
    assert path_partition_keys("/data/claims/value_bin=high/part-*.csv") == ["value_bin"]
    assert path_partition_keys("s3://bucket/records/group%3Dx=a/day=*/") == ["group=x", "day"]


@pytest.mark.parametrize(("spec", "message"), [
    (SourceSpec(table="db.t", lake="lake", row_filter="region = 'eu' and not (Answer < 0)"),
     "input.row_filter: names column 'Answer', which crowd releases treat as private (the claims' value)"),
    (SourceSpec(table="db.t", lake="lake", row_filter="answer.raw > 1"), "input.row_filter: names column 'answer.raw'"),
    (SourceSpec(path="claims/answer=60/part.csv"), "input.path: picks files by the folder key 'answer='"),
    (SourceSpec(path="claims/answer=*/part.csv"), "input.path: picks files by the folder key 'answer='"),
    # a glob's wildcards in the folder key (the second review's R2)
    (SourceSpec(path="claims/[a]nswer=[5-9]*/part.csv", partition_columns=[]),
     "input.path: picks files by the folder key '[a]nswer='"),
    (SourceSpec(path="claims/ans?er=6*/part.csv"), "input.path: picks files by the folder key 'ans?er='"),
    (SourceSpec(path="claims", partition_columns=["day", "answer"]), "input.partition_columns: names 'answer'"),
])
def test_a_selection_on_a_private_column_is_refused_from_the_config(spec: SourceSpec, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        refuse_private_selection(spec, {"answer": "the claims' value"}, "crowd")
    for public in (SourceSpec(table="db.t", lake="lake", row_filter="region = 'eu' and answered_at > 3"),
                   SourceSpec(path="claims/answer_bin=high/day=*/part.csv")):
        refuse_private_selection(public, {"answer": "the claims' value"}, "crowd")


# ---- crowd --------------------------------------------------------------------------------------


def claims_with_region() -> pd.DataFrame:
    claims = small_claims()
    claims["region"] = np.where(claims["question"] % 4 == 0, "us", "eu")
    return claims


@pytest.mark.parametrize("unit", ["claim", "source"])
def test_crowd_a_row_filter_on_the_value_is_refused_and_one_on_a_public_column_runs(
        unit: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    privacy = {"k": 4, "gamma": 4.0, "epsilon0": 4.0, "delta": 0.01, "weight_ratio_cap": 4.0,
               "value_range": [-100.0, 200.0]}
    if unit == "source":
        privacy.update(unit="source", max_objects_per_source=40)
    columns = {"object_id": "question", "source_id": "worker", "value": "answer"}
    claims = claims_with_region()
    (tmp_path / "refused").mkdir()
    refused = table_input(tmp_path / "refused", claims, "answer >= 50")
    config = crowd_config(tmp_path / "refused", Path("unused.csv"), tmp_path / "lake", privacy=privacy,
                          input={**refused, "columns": columns})
    assert_refused(config, "crowd-rf-1", capsys,
                   "input.row_filter: names column 'answer', which crowd releases treat as private (the claims' value)")

    (tmp_path / "public").mkdir()
    public = table_input(tmp_path / "public", claims, "region = 'eu'")
    config = crowd_config(tmp_path / "public", Path("unused.csv"), tmp_path / "lake", privacy=privacy,
                          input={**public, "columns": columns})
    assert main(["run", str(config), "--release-id", "crowd-rf-2"]) == 0
    with Lake(tmp_path / "lake") as lake:
        assert lake.is_published("crowd-rf-2")


def test_crowd_files_picked_by_a_value_folder_are_refused_and_a_value_bin_folder_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims = small_claims()
    for folder in ("answer=high", "answer_bin=high"):
        (tmp_path / "claims" / folder).mkdir(parents=True)
        claims.to_csv(tmp_path / "claims" / folder / "part-0.csv", index=False)
    config = crowd_config(tmp_path, tmp_path / "claims" / "answer=high" / "part-0.csv", tmp_path / "lake")
    assert_refused(config, "crowd-path-1", capsys, "input.path: picks files by the folder key 'answer='")
    # value_bin= is not the mapped value column: allowed (docs/PRIVACY.md: the operator's responsibility)
    config = crowd_config(tmp_path, tmp_path / "claims" / "answer_bin=*" / "*.csv", tmp_path / "lake")
    assert main(["run", str(config), "--release-id", "crowd-path-2"]) == 0


def test_crowd_partition_folders_of_the_value_are_refused_when_listed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    claims = small_claims()
    claims["answer"] = claims["answer"].round()
    for value, part in claims.groupby("answer"):
        folder = tmp_path / "claims" / f"answer={value:g}"
        folder.mkdir(parents=True, exist_ok=True)
        part.drop(columns=["answer"]).to_csv(folder / "part-0.csv", index=False)
    config = crowd_config(tmp_path, tmp_path / "claims", tmp_path / "lake")
    assert_refused(config, "crowd-part-1", capsys, "input.path: partition folders 'answer=...' are cut by column 'answer'",
                   reserved=True)


# ---- tabular ------------------------------------------------------------------------------------


def test_tabular_a_row_filter_on_an_attribute_is_refused_and_one_on_a_public_column_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tabular_case(tmp_path)
    records = census_like(600, seed=5)
    records["region"] = np.where(np.arange(600) % 3 == 0, "us", "eu")  # beside the attributes: public
    rewrite(config, input={**table_input(tmp_path, records, "income >= 10000"), "schema": "schema.yaml"})
    prepare_for(config, unit="record")
    assert_refused(config, "tab-rf-1", capsys,
                   "input.row_filter: names column 'income', which tabular releases treat as private "
                   "(an attribute of the schema)")
    document = yaml.safe_load(config.read_text())
    rewrite(config, input={**document["input"], "row_filter": "region = 'eu'"})
    assert main(["run", str(config), "--release-id", "tab-rf-2"]) == 0


def test_tabular_partition_folders_of_an_attribute_are_refused_when_listed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tabular_case(tmp_path)
    records = census_like(600, seed=5)
    for value, part in records.groupby("married"):
        folder = tmp_path / "records" / f"married={value}"
        folder.mkdir(parents=True)
        part.drop(columns=["married"]).to_csv(folder / "part-0.csv", index=False)
    document = yaml.safe_load(config.read_text())
    rewrite(config, input={**document["input"], "path": "records"})
    prepare_for(config, unit="record")
    assert_refused(config, "tab-part-1", capsys,
                   "input.path: partition folders 'married=...' are cut by column 'married', which tabular releases "
                   "treat as private (an attribute of the schema)")


# ---- ldp ----------------------------------------------------------------------------------------


def test_ldp_a_row_filter_on_the_report_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    (tmp_path / "catalog.json").write_text(json.dumps({"krr": {"type": "krr", "epsilon": 1.0, "input_size": 6}}))
    rng = np.random.default_rng(3)
    reports = pd.DataFrame({"user_id": np.arange(300), "mechanism": "krr", "report": rng.integers(0, 6, 300),
                            "region": rng.choice(["eu", "us"], 300)})
    config = {"kind": "ldp", "dataset": "ages", "lake": str(tmp_path / "lake"),
              "input": {**table_input(tmp_path, reports, "report < 3 or region = 'eu'"), "catalog": "catalog.json"}}
    path = tmp_path / "ldp.yaml"
    path.write_text(yaml.safe_dump(config))
    prepare_for(config)
    assert_refused(path, "ldp-rf-1", capsys, "input.row_filter: names column 'report', which ldp releases treat as "
                   "private (the users' privatized reports)")


# ---- filter (F1: the reviewer's layout) -----------------------------------------------------------


def test_filter_a_row_filter_on_a_private_label_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = filter_case(tmp_path, two_choices=True)
    prepare_for(config)
    rewrite(config, input={**table_input(tmp_path, people(300, seed=7), "colour = 'blue' and senior = 'yes'"),
                           "choice_column": "choice"})
    assert_refused(config, "filter-rf-1", capsys, "input.row_filter: names column 'senior', which filter releases "
                   "treat as private (the private label 'senior' of choice 'hide-senior')")


def write_label_partitions(folder: Path, frame: pd.DataFrame) -> None:
    """The reviewer's F1 layout: ``records/group=a/part-0.csv``, ``records/group=b/part-0.csv``."""
    for value, part in frame.groupby("group"):
        (folder / f"group={value}").mkdir(parents=True)
        part.drop(columns=["group"]).to_csv(folder / f"group={value}" / "part-0.csv", index=False)


def test_filter_a_private_label_from_partition_folders_is_refused_for_both_neighbours(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = people(300, seed=7)
    neighbour = data.copy()
    neighbour.loc[0, "group"] = "b" if data.loc[0, "group"] == "a" else "a"  # one private label changed
    config = filter_case(tmp_path, evaluation={"enabled": False})
    prepare_for(config)
    assert main(["train-encoder", str(config)]) == 0
    for number, frame in enumerate((data, neighbour)):
        write_label_partitions(tmp_path / f"records-{number}", frame)
        rewrite(config, input={"path": f"records-{number}"})
        assert_refused(config, f"filter-part-{number}", capsys,
                       "input.path: partition folders 'group=...' are cut by column 'group', which filter releases "
                       "treat as private (the private label 'group' of choice 'hide-group')", reserved=True)
    # a glob that picks the label's folder is refused from the config
    rewrite(config, input={"path": "records-0/group=a/*.csv"})
    assert_refused(config, "filter-glob-1", capsys, "input.path: picks files by the folder key 'group='")


def test_filter_label_folders_are_refused_when_they_do_not_become_columns(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The second review's R2: with ``partition_columns: []`` the files keep the label column and
    the folders do not become columns, but the files are still read in path order."""
    data = people(300, seed=7)
    config = filter_case(tmp_path, evaluation={"enabled": False})
    prepare_for(config)
    assert main(["train-encoder", str(config)]) == 0
    for value, part in data.groupby("group"):
        (tmp_path / "records" / f"group={value}").mkdir(parents=True)
        part.to_csv(tmp_path / "records" / f"group={value}" / "part-0.csv", index=False)
    rewrite(config, input={"path": "records", "partition_columns": []})
    assert_refused(config, "filter-folders-1", capsys, "input.path: partition folders 'group=...' are cut by column "
                   "'group', which filter releases treat as private", reserved=True)


def test_filter_an_iceberg_table_partitioned_by_a_private_label_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The second review's R1: an Iceberg table's files (and so the input's order) cut by the label."""
    rows = pa.Table.from_pandas(people(300, seed=7), preserve_index=False)
    with Lake(tmp_path / "input-lake") as lake:
        lake.catalog.create_namespace("db")
        table = lake.catalog.create_table("db.records", schema=rows.schema)
        with table.update_spec() as spec:
            spec.add_identity("group")
        table.append(rows)
    config = filter_case(tmp_path, evaluation={"enabled": False})
    prepare_for(config)
    assert main(["train-encoder", str(config)]) == 0
    rewrite(config, input={"table": "db.records", "lake": str(tmp_path / "input-lake")})
    assert_refused(config, "filter-table-1", capsys, "input.table: the table is partitioned or sorted by column "
                   "'group', which filter releases treat as private", reserved=True)
