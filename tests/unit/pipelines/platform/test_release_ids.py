"""A default release id carries the date, never the start time: the id is public (it names the
release's table), and a start time against the public publication time would tell how long the
release ran, which depends on the data (second issue-15 review, R3)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from pipelines.platform.ids import check_release_id, new_release_id


def test_a_default_release_id_is_the_dataset_the_date_and_random_digits() -> None:
    before = datetime.now(UTC).strftime("%Y%m%d")
    made = [new_release_id("census") for _ in range(20)]
    after = datetime.now(UTC).strftime("%Y%m%d")
    for release_id in made:
        assert check_release_id(release_id) == release_id
        match = re.fullmatch(r"census-(\d{8})-([0-9a-f]{8})", release_id)
        assert match is not None, release_id
        assert match.group(1) in (before, after)
    assert len(set(made)) == len(made)
