"""A release killed (SIGKILL, as ``kill -9``) at every stage, then ``privlake recover``, then a rerun.

The reliability issue found 16 reservations for 12 releases after 18 kills, raw claims left in
staging and orphan Parquet files in a table's folder. Here a ``privlake run`` subprocess kills
itself at each named point (``pipelines/platform/failpoints.py``); afterwards ``recover`` must leave
the ledger charging exactly the published releases, no staging folder, no lease and no file under
the release tables that no published snapshot owns; the rerun of the same id publishes exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.cli import main
from pipelines.platform.lake import Lake, release_table_name
from pipelines.platform.ledger import PUBLISHED, RESERVED, PrivacyLedger
from pipelines.platform.recovery import LEASE_SECONDS_VARIABLE, Lease, leases_folder, recover
from pipelines.platform.release_index import ReleaseIndex
from tests.e2e.conftest import write_config

LEASE = 0.5
TABULAR_POINTS = [
    "stage:read input", "stage:split and stage", "stage:structure learning", "stage:parameter learning",
    "stage:seed index", "stage:synthesize", "stage:write staging", "stage:validate output",
]
CROWD_POINTS = [
    "admitted", "reserved", "stage:list input", "stage:read and check input", "inputs checked",
    "stage:global weights", "stage:synthesize", "stage:write staging", "stage:validate output", "stage:publish",
    "publish:files-moved", "published",
]


def killed_run(config: Path, release_id: str, point: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PRIVLAKE_FAILPOINT": point, LEASE_SECONDS_VARIABLE: str(LEASE)}
    return subprocess.run([sys.executable, "-m", "pipelines", "run", str(config), "--release-id", release_id],
                          capture_output=True, text=True, env=environment, timeout=300)


def owned_files(lake: Lake) -> set[Path]:
    """Every data file a published release's (or the release index's) current snapshot references."""
    owned = set()
    tables = [tuple(release.table.split(".")) for release in lake.published_releases()]
    if lake.catalog.table_exists(("releases", "_index")):
        tables.append(("releases", "_index"))
    for identifier in tables:
        table = lake.catalog.load_table(identifier)
        for task in table.scan().plan_files():
            owned.add(Path(task.file.file_path.removeprefix("file://")).resolve())
    return owned


def assert_settled(lake_path: Path) -> None:
    """Ledger = published releases; no staging, lease or orphan data file; nothing reserved."""
    with Lake(lake_path) as lake:
        latest = PrivacyLedger(lake).entries().drop_duplicates(["dataset", "release_id"], keep="last")
        assert RESERVED not in set(latest["status"]), latest
        published_ids = {release.release_id for release in lake.published_releases()}
        assert ReleaseIndex(lake).release_ids() == published_ids, "releases._index must list exactly the published"
        assert set(latest.loc[latest["status"] == PUBLISHED, "release_id"]) == published_ids
        assert list(lake.staging_root.iterdir()) == [], "raw data must not linger in staging"
        folder = leases_folder(lake)
        assert not folder.exists() or list(folder.iterdir()) == []
        data_files = {path.resolve() for path in (lake_path / "warehouse" / "releases").rglob("*.parquet")
                      if "/data/" in str(path)}
        assert data_files == owned_files(lake), "orphan files under the release tables"
        assert lake.release_tables() == [tuple(release.table.split(".")) for release in lake.published_releases()]


def killed_recovered_and_rerun(config: Path, lake_path: Path, release_id: str, point: str,
                               refunded: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind's release killed at ``point``, then ``recover`` (refunding exactly ``refunded``), then
    a rerun of the same id: everything settled after each, one publication, one published event."""
    crashed = killed_run(config, release_id, point)
    assert crashed.returncode == -signal.SIGKILL, (point, crashed.returncode, crashed.stderr[-500:])
    monkeypatch.setenv(LEASE_SECONDS_VARIABLE, str(LEASE))
    time.sleep(LEASE * 1.5)  # the killed driver's lease expires
    with Lake(lake_path) as opened:
        assert recover(opened).refunded == refunded
    assert_settled(lake_path)
    assert main(["run", str(config), "--release-id", release_id]) == 0
    assert_settled(lake_path)
    with Lake(lake_path) as opened:
        assert [release.release_id for release in opened.published_releases()] == [release_id]
        assert (PrivacyLedger(opened).entries()["status"] == PUBLISHED).sum() == 1


@pytest.mark.slow
@pytest.mark.parametrize("point", CROWD_POINTS)
def test_a_release_killed_at_any_point_recovers_and_publishes_exactly_once(
    tmp_path: Path, claims_csv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], point: str
) -> None:
    lake = tmp_path / "lake"
    config = write_config(tmp_path, claims_csv, lake)
    crashed = killed_run(config, "crash-1", point)
    assert crashed.returncode == -signal.SIGKILL, (point, crashed.returncode, crashed.stderr[-500:])
    monkeypatch.setenv(LEASE_SECONDS_VARIABLE, str(LEASE))
    time.sleep(LEASE * 1.5)  # the killed driver's lease expires
    assert main(["recover", "--lake", str(lake), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    if point == "published":
        assert report["completed"] == [{"dataset": "small", "release_id": "crash-1"}]
    elif point not in ("admitted",):
        assert report["refunded"] == [{"dataset": "small", "release_id": "crash-1"}]
    assert_settled(lake)
    assert main(["run", str(config), "--release-id", "crash-1"]) == 0
    assert_settled(lake)
    with Lake(lake) as opened:
        assert [release.release_id for release in opened.published_releases()] == ["crash-1"]
        events = PrivacyLedger(opened).entries()
        assert (events["status"] == PUBLISHED).sum() == 1
        rows = opened.read_release("crash-1").num_rows
        assert rows == opened.manifest("crash-1")["rows"] > 0


def test_the_next_run_recovers_a_crashed_release_before_it_starts(
    tmp_path: Path, claims_csv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lake = tmp_path / "lake"
    config = write_config(tmp_path, claims_csv, lake)
    assert killed_run(config, "crash-1", "stage:synthesize").returncode == -signal.SIGKILL
    monkeypatch.setenv(LEASE_SECONDS_VARIABLE, str(LEASE))
    time.sleep(LEASE * 1.5)
    assert main(["run", str(config), "--release-id", "other-1"]) == 0
    assert "recover: refunded: release crash-1" in capsys.readouterr().err
    assert_settled(lake)


def test_a_live_lease_is_left_alone_and_an_expired_one_is_not(tmp_path: Path, claims_csv: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Recovery must never refund a release that is still running (on this host or another)."""
    from pipelines.platform.ledger import Charge
    from pipelines.platform.policy import LakePolicy

    lake_path = tmp_path / "lake"
    write_config(tmp_path, claims_csv, lake_path)
    monkeypatch.setenv(LEASE_SECONDS_VARIABLE, "30")
    with Lake(lake_path) as lake:
        budget = LakePolicy(lake).budget("small")
        ledger = PrivacyLedger(lake)
        with Lease(lake, "running-1", "small", "crowd"):
            ledger.reserve("small", "running-1", "crowd", Charge.of(1.0, 0.0), budget)
            (lake.staging_root / "running-1").mkdir()
            done = recover(lake)
            assert done.refunded == [] and done.live == ["running-1"]
            assert (lake.staging_root / "running-1").is_dir()
            assert ledger.latest_event("small", "running-1")["status"] == RESERVED
        # the lease is gone (the process ended without settling: as after a kill between the two)
        done = recover(lake)
        assert done.refunded == [("small", "running-1")] and done.staging_removed == ["running-1"]


def test_a_stalled_release_whose_reservation_was_recovered_does_not_publish(
    tmp_path: Path, claims_csv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver that stalled past its lease finds its reservation refunded at the commit: it stops
    (exit 4) instead of publishing uncharged."""
    from pipelines.platform import release as release_module

    lake_path = tmp_path / "lake"
    config = write_config(tmp_path, claims_csv, lake_path)
    real_finish = release_module.finish_release

    def recovered_meanwhile(context, result, summary=None):
        context.lease.path.unlink()  # as if it had expired
        context.lease.renew = lambda: None
        recover(context.lake)
        return real_finish(context, result, summary)

    monkeypatch.setattr(release_module, "finish_release", recovered_meanwhile)
    assert main(["run", str(config), "--release-id", "stalled-1"]) == 4
    assert_settled(lake_path)
    with Lake(lake_path) as lake:
        assert lake.published_releases() == []


def test_orphan_files_of_another_attempt_are_removed_only_when_older_than_the_lease(
    tmp_path: Path, claims_csv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake_path = tmp_path / "lake"
    config = write_config(tmp_path, claims_csv, lake_path)
    assert main(["run", str(config), "--release-id", "kept-1"]) == 0
    with Lake(lake_path) as lake:
        table_folder = Path(lake.published_releases()[0].location.removeprefix("file://"))
        published_file = next((table_folder / "data").rglob("*.parquet"))
        stray = table_folder / "data" / "another-attempt"
        stray.mkdir()
        pq.write_table(pq.read_table(published_file), stray / "part.parquet")
        monkeypatch.setenv(LEASE_SECONDS_VARIABLE, "30")
        assert recover(lake).orphan_files_removed == 0, "a publish in flight is younger than the lease"
        monkeypatch.setenv(LEASE_SECONDS_VARIABLE, str(LEASE))
        time.sleep(LEASE * 1.5)
        assert recover(lake).orphan_files_removed == 1
        assert not stray.exists() and published_file.exists()
        assert lake.read_release("kept-1").num_rows == lake.manifest("kept-1")["rows"]


@pytest.mark.slow
@pytest.mark.parametrize("point", TABULAR_POINTS)
def test_a_tabular_release_killed_at_any_of_its_stages_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    """The tabular kind's own stages (the platform's points are covered above)."""
    from tests.e2e.test_tabular_release import tabular_case

    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", "7ab1" * 16)
    config = tabular_case(tmp_path, synthesis={"omega": 4, "records": 200, "batch_size": 100})
    # tabular reserves once the split is known (after "split and stage"): nothing to refund before
    reserved_yet = TABULAR_POINTS.index(point) > TABULAR_POINTS.index("stage:split and stage")
    killed_recovered_and_rerun(config, tmp_path / "lake", "crash-t", point,
                               [("census", "crash-t")] if reserved_yet else [], monkeypatch)


def test_a_publish_in_flight_is_never_taken_for_orphan_files(tmp_path: Path, claims_csv: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A publish moves staged files (with the staging write's old times) into the table's folder
    before its commit: while the release's lease is live, recovery must leave that folder alone."""
    lake_path = tmp_path / "lake"
    write_config(tmp_path, claims_csv, lake_path)
    monkeypatch.setenv(LEASE_SECONDS_VARIABLE, str(LEASE))
    with Lake(lake_path) as lake:
        folder = lake_path / "warehouse" / "releases" / release_table_name("inflight-1") / "data" / "attempt"
        folder.mkdir(parents=True)
        (folder / "part.parquet").write_bytes(b"staged long ago")
        old = time.time() - 3600
        os.utime(folder / "part.parquet", (old, old))
        with Lease(lake, "inflight-1", "small", "crowd", seconds=30):
            assert recover(lake).orphan_files_removed == 0
            assert (folder / "part.parquet").exists()
        assert recover(lake).orphan_files_removed == 1
