"""The filter kind's own stages in the kill sweep (``test_crash_recovery.py`` covers the platform's
points with the crowd kind): a filter release with stored filters, killed (SIGKILL) at each of its
stages, then ``recover``, then a rerun of the same id that publishes exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.filter.pipeline import train_encoder, train_filters
from pipelines.platform.config import load_config
from pipelines.platform.lake import Lake
from tests.e2e.test_crash_recovery import killed_recovered_and_rerun
from tests.e2e.test_filter_release import SECRET_HEX, filter_case

FILTER_POINTS = [
    "stage:load encoder", "stage:read training records", "stage:list input", "stage:read input",
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
    reserved_yet = FILTER_POINTS.index(point) >= FILTER_POINTS.index(RESERVED_FROM)
    killed_recovered_and_rerun(config_path, Path(config.lake), "crash-f", point,
                               [("people", "crash-f")] if reserved_yet else [], monkeypatch)
    with Lake(config.lake) as opened:
        assert opened.read_release("crash-f").num_rows == opened.manifest("crash-f")["rows"] == 600
