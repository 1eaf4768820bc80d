"""Release ids: the one rule for what an id may be, and how a fresh one is made.

An id names the release's table and staging folder and is what a scheduler passes to make a
retry idempotent, so it is checked the same way everywhere (command line, Python API, lake).
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime

from pipelines.platform.errors import PrivlakeError

RELEASE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


class InvalidReleaseId(PrivlakeError, ValueError):
    """A release id that breaks ``RELEASE_ID_PATTERN`` (one line, exit code 2)."""


def check_release_id(release_id: str) -> str:
    """``release_id`` itself when it is letters, digits, ``.``, ``_`` and ``-`` (at most 128,
    starting with a letter or digit); ``InvalidReleaseId`` otherwise."""
    # fullmatch: the pattern's ``$`` alone would accept a trailing newline (issue 14)
    if not isinstance(release_id, str) or not RELEASE_ID_PATTERN.fullmatch(release_id):
        raise InvalidReleaseId(f"release id {release_id!r}: use letters, digits, '.', '_' and '-' (at most 128)")
    return release_id


def new_release_id(dataset: str) -> str:
    """``<dataset>-<UTC date>-<8 random hex digits>``. The date only: a release id is public (it
    names the release's table), and a start time to the second would, against the public
    publication time, tell readers how long the release ran — which depends on the data
    (docs/PRIVACY.md, the crowd's "Not covered"; second issue-15 review, R3)."""
    stamp = datetime.now(UTC).strftime("%Y%m%d")
    return f"{dataset}-{stamp}-{os.urandom(4).hex()}"
