"""Expectation suites of a filter release: the privatized records."""

from __future__ import annotations

from collections.abc import Mapping

from schemas.expectations import (
    INTEGER_DTYPES,
    ExpectationSpec,
    ExpectationSuiteSpec,
    finite,
    metric_between,
    metric_suite,
    spec,
)

FILTER_RECORD_COLUMN = "record"
FILTER_CHOICE_COLUMN = "choice"


def filter_output_suites(
    feature_columns: list[str],
    categories: Mapping[str, list[str]],
    bounds: Mapping[str, tuple[float, float] | None],
    integer_columns: list[str],
    utility_classes: Mapping[str, list[str]],
    kept: Mapping[str, str],
    withheld: Mapping[str, list[str]],
    rows: int,
) -> list[ExpectationSuiteSpec]:
    """The privatized records: exactly ``record``, ``choice``, the features and the utility label
    columns; one row per input record (``rows``), record numbers unique; features never null,
    categories from the spec's lists, numbers within the spec's bounds (finite where it has none);
    utility labels from their classes; per choice (``kept``: choice → its utility label column),
    its utility label present on its rows, and the columns of its private label (when another choice
    keeps that label as utility) empty on its rows (``withheld``: choice → columns)."""
    choices = list(kept)
    columns = [FILTER_RECORD_COLUMN, FILTER_CHOICE_COLUMN, *feature_columns, *utility_classes]
    values: list[ExpectationSpec] = [
        spec("expect_table_row_count_to_be_between", f"the release must have {rows} records (one per input record)",
              min_value=rows, max_value=rows),
        spec("expect_column_values_to_be_unique", "a record is released twice", column=FILTER_RECORD_COLUMN),
        spec("expect_column_values_to_be_in_set", "unknown choice", column=FILTER_CHOICE_COLUMN, value_set=choices),
    ]
    for column in feature_columns:
        if column in categories:
            values.append(spec("expect_column_values_to_not_be_null", "privatized value is missing", column=column))
            values.append(spec("expect_column_values_to_be_in_set", "category outside the spec's list",
                                column=column, value_set=list(categories[column])))
        elif bounds.get(column) is not None:
            low, high = bounds[column]  # type: ignore[misc]
            values.append(spec("expect_column_values_to_not_be_null", "privatized value is missing", column=column))
            values.append(spec("expect_column_values_to_be_between", f"value outside the spec's bounds [{low}, {high}]",
                                column=column, min_value=low, max_value=high))
        else:
            values.extend(finite(column, "privatized value"))
    for column, classes in utility_classes.items():
        values.append(spec("expect_column_values_to_be_in_set", "utility label outside its classes",
                            column=column, value_set=list(classes)))
    for choice, column in kept.items():
        values.append(spec("expect_column_values_to_not_be_null", f"utility label missing for choice {choice!r}",
                            row_condition=(FILTER_CHOICE_COLUMN, choice), column=column))
    for choice, hidden in withheld.items():
        for column in hidden:
            values.append(spec("expect_column_values_to_be_null", f"private label released for choice {choice!r}",
                                row_condition=(FILTER_CHOICE_COLUMN, choice), column=column))
    types = [
        spec("expect_column_values_to_be_in_type_list", "values are not integers", column=column,
              type_list=list(INTEGER_DTYPES))
        for column in [FILTER_RECORD_COLUMN, *integer_columns]
    ]
    return [
        ExpectationSuiteSpec(
            "filter_output_columns",
            (spec("expect_table_columns_to_match_set",
                   "the release's columns must be record, choice, the features and the utility labels",
                   column_set=columns, exact_match=True),),
            (),
        ),
        ExpectationSuiteSpec("filter_output_types", tuple(types), ()),
        ExpectationSuiteSpec("filter_output_values", tuple(values), (FILTER_RECORD_COLUMN,)),
    ]


def filter_output_metric_suites(names: list[str], rows: int, bounds: Mapping[str, tuple[float, float] | None],
                                categorical: list[str]) -> list[ExpectationSuiteSpec]:
    """The privatized records' gate on the engine's metrics (issue 15; ``names`` from
    ``pipelines/filter/engine_input.py:output_metric_names``): the checks and words of
    :func:`filter_output_suites` on the rows, each a count that must be 0 (``rows``: exactly
    ``rows`` records)."""
    checks: list[ExpectationSpec] = []
    for name in names:
        column, _, what = name.rpartition(": ")
        if name == "rows":
            checks.append(metric_between(name, f"the release must have {rows} records (one per input record)",
                                         min_value=rows, max_value=rows))
            continue
        if name == "record: repeats":
            message = "a record is released twice"
        elif name == "record: nulls":
            message = "values are not integers"
        elif name == "choice: unknown":
            message = "unknown choice"
        elif what == "nulls":
            message = "privatized value is missing" if column in categorical or bounds.get(column) is not None else (
                "privatized value is missing or not a number (NaN)")
        elif what == "outside":
            message = "category outside the spec's list" if column in categorical else (
                "value outside the spec's bounds [{}, {}]".format(*bounds[column]) if bounds.get(column) else "")
        elif what == "infinite":
            message = "privatized value is infinite"
        elif what == "non-integers":
            message = "values are not integers"
        elif what == "outside classes":
            message = "utility label outside its classes"
        elif what.endswith(" missing"):
            message = f"utility label missing for {column}"
        else:
            message = f"private label released for {column}"
        checks.append(metric_between(name, message, max_value=0))
    return metric_suite("filter_output_metrics", tuple(names), tuple(checks))


FILTER_INPUT_METRICS = ("rows", "fragments_with_a_bad_value")


def filter_input_metric_suites() -> list[ExpectationSuiteSpec]:
    """The filter input gate on the engine's metrics (issue 15): at least one record, and no fragment
    with a bad value (a missing or out-of-domain feature or label, an unknown or missing choice: each
    fragment's task stops at its first, which the failing line names by ``first_row``)."""
    return metric_suite("filter_input_metrics", FILTER_INPUT_METRICS, (
        metric_between("rows", "no rows (empty table)", min_value=1),
        metric_between("fragments_with_a_bad_value", "a value outside its public domain", max_value=0),
    ))
