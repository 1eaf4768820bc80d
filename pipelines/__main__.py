"""``python -m pipelines``: the ``privlake`` command line, for environments without the script
(a spark-submit entry, a scheduler's Python task)."""

import sys

from pipelines.cli import main

sys.exit(main())
