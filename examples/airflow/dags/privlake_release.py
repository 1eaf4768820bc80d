"""A daily privlake release, scheduled by Apache Airflow (tested on 3.3.2 with the pins in
``examples/airflow/requirements.txt``, and on 2.10.5 with those in ``requirements-airflow2.txt``).

Copy this file into the DAGs folder and set two Airflow Variables (or the environment variables
``AIRFLOW_VAR_PRIVLAKE_BIN`` and ``AIRFLOW_VAR_PRIVLAKE_CONFIG``, or ``PRIVLAKE_BIN`` and
``PRIVLAKE_CONFIG``):

- ``privlake_bin``: the ``privlake`` executable of privlake's own environment (say
  ``/opt/privlake/.venv/bin/privlake``); default: ``privlake`` on the ``PATH``. privlake need not
  be installed in Airflow's environment: the task runs it as a command.
- ``privlake_config``: the release config (YAML). Relative paths in it are relative to the file,
  so the task's working directory does not matter; ``${ENV_VAR}`` in it is read from the task's
  environment.

What the task does with the scheduler contract (``privlake run --help``):

- The release id is templated from the run's logical date (``sample-20260101``), so a retry, a
  cleared task or a re-run of the same date asks for the same id, and once that id is published
  ``privlake run`` does nothing and exits 0: a date is released at most once.
- Exit 75 (transient: an unreachable master or catalog, lost storage, a full disk) and a kill by
  a signal (the next run recovers what the killed one left) raise an ordinary error: Airflow
  retries it, with exponential backoff.
- Exit 2 (bad input or config), 3 (quarantined), 4 (refused by budget or policy) and 1 (a bug)
  raise ``AirflowFailException``: the task fails at once, without its retries (a retry would be
  refused again, or spend nothing and fail the same way).
- Exit 5 (nothing to release) raises ``AirflowSkipException``: the task is skipped.

A plain ``BashOperator`` cannot make this distinction: every non-zero exit code but its
``skip_on_exit_code`` raises the same retryable error, so a refused budget would be retried as
often as an unreachable master. This task runs the command itself (``subprocess``) and maps the
code. Its return value (an XCom) is the release's ``--json`` record: id, table, status, (ε, δ),
rows. privlake's log lines (``--log-format json``) go to the task's log.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import tempfile
from datetime import timedelta
from typing import Any

import pendulum

try:  # Airflow 3
    from airflow.sdk import DAG, Variable, task
    from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

    BACKOFF: float | bool = 2.0  # a multiplier: 5, 10, 20 minutes
except ImportError:  # Airflow 2
    from airflow import DAG
    from airflow.decorators import task
    from airflow.exceptions import AirflowException, AirflowFailException, AirflowSkipException
    from airflow.models import Variable

    BACKOFF = True  # doubling, with Airflow's jitter

log = logging.getLogger(__name__)

DAG_ID = "privlake_daily_release"
RELEASE_ID = "sample-{{ ds_nodash }}"
"""One release per logical date. An hourly schedule would use ``{{ ts_nodash }}``."""

RETRYABLE = frozenset({75})
"""Exit codes a retry may cure (transient infrastructure failure)."""
SKIP = frozenset({5})
"""Nothing to release: the task is skipped, not failed."""
MEANINGS = {
    1: "a bug in privlake (PRIVLAKE_DEBUG=1 shows the traceback)",
    2: "bad input, config or arguments",
    3: "the output failed validation and went to quarantine",
    4: "refused by budget or policy",
    5: "nothing to release",
    75: "transient infrastructure failure",
}
TERMINATE_GRACE_SECONDS = 30


def _setting(variable: str, environment: str, default: str | None = None) -> str | None:
    """An Airflow Variable (also ``AIRFLOW_VAR_<NAME>``), else an environment variable. (The
    default ``None`` is positional: Airflow 2 names it ``default_var``, Airflow 3 ``default``.)"""
    return Variable.get(variable, None) or os.environ.get(environment) or default


def _last_record(lines: Any) -> dict[str, Any]:
    """The last JSON object among ``run --json``'s output lines (anything else is ignored)."""
    record: dict[str, Any] = {}
    for line in lines:
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            record = parsed
    return record


def run_privlake(release_id: str) -> dict[str, Any]:
    """Run ``privlake run CONFIG --release-id ID --json`` and map its exit code to Airflow's
    retry, fail-now and skip (module docstring)."""
    executable = _setting("privlake_bin", "PRIVLAKE_BIN", "privlake")
    config = _setting("privlake_config", "PRIVLAKE_CONFIG")
    if not config:
        raise AirflowFailException("set the Airflow Variable privlake_config (or PRIVLAKE_CONFIG) to the release config")
    command = [executable, "run", config, "--release-id", release_id, "--json", "--log-format", "json"]
    log.info("running %s", " ".join(command))
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as standard_output:
        try:
            process = subprocess.Popen(command, stdout=standard_output, stderr=subprocess.PIPE, text=True)
        except OSError as error:  # the executable is missing or not executable: a setup error
            raise AirflowFailException(f"cannot start {executable}: {error.strerror or error}") from None
        try:
            for line in process.stderr:  # privlake's JSON log lines, as they come
                log.info("privlake: %s", line.rstrip("\n"))
            code = process.wait()
        finally:  # the task was killed or timed out: stop the release too (its lease is recovered)
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(TERMINATE_GRACE_SECONDS)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        standard_output.seek(0)
        record = _last_record(standard_output)
    if code == 0:
        log.info("release %s: %s", release_id, record.get("summary", "published"))
        return record
    reason = record.get("error") or MEANINGS.get(code, "unknown exit code")
    message = f"privlake run exited {code} for release {release_id}: {reason}"
    if code in SKIP:
        raise AirflowSkipException(message)
    if code in RETRYABLE or code < 0 or code >= 128:  # killed by a signal (OOM killer, lost host)
        raise AirflowException(message + " (retrying)")
    raise AirflowFailException(message + " (not retried)")


with DAG(
    dag_id=DAG_ID,
    description="A privacy-protected release per day, idempotent per logical date",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # one release of a dataset at a time: each is charged to the same budget
    default_args={
        "retries": 3,
        "retry_delay": timedelta(minutes=5),
        "retry_exponential_backoff": BACKOFF,
        "max_retry_delay": timedelta(hours=1),
        "execution_timeout": timedelta(hours=4),
    },
    tags=["privlake"],
) as dag:

    @task(task_id="release")
    def release(release_id: str) -> dict[str, Any]:
        return run_privlake(release_id)

    release(RELEASE_ID)
