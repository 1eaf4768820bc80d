"""The Spark engine: the engine interface on PySpark DataFrames, Arrow batches on the executors.

Every primitive that runs user code is a ``mapInArrow`` over the DataFrame's partitions: the
executor receives Arrow record batches, converts them with the same helpers as the other
engines (``parquet_writer``) and hands pandas frames to the batch function. ``mapInArrow``
rather than ``mapInPandas`` because the engine, not Spark, then decides the pandas dtypes
(Spark's own pandas conversion turns an int column with nulls into float and back
differently), so a batch function sees identical frames on every engine.

``map_groups`` is ``repartition(P, key).sortWithinPartitions(key)`` followed by one
``mapInArrow`` whose wrapper cuts the sorted stream at key boundaries into chunks of at most
``rows_per_call`` rows — not ``applyInPandas`` per group, which costs a Python call and a
pandas frame per group and is far too slow for 10^5+ groups. ``cluster_by_key`` does the
repartition and sort once and caches the result; ``map_groups`` on a collection clustered on
the same key maps its cached partitions directly, without a new shuffle.

``read_groups`` files are read by the Python workers themselves (a ``range`` of file indices,
one partition per file), and maps without a shuffle between them are fused into one
``mapInArrow`` with the ``write_parquet`` after them (see ``SparkCollection``).

``map_fragments`` is the same shape: a ``range`` of task indices, one partition per task, whose
Python worker runs the fragment function on its task's fragments (carried in the closure, as
``read_groups`` carries its file locations); the rows appear first on the executor and the maps
that follow are fused with it. ``first_row`` and ``column_metrics`` append one more fused stage
that reduces each partition to one row, and the driver merges those rows (``toArrow`` of one
row per partition). Exceptions raised in the Python workers' stages travel back through
``base.forward_errors`` and every driver-side action re-raises them (``base.worker_errors``).

Protection. Every session the engine starts has ``spark.io.encryption.enabled`` (broadcasts,
shuffle files, cache blocks and spills are encrypted on disk with a key held in memory),
``spark.authenticate`` and ``spark.network.crypto.enabled`` (RPC and block transfers
authenticated and encrypted) on. In ``local[*]`` Spark generates the authentication secret
itself; a standalone cluster shares one secret between master, workers and driver, which the
driver reads from an operator-only file (``auth_secret_file`` or ``PRIVLAKE_SPARK_AUTH_SECRET_FILE``,
never the configuration: that is recorded in the manifest) and hands to the JVM through Py4J after
it has started, so it is not on any command line either. A session on a cluster master without
the three settings is refused (``EngineRefused``) unless ``allow_unencrypted``.

Inside spark-submit (``infra/spark_submit/privlake_submit.py``: spark-submit's JVM starts this
process and hands it its gateway, ``PYSPARK_GATEWAY_PORT``), spark-submit's master and settings
(``--master``, ``--conf``, ``--properties-file``, ``spark-defaults.conf``) win over privlake's
defaults and ``engine.spark.conf``; privlake's own master (``--master``, ``engine.spark.master``)
must then be left at its default or equal spark-submit's (``resolve_submitted``). The protection
check runs on the settings the session will really have, and the shared secret still comes from
its file through Py4J, never from spark-submit's command line (refused there).

A side value's key material (the release secret: ``base.split_key_material``) is never broadcast:
PySpark writes a broadcast to a file in the local dir (encrypted with io encryption, in clear
without), where it outlives a crashed driver. It travels in the task closure instead, which
Spark keeps in memory (the task binary; encrypted if it ever spills) and hands to the Python
worker over its local socket; the rest of the side is broadcast as before.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pandas as pd
import pyarrow as pa

from pipelines.engines import arrow, storage
from pipelines.engines.base import (
    BatchFunction,
    Collection,
    ColumnMetrics,
    Engine,
    EngineError,
    EngineRefused,
    EngineUnreachable,
    FragmentFunction,
    forward_errors,
    join_key_material,
    split_key_material,
    worker_errors,
)
from pipelines.engines.spark_class_archive import DRIVER_OPTIONS, archive_settings

MASTER_CONNECT_TIMEOUT_SECONDS = 3.0
EXECUTOR_WAIT_SECONDS = 30.0
"""How long a session started on a standalone master waits for its first executor to size its shuffles."""
DRIVER_MERGE_MAX_FILES = 64
"""``sum_by_key`` over at most this many Python tasks (``read_groups`` files, fragment tasks) merges
their per-task partial sums on the driver; over more, Spark's aggregation sums the partials first
(see ``_sum_by_key_on_workers``)."""
_LOCAL_MASTER = re.compile(r"^local(\[(\*|\d+)(,\d+)?\])?$|^local-cluster\[\d+,\d+,\d+\]$")
_EMBEDDED_MASTER = re.compile(r"^local(\[(\*|\d+)(,\d+)?\])?$")
"""Masters whose driver, executors and Python workers are this process and its children: the
only ones that may run without authentication and encryption (``check_protection``)."""
_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
PROTECTION_SETTINGS = {
    "spark.io.encryption.enabled": "true",
    "spark.authenticate": "true",
    "spark.network.crypto.enabled": "true",
}
"""Set on every session the engine starts; required of any session on a cluster master."""
AUTH_SECRET_SETTING = "spark.authenticate.secret"
AUTH_SECRET_FILE_VARIABLE = "PRIVLAKE_SPARK_AUTH_SECRET_FILE"
"""Names the operator-only file that holds a standalone cluster's shared authentication secret
(``infra/spark_standalone.sh`` writes one into its state folder)."""
DEFAULT_MASTER = "local[*]"
"""The master privlake uses when none is given (``engine.spark.master``'s default)."""
SUBMIT_GATEWAY_VARIABLE = "PYSPARK_GATEWAY_PORT"
"""Set by spark-submit (its ``PythonRunner``) in the environment of the Python application it starts."""
_LAUNCH_ONLY_DEFAULTS = ("spark.driver.memory", DRIVER_OPTIONS)
"""Defaults that only act when privlake launches the driver JVM itself (not inside spark-submit)."""
_log = logging.getLogger("privlake")


def _spark_type(data_type: pa.DataType) -> Any:
    from pyspark.sql import types as spark_types

    mapping = {
        pa.int64(): spark_types.LongType(),
        pa.int32(): spark_types.IntegerType(),
        pa.int16(): spark_types.ShortType(),
        pa.int8(): spark_types.ByteType(),
        pa.float64(): spark_types.DoubleType(),
        pa.float32(): spark_types.FloatType(),
        pa.string(): spark_types.StringType(),
        pa.large_string(): spark_types.StringType(),
        pa.bool_(): spark_types.BooleanType(),
    }
    return mapping[data_type]


def spark_schema(schema: pa.Schema) -> Any:
    """The Spark ``StructType`` of an Arrow schema (explicit per-type mapping, all nullable)."""
    from pyspark.sql import types as spark_types

    arrow.check_schema(schema)
    return spark_types.StructType(
        [spark_types.StructField(field.name, _spark_type(field.type), nullable=True) for field in schema]
    )


def _master_endpoints(master: str) -> list[tuple[str, int]]:
    """Host and port of every master a URL names; empty for masters with nothing to probe."""
    if master.startswith("spark://"):
        endpoints = []
        for part in master[len("spark://") :].split(","):
            host, _, port = part.rpartition(":")
            if not host or not port.isdigit():
                raise EngineError(f"the Spark master URL {master!r} must look like spark://host:port")
            endpoints.append((host.strip("[]"), int(port)))
        return endpoints
    if master.startswith("k8s://"):
        address = urlsplit(
            master[len("k8s://") :] if "://" in master[len("k8s://") :] else "https://" + master[6:]
        )
        if address.hostname is None:
            raise EngineError(f"the Spark master URL {master!r} names no Kubernetes API host")
        return [(address.hostname, address.port or 443)]
    if _LOCAL_MASTER.match(master) or master == "yarn":
        return []
    raise EngineError(
        f"{master!r} is not a Spark master URL (expected local[N], local[*], spark://host:port, yarn or k8s://...)"
    )


def check_master_reachable(master: str, timeout: float = MASTER_CONNECT_TIMEOUT_SECONDS) -> None:
    """Fail fast, with one sentence, when no master the URL names accepts a TCP connection."""
    endpoints = _master_endpoints(master)
    if not endpoints:
        return
    reasons = []
    for host, port in endpoints:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as error:
            reasons.append(f"{host}:{port}: {error.strerror or error}")
    raise EngineUnreachable(
        f"cannot reach the Spark master {master} ({'; '.join(reasons)}); is the cluster running?"
    )


def spark_log_path() -> Path:
    """Where the driver JVM (and the Python workers it starts) write their console output.

    ``PRIVLAKE_SPARK_LOG`` names the file; by default one per process in the temp folder. The
    CLI's standard error then carries only privlake's own lines (one line on failure).
    """
    configured = os.environ.get("PRIVLAKE_SPARK_LOG")
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"privlake-spark-{os.getpid()}.log"


@contextmanager
def _standard_error_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` while the JVM is launched: the child process inherits
    it for its whole life, and this process gets its own standard error back afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _start_failure_reason(error: Exception) -> str:
    """One line saying why a SparkSession did not start (the Java exception, not the Py4J frame)."""
    text = str(error)
    if "stopped SparkContext" in text:
        return (
            "the master did not accept the application (no Spark standalone master answered on that port, "
            "or it refused this driver's authentication secret)"
        )
    java_lines = [
        line.lstrip(": ").strip()
        for line in text.splitlines()
        if re.match(r"^:? ?[\w.$]+(Exception|Error)\b", line)
    ]
    if java_lines:
        return java_lines[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _local_cores(master: str) -> int:
    match = re.match(r"^local\[(\*|\d+)", master)
    if match is None:
        return 1
    if match.group(1) == "*":
        return os.cpu_count() or 1
    return int(match.group(1))


def _default_conf(master: str, parallelism: int | None) -> dict[str, str]:
    settings = {
        "spark.app.name": "privlake",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        **PROTECTION_SETTINGS,
    }
    executors_here = False  # a cluster's executors on this host (loopback)
    if _LOCAL_MASTER.match(master):
        settings["spark.sql.shuffle.partitions"] = str(parallelism or 2 * _local_cores(master))
        settings["spark.driver.memory"] = "4g"
    else:
        settings["spark.network.timeout"] = "60s"
        settings["spark.rpc.askTimeout"] = "30s"
        if parallelism:
            settings["spark.sql.shuffle.partitions"] = str(parallelism)
        endpoints = _master_endpoints(master)
        if endpoints and all(host in _LOOPBACK_HOSTS for host, _ in endpoints):
            settings["spark.driver.host"] = "127.0.0.1"
            settings["spark.driver.bindAddress"] = "127.0.0.1"
            executors_here = True
    # the installation's class archive (a shorter start): the driver's, and on loopback the
    # executors' too (this host's file, which the driver checked)
    settings.update(archive_settings(executors_here=executors_here))
    return settings


def session_settings(master: str, conf: Mapping[str, Any], parallelism: int | None) -> dict[str, str]:
    """The configuration of a session the engine starts: its defaults (protection included),
    overridden by ``conf``."""
    return {**_default_conf(master, parallelism), **{name: str(value) for name, value in conf.items()}}


def is_embedded_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local[*]``, ``local[N,F]``: driver and executors in one JVM."""
    return bool(_EMBEDDED_MASTER.match(master))


def missing_protection(settings: Mapping[str, Any]) -> list[str]:
    """The protection settings (``PROTECTION_SETTINGS``) that a session configuration lacks."""
    return [name for name in PROTECTION_SETTINGS if str(settings.get(name, "")).strip().lower() != "true"]


def check_protection(master: str, settings: Mapping[str, Any], allow_unencrypted: bool) -> None:
    """Refuse (``EngineRefused``) a session on a cluster master whose configuration lacks
    authentication, network encryption or io encryption, unless the configuration opted out."""
    if allow_unencrypted or is_embedded_master(master):
        return
    missing = missing_protection(settings)
    if missing:
        raise EngineRefused(
            f"refused: a Spark session on master {master} without {', '.join(missing)} would carry the release "
            "secret and the rows over the network and onto the executors' disks in clear; set them to true "
            "in engine.spark.conf (a standalone cluster: infra/spark_standalone.sh), or opt out with "
            "engine.spark.allow_unencrypted: true (recorded in the manifest)"
        )


def require_pyspark() -> None:
    """Raise ``EngineError`` (one line naming the extra) when PySpark is not installed: it is the
    ``spark`` extra, not part of the core install."""
    try:
        import pyspark  # noqa: F401
    except ModuleNotFoundError as error:
        if error.name != "pyspark":
            raise
        raise EngineError(
            "the spark engine needs PySpark, which is not installed: pip install 'privlake[spark]' "
            "(or a cluster's own pyspark, with its connect extras)"
        ) from None


def under_spark_submit() -> bool:
    """Whether this process is a Python application that spark-submit started (its JVM is running
    and waiting for this process to build the SparkContext)."""
    return bool(os.environ.get(SUBMIT_GATEWAY_VARIABLE))


def submitted_settings() -> dict[str, str] | None:
    """The Spark settings spark-submit started this application with (``spark.master`` among them:
    its ``--master``, ``--conf`` values, properties file and ``spark-defaults.conf``), read from
    spark-submit's JVM; ``None`` outside spark-submit."""
    if not under_spark_submit():
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's gateway: launches nothing
    settings = {str(name): str(value) for name, value in SparkConf().getAll()}
    return settings if "spark.master" in settings else None


def resolve_submitted(
    requested_master: str, conf: Mapping[str, Any], parallelism: int | None, submitted: Mapping[str, str]
) -> tuple[str, dict[str, str]]:
    """The master and settings of a session inside spark-submit: spark-submit's master; privlake's
    defaults for that master, overridden by ``conf`` (``engine.spark.conf``), overridden by every
    setting spark-submit was given. A privlake master other than the default ``local[*]`` that
    differs from spark-submit's is an error: one master, chosen in one place."""
    master = submitted["spark.master"]
    if requested_master not in (DEFAULT_MASTER, master):
        raise EngineError(
            f"the release asks for Spark master {requested_master} (--master or engine.spark.master) but runs "
            f"inside spark-submit, whose master is {master}: give the master to spark-submit only"
        )
    ours = session_settings(master, conf, parallelism)
    for name in _LAUNCH_ONLY_DEFAULTS:
        if name not in conf:
            ours.pop(name, None)
    return master, {**ours, **submitted}


def _secret_on_submit_command_line() -> bool:
    """Whether spark-submit's own command line (readable by every local user) names the
    authentication secret."""
    from pyspark import SparkContext

    command = SparkContext._jvm.java.lang.System.getProperty("sun.java.command") or ""
    return AUTH_SECRET_SETTING in command


def _needs_shared_secret(master: str) -> bool:
    """Masters for which Spark neither generates nor distributes the authentication secret."""
    return master.startswith("spark://") or master.startswith("local-cluster[")


def read_auth_secret(path: Path) -> str:
    """A cluster's authentication secret from its operator-only file (refused when other users may
    read it)."""
    try:
        mode = path.stat().st_mode
        if mode & 0o077:
            raise EngineError(
                f"the Spark authentication secret file {path} may be read by other users "
                f"(mode {oct(mode & 0o777)}): make it operator-only (chmod 600)"
            )
        text = path.read_text(encoding="utf-8").strip()
    except OSError as error:
        raise EngineError(f"cannot read the Spark authentication secret file {path}: {error.strerror or error}") from None
    if not text:
        raise EngineError(f"the Spark authentication secret file {path} is empty")
    return text


def _cluster_auth_secret(master: str, auth_secret_file: str | Path | None) -> str:
    """The shared secret of the cluster behind ``master``: from ``auth_secret_file``, else the file
    ``PRIVLAKE_SPARK_AUTH_SECRET_FILE`` names; a ``local-cluster`` (whose workers this process
    starts) gets a fresh one."""
    named = auth_secret_file or os.environ.get(AUTH_SECRET_FILE_VARIABLE)
    if named:
        return read_auth_secret(Path(named))
    if master.startswith("local-cluster["):
        return secrets.token_hex(32)
    raise EngineError(
        f"the Spark master {master} runs with authentication (spark.authenticate): name the file holding the "
        f"cluster's shared secret in engine.spark.auth_secret_file or {AUTH_SECRET_FILE_VARIABLE} "
        "(infra/spark_standalone.sh writes it to its state folder as auth.secret)"
    )


class _SideReader:
    """A side value as a Python worker sees it: the broadcast payload (the side without its key
    material) joined with the key material this reader carries in the task closure. Read once
    per worker and broadcast: kept on the worker's broadcast object, which PySpark drops when
    the broadcast is destroyed."""

    def __init__(self, handle: Any, keys: tuple[bytes, ...]):
        self.handle = handle
        self.keys = keys

    def __call__(self) -> Any:
        handle = self.handle
        value = getattr(handle, "_privlake_side", _UNREAD)
        if value is _UNREAD:
            value = join_key_material(handle.value, self.keys)
            handle._privlake_side = value
        return value


_UNREAD = object()


def _summed_by_key(frame: Any, key: str, names: Sequence[str]) -> Any:
    """``frame``'s integer columns ``names`` summed by ``key``: one row per key, columns in order."""
    from pyspark.sql import functions as spark_functions

    return frame.groupBy(key).agg(*[spark_functions.sum(name).alias(name) for name in names]).select(key, *names)


def _compose(stages: tuple[Any, ...]) -> Any:
    """One ``mapInArrow`` function running ``stages`` (batch iterator -> batch iterator) in turn."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        for stage in stages:
            batches = stage(batches)
        return batches

    return run


def _forwarding(run: Any) -> Any:
    """``run`` (a ``mapInArrow`` function) with its exceptions made to reach the driver
    (``base.forward_errors``)."""

    def forwarding(batches: Iterator[Any]) -> Iterator[Any]:
        return forward_errors(run(batches))

    return forwarding


@dataclass(frozen=True)
class _PythonTasks:
    """A collection whose rows are made in the Python workers: ``count`` tasks, task ``i``'s
    rows being ``produce(i)`` (Arrow tables), one partition per task."""

    count: int
    produce: Any


def _chain(source: SparkCollection) -> tuple[SparkCollection, tuple[Any, ...]]:
    """The collection whose rows feed ``source``'s fused Python stages, and those stages."""
    return (source.origin, source.stages) if source.origin is not None else (source, ())


@dataclass(eq=False)
class SparkCollection(Collection):
    """A DataFrame whose columns are ``schema``; ``clustered_key`` is set when its partitions
    hold whole groups of that key, sorted by it (the result of ``cluster_by_key``).
    ``group_files`` is set for ``read_groups``: one partition per file, which the Python
    workers read themselves when a ``map_batches``/``map_groups`` runs on the collection.

    A collection made by ``map_batches``/``map_groups`` without a shuffle keeps its ``origin``
    and the Python ``stages`` applied to it, so that the next map or ``write_parquet`` runs
    all stages in one Python worker pass over the origin's rows instead of handing every
    intermediate batch back to the JVM and out again (Spark does not fuse ``mapInArrow``s).
    ``frame`` is the same computation as a DataFrame, for the JVM primitives. A collection
    mapped from another before that one was persisted recomputes the other's stages rather than
    reading its cache (persist before mapping to reuse it). ``persist`` on a ``read_groups``
    collection caches its rows, after which they are read from the cache, not the files.
    ``tasks`` is set for ``map_fragments`` (rows made by the Python workers, one partition per
    task), which maps fuse with as with ``group_files``."""

    schema: pa.Schema
    frame: Any
    clustered_key: str | None = None
    engine_id: int = field(default=0, repr=False)
    group_files: tuple[str | storage.Location, ...] | None = None
    tasks: _PythonTasks | None = field(default=None, repr=False)
    origin: SparkCollection | None = field(default=None, repr=False)
    stages: tuple[Any, ...] = field(default=(), repr=False)



def _identity_batches(tables: Iterator[pa.Table]) -> Iterator[pa.RecordBatch]:
    """A file's tables as record batches (the stage of a collection read straight from files)."""
    for table in tables:
        yield from table.to_batches()

class SparkEngine(Engine):
    """Engine on a SparkSession: the given ``session`` (never stopped by ``close``), or one it
    builds for ``master`` with ``conf`` (stopped by ``close``).

    ``parallelism`` is the number of partitions of every key shuffle (default:
    ``spark.sql.shuffle.partitions``); ``rows_per_call`` bounds the rows of one batch-function
    call. A session on a cluster master must have ``PROTECTION_SETTINGS`` on unless
    ``allow_unencrypted``; ``auth_secret_file`` holds a standalone cluster's shared secret (default:
    the file ``PRIVLAKE_SPARK_AUTH_SECRET_FILE`` names).
    """

    name: ClassVar[str] = "spark"

    def __init__(
        self,
        session: Any = None,
        master: str = "local[*]",
        conf: dict[str, str] | None = None,
        parallelism: int | None = None,
        rows_per_call: int = arrow.DEFAULT_ROWS_PER_CALL,
        allow_unencrypted: bool = False,
        auth_secret_file: str | Path | None = None,
    ):
        if parallelism is not None and parallelism < 1:
            raise EngineError(f"parallelism must be at least 1, not {parallelism}")
        if rows_per_call < 1:
            raise EngineError(f"rows_per_call must be at least 1, not {rows_per_call}")
        self.rows_per_call = rows_per_call
        self.allow_unencrypted = allow_unencrypted
        self._broadcasts: list[Any] = []
        self._cached_frames: list[Any] = []
        if session is not None:
            context = session.sparkContext
            check_protection(context.master, dict(context.getConf().getAll()), allow_unencrypted)
            self.session = session
            self._owns_session = False
        else:
            self.session, self._owns_session = self._start_session(
                master, conf or {}, parallelism, allow_unencrypted, auth_secret_file
            )
        if parallelism is None and session is None and self._owns_session and master.startswith("spark://") \
                and "spark.sql.shuffle.partitions" not in (conf or {}) and submitted_settings() is None:
            parallelism = self._standalone_parallelism()
        self.parallelism = parallelism or int(self.session.conf.get("spark.sql.shuffle.partitions"))

    def _standalone_parallelism(self) -> int:
        """Twice the cores of a standalone cluster's executors (Spark's own default, 200 shuffle
        partitions, is a hundred tasks a core on a small cluster, each paying a Python worker's
        overhead), once the executors have registered: the first, and no new one for a second
        (waiting at most ``EXECUTOR_WAIT_SECONDS``); set as the session's shuffle partitions too."""
        context = self.session.sparkContext
        deadline = time.monotonic() + EXECUTOR_WAIT_SECONDS
        seen, settled = 1, time.monotonic()  # the driver itself is one entry of the status
        while time.monotonic() < deadline and (seen < 2 or time.monotonic() - settled < 1.0):
            time.sleep(0.2)
            registered = context._jsc.sc().getExecutorMemoryStatus().size()
            if registered != seen:
                seen, settled = registered, time.monotonic()
        parallelism = max(2, 2 * int(context.defaultParallelism))
        self.session.conf.set("spark.sql.shuffle.partitions", str(parallelism))
        return parallelism

    @staticmethod
    def _start_session(
        master: str,
        conf: dict[str, str],
        parallelism: int | None,
        allow_unencrypted: bool,
        auth_secret_file: str | Path | None,
    ) -> tuple[Any, bool]:
        require_pyspark()
        submitted = submitted_settings()
        if submitted is None:
            settings = session_settings(master, conf, parallelism)
        else:
            master, settings = resolve_submitted(master, conf, parallelism, submitted)
            if AUTH_SECRET_SETTING in submitted and _secret_on_submit_command_line():
                raise EngineError(
                    f"spark-submit was given {AUTH_SECRET_SETTING} on its command line, where every local user "
                    f"can read it: put the cluster's secret in an operator-only file named by "
                    f"{AUTH_SECRET_FILE_VARIABLE} or engine.spark.auth_secret_file"
                )
        check_protection(master, settings, allow_unencrypted)
        check_master_reachable(master)
        auth_secret = settings.pop(AUTH_SECRET_SETTING, None)
        if auth_secret is None and settings["spark.authenticate"].strip().lower() == "true" and _needs_shared_secret(master):
            auth_secret = _cluster_auth_secret(master, auth_secret_file)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark import SparkConf, SparkContext
        from pyspark.sql import SparkSession

        running = SparkContext._active_spark_context
        if running is not None:
            if running.master == master:
                check_protection(master, dict(running.getConf().getAll()), allow_unencrypted)
                return SparkSession(running), False
            raise EngineError(
                f"a SparkSession on master {running.master} is already running in this process; "
                f"pass it to the engine or stop it before starting one on {master}"
            )
        if submitted is not None:
            return SparkEngine._start_submitted_session(master, settings, auth_secret, conf, submitted), True
        log_path = spark_log_path()
        try:
            with _standard_error_to(log_path):
                # PySpark puts the configuration it launches the JVM with on spark-submit's command
                # line (visible to every local user): launch it without the secret, then build the
                # context from a configuration held by the running JVM, set through Py4J.
                launch = SparkConf(loadDefaults=False).setMaster(master)
                for name, value in settings.items():
                    launch.set(name, value)
                SparkContext._ensure_initialized(conf=launch)
                context_conf = SparkConf().setMaster(master)
                for name, value in settings.items():
                    context_conf.set(name, value)
                if auth_secret is not None:
                    context_conf.set(AUTH_SECRET_SETTING, auth_secret)
                SparkContext.getOrCreate(context_conf)
                session = SparkSession.builder.getOrCreate()
        except Exception as error:
            raise EngineError(
                f"could not start Spark on master {master}: {_start_failure_reason(error)} (Spark log: {log_path})"
            ) from error
        session.sparkContext.setLogLevel("ERROR")
        return session, True

    @staticmethod
    def _start_submitted_session(
        master: str,
        settings: dict[str, str],
        auth_secret: str | None,
        conf: Mapping[str, Any],
        submitted: Mapping[str, str],
    ) -> Any:
        """The session of a spark-submit application, on spark-submit's already running JVM (whose
        console is spark-submit's own: no log file of privlake's)."""
        from pyspark import SparkConf, SparkContext
        from pyspark.sql import SparkSession

        try:
            context_conf = SparkConf()  # spark-submit's settings, from its JVM
            for name, value in settings.items():
                context_conf.set(name, value)
            if auth_secret is not None:
                context_conf.set(AUTH_SECRET_SETTING, auth_secret)
            context = SparkContext.getOrCreate(context_conf)
            session = SparkSession.builder.getOrCreate()
        except Exception as error:
            raise EngineError(
                f"could not start Spark on master {master} inside spark-submit: {_start_failure_reason(error)}"
            ) from error
        context.setLogLevel("ERROR")
        overridden = sorted(name for name in conf if name in submitted and submitted[name] != str(conf[name]))
        _log.info(
            "inside spark-submit: Spark master %s, default parallelism %d, with spark-submit's settings%s",
            context.master,
            context.defaultParallelism,
            f" (overriding engine.spark.conf's {', '.join(overridden)})" if overridden else "",
        )
        return session

    def warm_up(self, modules: Sequence[str]) -> None:
        """One small job over ``parallelism`` partitions with a shuffle and a sort, whose Python
        workers import ``modules`` (workers are reused, so later jobs find them warm)."""
        names = list(modules)

        def import_modules(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            import importlib

            for name in names:
                importlib.import_module(name)
            yield from batches

        warm = self.session.range(0, 4 * self.parallelism, 1, self.parallelism)
        warm = warm.repartition(self.parallelism, "id").sortWithinPartitions("id")
        warm.mapInArrow(import_modules, "id long").count()

    def drop_cached(self) -> None:
        """Destroy the broadcast side values and unpersist the cached frames made so far."""
        for handle in self._broadcasts:
            try:
                handle.destroy()
            except Exception:  # the context may already be gone
                pass
        self._broadcasts.clear()
        for frame in self._cached_frames:
            try:
                frame.unpersist()
            except Exception:  # the context may already be gone
                pass
        self._cached_frames.clear()

    def close(self) -> None:
        self.drop_cached()
        if self._owns_session:
            self.session.stop()
            self._owns_session = False

    def protection(self) -> dict[str, Any]:
        context = self.session.sparkContext
        conf = context.getConf()

        def enabled(name: str) -> bool:
            return str(conf.get(name, "false")).strip().lower() == "true"

        return {
            "engine": self.name,
            "master": context.master,
            "io_encryption": enabled("spark.io.encryption.enabled"),
            "authentication": enabled("spark.authenticate"),
            "network_encryption": enabled("spark.network.crypto.enabled"),
            "allow_unencrypted": self.allow_unencrypted,
            "key_material": "task closures (memory), never broadcasts",
        }

    def _collection(
        self, schema: pa.Schema, frame: Any, clustered_key: str | None = None, group_files: tuple[str | storage.Location, ...] | None = None
    ) -> SparkCollection:
        return SparkCollection(
            schema=schema.remove_metadata(),
            frame=frame,
            clustered_key=clustered_key,
            engine_id=id(self),
            group_files=group_files,
        )

    def _mapped(self, source: SparkCollection, run: Any, schema: pa.Schema, clustered_key: str | None) -> SparkCollection:
        """``source`` followed by the Python stage ``run``, fused with ``source``'s own stages."""
        origin, stages = _chain(source)
        stages = (*stages, run)
        mapped = self._collection(schema, self._python_map(origin, _compose(stages), spark_schema(schema)), clustered_key)
        mapped.origin, mapped.stages = origin, stages
        return mapped

    def _python_map(self, source: SparkCollection, run: Any, structure: Any) -> Any:
        """``mapInArrow(run)`` over ``source``'s rows. For a ``read_groups`` or
        ``map_fragments`` collection the rows never pass through the JVM before ``run``: one
        task per file (or fragment task), whose Python worker makes the rows and feeds them to
        ``run``."""
        if source.group_files is not None:
            return self._map_files(source.group_files, source.schema, run, structure)
        if source.tasks is not None:
            return self._map_tasks(source.tasks, run, structure)
        return source.frame.mapInArrow(_forwarding(run), structure)

    def _map_files(self, files: tuple[str | storage.Location, ...], schema: pa.Schema, run: Any, structure: Any) -> Any:
        """``run`` over the rows of ``files``, each file read by the Python worker of its own task."""

        def read_file(index: int) -> Iterator[pa.Table]:
            return arrow.read_parquet_batches(files[index], schema)

        return self._map_tasks(_PythonTasks(len(files), read_file), run, structure)

    def _map_tasks(self, tasks: _PythonTasks, run: Any, structure: Any) -> Any:
        """``run`` over the rows of ``tasks``: a ``range`` of task indices, one per partition,
        each Python worker producing its task's rows."""
        produce = tasks.produce

        def run_tasks(indices: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in indices:
                for index in batch.column(0).to_pylist():
                    yield from run(produce(index))

        return self.session.range(0, tasks.count, 1, tasks.count).mapInArrow(_forwarding(run_tasks), structure)

    def _own(self, collection: Collection) -> SparkCollection:
        if not isinstance(collection, SparkCollection) or collection.engine_id != id(self):
            raise EngineError("this collection belongs to another engine")
        return collection

    def _broadcast(self, value: Any) -> Any:
        handle = self.session.sparkContext.broadcast(value)
        self._broadcasts.append(handle)
        return handle

    def _side_reader(self, side: Any) -> Any:
        """What a task closure carries to read ``side`` on the worker (``None`` for no side): the
        side without its key material is broadcast, the key material stays in the closure."""
        if side is None:
            return None
        payload, keys = split_key_material(side)
        return _SideReader(self._broadcast(payload), keys)

    def read_parquet(self, paths: Sequence[Path], schema: pa.Schema) -> SparkCollection:
        structure = spark_schema(schema)
        if not paths:
            return self._collection(schema, self.session.createDataFrame([], structure))
        if not all(storage.is_local(path) for path in paths):
            # object storage: each file read by a Python worker through pyarrow (no Hadoop
            # connector needed on the cluster), one task per file
            files = tuple(paths)
            return self._collection(schema, self._map_files(files, schema, _identity_batches, structure))
        frame = self.session.read.schema(structure).parquet(*[str(Path(path).resolve()) for path in paths])
        return self._collection(schema, frame)

    def from_pandas(self, frame: pd.DataFrame, schema: pa.Schema) -> SparkCollection:
        structure = spark_schema(schema)
        table = arrow.frame_to_table(frame, schema)
        return self._collection(schema, self.session.createDataFrame(table, structure))

    def map_batches(
        self, collection: Collection, fn: BatchFunction, schema: pa.Schema, side: Any = None
    ) -> SparkCollection:
        source = self._own(collection)
        input_schema = source.schema
        rows_per_call = self.rows_per_call
        read_side = self._side_reader(side)

        def run_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            side_value = read_side() if read_side is not None else None
            conformed = (arrow.conform_table(batch, input_schema) for batch in batches)
            for chunk in arrow.row_chunks(conformed, rows_per_call):
                yield from arrow.apply_batch_function(fn, chunk, side_value, schema).to_batches()

        return self._mapped(source, run_batches, schema, None)

    def map_groups(
        self,
        collection: Collection,
        key: str,
        fn: BatchFunction,
        schema: pa.Schema,
        side: Any = None,
        keeps_groups: bool = False,
    ) -> SparkCollection:
        source = self._own(collection)
        arrow.check_key(source.schema, key)
        if source.clustered_key != key:
            source = self._collection(source.schema, self._clustered_frame(source.frame, key), key)
        input_schema = source.schema
        rows_per_call = self.rows_per_call
        read_side = self._side_reader(side)

        def run_groups(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            side_value = read_side() if read_side is not None else None
            conformed = (arrow.conform_table(batch, input_schema) for batch in batches)
            for chunk in arrow.whole_group_chunks(conformed, key, rows_per_call):
                yield from arrow.apply_batch_function(fn, chunk, side_value, schema).to_batches()

        return self._mapped(source, run_groups, schema, key if keeps_groups else None)

    def map_fragments(
        self,
        fragments: Sequence[Any],
        fn: FragmentFunction,
        schema: pa.Schema,
        side: Any = None,
        fragments_per_task: int = 1,
    ) -> SparkCollection:
        structure = spark_schema(schema)
        schema = schema.remove_metadata()
        grouped = tuple(arrow.fragment_tasks(fragments, fragments_per_task))
        if not grouped:
            return self._collection(schema, self.session.createDataFrame([], structure))
        read_side = self._side_reader(side)

        def produce(index: int) -> Iterator[pa.Table]:
            side_value = read_side() if read_side is not None else None
            return arrow.fragment_tables(fn, grouped[index], side_value, schema)

        tasks = _PythonTasks(len(grouped), produce)
        collection = self._collection(schema, self._map_tasks(tasks, _identity_batches, structure))
        collection.tasks = tasks
        return collection

    def first_row(self, collection: Collection, column: str = "ROW_ID") -> dict[str, Any] | None:
        """Each partition's smallest row (a fused Python stage), the smallest of those on the driver."""
        source = self._own(collection)
        arrow.check_orderable(source.schema, column)
        input_schema = source.schema

        def smallest(batches: Iterator[Any]) -> Iterator[pa.RecordBatch]:
            best = None
            for batch in batches:
                if batch.num_rows:
                    best = arrow.smallest_row([best, arrow.conform_table(batch, input_schema)], column)
            if best is not None:
                yield from best.to_batches()

        partials = self._reduce_partitions(source, smallest, spark_schema(input_schema))
        return arrow.row_dict(arrow.smallest_row([arrow.conform_table(partials, input_schema)], column))

    def column_metrics(self, collection: Collection, columns: Sequence[str] | None = None) -> dict[str, ColumnMetrics]:
        """Each partition's metrics as one row (a fused Python stage), merged on the driver."""
        source = self._own(collection)
        input_schema = source.schema
        names = list(input_schema.names if columns is None else columns)
        partial_schema = arrow.metrics_schema(input_schema, names)

        def metrics(batches: Iterator[Any]) -> Iterator[pa.RecordBatch]:
            conformed = (arrow.conform_table(batch, input_schema) for batch in batches)
            yield from arrow.partial_metrics(conformed, input_schema, names).to_batches()

        partials = self._reduce_partitions(source, metrics, spark_schema(partial_schema))
        return arrow.finish_metrics([partials], input_schema, names)

    def _reduce_partitions(self, source: SparkCollection, reduce: Any, structure: Any) -> pa.Table:
        """``reduce`` (batches -> a few batches) run on every partition of ``source`` after its
        fused stages; what it yields, gathered on the driver."""
        origin, stages = _chain(source)
        with worker_errors():
            return self._python_map(origin, _compose((*stages, reduce)), structure).toArrow()

    def _clustered_frame(self, frame: Any, key: str) -> Any:
        return frame.repartition(self.parallelism, key).sortWithinPartitions(key)

    def cluster_by_key(self, collection: Collection, key: str) -> SparkCollection:
        from pyspark import StorageLevel

        source = self._own(collection)
        arrow.check_key(source.schema, key)
        if source.clustered_key == key:
            return source
        clustered = self._clustered_frame(source.frame, key).persist(StorageLevel.MEMORY_AND_DISK)
        self._cached_frames.append(clustered)
        return self._collection(source.schema, clustered, key)

    def sum_by_key(self, collection: Collection, key: str, columns: Sequence[str]) -> pd.DataFrame:
        from pyspark.sql import functions as spark_functions

        source = self._own(collection)
        arrow.check_key(source.schema, key)
        arrow.check_integer_columns(source.schema, columns)
        origin = source.origin if source.origin is not None else source
        python_tasks = (len(origin.group_files) if origin.group_files is not None
                        else origin.tasks.count if origin.tasks is not None else None)
        if python_tasks is not None:
            return self._sum_by_key_on_workers(source, key, columns, python_tasks <= DRIVER_MERGE_MAX_FILES)
        halves = []
        aliases = []
        for index, column in enumerate(columns):
            value = spark_functions.coalesce(spark_functions.col(column).cast("long"), spark_functions.lit(0))
            halves += [
                spark_functions.shiftright(value, 32).alias(f"high_{index}"),
                value.bitwiseAND(spark_functions.lit(0xFFFFFFFF)).alias(f"low_{index}"),
            ]
            aliases += [f"high_{index}", f"low_{index}"]
        with worker_errors():
            summed = _summed_by_key(source.frame.select(spark_functions.col(key), *halves), key, aliases).toArrow()
        partials = summed.rename_columns([key, *arrow.half_sum_names(columns)])
        return arrow.finish_sums(partials, key, columns, source.schema.field(key).type)

    def _sum_by_key_on_workers(self, source: SparkCollection, key: str, columns: Sequence[str],
                               merge_on_driver: bool) -> pd.DataFrame:
        """``sum_by_key`` over rows the Python workers make (staged files or fragment tasks): each
        task sums its rows by key in Python, fused with the collection's stages, so a task hands
        on one row per key it saw, not one per row or batch. With ``merge_on_driver`` (at most
        ``DRIVER_MERGE_MAX_FILES`` tasks) the driver merges those partials: one job, no shuffle
        stage. With more, Spark sums the partials by key first, so the driver receives one row
        per key whatever the number of tasks (its memory stays bounded, issue 15) and the
        aggregation's input grows with tasks x keys, not with the rows: exact either way, the
        halves' sums staying below 2**63 for fewer than 2**31 input rows per key in all."""
        origin, stages = _chain(source)
        input_schema = source.schema
        empty = arrow.empty_partial_sums(input_schema, key, columns)
        transport = [key, *[f"half_{index}" for index in range(len(empty.schema.names) - 1)]]

        def partial_sums(batches: Iterator[Any]) -> Iterator[pa.RecordBatch]:
            merged = empty
            for batch in batches:
                if batch.num_rows:
                    partial = arrow.partial_sums(arrow.conform_table(batch, input_schema), key, columns)
                    merged = arrow.merge_partial_sums([merged, partial], key, columns)
            yield from merged.rename_columns(transport).to_batches()

        structure = spark_schema(empty.rename_columns(transport).schema)
        with worker_errors():
            partial_frame = self._python_map(origin, _compose((*stages, partial_sums)), structure)
            if not merge_on_driver:
                partial_frame = _summed_by_key(partial_frame, key, transport[1:])
            partials = partial_frame.toArrow()
        partials = partials.rename_columns(empty.schema.names).cast(empty.schema)
        if merge_on_driver:
            partials = arrow.merge_partial_sums([empty, arrow.sum_gathered_partials(partials, key, columns)],
                                                key, columns)
        return arrow.finish_sums(partials, key, columns, input_schema.field(key).type)

    def persist(self, collection: Collection) -> SparkCollection:
        from pyspark import StorageLevel

        source = self._own(collection)
        if not source.frame.is_cached:
            source.frame.persist(StorageLevel.MEMORY_AND_DISK)
            self._cached_frames.append(source.frame)
        source.origin, source.stages, source.group_files, source.tasks = None, (), None, None
        return source

    def unpersist(self, collection: Collection) -> None:
        self._own(collection).frame.unpersist()

    def count(self, collection: Collection) -> int:
        source = self._own(collection)
        with worker_errors():
            return int(source.frame.count())

    def collect(self, collection: Collection) -> pd.DataFrame:
        source = self._own(collection)
        with worker_errors():
            table = source.frame.toArrow()
        return arrow.table_to_frame(arrow.conform_table(table, source.schema))

    def write_groups(self, collection: Collection, key: str, directory: Path, schema: pa.Schema) -> list[Path]:
        source = self._own(collection)
        arrow.check_key(source.schema, key)
        if source.clustered_key != key:
            source = self._collection(source.schema, self._clustered_frame(source.frame, key), key)
        return self.write_parquet(source, directory, schema)

    def write_by_key(self, collection: Collection, key: str, order: Sequence[str], shards: int, directory: Path,
                     schema: pa.Schema) -> list[Path]:
        """A hash shuffle on ``key`` into ``shards`` partitions (Spark's Murmur3, whatever the
        collection's partitioning), each sorted by ``key`` and ``order``, a file per partition."""
        source = self._own(collection)
        arrow.check_key(source.schema, key)
        frame = source.frame.repartition(shards, key).sortWithinPartitions(key, *order)
        return self.write_parquet(self._collection(source.schema, frame), directory, schema)

    def read_groups(self, paths: Sequence[Path], key: str, schema: pa.Schema) -> SparkCollection:
        arrow.check_schema(schema)
        arrow.check_key(schema, key)
        files = tuple(str(Path(path).resolve()) if storage.is_local(path) else path for path in paths)
        if not files:
            return self._collection(schema, self.session.createDataFrame([], spark_schema(schema)), key)

        return self._collection(schema, self._map_files(files, schema, _identity_batches, spark_schema(schema)), key,
                                files)

    def write_parquet(self, collection: Collection, directory: Path, schema: pa.Schema) -> list[Path]:
        from pyspark import TaskContext

        source = self._own(collection)
        arrow.check_schema(schema)
        target = Path(directory).resolve() if storage.is_local(directory) else directory
        storage.make_folder(target)

        def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            context = TaskContext.get()
            path = arrow.write_parquet_file(
                batches,
                target,
                arrow.part_file_name(context.partitionId()),
                schema,
                attempt=str(context.taskAttemptId()),
            )
            if path is not None:
                yield pa.RecordBatch.from_pydict({"path": [path.name]})

        origin, stages = _chain(source)
        with worker_errors():
            written = self._python_map(origin, _compose((*stages, write_partition)), "path string").toArrow()
        return [target / name for name in sorted(written.column("path").to_pylist())]
