"""The filter kind's own stages in the kill sweep (``test_crash_recovery.py`` covers the platform's
points with the crowd kind): a filter release with stored filters, killed (SIGKILL) at each of its
stages, then ``recover``, then a rerun of the same id that publishes exactly once."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from pipelines.cli import main
from pipelines.filter.pipeline import train_encoder, train_filters
from pipelines.platform.config import load_config
from pipelines.platform.lake import Lake
from pipelines.platform.ledger import PUBLISHED, PrivacyLedger
from pipelines.platform.recovery import LEASE_SECONDS_VARIABLE, recover
from tests.e2e.test_crash_recovery import LEASE, assert_settled, killed_run
from tests.e2e.test_filter_release import SECRET_HEX, filter_case

FILTER_POINTS = [
    "stage:load encoder", "stage:read training records", "stage:read input", "stage:stage input",
    "stage:privatize", "stage:validate output", "stage:evaluate", "stage:publish",
]
RESERVED_FROM = "stage:read training records"
"""The guarantee (from the caps and the stored filters) is reserved in the plan, after the encoder
is loaded: a kill from here on leaves a reservation that ``recover`` refunds."""


@pytest.mark.slow
@pytest.mark.parametrize("point", FILTER_POINTS)
def test_a_filter_release_killed_at_any_of_its_stages_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)
    config_path = filter_case(tmp_path, filters={"artifact": "latest"}, evaluation={"max_records": 200})
    config = load_config(config_path)
    train_encoder(config)
    train_filters(config)
    crashed = killed_run(config_path, "crash-f", point)
    assert crashed.returncode == -signal.SIGKILL, (point, crashed.returncode, crashed.stderr[-500:])
    monkeypatch.setenv(LEASE_SECONDS_VARIABLE, str(LEASE))
    time.sleep(LEASE * 1.5)
    reserved_yet = FILTER_POINTS.index(point) >= FILTER_POINTS.index(RESERVED_FROM)
    with Lake(config.lake) as opened:
        assert recover(opened).refunded == ([("people", "crash-f")] if reserved_yet else [])
    assert_settled(Path(config.lake))
    assert main(["run", str(config_path), "--release-id", "crash-f"]) == 0
    assert_settled(Path(config.lake))
    with Lake(config.lake) as opened:
        assert [release.release_id for release in opened.published_releases()] == ["crash-f"]
        assert (PrivacyLedger(opened).entries()["status"] == PUBLISHED).sum() == 1
        assert opened.read_release("crash-f").num_rows == opened.manifest("crash-f")["rows"] == 600
