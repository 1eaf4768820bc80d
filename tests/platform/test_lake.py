"""The Iceberg lake: atomic publication, idempotence, quarantine, listing (DESIGN.md, "Releases and the lake")."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import CreateTableTransaction

from pipelines.platform.lake import (
    Lake,
    ReleaseAlreadyPublished,
    ReleaseFilesInvalid,
    UnknownRelease,
    release_table_name,
)

CLAIMS_SCHEMA = pa.schema(
    [
        ("object_id", pa.int64()),
        ("claim_index", pa.int32()),
        ("value", pa.float64()),
        ("label", pa.string()),
    ]
)


def claims_table(first_object: int, objects: int, seed: int) -> pa.Table:
    generator = np.random.default_rng(seed)
    object_ids = np.repeat(np.arange(first_object, first_object + objects, dtype=np.int64), 3)
    return pa.table(
        {
            "object_id": object_ids,
            "claim_index": np.tile(np.arange(3, dtype=np.int32), objects),
            "value": generator.normal(size=3 * objects),
            "label": [f"object-{identifier}" for identifier in object_ids],
        },
        schema=CLAIMS_SCHEMA,
    )


def stage(folder: Path, tables: list[pa.Table], prefix: str = "part") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, table in enumerate(tables):
        path = folder / f"{prefix}-{index}.parquet"
        pq.write_table(table, path)
        paths.append(path)
    return paths


def sorted_frame(table: pa.Table, keys: list[str]) -> pd.DataFrame:
    return table.to_pandas().sort_values(keys).reset_index(drop=True)


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    with Lake(tmp_path / "lake") as opened:
        yield opened


def test_embedded_layout(tmp_path: Path) -> None:
    Lake(tmp_path / "lake").close()
    for name in ("catalog.db", "warehouse", "staging", "quarantine"):
        assert (tmp_path / "lake" / name).exists(), name


def test_publish_then_read_back(lake: Lake) -> None:
    tables = [claims_table(0, 40, seed=1), claims_table(40, 25, seed=2)]
    files = stage(lake.staging_directory("crowd-1"), tables)
    manifest = {"release_id": "crowd-1", "kind": "crowd", "epsilon": 1.25, "rows": 195, "config": {"k": [3, 4]}}

    lake.publish("crowd-1", "crowd", files, CLAIMS_SCHEMA, manifest)

    assert lake.is_published("crowd-1")
    expected = sorted_frame(pa.concat_tables(tables), ["object_id", "claim_index"])
    released = lake.read_release("crowd-1")
    assert released.schema.names == CLAIMS_SCHEMA.names
    pd.testing.assert_frame_equal(sorted_frame(released, ["object_id", "claim_index"]), expected)
    assert lake.manifest("crowd-1") == manifest
    assert lake.release("crowd-1").rows == 3 * 65
    assert not any(path.exists() for path in files), "staged files are moved into the table"
    table = lake.catalog.load_table(lake.release_identifier("crowd-1"))
    data_files = table.inspect.files().column("file_path").to_pylist()
    assert len(data_files) == 2
    assert all(path.startswith(table.location()) for path in data_files)


def test_string_object_ids_are_accepted(lake: Lake) -> None:
    schema = pa.schema([("object_id", pa.string()), ("value", pa.float64()), ("count", pa.int32())])
    table = pa.table(
        {"object_id": ["Berlin", "Paris", "Lyon"], "value": [3.6e6, 2.1e6, 5.2e5], "count": [7, 9, 2]},
        schema=schema,
    )
    files = stage(lake.staging_directory("population"), [table])
    lake.publish("population", "crowd", files, schema, {"release_id": "population"})
    pd.testing.assert_frame_equal(
        sorted_frame(lake.read_release("population"), ["object_id"]), sorted_frame(table, ["object_id"])
    )


def test_second_publish_of_the_same_id_is_refused_and_adds_no_rows(lake: Lake, tmp_path: Path) -> None:
    first = claims_table(0, 10, seed=3)
    lake.publish("r", "crowd", stage(lake.staging_directory("r"), [first]), CLAIMS_SCHEMA, {"attempt": 1})
    again = stage(tmp_path / "rerun", [claims_table(100, 10, seed=4)])

    with pytest.raises(ReleaseAlreadyPublished, match="'r' is already published"):
        lake.publish("r", "crowd", again, CLAIMS_SCHEMA, {"attempt": 2})

    assert lake.read_release("r").num_rows == first.num_rows
    assert lake.manifest("r") == {"attempt": 1}
    assert all(path.exists() for path in again), "a refused publish does not take the files"


def test_publish_with_an_incompatible_file_leaves_nothing_visible(lake: Lake) -> None:
    good = claims_table(0, 5, seed=5)
    bad = good.set_column(0, "object_id", pa.array([str(value) for value in good.column("object_id").to_pylist()]))
    files = stage(lake.staging_directory("broken"), [good, bad])

    with pytest.raises(ReleaseFilesInvalid, match="column 'object_id' has type string"):
        lake.publish("broken", "crowd", files, CLAIMS_SCHEMA, {"release_id": "broken"})

    assert not lake.is_published("broken")
    assert lake.list_releases() == []
    assert all(path.exists() for path in files)
    with pytest.raises(UnknownRelease):
        lake.read_release("broken")


def test_publish_with_a_missing_column_is_refused(lake: Lake) -> None:
    files = stage(lake.staging_directory("narrow"), [claims_table(0, 5, seed=6).drop_columns(["label"])])
    with pytest.raises(ReleaseFilesInvalid, match="column 'label' of the release schema is missing"):
        lake.publish("narrow", "crowd", files, CLAIMS_SCHEMA, {})
    assert not lake.is_published("narrow")


def test_failure_during_the_commit_returns_the_files_and_leaves_nothing_visible(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    tables = [claims_table(0, 8, seed=7), claims_table(8, 8, seed=8)]
    files = stage(lake.staging_directory("crash"), tables)
    original_commit = CreateTableTransaction.commit_transaction

    def crash(self: CreateTableTransaction) -> None:
        raise RuntimeError("driver lost before the catalog commit")

    monkeypatch.setattr(CreateTableTransaction, "commit_transaction", crash)
    with pytest.raises(RuntimeError, match="driver lost"):
        lake.publish("crash", "crowd", files, CLAIMS_SCHEMA, {"try": 1})
    assert not lake.is_published("crash")
    assert lake.list_releases() == []
    assert all(path.exists() for path in files), "the files are back in staging"

    monkeypatch.setattr(CreateTableTransaction, "commit_transaction", original_commit)
    lake.publish("crash", "crowd", files, CLAIMS_SCHEMA, {"try": 2})
    assert lake.read_release("crash").num_rows == sum(table.num_rows for table in tables)
    assert lake.manifest("crash") == {"try": 2}


def test_an_orphan_table_is_replaced(lake: Lake) -> None:
    lake.ensure_namespace("releases")
    lake.catalog.create_table(lake.release_identifier("orphaned"), schema=CLAIMS_SCHEMA)
    assert not lake.is_published("orphaned")

    table = claims_table(0, 4, seed=9)
    lake.publish("orphaned", "crowd", stage(lake.staging_directory("orphaned"), [table]), CLAIMS_SCHEMA, {"ok": True})
    assert lake.read_release("orphaned").num_rows == table.num_rows
    assert lake.manifest("orphaned") == {"ok": True}


def test_quarantine_deletes_the_output_and_publishes_nothing(lake: Lake) -> None:
    """A quarantined release is refunded, so none of its output may stay: its files, and those of an
    earlier quarantine of the same id (left by an older version in ``quarantine/``), are deleted."""
    tables = [claims_table(0, 3, seed=10), claims_table(3, 3, seed=11)]
    files = stage(lake.staging_directory("suspect"), tables)
    earlier = lake.quarantine_root / "suspect.superseded-20260101T000000000000Z"
    earlier.mkdir(parents=True)
    (earlier / "00000-part.parquet").write_bytes(b"old output")
    other = lake.quarantine_root / "suspects"
    other.mkdir()

    lake.quarantine("suspect", files)

    assert not any(path.exists() for path in files)
    assert not earlier.exists() and other.exists(), "only this release id's left-overs go"
    assert not list(lake.root.rglob("*.parquet"))
    assert not lake.is_published("suspect")
    assert lake.list_releases() == []


def test_list_releases_newest_first_and_visible_from_another_lake_object(lake: Lake) -> None:
    for number in range(3):
        release_id = f"release-{number}"
        files = stage(lake.staging_directory(release_id), [claims_table(number, 2, seed=number)])
        lake.publish(release_id, "crowd", files, CLAIMS_SCHEMA, {"release_id": release_id, "n": number})

    expected = [{"release_id": f"release-{number}", "n": number} for number in (2, 1, 0)]
    assert lake.list_releases() == expected
    with Lake(lake.root) as reopened:
        assert reopened.list_releases() == expected
        assert reopened.read_release("release-1").num_rows == 6


def test_unknown_release_is_a_clear_key_error(lake: Lake) -> None:
    with pytest.raises(KeyError) as raised:
        lake.manifest("nothing-here")
    assert str(raised.value) == "no published release has id 'nothing-here'"


def test_staging_directory_is_emptied_and_discarded(lake: Lake) -> None:
    folder = lake.staging_directory("s")
    (folder / "left-over.parquet").write_bytes(b"x")
    assert list(lake.staging_directory("s").iterdir()) == []
    lake.discard_staging("s")
    assert not folder.exists()


def test_release_table_names() -> None:
    assert release_table_name("crowd_2024_01") == "crowd_2024_01"
    assert release_table_name("a-b") != release_table_name("a_b")
    assert release_table_name("A_b") != release_table_name("a_b")
    for release_id in ("a-b", "2024-01-01T00.00Z", "Crowd.Emotion"):
        name = release_table_name(release_id)
        assert name.replace("_", "").isalnum() and name == name.lower() and not name[0].isdigit()
    for bad in ("../escape", "2024-01-01T00:00Z", ".hidden", ""):
        with pytest.raises(ValueError, match="release id"):
            release_table_name(bad)


def test_concurrent_publishers_of_one_release_id_publish_it_once(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    lakes = [Lake(root), Lake(root)]
    tables = [claims_table(0, 10, seed=20), claims_table(50, 7, seed=21)]
    files = [stage(tmp_path / f"writer-{index}", [table]) for index, table in enumerate(tables)]
    outcomes: list[str] = [""] * 2
    barrier = threading.Barrier(2)

    def publish(index: int) -> None:
        barrier.wait()
        try:
            lakes[index].publish("shared", "crowd", files[index], CLAIMS_SCHEMA, {"writer": index})
            outcomes[index] = "published"
        except ReleaseAlreadyPublished:
            outcomes[index] = "refused"

    threads = [threading.Thread(target=publish, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["published", "refused"]
    winner = outcomes.index("published")
    assert lakes[0].manifest("shared") == {"writer": winner}
    assert lakes[1].read_release("shared").num_rows == tables[winner].num_rows
    assert all(path.exists() for path in files[1 - winner])
    for opened in lakes:
        opened.close()


def test_a_release_with_no_rows_is_published_empty(lake: Lake) -> None:
    lake.publish("all-suppressed", "crowd", [], CLAIMS_SCHEMA, {"rows": 0})
    assert lake.is_published("all-suppressed")
    released = lake.read_release("all-suppressed")
    assert released.num_rows == 0 and released.schema.names == CLAIMS_SCHEMA.names


def test_a_published_release_cannot_be_quarantined(lake: Lake, tmp_path: Path) -> None:
    lake.publish("done", "crowd", [], CLAIMS_SCHEMA, {})
    files = stage(tmp_path / "late", [claims_table(0, 1, seed=30)])
    with pytest.raises(ReleaseAlreadyPublished):
        lake.quarantine("done", files)
    assert all(path.exists() for path in files)


def test_a_catalog_given_by_properties(tmp_path: Path) -> None:
    warehouse = tmp_path / "shared-warehouse"
    warehouse.mkdir()
    properties = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'shared.db'}", "warehouse": warehouse.as_uri()}
    with Lake.from_catalog_properties("cluster", properties, tmp_path / "driver") as lake:
        table = claims_table(0, 3, seed=31)
        lake.publish("remote", "crowd", stage(lake.staging_directory("remote"), [table]), CLAIMS_SCHEMA, {"n": 1})
        assert lake.catalog.name == "cluster"
        assert lake.read_release("remote").num_rows == table.num_rows
    assert not (tmp_path / "driver" / "catalog.db").exists()
    assert any(warehouse.rglob("*.parquet"))
