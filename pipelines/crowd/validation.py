"""The crowd release's validation gate: the input claims before any computation (schema,
non-null ids, finite values, duplicates policy) and the synthetic output before it is published
(columns, types, finite values, at most ``m`` claims per object, no released object below ``k``
input claims, no suppressed object released).

A release runs both gates on metrics the engine computed where the rows live (issue 15:
``validate_crowd_input_metrics``, ``validate_crowd_output_metrics``, through
``validation.validate_metrics``); the frame gates (``validate_crowd_input``, ``validate_crowd_output``:
claims counted per object in pandas, GX on the per-object frame) check a frame held in memory, the
single-file reference the metric gates reproduce (tests)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from pipelines.platform.validation import (
    IssueWriter,
    ValidationIssue,
    ValidationResult,
    run_suites,
    validate_metrics,
    with_row_numbers,
)
from schemas.crowd.expectations import (
    LISTED_COLUMN,
    RELEASED_CLAIMS_COLUMN,
    crowd_input_metric_suites,
    crowd_input_suites,
    crowd_output_claims_suites,
    crowd_output_metric_suites,
    crowd_output_objects_suites,
    crowd_output_per_object_suite,
)


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
    return run_suites(with_row_numbers(frame), crowd_input_suites(duplicates_policy), "input", file_name, column_names)


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
    claims_writer = IssueWriter(None, {}, "claims")
    claims_ok = all(claims_writer.add(claims, suite) for suite in crowd_output_claims_suites(claims_per_object))
    objects_writer = IssueWriter(None, {}, "objects")
    objects_ok = all(objects_writer.add(objects, suite) for suite in crowd_output_objects_suites())
    result = claims_writer.result().merged(objects_writer.result())
    if not (claims_ok and objects_ok):
        return result
    try:
        counts = per_object_counts(claims, objects)
    except ValueError as error:
        issue = ValidationIssue(None, None, "object_id", f"claims and object table cannot be joined on object ids ({error})")
        return result.merged(ValidationResult(False, [], [issue]))
    per_object_writer = IssueWriter(None, {}, "per_object")
    per_object_writer.add(counts, crowd_output_per_object_suite(claims_per_object, k))
    return result.merged(per_object_writer.result())


def validate_crowd_input_metrics(metrics: Mapping[str, Any], *, file_name: str,
                                 duplicates_policy: str) -> ValidationResult:
    """The crowd input gate on the metrics the engine computed over the whole input (issue 15):
    Great Expectations on a one-row frame (``validation.validate_metrics``)."""
    return validate_metrics(metrics, crowd_input_metric_suites(duplicates_policy), "input", file_name)


def validate_crowd_output_metrics(metrics: Mapping[str, Any], *, claims_per_object: int, k: int) -> ValidationResult:
    """The crowd output gate on the metrics the engine computed over the outcome (released claims
    and object table, counted per block of whole objects): the released claims are never read
    whole on the driver."""
    return validate_metrics(metrics, crowd_output_metric_suites(claims_per_object, k), "output")
