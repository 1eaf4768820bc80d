"""Expectation suites of a tabular release: the released synthetic records."""

from __future__ import annotations

from collections.abc import Mapping

from schemas.expectations import INTEGER_DTYPES, ExpectationSpec, ExpectationSuiteSpec, spec


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
