"""The filter release's validation gate: the privatized records against the feature spec and the choices."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from pipelines.platform.validation import ValidationResult, run_suites, validate_metrics
from schemas.filter.expectations import (
    filter_input_metric_suites,
    filter_output_metric_suites,
    filter_output_suites,
)


def validate_filter_output(released: pd.DataFrame, spec: Any, utility_classes: dict[str, list[str]],
                           kept: dict[str, str], withheld: dict[str, list[str]], rows: int) -> ValidationResult:
    """Check the privatized records against the feature spec and the choices (``schemas.filter.features``)."""
    categories = {f.name: list(f.categories) for f in spec.features if f.type == "categorical"}
    bounds = {f.name: (tuple(map(float, f.bounds)) if f.bounds is not None else None)
              for f in spec.features if f.type == "numeric"}
    integer_columns = [f.name for f in spec.features if f.type == "numeric" and f.integer]
    suites = filter_output_suites(list(spec.names), categories, bounds, integer_columns, utility_classes, kept,
                                  withheld, rows)
    return run_suites(released, suites, "output")


def validate_filter_output_metrics(metrics: Mapping[str, int], names: list[str], spec: Any,
                                   rows: int) -> ValidationResult:
    """Check the metrics the engine computed over the privatized records (the row-level gate's
    checks, each as a count: ``schemas.filter.expectations.filter_output_metric_suites``)."""
    categorical = [f.name for f in spec.features if f.type == "categorical"]
    bounds = {f.name: (tuple(map(float, f.bounds)) if f.bounds is not None else None)
              for f in spec.features if f.type == "numeric"}
    return validate_metrics(metrics, filter_output_metric_suites(names, rows, bounds, categorical), "output")


def validate_filter_input_metrics(metrics: Mapping[str, int], file_name: str) -> ValidationResult:
    """Check the metrics the engine computed over the records to privatize
    (``schemas.filter.expectations.filter_input_metric_suites``)."""
    return validate_metrics(metrics, filter_input_metric_suites(), "input", file_name)
