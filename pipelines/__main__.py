"""``python -m pipelines``: the ``privlake`` command line, for environments without the script
(a spark-submit entry, a scheduler's Python task)."""

from pipelines.cli import command

command()
