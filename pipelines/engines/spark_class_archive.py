"""The Spark driver JVM's class archive: a shorter engine start for every release (issue 15).

A Spark session started for a release spends most of its start loading and verifying the same
several thousand classes from Spark's jars (about 5 s for the session and 5 s for its first job
on the reference machine). A dynamic class-data-sharing archive of the JDK (``-XX:SharedArchiveFile``,
JEP 350) holds those classes already parsed and verified; a driver JVM that maps it starts about
3 s sooner (``benchmarks/spark_start.py``).

The archive is built once per installation (``make install`` runs
``python -m pipelines.engines.spark_class_archive``; the Docker image does the same), by a
session that loads the classes a release's jobs load and exits, and is installed only after a
second session has started from it with sharing required (``-Xshare:on``). It is moved into place
in one rename, beside a record of its size: a JVM that maps a truncated archive crashes (seen with
JDK 17: SIGBUS), so an archive whose size is not the recorded one is never handed to a JVM. An
archive the JVM cannot use (another JDK, another classpath) is skipped by the JVM itself; the JVM's
log warnings, which it prints on standard output by default, go to standard error (Spark's log
file), so that nothing reaches a command's output. A site's ``spark-defaults.conf`` that sets the
driver's or executors' Java options keeps them: the archive is then not used for that JVM.

Where: ``PRIVLAKE_SPARK_CLASS_ARCHIVE`` (a path; empty: no archive), else
``<prefix>/share/privlake/spark-<pyspark version>.jsa`` of the running Python's installation.
The driver uses it, and so do the executors of a cluster on loopback (the same host's file, which
the driver checked); a remote cluster's executors start on their own hosts, whose files this
process cannot check (an operator may build an archive there and set
``spark.executor.extraJavaOptions``).
The archive holds class metadata from Spark's and the JDK's own jars, no data; it is as trusted as
those jars (build it where they are, writable by their owner only).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

ARCHIVE_VARIABLE = "PRIVLAKE_SPARK_CLASS_ARCHIVE"
QUIET = "-Xlog:disable -Xlog:all=warning:stderr"
"""The JVM's log warnings on standard error, not standard output (a skipped archive says so)."""
DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
EXECUTOR_OPTIONS = "spark.executor.extraJavaOptions"
BUILD_SECONDS = 600


def archive_path() -> Path | None:
    """Where this installation's archive is (module docstring); ``None``: archives are off."""
    configured = os.environ.get(ARCHIVE_VARIABLE)
    if configured is not None:
        return Path(configured) if configured.strip() else None
    try:
        from pyspark import __version__ as version
    except ImportError:
        return None
    return Path(sys.prefix) / "share" / "privlake" / f"spark-{version}.jsa"


def _record(archive: Path) -> Path:
    return archive.with_name(archive.name + ".json")


def usable_archive() -> Path | None:
    """The archive, when it is in place whole: its size is the one recorded when it was installed
    (and its path has no blank, which Spark would split the Java options at)."""
    archive = archive_path()
    if archive is None or any(character.isspace() for character in str(archive)):
        return None
    try:
        recorded = json.loads(_record(archive).read_text())
        return archive if int(recorded["bytes"]) == archive.stat().st_size > 0 else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def driver_java_options() -> str | None:
    """The driver JVM's options that map the archive, or ``None`` without a usable one."""
    archive = usable_archive()
    return None if archive is None else f"-XX:SharedArchiveFile={archive} -Xshare:auto {QUIET}"


def site_settings() -> set[str]:
    """The names the site's ``spark-defaults.conf`` sets (the file spark-submit reads when it
    launches the driver: ``SPARK_CONF_DIR``, else ``SPARK_HOME/conf``, else PySpark's own)."""
    folder = os.environ.get("SPARK_CONF_DIR")
    if folder is None:
        home = os.environ.get("SPARK_HOME")
        if home is None:
            try:
                import pyspark
            except ImportError:
                return set()
            home = str(Path(pyspark.__file__).parent)
        folder = str(Path(home) / "conf")
    try:
        lines = (Path(folder) / "spark-defaults.conf").read_text(errors="replace").splitlines()
    except OSError:
        return set()
    return {line.split()[0] for line in lines if line.strip() and not line.lstrip().startswith("#")}


def archive_settings(executors_here: bool) -> dict[str, str]:
    """The Spark settings that map the archive: the driver's Java options, and the executors' when
    they run on this host (``executors_here``); none the site's ``spark-defaults.conf`` sets (a
    ``--conf`` would silently replace the site's own options)."""
    options = driver_java_options()
    if options is None:
        return {}
    wanted = {DRIVER_OPTIONS: options, **({EXECUTOR_OPTIONS: options} if executors_here else {})}
    taken = site_settings()
    return {name: value for name, value in wanted.items() if name not in taken}


def _load_release_classes(java_options: str) -> None:
    """A local session that loads what a release's jobs load (an Arrow map over a shuffle and a
    sort, results collected as Arrow), run with ``java_options``; its JVM is made to exit, and
    waited for, before this returns (the archive is written as the JVM exits)."""
    from pipelines.engines.spark import SparkEngine

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    engine = SparkEngine(master="local[2]", conf={DRIVER_OPTIONS: java_options})
    jvm = engine.session.sparkContext._gateway.proc  # spark-submit, exec'd into the JVM
    try:
        engine.warm_up([])
        engine.session.range(0, 64, 1, 2).toArrow()
    finally:
        engine.close()
        jvm.stdin.close()  # PySpark's gateway server exits on end of input
        try:
            jvm.wait(timeout=BUILD_SECONDS)
        except subprocess.TimeoutExpired:
            jvm.kill()
            raise


def _child(step: str, archive: Path) -> None:
    """``step`` in a child process of its own session: on a timeout the child and its JVM are
    killed together (a JVM left behind would write the archive after the build gave up)."""
    child = subprocess.Popen([sys.executable, "-m", "pipelines.engines.spark_class_archive", step, str(archive)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, error = child.communicate(timeout=BUILD_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, child.args, stderr=error)


def build(archive: Path) -> Path:
    """Build the archive at ``archive`` (module docstring): dump, check, then one rename; one
    builder at a time (a lock file beside it), a failed one's partial files removed."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(archive.with_name(archive.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for stale in archive.parent.glob(f".{archive.name}.*.partial"):
            stale.unlink(missing_ok=True)
        partial = archive.with_name(f".{archive.name}.{uuid.uuid4().hex}.partial")
        try:
            _child("dump", partial)
            if not partial.is_file() or partial.stat().st_size == 0:
                raise RuntimeError("the JVM wrote no class archive")
            _child("check", partial)
            _record(archive).unlink(missing_ok=True)  # no record names a file in the middle of its move
            os.replace(partial, archive)
            record = partial.with_suffix(".json")
            record.write_text(json.dumps({"bytes": archive.stat().st_size}))
            os.replace(record, _record(archive))
        finally:
            partial.unlink(missing_ok=True)
            partial.with_suffix(".json").unlink(missing_ok=True)
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the Spark driver's class archive (module docstring).")
    parser.add_argument("step", nargs="?", choices=["build", "dump", "check"], default="build")
    parser.add_argument("archive", nargs="?", type=Path, help="default: this installation's archive path")
    arguments = parser.parse_args(argv)
    archive = arguments.archive or archive_path()
    if archive is None:
        print(f"spark class archive: off ({ARCHIVE_VARIABLE} is empty, or PySpark is not installed)")
        return 0
    if arguments.step == "dump":
        _load_release_classes(f"-XX:ArchiveClassesAtExit={archive} {QUIET}")
    elif arguments.step == "check":  # sharing required: a JVM that cannot map the archive fails to start
        _load_release_classes(f"-XX:SharedArchiveFile={archive} -Xshare:on {QUIET}")
    else:
        try:
            build(archive)
        except (OSError, RuntimeError, subprocess.SubprocessError) as error:
            detail = getattr(error, "stderr", None) or b""
            reason = detail.decode(errors="replace").strip().splitlines()[-1:] if detail else [str(error)]
            print(f"spark class archive: not built ({reason[0] if reason else type(error).__name__}); "
                  "Spark starts without it", file=sys.stderr)
            return 1
        print(f"spark class archive: {archive} ({archive.stat().st_size / 2**20:.0f} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
