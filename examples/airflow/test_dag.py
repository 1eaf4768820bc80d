"""The Airflow example (``dags/privlake_release.py``) run by Airflow's own ``dag.test()``: the
scheduler's dependency loop, task runner, retries and metadata database, in this process. Every
release is real: the project's ``privlake`` runs the sample crowd config (``examples/
crowd_sample.yaml``, on the local engine) on generated claims into a temporary test lake.

Run in Airflow's environment (``make test-scheduling``), not in the main suite: ``privlake`` is
found through ``PRIVLAKE_BIN`` (default: the project's ``.venv/bin/privlake``).

Each attempt goes through a recording wrapper (``privlake_recorder``) that runs the real command
and appends its exit code to a file, so a test sees how often Airflow ran it. For the transient
case the wrapper makes the first attempt ask for a Spark master nobody listens on
(``spark://127.0.0.1:9``): privlake itself exits 75, as it does when a cluster is down, and the
next attempt (the cluster is "back") runs the config as it is.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
import pytest
import yaml

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parents[1]
PRIVLAKE = Path(os.environ.get("PRIVLAKE_BIN") or PROJECT / ".venv" / "bin" / "privlake")
TEST_SECRET_HEX = "5eed" * 16
DATASET = "sample"
SAMPLE_EPSILON = 4.0  # what one release of the sample config spends (its manifest's epsilon)
DAY = pendulum.datetime(2026, 3, 1, tz="UTC")
UNREACHABLE_MASTER = "spark://127.0.0.1:9"


def privlake(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run([str(PRIVLAKE), *args], capture_output=True, text=True)
    if check:
        assert completed.returncode == 0, f"privlake {' '.join(args)}: {completed.stderr}"
    return completed


@pytest.fixture(scope="session")
def claims(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert PRIVLAKE.is_file(), f"no privlake at {PRIVLAKE}: make install, or set PRIVLAKE_BIN"
    data = tmp_path_factory.mktemp("claims")
    privlake("generate-crowd", "--out", str(data), "--objects", "40", "--claims-per-object", "20",
             "--sources", "30", "--seed", "5")
    return data


@pytest.fixture(scope="session")
def dag(airflow_db: Path) -> Any:
    """The example DAG as the scheduler loads it (a DagBag of the DAGs folder), with its retry delay
    cut from minutes to nothing so that a retry runs at once."""
    try:
        from airflow.dag_processing.dagbag import DagBag  # Airflow 3
    except ImportError:
        from airflow.models.dagbag import DagBag  # Airflow 2

    bag = DagBag(dag_folder=str(HERE / "dags"))
    assert not bag.import_errors, bag.import_errors
    loaded = bag.dags["privlake_daily_release"]
    task = loaded.get_task("release")
    task.retry_delay = timedelta(0)
    task.retry_exponential_backoff = 0
    return loaded


class LakeCase:
    """A test lake with the sample dataset's budget, a config releasing into it and a recording
    ``privlake`` the DAG is pointed at (the Airflow Variables ``privlake_bin`` and
    ``privlake_config``, given as ``AIRFLOW_VAR_*`` environment variables)."""

    def __init__(self, root: Path, claims: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.lake = root / "lake"
        self.calls = root / "calls"
        monkeypatch.setenv("PRIVLAKE_TEST_SECRET", TEST_SECRET_HEX)
        monkeypatch.setenv("PRIVLAKE_KEY_DIR", str(root / "keys"))
        for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
            monkeypatch.setenv(variable, "1")
        config = yaml.safe_load((PROJECT / "examples" / "crowd_sample.yaml").read_text(encoding="utf-8"))
        config["lake"] = "lake"  # relative to the config file
        config["input"]["path"] = str(claims / "claims.csv")
        config["evaluation"]["truth_path"] = str(claims / "truth.csv")
        config["engine"] = {"name": "local"}
        self.config = root / "release.yaml"
        self.config.write_text(yaml.safe_dump(config), encoding="utf-8")
        recorder = root / "privlake_recorder"
        recorder.write_text(
            "#!/bin/sh\n"
            "# runs the real privlake, appending each exit code to the calls file; the first\n"
            "# $FLAKY_ATTEMPTS attempts ask for a Spark master nobody listens on (exit 75)\n"
            f"calls={shlex.quote(str(self.calls))}\n"
            'made=0; [ -f "$calls" ] && made=$(wc -l < "$calls")\n'
            'if [ "$made" -lt "${FLAKY_ATTEMPTS:-0}" ]; then\n'
            f"    set -- \"$@\" --engine spark --master {UNREACHABLE_MASTER}\n"
            "fi\n"
            f"{shlex.quote(str(PRIVLAKE))} \"$@\"\n"
            "code=$?\n"
            'echo "$code" >> "$calls"\n'
            "exit $code\n",
            encoding="utf-8",
        )
        recorder.chmod(0o755)
        monkeypatch.setenv("AIRFLOW_VAR_PRIVLAKE_BIN", str(recorder))
        monkeypatch.setenv("AIRFLOW_VAR_PRIVLAKE_CONFIG", str(self.config))
        privlake("init-lake", str(self.lake), "--test")

    def budget(self, epsilon: float) -> None:
        privlake("budget", "set", DATASET, "--epsilon", str(epsilon), "--delta", "1e-5", "--lake", str(self.lake))

    def exit_codes(self) -> list[int]:
        return [int(line) for line in self.calls.read_text().split()] if self.calls.exists() else []

    def releases(self) -> list[str]:
        return sorted(m["release_id"] for m in json.loads(privlake("releases", "--lake", str(self.lake), "--json").stdout))

    def charges(self) -> list[dict[str, Any]]:
        events = json.loads(privlake("ledger", "--lake", str(self.lake), "--json").stdout)
        return [event for event in events if event["status"] == "published"]


@pytest.fixture
def case(tmp_path: Path, claims: Path, monkeypatch: pytest.MonkeyPatch) -> LakeCase:
    return LakeCase(tmp_path, claims, monkeypatch)


def run_day(dag: Any, day: pendulum.DateTime) -> Any:
    """One DagRun of ``day`` through ``dag.test()``; its ``release`` task instance."""
    import airflow

    date_argument = "logical_date" if int(airflow.__version__.split(".")[0]) >= 3 else "execution_date"
    run = dag.test(**{date_argument: day})
    return run.get_task_instance("release")


def test_the_dag_parses_with_the_scheduler_contract(dag: Any) -> None:
    task = dag.get_task("release")
    assert dag.max_active_runs == 1 and not dag.catchup
    assert task.retries == 3 and task.execution_timeout == timedelta(hours=4)
    assert "{{ ds_nodash }}" in str(task.op_args)


def test_a_day_is_published_under_its_templated_id_and_a_rerun_publishes_nothing(dag: Any, case: LakeCase) -> None:
    case.budget(100)
    first = run_day(dag, DAY)
    assert (first.state, first.try_number) == ("success", 1)
    assert case.releases() == ["sample-20260301"] and case.exit_codes() == [0]
    # The same logical date again (a cleared task, a re-triggered run, a retry after the commit):
    # the same id, privlake's "already published" (exit 0), nothing new and nothing charged.
    again = run_day(dag, DAY)
    assert (again.state, again.try_number) == ("success", 1)
    assert case.exit_codes() == [0, 0]
    assert case.releases() == ["sample-20260301"]
    assert [event["release_id"] for event in case.charges()] == ["sample-20260301"]
    # The next day is its own release.
    assert run_day(dag, DAY.add(days=1)).state == "success"
    assert case.releases() == ["sample-20260301", "sample-20260302"]


def test_a_transient_failure_is_retried_and_the_retry_publishes(
    dag: Any, case: LakeCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    case.budget(100)
    monkeypatch.setenv("FLAKY_ATTEMPTS", "1")
    instance = run_day(dag, DAY)
    assert case.exit_codes() == [75, 0], "exit 75 must be retried, and the retry must run the release"
    assert (instance.state, instance.try_number) == ("success", 2)
    assert case.releases() == ["sample-20260301"]


def test_a_transient_failure_that_persists_fails_after_the_retries(
    dag: Any, case: LakeCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    case.budget(100)
    monkeypatch.setenv("FLAKY_ATTEMPTS", "99")
    monkeypatch.setattr(dag.get_task("release"), "retries", 1)  # one retry instead of three: shorter
    instance = run_day(dag, DAY)
    assert case.exit_codes() == [75, 75], "one try and one retry"
    assert (instance.state, instance.try_number) == ("failed", 2)
    assert case.releases() == []


@pytest.mark.parametrize("failure", ["refused budget", "bad config"])
def test_a_permanent_failure_fails_at_once_without_retries(dag: Any, case: LakeCase, failure: str) -> None:
    if failure == "refused budget":
        case.budget(SAMPLE_EPSILON / 2)  # one release spends more than the whole budget: exit 4
        expected = 4
    else:
        case.budget(100)
        case.config.write_text(case.config.read_text() + "nonsense_key: 1\n")  # an unknown key: exit 2
        expected = 2
    instance = run_day(dag, DAY)
    assert case.exit_codes() == [expected], "a refusal or a bad config must not be retried"
    assert instance.state == "failed" and instance.try_number == 1 and instance.max_tries == 3
    assert case.releases() == []


def test_nothing_to_release_skips_the_task(dag: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit 5 through a stand-in executable (the sample crowd config cannot be made to release
    nothing; the real exit 5 is tested in ``tests/e2e/test_tabular_release.py``)."""
    calls = tmp_path / "calls"
    stand_in = tmp_path / "stand_in"
    stand_in.write_text(
        "#!/bin/sh\n"
        f"echo 5 >> {shlex.quote(str(calls))}\n"
        """echo '{"status": "failed", "exit_code": 5, "error": "nothing to release"}'\n"""
        "exit 5\n",
        encoding="utf-8",
    )
    stand_in.chmod(0o755)
    monkeypatch.setenv("AIRFLOW_VAR_PRIVLAKE_BIN", str(stand_in))
    monkeypatch.setenv("AIRFLOW_VAR_PRIVLAKE_CONFIG", str(tmp_path / "release.yaml"))
    instance = run_day(dag, DAY)
    assert (instance.state, instance.try_number) == ("skipped", 1)
    assert calls.read_text().split() == ["5"]
