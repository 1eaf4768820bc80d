"""Expectation suites of an ldp release: the reports and the released estimate."""

from __future__ import annotations

from schemas.expectations import (
    ExpectationSuiteSpec,
    columns_exist,
    finite,
    metric_between,
    metric_suite,
    spec,
)

LDP_OUTPUT_LINE_COLUMNS = ("value", "probability")
LDP_OUTPUT_GRID_COLUMNS = ("row", "col", "probability")


LDP_INPUT_METRICS = (
    "rows", "user_id_nulls", "mechanism_nulls", "report_nulls", "unknown_mechanisms", "repeated_users",
    "boolean_reports", "non_integer_reports", "wrong_length_bit_vectors", "non_bit_vectors",
    "reports_outside_alphabet", "user_id_types",
)
"""The metrics the engine computes over an ldp input (``pipelines/ldp/engine_input.py``): rows read,
rows with each problem, repeated users (rows after a user's first) and how many kinds of user id
(integer, text) the files hold."""


def ldp_input_metric_suites() -> list[ExpectationSuiteSpec]:
    """The ldp input gate on the engine's metrics (issue 15): at least one report; no missing user
    id, mechanism or report; every mechanism in the catalog; one report per user; every report of
    its mechanism's type and inside its output alphabet; one kind of user id. A failing check is
    reported at the first failing row the engine found (``first_row``)."""
    return metric_suite("ldp_input_metrics", LDP_INPUT_METRICS, (
        metric_between("rows", "no rows (empty input)", min_value=1),
        metric_between("user_id_nulls", "user id is missing", max_value=0),
        metric_between("mechanism_nulls", "mechanism is missing", max_value=0),
        metric_between("report_nulls", "report is missing", max_value=0),
        metric_between("unknown_mechanisms", "unknown mechanism: not in the mechanism catalog", max_value=0),
        metric_between("repeated_users", "a user sent more than one report (one report per user)", max_value=0),
        metric_between("boolean_reports", "reports must be integers or bit-vector text, not booleans", max_value=0),
        metric_between("non_integer_reports", "report is not an integer", max_value=0),
        metric_between("wrong_length_bit_vectors", "bit vector of the wrong length", max_value=0),
        metric_between("non_bit_vectors", "report is not a bit vector of 0s and 1s", max_value=0),
        metric_between("reports_outside_alphabet", "report is outside its mechanism's output alphabet", max_value=0),
        metric_between("user_id_types", "user ids are integers in some files and text in others", max_value=1),
    ))


def ldp_output_suites(layout: str, secrets: int) -> list[ExpectationSuiteSpec]:
    """The released estimate: one row per secret (``secrets`` of them), labels not null,
    probabilities finite in [0, 1] and summing to 1 (to 1e-6)."""
    columns = LDP_OUTPUT_GRID_COLUMNS if layout == "grid" else LDP_OUTPUT_LINE_COLUMNS
    labels = columns[:-1]
    return [
        columns_exist("ldp_output_columns", columns, ()),
        ExpectationSuiteSpec(
            "ldp_output_values",
            (
                spec(
                    "expect_table_row_count_to_be_between",
                    f"the estimate must have one row per secret ({secrets})",
                    min_value=secrets,
                    max_value=secrets,
                ),
                *finite("probability", "probability"),
                spec(
                    "expect_column_values_to_be_between",
                    "probability outside [0, 1]",
                    column="probability",
                    min_value=0.0,
                    max_value=1.0,
                ),
                spec(
                    "expect_column_sum_to_be_between",
                    "probabilities do not sum to 1",
                    column="probability",
                    min_value=1.0 - 1e-6,
                    max_value=1.0 + 1e-6,
                ),
                spec(
                    "expect_compound_columns_to_be_unique" if len(labels) > 1 else "expect_column_values_to_be_unique",
                    "a secret is listed twice",
                    **({"column_list": list(labels)} if len(labels) > 1 else {"column": labels[0]}),
                ),
            ),
            labels,
        ),
    ]
