"""Fixtures shared by every test suite: one embedded SparkSession per test session and a fixed
release secret (tests only; production secrets come from the OS, DESIGN.md).

Two things keep the suite the same on every machine. Thread counts are fixed before NumPy, BLAS
or torch load (a reduction split over another number of threads rounds differently). And the
``spark`` and ``beam`` markers are kept honest: a test that uses the session's SparkSession, or is
parametrized with the spark or beam engine, is marked so at collection, and a test that builds a
Spark or Beam engine (in its own body or in a fixture it set up) without the marker fails, so
``-m "not spark and not beam"`` really leaves the engines out.
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_variable] = "1"

import functools  # noqa: E402 (the thread counts above must be set before any numerical import)
import sys  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

import pipelines.engines as _engines  # noqa: E402

ENGINE_MARKERS = ("spark", "beam")
_engines_built: list[str] = []


@pytest.fixture(autouse=True, scope="session")
def _lake_keys_outside_the_lakes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Lakes' fingerprint keys go to a folder of the test session (never the user's home)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PRIVLAKE_KEY_DIR", str(tmp_path_factory.mktemp("lake-keys")))
        yield


def _recording_make_engine(make_engine: Any) -> Any:
    @functools.wraps(make_engine)
    def recording(name: str, **options: Any) -> Any:
        _engines_built.append(name)
        return make_engine(name, **options)

    return recording


_engines.make_engine = _recording_make_engine(_engines.make_engine)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what can be seen at collection: the shared SparkSession in a test's fixture closure,
    an engine name among its parameters."""
    for item in items:
        if "spark_session" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
        params = getattr(getattr(item, "callspec", None), "params", {})
        for value in params.values():
            if isinstance(value, str) and value in ENGINE_MARKERS:
                item.add_marker(getattr(pytest.mark, value))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Fails (at teardown) a test that built a Spark or Beam engine without its marker. Counted
    from the end of the previous test, so engines built by a module-scoped fixture count for the
    first test that set the fixture up; a test whose setup already failed is not blamed twice."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "setup" and report.failed:
        item.stash[_SETUP_FAILED] = True
    if report.when != "teardown":
        return
    used = {name for name in _engines_built if name in ENGINE_MARKERS}
    _engines_built.clear()
    missing = sorted(name for name in used if item.get_closest_marker(name) is None)
    if missing and not item.stash.get(_SETUP_FAILED, False) and report.passed:
        report.outcome = "failed"
        report.longrepr = f"this test builds the {', '.join(missing)} engine: mark it pytest.mark.{missing[0]}"


_SETUP_FAILED = pytest.StashKey[bool]()
FIXED_SECRET_HEX = "00112233445566778899aabbccddeeff0123456789abcdef0f1e2d3c4b5a6978"


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    """An embedded ``local[2]`` SparkSession shared by all tests: UI off, Arrow on, four
    shuffle partitions, executors on this interpreter. Stopped at the end of the session."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("privlake-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def fixed_secret() -> bytes:
    """A fixed 32-byte release secret, for tests only."""
    secret = bytes.fromhex(FIXED_SECRET_HEX)
    assert len(secret) == 32
    return secret
