"""A real Spark standalone cluster (master + 2 workers on loopback, infra/spark_standalone.sh)
gives the same results as the local engine.

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
    """Start a master and two workers on a free loopback port; yield the master URL; always stop."""
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
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(CLUSTER_SCRIPT), "stop"], env=environment, capture_output=True, timeout=120)
        leftovers = list(state.glob("*.pid"))
        assert not leftovers, f"stop left pid files behind: {leftovers}"


def run_on_cluster(
    master_url: str,
    function: Callable[..., Any],
    *args: Any,
    spark_conf: dict[str, str] | None = None,
    timeout: float = 900,
) -> Any:
    """``function(engine, *args)`` in a child process whose ``SparkEngine`` drives ``master_url``.

    ``function`` must be a module-level function (the child imports it); ``args`` and the
    result must pickle. A failure in the child raises ``AssertionError`` with its traceback.
    """
    with tempfile.TemporaryDirectory(prefix="privlake-cluster-run-") as folder:
        request = Path(folder) / "request.pickle"
        response = Path(folder) / "response.pickle"
        request.write_bytes(pickle.dumps((master_url, function, args, spark_conf or {})))
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
    master_url, function, args, spark_conf = pickle.loads(request.read_bytes())
    try:
        with make_engine(
            "spark", master=master_url, spark_conf=spark_conf, parallelism=CLUSTER_PARALLELISM
        ) as engine:
            outcome = (True, function(engine, *args))
    except BaseException:  # the parent reports whatever went wrong
        outcome = (False, traceback.format_exc())
    response.write_bytes(pickle.dumps(outcome))


def cluster_primitives(engine: Any, workdir: str) -> dict[str, Any]:
    """The conformance primitives on the cluster, plus where they ran."""
    engine.rows_per_call = ROWS_PER_CALL
    results = primitive_results(engine, claims_frame(), Path(workdir))
    context = engine.session.sparkContext
    results["ran_on"] = (context.master, context._jsc.sc().getExecutorMemoryStatus().size() - 1)
    return results


def test_standalone_cluster_matches_the_local_engine(standalone_master: str, tmp_path: Path) -> None:
    on_cluster = run_on_cluster(standalone_master, cluster_primitives, str(tmp_path / "cluster"))
    master, executors = on_cluster.pop("ran_on")
    assert master == standalone_master and executors == 2
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
