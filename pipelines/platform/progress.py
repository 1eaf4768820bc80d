"""Progress of a release on standard error."""

from __future__ import annotations

import os
import sys


class StageProgress:
    """A progress bar on standard error over a release's stages (shown on a terminal, or when
    ``PRIVLAKE_PROGRESS`` is set), with the current stage and elapsed time."""

    def __init__(self) -> None:
        from tqdm import tqdm

        enabled = sys.stderr.isatty() or bool(os.environ.get("PRIVLAKE_PROGRESS"))
        self._bar = tqdm(
            total=None, unit="stage", file=sys.stderr, disable=not enabled, leave=False,
            bar_format="privlake: {desc} [{elapsed}]",
        )

    def __call__(self, stage: str) -> None:
        self._bar.set_description_str(stage)
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()
