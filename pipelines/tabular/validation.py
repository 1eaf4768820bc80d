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


_KIND_WORDS = {1: "nulls", 2: "outside domain", 3: "non-integers"}


def released_metric_name(column: str, kind: int) -> str:
    """The output gate's name of a released column's metric (``kind``: 1 nulls, 2 values outside
    the public domain, 3 non-integers of an integer attribute)."""
    return f"{column}: {_KIND_WORDS[kind]}"


def validate_tabular_output_metrics(metrics: Mapping[str, Any], schema: Any, rows: int) -> ValidationResult:
    """Check the metrics the engine computed over the released records (the same checks as
    :func:`validate_tabular_output` on the rows: ``rows`` records, no nulls, categories from the
    schema's lists, numbers within its bounds, integers for integer attributes)."""
    from schemas.tabular.expectations import tabular_output_metric_suites

    return validate_metrics(metrics, tabular_output_metric_suites(schema, rows, released_metric_name), "output")
