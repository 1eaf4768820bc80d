"""Fixtures shared by every test suite: one embedded SparkSession per test session and a fixed
release secret (tests only; production secrets come from the OS, DESIGN.md)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

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
