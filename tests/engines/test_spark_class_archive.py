"""The Spark driver's class archive (pipelines/engines/spark_class_archive.py): handed to the driver
JVM only when it is in place whole (a JVM that maps a truncated archive crashes), quiet when the JVM
cannot use it, built only when a JVM has started from it with sharing required, and never in the
way of a configuration that sets the driver's Java options itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.engines import spark_class_archive as archives
from pipelines.engines.spark import session_settings

ROOT = Path(__file__).resolve().parents[2]
DRIVER_OPTIONS = archives.DRIVER_OPTIONS


def placed(folder: Path, content: bytes, recorded: int | None = None) -> Path:
    """An archive file with its size record (``recorded``: the size the record claims)."""
    archive = folder / "spark.jsa"
    archive.write_bytes(content)
    archive.with_name("spark.jsa.json").write_text(json.dumps({"bytes": len(content) if recorded is None else recorded}))
    return archive


def test_an_archive_in_place_whole_goes_to_the_driver_jvm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = placed(tmp_path, b"x" * 4096)
    monkeypatch.setenv(archives.ARCHIVE_VARIABLE, str(archive))
    options = session_settings("local[2]", {}, None)[DRIVER_OPTIONS]
    assert f"-XX:SharedArchiveFile={archive}" in options.split()
    assert "-Xshare:auto" in options.split(), "a JVM that cannot use the archive must start without it"
    assert {"-Xlog:disable", "-Xlog:all=warning:stderr"} <= set(options.split()), "the JVM's skip notice goes to stdout"
    loopback = session_settings("spark://127.0.0.1:7077", {}, None)
    assert loopback[DRIVER_OPTIONS] == options and loopback["spark.executor.extraJavaOptions"] == options
    remote = session_settings("spark://spark-master.internal:7077", {}, None)
    assert remote[DRIVER_OPTIONS] == options
    assert "spark.executor.extraJavaOptions" not in remote, "another host's file is not the one checked here"


@pytest.mark.parametrize("recorded", [4096 * 2, 0, None], ids=["truncated", "empty-record", "no-record"])
def test_a_truncated_or_unrecorded_archive_is_never_handed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                recorded: int | None) -> None:
    archive = placed(tmp_path, b"x" * 4096, recorded=recorded)
    if recorded is None:  # no record at all: an archive not installed by ``build``
        archive.with_name("spark.jsa.json").unlink()
    monkeypatch.setenv(archives.ARCHIVE_VARIABLE, str(archive))
    assert archives.usable_archive() is None
    assert DRIVER_OPTIONS not in session_settings("local[2]", {}, None)


def test_archives_off_and_the_configuration_s_own_java_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = placed(tmp_path, b"x" * 4096)
    monkeypatch.setenv(archives.ARCHIVE_VARIABLE, "")
    assert archives.archive_path() is None and DRIVER_OPTIONS not in session_settings("local[2]", {}, None)
    monkeypatch.setenv(archives.ARCHIVE_VARIABLE, str(archive))
    own = session_settings("local[2]", {DRIVER_OPTIONS: "-Dx=1"}, None)
    assert own[DRIVER_OPTIONS] == "-Dx=1", "a configuration's own driver options win"


def test_the_default_archive_is_the_installation_s(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import __version__

    monkeypatch.delenv(archives.ARCHIVE_VARIABLE, raising=False)
    assert archives.archive_path() == Path(sys.prefix) / "share" / "privlake" / f"spark-{__version__}.jsa"


def _session_output(archive: Path, tmp_path: Path, conf: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A child that starts a local session (``conf``) with ``archive`` in place and runs one job."""
    script = ("from pipelines.engines.spark import SparkEngine\n"
              f"engine = SparkEngine(master='local[1]', conf={conf or {}!r})\n"
              "print('rows', engine.session.range(0, 5).count())\n"
              "engine.close()\n")
    environment = {**os.environ, archives.ARCHIVE_VARIABLE: str(archive), "PYSPARK_PYTHON": sys.executable,
                   "TMPDIR": str(tmp_path)}
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.spark
def test_a_damaged_archive_of_the_recorded_size_is_skipped(tmp_path: Path) -> None:
    """Bytes that are no archive, of the recorded size: the session starts without them."""
    archive = placed(tmp_path, b"not a class archive\n" * 64)
    ran = _session_output(archive, tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip() == "rows 5"


@pytest.mark.spark
def test_build_installs_an_archive_a_jvm_starts_from_and_refuses_one_it_cannot(tmp_path: Path) -> None:
    archive = archives.build(tmp_path / "share" / "spark.jsa")
    recorded = json.loads(archive.with_name("spark.jsa.json").read_text())
    assert recorded["bytes"] == archive.stat().st_size > 1 << 20
    assert not [path.name for path in archive.parent.iterdir() if path.name.startswith(".")], "no partial file left"
    ran = _session_output(archive, tmp_path)
    assert ran.returncode == 0 and ran.stdout.strip() == "rows 5", ran.stderr[-2000:]
    # a JVM whose classpath is not the archive's skips it, and says so on standard output unless
    # told not to: nothing but the command's own output may reach it
    other = _session_output(archive, tmp_path, {"spark.driver.extraClassPath": str(tmp_path)})
    assert other.returncode == 0 and other.stdout.strip() == "rows 5", other.stdout[-2000:] + other.stderr[-2000:]
    # the check step requires sharing: an archive no JVM can map is refused, not installed
    garbage = tmp_path / "garbage.jsa"
    garbage.write_bytes(b"\0" * 4096)
    with pytest.raises(subprocess.CalledProcessError):
        archives._child("check", garbage)


def test_a_site_s_own_java_options_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """spark-submit reads the site's spark-defaults.conf, and a ``--conf`` of ours would silently
    replace what it sets there (a truststore, Kerberos, log4j): such a JVM goes without the archive."""
    archive = placed(tmp_path, b"x" * 4096)
    monkeypatch.setenv(archives.ARCHIVE_VARIABLE, str(archive))
    site = tmp_path / "conf"
    site.mkdir()
    (site / "spark-defaults.conf").write_text("# site settings\nspark.driver.extraJavaOptions -Djavax.net.ssl.trustStore=/x\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(site))
    loopback = session_settings("spark://127.0.0.1:7077", {}, None)
    assert DRIVER_OPTIONS not in loopback
    assert "-XX:SharedArchiveFile" in loopback["spark.executor.extraJavaOptions"], "only what the site sets is left alone"


def test_inside_spark_submit_the_driver_options_are_not_claimed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under spark-submit the driver JVM is already running: its options are spark-submit's."""
    from pipelines.engines.spark import DEFAULT_MASTER, resolve_submitted

    monkeypatch.setenv(archives.ARCHIVE_VARIABLE, str(placed(tmp_path, b"x" * 4096)))
    _, settings = resolve_submitted(DEFAULT_MASTER, {}, None, {"spark.master": "local[1]"})
    assert DRIVER_OPTIONS not in settings


def test_a_path_with_a_blank_is_not_handed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "with blank"
    folder.mkdir()
    monkeypatch.setenv(archives.ARCHIVE_VARIABLE, str(placed(folder, b"x" * 4096)))
    assert archives.usable_archive() is None, "Spark splits the Java options at blanks"


def test_build_installs_nothing_when_the_check_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dump succeeded but no JVM could start from it: no archive, no record, no partial file."""
    def child(step: str, archive: Path) -> None:
        if step == "dump":
            archive.write_bytes(b"dumped" * 1000)
            return
        raise subprocess.CalledProcessError(1, ["check"], stderr=b"could not map the archive")

    monkeypatch.setattr(archives, "_child", child)
    target = tmp_path / "share" / "spark.jsa"
    (tmp_path / "share").mkdir()
    (tmp_path / "share" / ".spark.jsa.stale.partial").write_bytes(b"left by a killed build")
    with pytest.raises(subprocess.CalledProcessError):
        archives.build(target)
    assert not target.exists() and not target.with_name("spark.jsa.json").exists()
    assert not list((tmp_path / "share").glob(".*")), "partial files removed, an earlier one's too"
