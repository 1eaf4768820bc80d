"""The tabular release's validation gate: the released synthetic records against the schema."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from pipelines.platform.validation import ValidationResult, run_suites, validate_metrics
from schemas.tabular.expectations import tabular_input_metric_suites, tabular_output_suites


def validate_tabular_metrics(metrics: Mapping[str, Any], file_name: str) -> ValidationResult:
    """Check the metrics the engine computed over the records (``schemas/tabular/expectations.py``,
    ``TABULAR_INPUT_METRICS``): rows, missing values, values outside their public domain."""
    return validate_metrics(metrics, tabular_input_metric_suites(), "input", file_name)


def validate_tabular_output(released: pd.DataFrame, schema: Any, rows: int) -> ValidationResult:
    """Check the released synthetic records against the schema (``schemas.tabular.schema``)."""
    categories = {a.name: list(a.categories) for a in schema.attributes if a.type == "categorical"}
    bounds = {a.name: (float(a.bounds[0]), float(a.bounds[1])) for a in schema.attributes if a.type == "numeric"}
    integer_columns = [a.name for a in schema.attributes if a.type == "numeric" and a.integer]
    return run_suites(released, tabular_output_suites(list(schema.names), categories, bounds, integer_columns, rows),
                      "output")
