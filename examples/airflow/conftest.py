"""Airflow for the DAG's tests: a metadata database of its own (SQLite in a temporary
``AIRFLOW_HOME``), set before anything imports Airflow, whose configuration is read at import.
The tests run in Airflow's own environment (``.venv-airflow``, pins in ``requirements.txt``),
never in privlake's: privlake is the command the DAG runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DAGS = HERE / "dags"

assert "airflow" not in sys.modules, "Airflow was imported before its test home was set"
for _name in [name for name in os.environ if name.startswith("AIRFLOW")]:
    del os.environ[_name]  # an operator's Airflow settings, variables or connections stay out
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="privlake-airflow-home-"))
os.environ.update(
    AIRFLOW_HOME=str(AIRFLOW_HOME),
    AIRFLOW__CORE__DAGS_FOLDER=str(DAGS),
    AIRFLOW__CORE__LOAD_EXAMPLES="False",
)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[Path]:
    """A migrated metadata database, through Airflow's own command line."""
    completed = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    import airflow

    if airflow.__version__.startswith("2."):
        # Airflow 2's dag.test() deletes rows whose foreign keys name the FAB user table, which
        # SQLAlchemy knows only once the FAB models are imported (the webserver does it).
        import airflow.providers.fab.auth_manager.models  # noqa: F401
    yield AIRFLOW_HOME
