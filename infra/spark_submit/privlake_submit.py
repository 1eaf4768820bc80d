"""privlake as a spark-submit application: spark-submit needs a Python file to run, and this is it.

    spark-submit --master spark://HOST:7077 --py-files dist/privlake.zip \\
        infra/spark_submit/privlake_submit.py run CONFIG.yaml --json

The arguments after the file are privlake's command line (``privlake --help``); ``run`` without
``--engine`` runs on Spark. The session uses spark-submit's master and settings; privlake still
enforces its protection checks on them (docs/PRODUCTION.md, "spark-submit"). The exit status is
privlake's (spark-submit passes it on).

spark-submit merges its Python application's standard error into its standard output; this file
points privlake's standard error back at spark-submit's own, so that standard output carries only
what privlake prints there (``--json``: one JSON object per release).
"""

import os
import sys

from pipelines.cli import main


def privlake_arguments(argv: list[str]) -> list[str]:
    """``argv`` with ``--engine spark`` added to a ``run`` that names no engine."""
    if argv[:1] == ["run"] and not any(arg == "--engine" or arg.startswith("--engine=") for arg in argv):
        return ["run", "--engine", "spark", *argv[1:]]
    return argv


def standard_error_to_spark_submit() -> None:
    """Point file descriptor 2 at the standard error of spark-submit's JVM (this process's parent),
    when this process runs under spark-submit and that is reachable; else leave it."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return
    try:
        console = os.open(f"/proc/{os.getppid()}/fd/2", os.O_WRONLY | os.O_APPEND)
    except OSError:
        return
    sys.stderr.flush()
    os.dup2(console, 2)
    os.close(console)


if __name__ == "__main__":
    standard_error_to_spark_submit()
    sys.exit(main(privlake_arguments(sys.argv[1:])))
