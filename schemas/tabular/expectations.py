"""Expectation suites of a tabular release: the released synthetic records."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.expectations import (
    INTEGER_DTYPES,
    ExpectationSpec,
    ExpectationSuiteSpec,
    metric_between,
    metric_suite,
    spec,
)

TABULAR_INPUT_METRICS = ("rows", "missing_values", "values_not_in_domain", "values_outside_bounds")
"""The metrics the engine computes over a tabular input (``pipelines/tabular/engine_input.py``)."""


def tabular_input_metric_suites() -> list[ExpectationSuiteSpec]:
    """The tabular input gate on the engine's metrics (issue 15): at least one record; no missing
    value; every category in its list and every numeric value a number; every number inside its
    bounds (an attribute that clips has none outside). A failing check is reported at the first bad
    value the engine found (``first_row``)."""
    return metric_suite("tabular_input_metrics", TABULAR_INPUT_METRICS, (
        metric_between("rows", "no rows (empty table)", min_value=1),
        metric_between("missing_values", "missing value (blank or a null spelling)", max_value=0),
        metric_between("values_not_in_domain", "value is not in its attribute's public domain", max_value=0),
        metric_between("values_outside_bounds", "value is outside its attribute's bounds", max_value=0),
    ))


def tabular_output_suites(
    columns: list[str],
    categories: Mapping[str, list[str]],
    bounds: Mapping[str, tuple[float, float]],
    integer_columns: list[str],
    rows: int,
) -> list[ExpectationSuiteSpec]:
    """The released synthetic records: exactly the schema's columns (no seed index or internal
    column), ``rows`` records, no nulls, categories from the schema's lists, numbers within the
    schema's bounds (integers for integer attributes)."""
    values: list[ExpectationSpec] = [
        spec("expect_table_row_count_to_be_between", f"the release must have {rows} records",
              min_value=rows, max_value=rows),
    ]
    for column in columns:
        values.append(spec("expect_column_values_to_not_be_null", "synthetic value is missing", column=column))
        if column in categories:
            values.append(spec("expect_column_values_to_be_in_set", "category outside the schema's list",
                                column=column, value_set=list(categories[column])))
        else:
            low, high = bounds[column]
            values.append(spec("expect_column_values_to_be_between", f"value outside the schema's bounds [{low}, {high}]",
                                column=column, min_value=low, max_value=high))
    types = [
        spec("expect_column_values_to_be_in_type_list", "values are not integers", column=column,
              type_list=list(INTEGER_DTYPES))
        for column in integer_columns
    ]
    return [
        ExpectationSuiteSpec(
            "tabular_output_columns",
            (spec("expect_table_columns_to_match_set", "the release's columns must be exactly the schema's",
                   column_set=list(columns), exact_match=True),),
            (),
        ),
        ExpectationSuiteSpec("tabular_output_types", tuple(types), ()),
        ExpectationSuiteSpec("tabular_output_values", tuple(values), ()),
    ]


def tabular_output_metric_suites(schema: Any, rows: int, metric_name: Any) -> list[ExpectationSuiteSpec]:
    """The released records' gate on the engine's metrics (issue 15): ``rows`` records; per
    attribute no null, no value outside its public domain (a category not in the list, a number
    outside the bounds), and for an integer attribute no non-integer. ``metric_name(column, kind)``
    names the metrics (kind 1 nulls, 2 outside the domain, 3 non-integers)."""
    names = ["rows"]
    checks: list[ExpectationSpec] = [metric_between("rows", f"the release must have {rows} records",
                                                    min_value=rows, max_value=rows)]
    for attribute in schema.attributes:
        nulls, outside, integers = (metric_name(attribute.name, kind) for kind in (1, 2, 3))
        names += [nulls, outside, integers]
        checks.append(metric_between(nulls, "synthetic value is missing", max_value=0))
        if attribute.type == "categorical":
            checks.append(metric_between(outside, "category outside the schema's list", max_value=0))
        else:
            low, high = float(attribute.bounds[0]), float(attribute.bounds[1])
            checks.append(metric_between(outside, f"value outside the schema's bounds [{low}, {high}]", max_value=0))
        checks.append(metric_between(integers, "values are not integers", max_value=0))
    return metric_suite("tabular_output_metrics", tuple(names), tuple(checks))
