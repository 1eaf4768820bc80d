"""Inside spark-submit, spark-submit's master and settings win (``resolve_submitted``), a conflicting
privlake master is one line, and the protection check sees the settings the session will have.
The real spark-submit runs are in tests/cluster/test_spark_submit.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from pipelines.engines.base import EngineError, EngineRefused
from pipelines.engines.spark import (
    DEFAULT_MASTER,
    PROTECTION_SETTINGS,
    SUBMIT_GATEWAY_VARIABLE,
    check_protection,
    require_pyspark,
    resolve_submitted,
    submitted_settings,
    under_spark_submit,
)

SHIM = Path(__file__).resolve().parents[2] / "infra" / "spark_submit" / "privlake_submit.py"


def test_the_submitted_master_and_settings_win() -> None:
    submitted = {"spark.master": "local[1]", "spark.app.name": "nightly", "spark.sql.shuffle.partitions": "3"}
    master, settings = resolve_submitted(DEFAULT_MASTER, {"spark.sql.shuffle.partitions": "8", "spark.x": "1"},
                                         None, submitted)
    assert master == "local[1]"
    assert settings["spark.master"] == "local[1]" and settings["spark.app.name"] == "nightly"
    assert settings["spark.sql.shuffle.partitions"] == "3"  # spark-submit's, over engine.spark.conf's
    assert settings["spark.x"] == "1"  # engine.spark.conf fills what spark-submit did not set
    assert {name: settings[name] for name in PROTECTION_SETTINGS} == PROTECTION_SETTINGS
    assert "spark.driver.memory" not in settings  # the JVM is spark-submit's: a launch setting would lie


def test_privlake_defaults_follow_the_submitted_master() -> None:
    _, settings = resolve_submitted(DEFAULT_MASTER, {}, None, {"spark.master": "spark://127.0.0.1:7077"})
    assert settings["spark.driver.host"] == "127.0.0.1"  # loopback cluster: the driver listens there too
    _, local = resolve_submitted("local[1]", {}, None, {"spark.master": "local[1]"})
    assert local["spark.sql.shuffle.partitions"] == "2"


def test_a_conflicting_master_is_one_line() -> None:
    with pytest.raises(EngineError) as raised:
        resolve_submitted("spark://10.0.0.1:7077", {}, None, {"spark.master": "local[1]"})
    message = str(raised.value)
    assert "\n" not in message and "spark://10.0.0.1:7077" in message and "local[1]" in message


def test_protection_is_checked_on_the_submitted_settings() -> None:
    submitted = {"spark.master": "spark://127.0.0.1:7077", "spark.authenticate": "false"}
    master, settings = resolve_submitted(DEFAULT_MASTER, {}, None, submitted)
    with pytest.raises(EngineRefused, match="spark.authenticate"):
        check_protection(master, settings, allow_unencrypted=False)
    check_protection(master, settings, allow_unencrypted=True)


def test_spark_submit_is_detected_by_its_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SUBMIT_GATEWAY_VARIABLE, raising=False)
    assert not under_spark_submit() and submitted_settings() is None
    monkeypatch.setenv(SUBMIT_GATEWAY_VARIABLE, "12345")
    assert under_spark_submit()


def test_the_submit_entry_runs_on_spark_unless_told_otherwise() -> None:
    spec = importlib.util.spec_from_file_location("privlake_submit", SHIM)
    assert spec is not None and spec.loader is not None
    shim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim)
    assert shim.privlake_arguments(["run", "a.yaml"]) == ["run", "--engine", "spark", "a.yaml"]
    assert shim.privlake_arguments(["run", "a.yaml", "--engine", "local"]) == ["run", "a.yaml", "--engine", "local"]
    assert shim.privlake_arguments(["run", "--engine=beam", "a.yaml"]) == ["run", "--engine=beam", "a.yaml"]
    assert shim.privlake_arguments(["ledger", "--lake", "L"]) == ["ledger", "--lake", "L"]


def test_a_missing_pyspark_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # what an install without the spark extra sees
    with pytest.raises(EngineError, match=r"pip install 'privlake\[spark\]'"):
        require_pyspark()


@pytest.mark.beam  # asks make_engine for beam (which fails before anything starts)
def test_a_missing_beam_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import pipelines.engines
    from pipelines.engines import EngineError, check_protection, make_engine

    monkeypatch.setitem(sys.modules, "apache_beam", None)  # what an install without the beam extra sees
    monkeypatch.delitem(sys.modules, "pipelines.engines.beam", raising=False)
    monkeypatch.delattr(pipelines.engines, "beam", raising=False)  # a module imported earlier in this process
    for attempt in (lambda: make_engine("beam"), lambda: check_protection("beam")):
        with pytest.raises(EngineError, match=r"pip install 'privlake\[beam\]'") as caught:
            attempt()
        assert "\n" not in str(caught.value)
