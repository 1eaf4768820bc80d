"""``releases._index``: one public row per published release, added after the release's commit,
restored by recovery after a crash between the two, never doubled, and invisible to everything
that lists or sweeps release tables."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from pipelines.platform.lake import Lake
from pipelines.platform.recovery import recover
from pipelines.platform.release_index import INDEX_SCHEMA, ReleaseIndex
from tests.platform.test_lake import CLAIMS_SCHEMA, claims_table, stage

MANIFEST = {"dataset": "books", "epsilon": 2.5, "delta": 1e-6, "headline_scope": "whole release",
            "privacy_unit": {"unit": "claim"}, "timings": {"weights": 1.0}}


def publish(lake: Lake, release_id: str, seed: int) -> None:
    files = stage(lake.staging_directory(release_id), [claims_table(0, 3, seed)])
    lake.publish(release_id, "crowd", files, CLAIMS_SCHEMA, {**MANIFEST, "release_id": release_id})


def test_rows_hold_the_public_fields_and_are_added_once(tmp_path: Path) -> None:
    with Lake(tmp_path / "lake") as lake:
        publish(lake, "first", 1)
        index = ReleaseIndex(lake)
        assert index.add([lake.release("first")]) == 1
        assert index.add([lake.release("first")]) == 0  # a retry never doubles a row
        rows = index.entries()
        assert rows.schema.names == INDEX_SCHEMA.names
        row = rows.to_pylist()[0]
        assert row["release_id"] == "first" and row["table"] == "releases.first" and row["kind"] == "crowd"
        assert row["dataset"] == "books" and row["epsilon"] == 2.5 and row["delta"] == 1e-6
        assert row["privacy_unit"] == '{"unit": "claim"}' and row["rows"] == lake.release("first").rows > 0
        assert "timings" not in rows.schema.names


def test_recovery_restores_rows_lost_between_the_commit_and_the_append(tmp_path: Path) -> None:
    with Lake(tmp_path / "lake") as lake:
        for number, release_id in enumerate(("a", "b", "c")):
            publish(lake, release_id, number)
        ReleaseIndex(lake).add([lake.release("a")])
        done = recover(lake)
        assert done.index_rows_added == 2 and any("releases._index" in line for line in done.lines())
        assert sorted(ReleaseIndex(lake).release_ids()) == ["a", "b", "c"]
        assert recover(lake).index_rows_added == 0


def test_the_index_is_not_a_release_and_survives_the_orphan_sweep(tmp_path: Path) -> None:
    with Lake(tmp_path / "lake") as lake:
        publish(lake, "only", 3)
        index = ReleaseIndex(lake)
        index.add([lake.release("only")])
        publish(lake, "second", 4)
        index.add([lake.release("second")])  # a second data file in the index table's folder
        assert [release.release_id for release in lake.published_releases()] == ["second", "only"]
        assert ("releases", "_index") not in lake.release_tables()
        recover(lake, now=4e9)  # far in the future: every unowned file would be old enough to sweep
        assert sorted(index.release_ids()) == ["only", "second"]


def test_an_id_cannot_name_the_index_table() -> None:
    from pipelines.platform.lake import release_table_name

    for release_id in ("_index", "-index", ".index"):
        with pytest.raises(ValueError):
            release_table_name(release_id)
    assert not release_table_name("index").startswith("_")


def test_an_empty_lake_has_an_empty_index(tmp_path: Path) -> None:
    with Lake(tmp_path / "lake") as lake:
        assert ReleaseIndex(lake).entries().num_rows == 0
        assert ReleaseIndex(lake).entries().schema.names == pa.schema(INDEX_SCHEMA).names


def test_racing_adds_of_one_release_leave_one_row(tmp_path: Path) -> None:
    """Both adders read the index before either appends (pyiceberg's own retry would replay the
    second append on the refreshed table without our check: the index has it switched off)."""
    import threading

    with Lake(tmp_path / "lake") as lake:
        publish(lake, "raced", 5)
        release = lake.release("raced")
        ReleaseIndex(lake)._table(create=True)
        barrier = threading.Barrier(2)
        original = ReleaseIndex._table
        first_load = threading.local()

        def synchronized(self, create):
            table = original(self, create)
            if create and not getattr(first_load, "done", False):
                first_load.done = True
                barrier.wait(timeout=30)  # both have loaded the same (empty) snapshot
            return table

        ReleaseIndex._table = synchronized
        try:
            results = []
            threads = [threading.Thread(target=lambda: results.append(ReleaseIndex(Lake(tmp_path / "lake")).add(
                [release]))) for _ in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
        finally:
            ReleaseIndex._table = original
        table = lake.catalog.load_table(("releases", "_index"))
        assert table.scan().to_arrow().column("release_id").to_pylist() == ["raced"]
        assert sorted(results) == [0, 1]
