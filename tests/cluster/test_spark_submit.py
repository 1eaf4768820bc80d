"""The spark-submit recipe of docs/PRODUCTION.md, run for real: the wheel built by
``infra/spark_submit/build.sh``, shipped with ``--py-files`` to a driver and executors whose Python
has privlake's dependencies but not privlake, runs a crowd release on the loopback standalone
cluster through ``infra/spark_submit/privlake_submit.py``; spark-submit's ``--master local[1]``
is the master the session really has; a conflicting privlake master, or the cluster secret on
spark-submit's command line, is one line, exit 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.engines.spark import AUTH_SECRET_FILE_VARIABLE
from pipelines.platform.lake import Lake
from tests.cluster.test_standalone_cluster import processes_showing, standalone_master  # noqa: F401
from tests.e2e.crowd_cases import CONFORMANCE_SECRET_HEX, conformance_claims, conformance_config
from tests.lake_setup import prepare_for

PROJECT_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = PROJECT_ROOT / "infra" / "spark_submit" / "build.sh"
ENTRY = PROJECT_ROOT / "infra" / "spark_submit" / "privlake_submit.py"

pytestmark = pytest.mark.cluster


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@pytest.fixture(scope="module")
def py_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The zip spark-submit ships (the wheel, renamed), built as the recipe builds it."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run([str(BUILD_SCRIPT), str(out)], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHON": sys.executable})
    assert built.returncode == 0, built.stderr
    wheel, archive = (Path(line) for line in built.stdout.split())
    assert wheel.suffix == ".whl" and archive == out / "privlake.zip" and archive.read_bytes() == wheel.read_bytes()
    return archive


@pytest.fixture(scope="module")
def dependencies_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with privlake's dependencies and without privlake: a virtual environment that sees
    this one's site-packages as a plain path (so the editable install's hook never runs)."""
    folder = tmp_path_factory.mktemp("dependencies-python")
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    site = Path(subprocess.run([str(folder / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "privlake_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = folder / "bin" / "python"
    without = subprocess.run([str(python), "-c", "import pipelines"], cwd=folder, capture_output=True, text=True)
    assert without.returncode != 0 and "No module named 'pipelines'" in without.stderr  # negative control
    return python


def crowd_config(folder: Path) -> Path:
    claims = folder / "claims.csv"
    conformance_claims().to_csv(claims, index=False)
    config = conformance_config(claims, folder / "lake")
    prepare_for(config)
    path = folder / "crowd.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def spark_submit(submit_options: list[str], privlake_arguments: list[str], python: Path, folder: Path,
                 ) -> subprocess.CompletedProcess[str]:
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    environment.update(SPARK_HOME=str(spark_home()), PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python),
                       PRIVLAKE_TEST_SECRET=CONFORMANCE_SECRET_HEX)
    command = [str(spark_home() / "bin" / "spark-submit"), *submit_options, str(ENTRY), *privlake_arguments]
    return subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True, timeout=900)


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def session_line(stderr: str) -> str:
    lines = [entry["message"] for entry in json_lines(stderr) if "inside spark-submit" in entry.get("message", "")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def test_spark_submit_keeps_its_local_master(tmp_path: Path) -> None:
    config = crowd_config(tmp_path)
    submitted = spark_submit(
        ["--master", "local[1]"],
        ["run", str(config), "--release-id", "local-one", "--json", "--log-format", "json"],
        Path(sys.executable),
        tmp_path,
    )
    assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-4000:]
    assert "Spark master local[1], default parallelism 1" in session_line(submitted.stderr)
    (outcome,) = [json.loads(line) for line in submitted.stdout.splitlines()]
    assert outcome["status"] == "published"


def test_a_master_conflicting_with_spark_submit_is_one_line(tmp_path: Path) -> None:
    config = crowd_config(tmp_path)
    submitted = spark_submit(["--master", "local[1]"], ["run", str(config), "--master", "local[2]"],
                             Path(sys.executable), tmp_path)
    assert submitted.returncode == 2
    errors = [line for line in submitted.stderr.splitlines() if line.startswith("privlake:")]
    assert len(errors) == 1 and "local[2]" in errors[0] and "spark-submit, whose master is local[1]" in errors[0]
    with Lake.for_reading(tmp_path / "lake") as lake:
        assert lake.list_releases() == []



def test_an_authentication_secret_on_the_spark_submit_command_line_is_refused(tmp_path: Path) -> None:
    config = crowd_config(tmp_path)
    submitted = spark_submit(["--master", "local[1]", "--conf", "spark.authenticate.secret=on-the-command-line"],
                             ["run", str(config)], Path(sys.executable), tmp_path)
    assert submitted.returncode == 2
    errors = [line for line in submitted.stderr.splitlines() if line.startswith("privlake:")]
    assert len(errors) == 1 and "command line" in errors[0] and AUTH_SECRET_FILE_VARIABLE in errors[0]
    assert "on-the-command-line" not in errors[0]

def test_spark_submit_publishes_a_crowd_release_on_the_standalone_cluster(
    standalone_master: str,  # noqa: F811
    py_files: Path,
    dependencies_python: Path,
    tmp_path: Path,
) -> None:
    config = crowd_config(tmp_path)
    secret = Path(os.environ[AUTH_SECRET_FILE_VARIABLE]).read_text().strip()
    submitted = spark_submit(
        ["--master", standalone_master, "--name", "privlake-crowd", "--py-files", str(py_files),
         "--conf", "spark.sql.shuffle.partitions=4"],  # Spark's default, 200, is far too many for 2 cores
        ["run", str(config), "--release-id", "submitted-1", "--json", "--log-format", "json"],
        dependencies_python,
        tmp_path,
    )
    assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-4000:]
    (outcome,) = [json.loads(line) for line in submitted.stdout.splitlines()]  # stdout: the JSON alone
    assert outcome["status"] == "published" and outcome["rows"] > 0
    assert f"Spark master {standalone_master}, default parallelism 2" in session_line(submitted.stderr)
    assert secret not in submitted.stdout + submitted.stderr and processes_showing(secret) == []
    with Lake.for_reading(tmp_path / "lake") as lake:
        assert lake.read_release("submitted-1").num_rows == outcome["rows"]
