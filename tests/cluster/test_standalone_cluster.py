"""A real Spark standalone cluster (master + 2 workers on loopback, infra/spark_standalone.sh)
gives the same results as the local engine, with authentication (one shared secret for master,
workers and driver) and encryption on; a driver without the cluster's secret is refused, and the
secret is on no process's command line.

Only one SparkContext can run in a process, and the test session may already hold the
embedded ``local[2]`` session (the ``spark_session`` fixture). Stopping and later recreating
that session would hand every later test a stopped session object, so the cluster side runs
in a child Python process with its own driver JVM instead (``run_on_cluster``): robust to
test order, at the cost of one interpreter start. Functions sent to the child travel by
reference (they must be importable module-level functions); their arguments and results by
pickle.
"""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.engines.local import LocalEngine
from pipelines.engines.spark import AUTH_SECRET_FILE_VARIABLE
from tests.engines.test_engine_conformance import (
    ROWS_PER_CALL,
    assert_results_equal,
    claims_frame,
    primitive_results,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = PROJECT_ROOT / "infra" / "spark_standalone.sh"
CLUSTER_PARALLELISM = 4
_CHILD_ENTRY = "from tests.cluster.test_standalone_cluster import _child_main\n_child_main()\n"
"""Run from a file, not ``python -c``: PySpark's Connect import check takes a ``-c`` main module
for a doctest run and exits the process (Great Expectations imports it)."""

pytestmark = pytest.mark.cluster


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start a master and two workers on a free loopback port; yield the master URL, with
    ``PRIVLAKE_SPARK_AUTH_SECRET_FILE`` naming the cluster's shared secret; always stop."""
    state = tmp_path_factory.mktemp("spark-standalone")
    environment = {
        **os.environ,
        "PRIVLAKE_CLUSTER_STATE": str(state),
        "PRIVLAKE_CLUSTER_PORT": str(free_port()),
        "PYSPARK_PYTHON": sys.executable,
    }
    try:
        started = subprocess.run(
            [str(CLUSTER_SCRIPT), "start"], env=environment, capture_output=True, text=True, timeout=240
        )
        if started.returncode != 0:
            logs = "\n".join(
                f"--- {log.name}\n{log.read_text()[-2000:]}" for log in sorted(state.glob("logs/*.log"))
            )
            pytest.fail(f"the standalone cluster did not start: {started.stderr.strip()}\n{logs}")
        secret_file = state / "auth.secret"
        assert secret_file.stat().st_mode & 0o077 == 0, "the cluster's secret file is readable by others"
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(AUTH_SECRET_FILE_VARIABLE, str(secret_file))
            yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(CLUSTER_SCRIPT), "stop"], env=environment, capture_output=True, timeout=120)
        leftovers = list(state.glob("*.pid")) + list(state.glob("auth.secret")) + list(state.glob("*.conf"))
        assert not leftovers, f"stop left pid or secret files behind: {leftovers}"


def run_on_cluster(
    master_url: str,
    function: Callable[..., Any],
    *args: Any,
    spark_conf: dict[str, str] | None = None,
    timeout: float = 900,
    parallelism: int | None = CLUSTER_PARALLELISM,
) -> Any:
    """``function(engine, *args)`` in a child process whose ``SparkEngine`` drives ``master_url``.

    ``function`` must be a module-level function (the child imports it); ``args`` and the
    result must pickle. A failure in the child raises ``AssertionError`` with its traceback.
    """
    with tempfile.TemporaryDirectory(prefix="privlake-cluster-run-") as folder:
        request = Path(folder) / "request.pickle"
        response = Path(folder) / "response.pickle"
        request.write_bytes(pickle.dumps((master_url, function, args, spark_conf or {}, parallelism)))
        entry = Path(folder) / "cluster_driver.py"
        entry.write_text(_CHILD_ENTRY)
        environment = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
        }
        completed = subprocess.run(
            [sys.executable, str(entry), str(request), str(response)],
            cwd=PROJECT_ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if not response.exists():
            raise AssertionError(
                f"the cluster run exited with {completed.returncode} and no result:\n{completed.stderr[-4000:]}"
            )
        succeeded, payload = pickle.loads(response.read_bytes())
        if not succeeded:
            raise AssertionError(f"the cluster run raised:\n{payload}")
        return payload


def _child_main() -> None:
    """Entry point of ``run_on_cluster``'s child process."""
    from pipelines.engines import make_engine

    request, response = Path(sys.argv[1]), Path(sys.argv[2])
    master_url, function, args, spark_conf, parallelism = pickle.loads(request.read_bytes())
    try:
        with make_engine("spark", master=master_url, spark_conf=spark_conf, parallelism=parallelism) as engine:
            outcome = (True, function(engine, *args))
    except BaseException:  # the parent reports whatever went wrong
        outcome = (False, traceback.format_exc())
    response.write_bytes(pickle.dumps(outcome))


def processes_showing(text: str) -> list[str]:
    """The command lines of this machine's processes that hold ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes()
        except OSError:
            continue
        if text.encode() in line:
            found.append(line.replace(b"\0", b" ").decode(errors="replace")[:200])
    return found


def cluster_primitives(engine: Any, workdir: str) -> dict[str, Any]:
    """The conformance primitives on the cluster, plus where they ran, how the session was
    protected, and the command lines (the driver's JVM's, the cluster's) showing the secret."""
    engine.rows_per_call = ROWS_PER_CALL
    results = primitive_results(engine, claims_frame(), Path(workdir))
    context = engine.session.sparkContext
    results["ran_on"] = (context.master, context._jsc.sc().getExecutorMemoryStatus().size() - 1)
    results["protection"] = engine.protection()
    shared = Path(os.environ[AUTH_SECRET_FILE_VARIABLE]).read_text().strip()
    results["secret_on_command_lines"] = processes_showing(shared)
    return results


def shuffle_sizes(engine: Any) -> tuple[int, str]:
    return engine.parallelism, engine.session.conf.get("spark.sql.shuffle.partitions")


def test_a_session_on_the_cluster_sizes_its_shuffles_by_the_cluster_cores(standalone_master: str) -> None:
    """Without a configured parallelism, twice the executors' cores (2 workers of 1 core), not
    Spark's 200 partitions (a hundred tasks a core, each paying a Python worker's overhead: the
    crowd release at 10^6 claims took 668 s instead of about 60)."""
    assert run_on_cluster(standalone_master, shuffle_sizes, parallelism=None) == (4, "4")


def test_standalone_cluster_matches_the_local_engine(standalone_master: str, tmp_path: Path) -> None:
    on_cluster = run_on_cluster(standalone_master, cluster_primitives, str(tmp_path / "cluster"))
    master, executors = on_cluster.pop("ran_on")
    assert master == standalone_master and executors == 2
    protection = on_cluster.pop("protection")
    assert protection["authentication"] and protection["network_encryption"] and protection["io_encryption"]
    assert on_cluster.pop("secret_on_command_lines") == []
    with LocalEngine(parallelism=2, rows_per_call=ROWS_PER_CALL) as local:
        on_local = primitive_results(local, claims_frame(), tmp_path / "local")
    assert_results_equal(on_cluster, on_local)


def test_crowd_release_on_the_cluster_equals_local_spark(
    standalone_master: str, tmp_path: Path, spark_session: Any
) -> None:
    from pipelines.engines import make_engine
    from tests.e2e.crowd_cases import (
        assert_same_release,
        conformance_claims,
        conformance_config,
        release_on_engine,
    )

    claims = tmp_path / "claims.csv"
    conformance_claims().to_csv(claims, index=False)
    on_cluster = run_on_cluster(
        standalone_master, release_on_engine, conformance_config(claims, tmp_path / "cluster-lake"), "cluster-1"
    )
    with make_engine("spark", spark_session=spark_session) as engine:
        on_local_spark = release_on_engine(engine, conformance_config(claims, tmp_path / "local-lake"), "cluster-1")
    assert on_local_spark["engine"] == on_cluster["engine"] == "spark"
    assert len(on_cluster["rows"]) > 0
    assert_same_release(on_cluster, on_local_spark)


def start_only(engine: Any) -> str:
    return engine.session.sparkContext.master


def test_a_driver_without_the_cluster_secret_is_refused(
    standalone_master: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control of the authentication: the same driver with another secret never gets an
    executor (the master drops its connection; Spark gives up after its three registration tries)."""
    wrong = tmp_path / "wrong.secret"
    wrong.write_text("not-the-cluster-secret\n")
    wrong.chmod(0o600)
    monkeypatch.setenv(AUTH_SECRET_FILE_VARIABLE, str(wrong))
    with pytest.raises(AssertionError, match="did not accept the application"):
        run_on_cluster(standalone_master, start_only, timeout=300)
