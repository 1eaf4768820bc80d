"""Named points in a release where a test can kill the process, as ``kill -9`` would.

``PRIVLAKE_FAILPOINT=<name>`` makes the process SIGKILL itself when it reaches the point ``name``:
no ``finally`` block, no refund, no clean-up runs — exactly what a lost driver leaves behind. The
crash tests (``tests/e2e/test_crash_recovery.py``) kill a ``privlake run`` at every point, then run
``privlake recover`` and a rerun, and check that the ledger equals the published releases and that
no staging or orphan file is left. Unset (always, in production) a point costs one dictionary
look-up.

Points: ``admitted`` (policy checked, nothing reserved), ``reserved`` (budget reserved),
``stage:<name>`` at the start of every timed stage (``stage:read input``, ``stage:validate
input``, ``stage:stage input``, the kind's engine stages, ``stage:publish``), ``publish:files-moved``
(the files are in the table's folder, the commit has not happened) and ``published`` (the commit
landed, the ledger still says reserved).
"""

from __future__ import annotations

import os
import signal

FAILPOINT_VARIABLE = "PRIVLAKE_FAILPOINT"


def failpoint(name: str) -> None:
    """SIGKILL this process if ``PRIVLAKE_FAILPOINT`` names ``name``."""
    if os.environ.get(FAILPOINT_VARIABLE) == name:
        os.kill(os.getpid(), signal.SIGKILL)
