"""The validation gate: Great Expectations 1.x checks on a release's input and output.

DESIGN.md, "Releases and the lake", and issue 2, "Bad input": the input claims are checked
before any computation (schema, non-null ids, finite values, duplicates policy) and the
synthetic output before it is published (columns, types, finite values, at most ``m`` claims
per object, no released object below ``k`` input claims, no suppressed object released). A
failing input stops the run with one clear line naming file, row and column — never a value of
the input (a duplicate names the earlier row, not the repeated key; an observed value is shown
only when it is a type name); a failing output is quarantined.

The suites themselves are data (``schemas/expectations.py`` and each kind's
``schemas/<kind>/expectations.py``); this module runs them with an ephemeral GX context over a
pandas data source, and each kind's ``pipelines/<kind>/validation.py`` says which suites run on
which frame. Importing GX and building the context takes seconds, so both happen once per process,
on first use (:func:`gx_batch_definition`).

Off the critical path (issue 16, "Fast start"): ``privlake run`` starts the gate's *worker* first
thing (:func:`start_gate_worker`), a child process that imports GX and builds its context while
the release imports its own libraries, opens the lake, reserves its charge and reads the input —
on another core, which a thread cannot give (importing is Python code, serialized by the GIL).
A suite then runs in the worker on a pickled copy of the frame (exact: same dtypes, same values)
with the same :func:`run_suite` code, and only GX's per-expectation outcomes come back; the
issues and their one-line messages are written here, as before. The worker is used for frames of
at most :data:`WORKER_MAX_ROWS` rows (beyond that, copying the frame costs more than the import
saves) and never when GX is already imported in this process; if it cannot start, dies or fails
a suite, the suite runs here — the gate is the same either way. The worker holds no secret, writes
nothing, and exits when this process closes its pipe (or dies). ``PRIVLAKE_GATE_WORKER=0``
turns it off. Its GX sees PySpark, boto3 and SQLAlchemy as not installed (GX imports them when present, for
data sources privlake never uses), so a release on the local engine imports no Spark anywhere.
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import pickle
import struct
import subprocess
import sys
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipelines.platform.errors import one_line
from schemas.expectations import ExpectationSpec, ExpectationSuiteSpec
from schemas.tables import ROW_NUMBER

if TYPE_CHECKING:
    import pandas as pd
# NumPy and pandas are imported where used: ``privlake run`` imports this module first thing, to
# start the gate's worker before anything heavy loads.

PARTIAL_UNEXPECTED_COUNT = 20
SAMPLE_ROWS_IN_CHECKS = 5
_CHECK_META_KEY = "privlake_check"


@dataclass
class ValidationIssue:
    """One failing expectation, located at its first offending row."""

    file: str | None
    row: int | None
    column: str | None
    message: str
    columns: tuple[str, ...] = field(default=())

    def line(self) -> str:
        """One line, e.g. ``answer.csv: row 17, column 'worker': source id is null``."""
        location = []
        if self.row is not None:
            location.append(f"row {self.row}")
        if len(self.columns) > 1:
            location.append("columns " + ", ".join(f"'{name}'" for name in self.columns))
        elif self.column is not None:
            location.append(f"column '{self.column}'")
        parts = [part for part in (self.file, ", ".join(location)) if part]
        return ": ".join([*parts, self.message])

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "row": self.row,
            "column": self.column,
            "columns": list(self.columns),
            "message": self.message,
            "line": self.line(),
        }


@dataclass
class ValidationResult:
    """Outcome of a validation gate: every check run, and the issues of the failing ones."""

    success: bool
    checks: list[dict[str, Any]]
    issues: list[ValidationIssue]

    def to_json(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "checks": _json_safe(self.checks),
            "issues": [issue.to_json() for issue in self.issues],
        }

    def first_line(self) -> str | None:
        """The first issue as one line, if any."""
        return self.issues[0].line() if self.issues else None

    def merged(self, other: ValidationResult) -> ValidationResult:
        return ValidationResult(self.success and other.success, self.checks + other.checks, self.issues + other.issues)


@functools.cache
def gx_batch_definition() -> Any:
    """A whole-dataframe batch definition in an ephemeral GX context, built once per process
    (analytics and progress bars off, in-memory stores).

    GX labels every in-memory pandas batch below ``HASH_THRESHOLD`` bytes (1 GB) with an MD5 of
    a whole-frame row hash, computed each time a batch is fetched: twice per suite, so six full
    passes over a release's input, about 40% of the gate's time at 10^6 claims and more with
    text ids. The label is only batch metadata; privlake fingerprints its inputs itself (SHA-256
    of the file, in the manifest), so the threshold is set to 0 and the label is skipped. The
    checks and their results do not change.
    """
    import great_expectations as gx
    from great_expectations.execution_engine import pandas_execution_engine

    if hasattr(pandas_execution_engine, "HASH_THRESHOLD"):
        pandas_execution_engine.HASH_THRESHOLD = 0
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
    )
    context = gx.get_context(mode="ephemeral", project_config=config)
    asset = context.data_sources.add_pandas("privlake").add_dataframe_asset("frame")
    return asset.add_batch_definition_whole_dataframe("whole_frame")


def _expectation(spec: ExpectationSpec, position: int) -> Any:
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration
    from great_expectations.expectations.row_conditions import Column

    kwargs: dict[str, Any] = dict(spec.kwargs)
    if spec.row_condition is not None:
        column, value = spec.row_condition
        kwargs["row_condition"] = Column(column) == value
    configuration = ExpectationConfiguration(
        type=spec.expectation_type, kwargs=kwargs, meta={_CHECK_META_KEY: position}
    )
    return configuration.to_domain_obj()


def run_suite(frame: pd.DataFrame, suite: ExpectationSuiteSpec) -> list[tuple[ExpectationSpec, dict[str, Any]]]:
    """Run one suite on ``frame``; ``(spec, GX result dict)`` pairs in the suite's order. In the
    gate's worker when it runs and the frame is small enough, else in this process."""
    worker = _WORKER
    if worker is not None and len(frame) <= WORKER_MAX_ROWS:
        outcomes = worker.run(frame, suite)
        if outcomes is not None:
            return list(zip(suite.expectations, outcomes, strict=True))
    return run_suite_here(frame, suite)


def run_suite_here(frame: pd.DataFrame, suite: ExpectationSuiteSpec) -> list[tuple[ExpectationSpec, dict[str, Any]]]:
    """:func:`run_suite` in this process."""
    import great_expectations as gx

    expectations = [_expectation(spec, position) for position, spec in enumerate(suite.expectations)]
    result_format: dict[str, Any] = {
        "result_format": "SUMMARY",
        "partial_unexpected_count": PARTIAL_UNEXPECTED_COUNT,
    }
    if suite.index_columns:
        result_format["unexpected_index_column_names"] = list(suite.index_columns)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gx_suite = gx.ExpectationSuite(name=suite.name, expectations=expectations)
        batch = gx_batch_definition().get_batch(batch_parameters={"dataframe": frame})
        outcome = batch.validate(gx_suite, result_format=result_format)
    by_position: dict[int, dict[str, Any]] = {}
    for expectation_result in outcome.results:
        position = int(expectation_result.expectation_config.meta[_CHECK_META_KEY])
        exception = expectation_result.exception_info or {}
        by_position[position] = {
            "success": bool(expectation_result.success),
            "result": dict(expectation_result.result or {}),
            "exception": exception.get("exception_message") if exception.get("raised_exception") else None,
        }
    return [(spec, by_position[position]) for position, spec in enumerate(suite.expectations)]


# ----------------------------------------------------------------------------- the gate's worker

WORKER_MAX_ROWS = 1_000_000
"""Frames up to this many rows are validated in the worker (a pickled copy); larger ones here."""
WORKER_VARIABLE = "PRIVLAKE_GATE_WORKER"
HIDDEN_FROM_GX = ("pyspark", "boto3", "botocore", "sqlalchemy")
"""Libraries the worker's GX must not import: optional for GX (its Spark, S3 and SQL data sources,
which privlake does not use) and heavy to import."""
DEFERRED_FOR_GX = ("altair", "scipy.stats")
"""Libraries GX imports at its own import only for expectations and renderers privlake does not
use (Altair charts; SciPy's statistics for the KL-divergence expectation): the worker loads them
lazily (``importlib.util.LazyLoader``: a module runs at its first attribute access), which halves
GX's import (2.7 s to 1.6 s measured). A suite that does use one loads it then, so outcomes are
the same."""
_HEADER = struct.Struct("!Q")
_WORKER: _GateWorker | None = None
_WORKER_LOCK = threading.Lock()


def _send(stream: Any, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def _receive(stream: Any) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("the gate's worker closed its pipe")
    size = _HEADER.unpack(header)[0]
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the gate's worker closed its pipe")
    return pickle.loads(data)


def _suite_payload(suite: ExpectationSuiteSpec) -> tuple:
    """The suite as plain, picklable values (a spec's keyword arguments are a read-only mapping)."""
    return (suite.name, [(spec.expectation_type, dict(spec.kwargs), spec.message, spec.row_condition)
                         for spec in suite.expectations], tuple(suite.index_columns))


def _suite_from_payload(payload: tuple) -> ExpectationSuiteSpec:
    from types import MappingProxyType

    name, expectations, index_columns = payload
    return ExpectationSuiteSpec(name, tuple(ExpectationSpec(kind, MappingProxyType(kwargs), message, condition)
                                            for kind, kwargs, message, condition in expectations), index_columns)


class _DeferredImports:
    """A meta-path finder that gives :data:`DEFERRED_FOR_GX` modules a lazy loader (the worker's
    only; see :data:`DEFERRED_FOR_GX`)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = frozenset(names)

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in self.names:
            return None
        import importlib.util

        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = importlib.util.LazyLoader(spec.loader)
                return spec
        return None


class _GateWorker:
    """The child process that runs suites (``python -c`` of :func:`serve_gate_worker`), one
    request at a time: ``(suite, frame)`` in, ``("ok", outcomes)`` or ``("failed", reason)`` out."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.broken = False
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from pipelines.platform.validation import serve_gate_worker; serve_gate_worker()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )

    def run(self, frame: pd.DataFrame, suite: ExpectationSuiteSpec) -> list[dict[str, Any]] | None:
        """GX's outcomes for ``suite`` on ``frame`` in the suite's order; ``None`` when the
        worker cannot give them (the caller then runs the suite itself)."""
        try:
            request = pickle.dumps((_suite_payload(suite), frame), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PickleError, AttributeError, TypeError, ValueError):
            return None
        with self.lock:
            if self.broken:
                return None
            try:
                self.process.stdin.write(_HEADER.pack(len(request)))
                self.process.stdin.write(request)
                self.process.stdin.flush()
                status, payload = _receive(self.process.stdout)
            except (OSError, EOFError, pickle.PickleError, AttributeError, TypeError, ValueError):
                self._stop()
                return None
        if status != "ok" or len(payload) != len(suite.expectations):
            return None
        return payload

    def _stop(self) -> None:
        self.broken = True
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        with self.lock:
            if not self.broken:
                self._stop()


def start_gate_worker() -> None:
    """Start the gate's worker (once per process; see the module's docstring). Nothing happens
    when it already runs, when GX is already imported here (the gate is then fast in process) or
    when ``PRIVLAKE_GATE_WORKER=0``."""
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is not None or "great_expectations" in sys.modules or os.environ.get(WORKER_VARIABLE, "1") == "0":
            return
        try:
            _WORKER = _GateWorker()
        except OSError:
            return
        atexit.register(stop_gate_worker)


def stop_gate_worker() -> None:
    """Stop the gate's worker, if one runs (suites then run in this process)."""
    global _WORKER
    with _WORKER_LOCK:
        worker, _WORKER = _WORKER, None
    if worker is not None:
        worker.close()


def prepare_gx_imports() -> None:
    """How the worker's GX is imported: :data:`HIDDEN_FROM_GX` as not installed, and
    :data:`DEFERRED_FOR_GX` loaded lazily. Call it before GX is imported (the worker; the
    fast-start benchmark's floor; the tests)."""
    for name in HIDDEN_FROM_GX:
        sys.modules.setdefault(name, None)  # type: ignore[assignment]  # "not installed", for GX
    sys.meta_path.insert(0, _DeferredImports(DEFERRED_FOR_GX))


def serve_gate_worker() -> None:
    """The worker's loop: import GX and build its context at once, then answer requests until
    the parent closes the pipe. Standard output carries only the protocol (anything printed goes
    to standard error, which the parent discards)."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    prepare_gx_imports()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gx_batch_definition()
    except Exception:  # noqa: BLE001, S110 - each request then fails and the parent validates itself
        pass
    while True:
        try:
            suite, frame = _receive(requests)
        except EOFError:
            os._exit(0)  # nothing to keep: skip tearing GX's modules down (0.35 s)
        try:
            reply = ("ok", [outcome for _, outcome in run_suite_here(frame, _suite_from_payload(suite))])
            _send(replies, reply)
        except Exception as error:  # noqa: BLE001 - the parent runs the suite itself
            _send(replies, ("failed", type(error).__name__))


def _python_value(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    return value


def _json_safe(value: Any) -> Any:
    """Plain JSON (no NaN/inf, no numpy scalars): non-finite floats become strings."""
    value = _python_value(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return value


class IssueWriter:
    """Turns GX results into checks and one-line issues, in the file's column names."""

    def __init__(self, file: str | None, column_names: Mapping[str, str], table: str) -> None:
        self.file = file
        self.column_names = column_names
        self.table = table
        self.raw = table == "input"
        """An input frame holds raw data: its issue lines name rows and columns, never a value."""
        self.checks: list[dict[str, Any]] = []
        self.issues: list[ValidationIssue] = []

    def name(self, column: str) -> str:
        return self.column_names.get(column, column)

    def add(self, frame: pd.DataFrame, suite: ExpectationSuiteSpec) -> bool:
        """Run ``suite`` on ``frame``, record checks and issues; whether every check passed."""
        passed = True
        for spec, outcome in run_suite(frame, suite):
            result = outcome["result"]
            samples = [
                {key: _python_value(item) for key, item in row.items()}
                for row in result.get("partial_unexpected_index_list") or []
            ]
            self.checks.append(
                {
                    "table": self.table,
                    "suite": suite.name,
                    "expectation": spec.expectation_type,
                    "column": spec.columns[0] if len(spec.columns) == 1 else list(spec.columns) or None,
                    "success": outcome["success"],
                    "unexpected_count": result.get("unexpected_count"),
                    "observed_value": result.get("observed_value"),
                    "sample_rows": samples[:SAMPLE_ROWS_IN_CHECKS],
                    "exception": outcome["exception"],
                }
            )
            if not outcome["success"]:
                passed = False
                self.issues.append(self._issue(frame, spec, suite, outcome, samples))
        return passed

    def _issue(
        self,
        frame: pd.DataFrame,
        spec: ExpectationSpec,
        suite: ExpectationSuiteSpec,
        outcome: dict[str, Any],
        samples: list[dict[str, Any]],
    ) -> ValidationIssue:
        columns = tuple(self.name(column) for column in spec.columns)
        column = columns[0] if columns else None
        result = outcome["result"]
        message = spec.message
        if spec.expectation_type == "expect_column_to_exist":
            present = ", ".join(self.name(str(name)) for name in frame.columns if name != ROW_NUMBER)
            return ValidationIssue(self.file, None, column, f"{message} (columns present: {present or 'none'})")
        if outcome["exception"]:
            reason = type_name_only(outcome["exception"]) if self.raw else one_line(outcome["exception"], 120)
            return ValidationIssue(self.file, None, column, f"{message} (check could not run: {reason})", columns)
        if not samples:
            observed = result.get("observed_value")
            if (observed is not None and spec.expectation_type != "expect_table_row_count_to_be_between"
                    and (not self.raw or spec.expectation_type in _TYPE_EXPECTATIONS)):
                message = f"{message} (found {one_line(str(observed), 80)})"
            return ValidationIssue(self.file, None, column, message, columns)
        unexpected = int(result.get("unexpected_count") or len(samples))
        if ROW_NUMBER in suite.index_columns:
            ordered = sorted(samples, key=lambda row: row[ROW_NUMBER])
            first, earlier_row = _first_offending_row(spec, ordered)
            details = []
            if earlier_row is not None:
                details.append(f"the same {' and '.join(self.name(name) for name in spec.columns)} as row {earlier_row}")
            if unexpected > 1:
                rows = ", ".join(str(row[ROW_NUMBER]) for row in ordered[:5])
                details.append(f"{unexpected} rows in all, first rows {rows}")
            text = f"{message}; {'; '.join(details)}" if details else message
            return ValidationIssue(self.file, int(first[ROW_NUMBER]), column, text, columns)
        first = samples[0]
        where = "" if self.raw else ", ".join(f"{name} {first[name]!r}" for name in suite.index_columns if name in first)
        text = f"{where}: {message}" if where else message
        if unexpected > 1:
            text += f" ({unexpected} {'objects' if suite.index_columns == ('object_id',) else 'rows'} in all)"
        return ValidationIssue(self.file, None, column, text, columns)

    def result(self) -> ValidationResult:
        return ValidationResult(not self.issues, self.checks, self.issues)


_TYPE_EXPECTATIONS = ("expect_column_values_to_be_of_type", "expect_column_values_to_be_in_type_list")
"""Expectations whose observed value is a type name, never data: the only ones an input issue
shows it for."""


def type_name_only(exception_message: str) -> str:
    """The leading ``Name:`` of an exception message when it has one (a message may quote data)."""
    head = str(exception_message).split(":", 1)[0].strip()
    return head if head.isidentifier() else "an error in the check"


def _first_offending_row(spec: ExpectationSpec, ordered: list[dict[str, Any]]) -> tuple[dict[str, Any], int | None]:
    """The first offending row; for a duplicate, the first row repeating an earlier key, and
    the row number of that earlier occurrence."""
    if spec.expectation_type not in ("expect_compound_columns_to_be_unique", "expect_column_values_to_be_unique"):
        return ordered[0], None
    seen: dict[tuple, int] = {}
    for row in ordered:
        key = tuple(row.get(column) for column in spec.columns)
        if key in seen:
            return row, seen[key]
        seen[key] = int(row[ROW_NUMBER])
    return ordered[0], None


def with_row_numbers(frame: pd.DataFrame) -> pd.DataFrame:
    if ROW_NUMBER in frame.columns:
        return frame
    import numpy as np

    return frame.assign(**{ROW_NUMBER: np.arange(1, len(frame) + 1, dtype=np.int64)})


def run_suites(
    frame: pd.DataFrame,
    suites: list[ExpectationSuiteSpec],
    label: str,
    file_name: str | None = None,
    column_names: Mapping[str, str] | None = None,
) -> ValidationResult:
    """Run ``suites`` on ``frame`` in order, stopping at the first stage that fails (a missing
    column would bury the real problem under failures of every later expectation). ``label``
    names the frame in the result (``input``, ``output``); ``column_names`` maps canonical column
    names to the file's, so issues name the columns the user knows."""
    writer = IssueWriter(file_name, column_names or {}, label)
    for suite in suites:
        if not writer.add(frame, suite):
            break
    return writer.result()



def metrics_frame(metrics: Mapping[str, Any]) -> pd.DataFrame:
    """An input's metrics (name -> number) as the one-row frame a metrics suite validates, with its
    index column ``metrics_row``."""
    import pandas as pd

    from schemas.expectations import METRICS_ROW

    return pd.DataFrame({METRICS_ROW: [0], **{name: [_python_value(value)] for name, value in metrics.items()}})


def validate_metrics(
    metrics: Mapping[str, Any],
    suites: list[ExpectationSuiteSpec],
    label: str = "input",
    file_name: str | None = None,
) -> ValidationResult:
    """Great Expectations on metrics an engine computed over a whole input, not on its rows (issue
    15; any kind): ``metrics`` (rows, nulls and bad values per column, repeats, minimum and maximum,
    ...: reduced where the rows live, e.g. by ``Engine.column_metrics`` or ``sum_by_key``) are one
    small frame (:func:`metrics_frame`), validated by ``suites`` (``schemas.expectations.metric_suite``)
    in the gate's worker like any frame. An issue names the failing metric as its column and never a
    value (``label`` ``input``: raw data); the kind locates a failing check's first row itself (the
    engine's ``first_row`` over the rows it flagged) and words that line. The result's checks record
    the observed metric values (operator-only)."""
    return run_suites(metrics_frame(metrics), suites, label, file_name)
