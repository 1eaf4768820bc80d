"""Progress of a release on standard error."""

from __future__ import annotations

import os
import sys
import time

from pipelines.platform import log


class StageProgress:
    """The release's current stage on standard error: a live line on a terminal; off a terminal
    (a scheduler's log), one plain line per stage with the elapsed time when ``PRIVLAKE_PROGRESS``
    is set or the log format is JSON — never a carriage return into a log file — and nothing
    otherwise."""

    def __init__(self) -> None:
        self._terminal = sys.stderr.isatty()
        self._lines = not self._terminal and bool(os.environ.get("PRIVLAKE_PROGRESS"))
        self._start = time.monotonic()
        self._bar = None
        if self._terminal:
            from tqdm import tqdm

            self._bar = tqdm(total=None, unit="stage", file=sys.stderr, leave=False,
                             bar_format="privlake: {desc} [{elapsed}]")

    def __call__(self, stage: str) -> None:
        if self._bar is not None:
            self._bar.set_description_str(stage)
            self._bar.update(1)
        elif self._lines or log.is_json():
            log.info(f"{stage} [{time.monotonic() - self._start:.1f} s]", stage=stage)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
