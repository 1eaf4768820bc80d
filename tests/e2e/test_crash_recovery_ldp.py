"""The ldp kind's own stages in the kill sweep (``test_crash_recovery.py`` covers the platform's
points with the crowd kind): an ldp release over a partitioned folder of reports, read and checked
on the engine, killed (SIGKILL) at each of its stages, then ``recover``, then a rerun of the same
id that publishes exactly once."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.ldp.simulation import simulate_ldp_reports
from pipelines.platform.config import load_config
from pipelines.platform.lake import Lake
from tests.e2e.test_crash_recovery import killed_recovered_and_rerun
from tests.e2e.test_ldp_release import MIXED, ldp_config

LDP_POINTS = [
    "stage:read catalog", "stage:list input", "stage:read and check input", "stage:estimate",
    "stage:validate output", "stage:publish",
]
RESERVED_FROM = "stage:list input"
"""The release's (zero) central charge is reserved once the catalog is read: a kill from here on
leaves a reservation that ``recover`` refunds."""


@pytest.mark.slow
@pytest.mark.parametrize("point", LDP_POINTS)
def test_an_ldp_release_killed_at_any_of_its_stages_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    config_path = ldp_config(tmp_path, MIXED)
    simulate_ldp_reports(load_config(config_path))
    # the reports as a folder of two hive partitions, read fragment by fragment on the engine
    reports = pq.read_table(tmp_path / "reports.parquet")
    half = reports.num_rows // 2
    for number, part in enumerate((reports.slice(0, half), reports.slice(half))):
        (tmp_path / "reports" / f"part={number}").mkdir(parents=True)
        pq.write_table(part, tmp_path / "reports" / f"part={number}" / "data.parquet")
    config_path.write_text(config_path.read_text().replace(str(tmp_path / "reports.parquet"), str(tmp_path / "reports")))
    config = load_config(config_path)
    reserved_yet = LDP_POINTS.index(point) >= LDP_POINTS.index(RESERVED_FROM)
    killed_recovered_and_rerun(config_path, Path(config.lake), "crash-l", point,
                               [("ages", "crash-l")] if reserved_yet else [], monkeypatch)
    with Lake(config.lake) as opened:
        # every user of both partitions counted once
        assert sum(entry["users"] for entry in opened.manifest("crash-l")["mechanism_mix"]) == reports.num_rows
