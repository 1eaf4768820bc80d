"""The validation gate: Great Expectations 1.x checks on a release's input and output.

DESIGN.md, "Releases and the lake", and issue 2, "Bad input": the input claims are checked
before any computation (schema, non-null ids, finite values, duplicates policy) and the
synthetic output before it is published (columns, types, finite values, at most ``m`` claims
per object, no released object below ``k`` input claims, no suppressed object released). A
failing input stops the run with one clear line naming file, row and column; a failing
output is quarantined.

The suites themselves are data in :mod:`schemas.expectations`; this module runs them with an
ephemeral GX context over a pandas data source. Importing GX and building the context takes
seconds, so both happen once per process, on first use (:func:`gx_batch_definition`).
Counting claims per object is pandas; GX then checks the per-object counts frame.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from schemas.expectations import (
    LISTED_COLUMN,
    RELEASED_CLAIMS_COLUMN,
    ROW_NUMBER_COLUMN,
    ExpectationSpec,
    ExpectationSuiteSpec,
    crowd_input_suites,
    crowd_output_claims_suites,
    crowd_output_objects_suites,
    crowd_output_per_object_suite,
    filter_output_suites,
    ldp_input_suites,
    ldp_output_suites,
    tabular_output_suites,
)

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
    """Run one suite on ``frame``; ``(spec, GX result dict)`` pairs in the suite's order."""
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


def _python_value(value: Any) -> Any:
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


class _IssueWriter:
    """Turns GX results into checks and one-line issues, in the file's column names."""

    def __init__(self, file: str | None, column_names: Mapping[str, str], table: str) -> None:
        self.file = file
        self.column_names = column_names
        self.table = table
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
            present = ", ".join(self.name(str(name)) for name in frame.columns if name != ROW_NUMBER_COLUMN)
            return ValidationIssue(self.file, None, column, f"{message} (columns present: {present or 'none'})")
        if outcome["exception"]:
            return ValidationIssue(self.file, None, column, f"{message} (check could not run: {outcome['exception']})", columns)
        if not samples:
            observed = result.get("observed_value")
            if observed is not None and spec.expectation_type != "expect_table_row_count_to_be_between":
                message = f"{message} (found {observed})"
            return ValidationIssue(self.file, None, column, message, columns)
        unexpected = int(result.get("unexpected_count") or len(samples))
        if ROW_NUMBER_COLUMN in suite.index_columns:
            ordered = sorted(samples, key=lambda row: row[ROW_NUMBER_COLUMN])
            first, earlier_row = _first_offending_row(spec, ordered)
            details = []
            if earlier_row is not None:
                key = ", ".join(f"{self.name(name)} {first.get(name)!r}" for name in spec.columns)
                details.append(f"{key} first at row {earlier_row}")
            if unexpected > 1:
                rows = ", ".join(str(row[ROW_NUMBER_COLUMN]) for row in ordered[:5])
                details.append(f"{unexpected} rows in all, first rows {rows}")
            text = f"{message}; {'; '.join(details)}" if details else message
            return ValidationIssue(self.file, int(first[ROW_NUMBER_COLUMN]), column, text, columns)
        first = samples[0]
        where = ", ".join(f"{name} {first[name]!r}" for name in suite.index_columns if name in first)
        text = f"{where}: {message}" if where else message
        if unexpected > 1:
            text += f" ({unexpected} {'objects' if suite.index_columns == ('object_id',) else 'rows'} in all)"
        return ValidationIssue(self.file, None, column, text, columns)

    def result(self) -> ValidationResult:
        return ValidationResult(not self.issues, self.checks, self.issues)


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
        seen[key] = int(row[ROW_NUMBER_COLUMN])
    return ordered[0], None


def _with_row_numbers(frame: pd.DataFrame) -> pd.DataFrame:
    if ROW_NUMBER_COLUMN in frame.columns:
        return frame
    return frame.assign(**{ROW_NUMBER_COLUMN: np.arange(1, len(frame) + 1, dtype=np.int64)})


def validate_crowd_input(
    frame: pd.DataFrame,
    *,
    file_name: str,
    duplicates_policy: str,
    column_names: Mapping[str, str] | None = None,
) -> ValidationResult:
    """Check crowd input claims (``object_id, source_id, value`` and ``row_number``, the 1-based
    data row of the file; the position in ``frame`` if absent). ``column_names`` maps the
    canonical names to the file's (as in the config's ``input.columns``) so issues name the
    columns the user knows. Stages stop at the first failing one (columns, types, values)."""
    writer = _IssueWriter(file_name, column_names or {}, "input")
    frame = _with_row_numbers(frame)
    for suite in crowd_input_suites(duplicates_policy):
        if not writer.add(frame, suite):
            break
    return writer.result()


def per_object_counts(claims: pd.DataFrame, objects: pd.DataFrame) -> pd.DataFrame:
    """The per-object frame the output checks run on: the object table joined (outer) with the
    number of synthetic claims per object (``released_claims``); ``listed`` is False for an
    object that has claims but is not in the object table."""
    counts = claims.groupby("object_id", sort=False, dropna=False).size().rename(RELEASED_CLAIMS_COLUMN).reset_index()
    merged = objects[["object_id", "claims", "released", "suppressed"]].merge(
        counts, on="object_id", how="outer", indicator=True
    )
    merged[LISTED_COLUMN] = merged.pop("_merge") != "right_only"
    merged[RELEASED_CLAIMS_COLUMN] = merged[RELEASED_CLAIMS_COLUMN].fillna(0).astype(np.int64)
    merged["claims"] = merged["claims"].fillna(0).astype(np.int64)
    for flag in ("released", "suppressed"):
        merged[flag] = merged[flag].astype("boolean").fillna(False).astype(bool)
    return merged


def validate_crowd_output(
    claims: pd.DataFrame, objects: pd.DataFrame, *, claims_per_object: int, k: int
) -> ValidationResult:
    """Check a crowd release's synthetic claims ``(object_id, claim_index, value)`` and object
    table ``(object_id, claims, released, suppressed)`` against ``m = claims_per_object`` and
    ``k`` (PrisCrowd Algorithm 1: at most ``m`` claims per object; objects with fewer than
    ``k`` claims suppressed)."""
    claims_writer = _IssueWriter(None, {}, "claims")
    claims_ok = all(claims_writer.add(claims, suite) for suite in crowd_output_claims_suites(claims_per_object))
    objects_writer = _IssueWriter(None, {}, "objects")
    objects_ok = all(objects_writer.add(objects, suite) for suite in crowd_output_objects_suites())
    result = claims_writer.result().merged(objects_writer.result())
    if not (claims_ok and objects_ok):
        return result
    try:
        counts = per_object_counts(claims, objects)
    except ValueError as error:
        issue = ValidationIssue(None, None, "object_id", f"claims and object table cannot be joined on object ids ({error})")
        return result.merged(ValidationResult(False, [], [issue]))
    per_object_writer = _IssueWriter(None, {}, "per_object")
    per_object_writer.add(counts, crowd_output_per_object_suite(claims_per_object, k))
    return result.merged(per_object_writer.result())


def validate_ldp_input(frame: pd.DataFrame, *, file_name: str, mechanism_names: list[str],
                       column_names: Mapping[str, str] | None = None) -> ValidationResult:
    """Check ldp reports (``user_id, mechanism, report`` and ``row_number``): columns, nulls, one
    report per user, mechanisms named in the catalog. Issues use the file's column names."""
    writer = _IssueWriter(file_name, column_names or {}, "input")
    frame = _with_row_numbers(frame)
    for suite in ldp_input_suites(mechanism_names):
        if not writer.add(frame, suite):
            break
    return writer.result()


def validate_ldp_output(estimate: pd.DataFrame, *, layout: str, secrets: int) -> ValidationResult:
    """Check the released estimate before it is published."""
    writer = _IssueWriter(None, {}, "output")
    for suite in ldp_output_suites(layout, secrets):
        if not writer.add(estimate, suite):
            break
    return writer.result()


def validate_tabular_output(released: pd.DataFrame, schema: Any, rows: int) -> ValidationResult:
    """Check the released synthetic records against the schema (``schemas.tabular_schema``)."""
    categories = {a.name: list(a.categories) for a in schema.attributes if a.type == "categorical"}
    bounds = {a.name: (float(a.bounds[0]), float(a.bounds[1])) for a in schema.attributes if a.type == "numeric"}
    integer_columns = [a.name for a in schema.attributes if a.type == "numeric" and a.integer]
    writer = _IssueWriter(None, {}, "output")
    for suite in tabular_output_suites(list(schema.names), categories, bounds, integer_columns, rows):
        if not writer.add(released, suite):
            break
    return writer.result()


def validate_filter_output(released: pd.DataFrame, spec: Any, utility_classes: dict[str, list[str]],
                           kept: dict[str, str], withheld: dict[str, list[str]], rows: int) -> ValidationResult:
    """Check the privatized records against the feature spec and the choices (``schemas.filter_schema``)."""
    categories = {f.name: list(f.categories) for f in spec.features if f.type == "categorical"}
    bounds = {f.name: (tuple(map(float, f.bounds)) if f.bounds is not None else None)
              for f in spec.features if f.type == "numeric"}
    integer_columns = [f.name for f in spec.features if f.type == "numeric" and f.integer]
    writer = _IssueWriter(None, {}, "output")
    for suite in filter_output_suites(list(spec.names), categories, bounds, integer_columns, utility_classes,
                                      kept, withheld, rows):
        if not writer.add(released, suite):
            break
    return writer.result()
