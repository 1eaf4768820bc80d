"""Expectation suites of an ldp release: the reports and the released estimate."""

from __future__ import annotations

from schemas.expectations import ROW_NUMBER, ExpectationSuiteSpec, columns_exist, finite, spec

LDP_INPUT_COLUMNS = ("user_id", "mechanism", "report")
LDP_OUTPUT_LINE_COLUMNS = ("value", "probability")
LDP_OUTPUT_GRID_COLUMNS = ("row", "col", "probability")


def ldp_input_suites(mechanism_names: list[str]) -> list[ExpectationSuiteSpec]:
    """Reports ``(user_id, mechanism, report)`` of an ldp release (issue 4, "On the platform"):
    columns present; at least one report; nothing null; one report per user; every mechanism
    named in the catalog. (Whether a report lies in its mechanism's output alphabet is checked
    per mechanism by the reader, which knows the alphabets.)"""
    index = (ROW_NUMBER,)
    return [
        columns_exist("ldp_input_columns", LDP_INPUT_COLUMNS, index),
        ExpectationSuiteSpec(
            "ldp_input_values",
            (
                spec("expect_table_row_count_to_be_between", "the input has no reports", min_value=1),
                spec("expect_column_values_to_not_be_null", "user id is missing", column="user_id"),
                spec("expect_column_values_to_not_be_null", "mechanism is missing", column="mechanism"),
                spec("expect_column_values_to_not_be_null", "report is missing", column="report"),
                spec(
                    "expect_column_values_to_be_in_set",
                    "unknown mechanism: not in the mechanism catalog",
                    column="mechanism",
                    value_set=list(mechanism_names),
                ),
                spec(
                    "expect_column_values_to_be_unique",
                    "a user sent more than one report (one report per user)",
                    column="user_id",
                ),
            ),
            index,
        ),
    ]


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
