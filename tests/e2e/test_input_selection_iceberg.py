"""Input selection on a protected column of an Iceberg table or through folder names (third
issue-15 review: N1, N2 and R6; ``pipelines/platform/selection.py``).

Through the CLI (``privlake run``):

* N1: a row filter on the *new* name of a renamed private column is refused. A rename is metadata
  only, the scan binds the filter to the current schema while the release reads the snapshot's,
  so ``score >= 50`` after renaming the value column ``answer`` to ``score`` reads the protected
  field. The filter's references are resolved by field id through every schema of the table;
  a filter on a renamed public column still runs.
* N2: an unpartitioned table whose data files lie under ``group=a/``, ``group=b/`` folders (a hive
  folder registered with ``add_files``) is refused for a filter release that treats ``group`` as
  private (the data files are read in path order), while a ``key=`` in the table's own location
  (the warehouse's prefix) is no such folder.
* R6: the listing errors that run before the refusal (partition folders that differ, a key named
  twice, a declared level of another key) name the input and folder keys, never a folder's value.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipelines.cli import main
from pipelines.platform.lake import Lake
from pipelines.platform.selection import refuse_private_partitions
from pipelines.platform.sources import list_fragments
from schemas.sources import SourceSpec
from tests.e2e.conftest import TEST_SECRET_HEX, small_claims
from tests.e2e.conftest import write_config as crowd_config
from tests.e2e.test_filter_release import filter_case, people
from tests.e2e.test_input_selection import assert_refused, claims_with_region, rewrite
from tests.lake_setup import prepare_for


@pytest.fixture(autouse=True)
def _fixed_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", TEST_SECRET_HEX)


CROWD_PRIVACY = {"k": 4, "gamma": 4.0, "epsilon0": 4.0, "delta": 0.01, "weight_ratio_cap": 4.0,
                 "value_range": [-100.0, 200.0]}
CROWD_COLUMNS = {"object_id": "question", "source_id": "worker", "value": "answer"}


def renamed_table(lake_folder: Path, frame: pd.DataFrame, old: str, new: str) -> int:
    """``frame`` as ``db.records``, appended once, then column ``old`` renamed to ``new`` (metadata
    only: the current snapshot keeps the old schema); the snapshot's id."""
    rows = pa.Table.from_pandas(frame, preserve_index=False)
    with Lake(lake_folder) as lake:
        lake.catalog.create_namespace("db")
        table = lake.catalog.create_table("db.records", schema=rows.schema)
        table.append(rows)
        snapshot = table.current_snapshot().snapshot_id
        with table.update_schema() as update:
            update.rename_column(old, new)
    return snapshot


# ---- N1: a row filter on a renamed private column ---------------------------------------------------


@pytest.mark.parametrize("pinned", [False, True])
def test_crowd_a_row_filter_on_the_new_name_of_the_renamed_value_column_is_refused(
        pinned: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = renamed_table(tmp_path / "input-lake", claims_with_region(), "answer", "score")
    table = {"table": "db.records", "lake": str(tmp_path / "input-lake"), "row_filter": "score >= 50",
             **({"snapshot_id": snapshot} if pinned else {})}
    config = crowd_config(tmp_path, Path("unused.csv"), tmp_path / "lake", privacy=CROWD_PRIVACY,
                          input={**table, "columns": CROWD_COLUMNS})
    assert_refused(config, "crowd-rename-1", capsys,
                   "input.row_filter: names column 'score', which is (in one of the table's schemas) column "
                   "'answer', which crowd releases treat as private (the claims' value)", reserved=True)


def test_crowd_a_row_filter_on_a_renamed_public_column_runs(tmp_path: Path) -> None:
    renamed_table(tmp_path / "input-lake", claims_with_region(), "region", "area")
    table = {"table": "db.records", "lake": str(tmp_path / "input-lake"), "row_filter": "area = 'eu'"}
    config = crowd_config(tmp_path, Path("unused.csv"), tmp_path / "lake", privacy=CROWD_PRIVACY,
                          input={**table, "columns": CROWD_COLUMNS})
    assert main(["run", str(config), "--release-id", "crowd-rename-2"]) == 0


# ---- N2: Iceberg data files under private key=value folders -----------------------------------------


def hive_files(folder: Path, frame: pd.DataFrame) -> list[str]:
    """The review's layout: ``folder/group=a/part-0.parquet``, ``folder/group=b/part-0.parquet``
    (the label kept in the files)."""
    paths = []
    for value, part in frame.groupby("group"):
        (folder / f"group={value}").mkdir(parents=True)
        pq.write_table(pa.Table.from_pandas(part.reset_index(drop=True), preserve_index=False),
                       folder / f"group={value}" / "part-0.parquet")
        paths.append(str(folder / f"group={value}" / "part-0.parquet"))
    return paths


def added_files_table(lake_folder: Path, frame: pd.DataFrame, files: list[str]) -> None:
    """An unpartitioned table, no sort order, whose data files are ``files`` where they lie."""
    with Lake(lake_folder) as lake:
        lake.catalog.create_namespace("db")
        table = lake.catalog.create_table("db.records", schema=pa.Table.from_pandas(frame, preserve_index=False).schema)
        table.add_files(files)


def test_filter_a_table_whose_data_files_lie_under_private_label_folders_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = people(300, seed=7)
    added_files_table(tmp_path / "input-lake", data, hive_files(tmp_path / "records", data))
    config = filter_case(tmp_path, evaluation={"enabled": False})
    prepare_for(config)
    assert main(["train-encoder", str(config)]) == 0
    rewrite(config, input={"table": "db.records", "lake": str(tmp_path / "input-lake")})
    assert_refused(config, "filter-added-1", capsys,
                   "input.table: the table's data files lie under folders 'group=...' of column 'group', which "
                   "filter releases treat as private (the private label 'group' of choice 'hide-group')",
                   reserved=True)


def test_a_key_folder_in_the_tables_own_location_is_not_a_data_files_folder(tmp_path: Path) -> None:
    """Paths are checked below the table's location: a lake under ``group=x/`` is not refused;
    the same lake's table of files added from label folders is."""
    data = people(60, seed=7)
    lake_folder = tmp_path / "group=x" / "input-lake"
    rows = pa.Table.from_pandas(data, preserve_index=False)
    with Lake(lake_folder) as lake:
        lake.catalog.create_namespace("db")
        lake.catalog.create_table("db.records", schema=rows.schema).append(rows)
        lake.catalog.create_table("db.added", schema=rows.schema).add_files(hive_files(tmp_path / "records", data))
    private = {"group": "the private label"}
    fragments = list_fragments(SourceSpec(table="db.records", lake=lake_folder))
    assert "group=x" in fragments[0].name
    refuse_private_partitions(fragments, private, "filter")
    with pytest.raises(Exception, match="input.table: the table's data files lie under folders 'group=...'"):
        refuse_private_partitions(list_fragments(SourceSpec(table="db.added", lake=lake_folder)), private, "filter")


# ---- R6: listing errors name no folder value --------------------------------------------------------


@pytest.mark.parametrize(("folders", "partition_columns", "message"), [
    (["answer=61.37", "misc"], None, "partition folders differ: a file lies under folder keys () where another lies "
                                     "under (answer)"),
    (["answer=61.37/answer=2"], None, "a file's folders name the partition key answer= twice"),
    (["answer=61.37/day=2"], ["day", "other"], "folder level 1 below the input's root: level answer= where "
                                                "partition_columns names day"),
    (["answer=61.37/day=2"], ["day"], "partition_columns names 1 folder levels but a file lies 2 below the input's "
                                      "root"),
])
def test_crowd_listing_errors_before_the_refusal_name_no_folder_value(
        folders: list[str], partition_columns: list[str] | None, message: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    claims = small_claims()
    for folder in folders:
        (tmp_path / "claims" / folder).mkdir(parents=True)
        claims.to_csv(tmp_path / "claims" / folder / "part-0.csv", index=False)
    config = crowd_config(tmp_path, tmp_path / "claims", tmp_path / "lake")
    if partition_columns is not None:
        document = yaml.safe_load(config.read_text())
        rewrite(config, input={**document["input"], "partition_columns": partition_columns})
    capsys.readouterr()
    assert main(["run", str(config), "--release-id", "crowd-listing-1"]) != 0
    error = capsys.readouterr().err.strip()
    assert error.splitlines() == [error], error
    assert message in error, error
    assert "61.37" not in error and "misc" not in error, error
