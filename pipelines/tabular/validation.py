"""The tabular release's validation gate: the released synthetic records against the schema."""

from __future__ import annotations

from typing import Any

import pandas as pd

from pipelines.platform.validation import ValidationResult, run_suites
from schemas.tabular.expectations import tabular_output_suites


def validate_tabular_output(released: pd.DataFrame, schema: Any, rows: int) -> ValidationResult:
    """Check the released synthetic records against the schema (``schemas.tabular.schema``)."""
    categories = {a.name: list(a.categories) for a in schema.attributes if a.type == "categorical"}
    bounds = {a.name: (float(a.bounds[0]), float(a.bounds[1])) for a in schema.attributes if a.type == "numeric"}
    integer_columns = [a.name for a in schema.attributes if a.type == "numeric" and a.integer]
    return run_suites(released, tabular_output_suites(list(schema.names), categories, bounds, integer_columns, rows),
                      "output")
