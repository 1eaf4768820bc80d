"""Expectation suites of a crowd release: the input claims and the released claims and objects."""

from __future__ import annotations

from schemas.expectations import (
    INTEGER_DTYPES,
    ROW_NUMBER,
    ExpectationSpec,
    ExpectationSuiteSpec,
    columns_exist,
    finite,
    metric_between,
    metric_suite,
    spec,
)

DUPLICATES_POLICIES = ("reject", "keep_last", "mean")

CROWD_INPUT_COLUMNS = ("object_id", "source_id", "value")
CROWD_OUTPUT_CLAIMS_COLUMNS = ("object_id", "claim_index", "value")
CROWD_OUTPUT_OBJECTS_COLUMNS = ("object_id", "claims", "released", "suppressed")
RELEASED_CLAIMS_COLUMN = "released_claims"
LISTED_COLUMN = "listed"


def crowd_input_suites(duplicates_policy: str) -> list[ExpectationSuiteSpec]:
    """Input claims ``(object_id, source_id, value)`` of a crowd release (issue 2, "Bad input"):
    columns present; value a float64 column; at least one claim; ids not null; values finite;
    and, when the duplicates policy is ``reject``, at most one claim per (object, source)."""
    if duplicates_policy not in DUPLICATES_POLICIES:
        raise ValueError(
            f"duplicates policy must be one of {', '.join(DUPLICATES_POLICIES)}, got {duplicates_policy!r}"
        )
    index = (ROW_NUMBER,)
    values: list[ExpectationSpec] = [
        spec("expect_table_row_count_to_be_between", "the input has no claims", min_value=1),
        spec("expect_column_values_to_not_be_null", "object id is null", column="object_id"),
        spec("expect_column_values_to_not_be_null", "source id is null", column="source_id"),
        *finite("value", "value"),
    ]
    if duplicates_policy == "reject":
        values.append(
            spec(
                "expect_compound_columns_to_be_unique",
                "duplicate claim: the same source claimed this object before (duplicates policy 'reject')",
                column_list=["object_id", "source_id"],
            )
        )
    return [
        columns_exist("crowd_input_columns", CROWD_INPUT_COLUMNS, index),
        ExpectationSuiteSpec(
            "crowd_input_types",
            (spec("expect_column_values_to_be_of_type", "values are not float64 numbers", column="value", type_="float64"),),
            index,
        ),
        ExpectationSuiteSpec("crowd_input_values", tuple(values), index),
    ]


def crowd_output_claims_suites(claims_per_object: int) -> list[ExpectationSuiteSpec]:
    """Synthetic claims ``(object_id, claim_index, value)``: columns and types, ids not null,
    values finite, ``claim_index`` in ``[0, m)`` with ``m = claims_per_object``."""
    index = ("object_id", "claim_index")
    return [
        columns_exist("crowd_output_claims_columns", CROWD_OUTPUT_CLAIMS_COLUMNS, ()),
        ExpectationSuiteSpec(
            "crowd_output_claims_types",
            (
                spec("expect_column_values_to_be_of_type", "values are not float64 numbers", column="value", type_="float64"),
                spec(
                    "expect_column_values_to_be_in_type_list",
                    "claim indices are not integers",
                    column="claim_index",
                    type_list=list(INTEGER_DTYPES),
                ),
            ),
            (),
        ),
        ExpectationSuiteSpec(
            "crowd_output_claims_values",
            (
                spec("expect_column_values_to_not_be_null", "object id is null", column="object_id"),
                *finite("value", "synthetic value"),
                spec(
                    "expect_column_values_to_be_between",
                    f"claim index outside [0, {claims_per_object})",
                    column="claim_index",
                    min_value=0,
                    max_value=claims_per_object - 1,
                ),
            ),
            index,
        ),
    ]


def crowd_output_objects_suites() -> list[ExpectationSuiteSpec]:
    """The per-object table of a crowd release ``(object_id, claims, released, suppressed)``:
    columns and types (``claims`` = number of input claims, two boolean flags)."""
    return [
        columns_exist("crowd_output_objects_columns", CROWD_OUTPUT_OBJECTS_COLUMNS, ()),
        ExpectationSuiteSpec(
            "crowd_output_objects_types",
            (
                spec(
                    "expect_column_values_to_be_in_type_list",
                    "input claim counts are not integers",
                    column="claims",
                    type_list=list(INTEGER_DTYPES),
                ),
                spec("expect_column_values_to_be_of_type", "flags are not booleans", column="released", type_="bool"),
                spec("expect_column_values_to_be_of_type", "flags are not booleans", column="suppressed", type_="bool"),
                spec("expect_column_values_to_be_unique", "object listed more than once", column="object_id"),
            ),
            ("object_id",),
        ),
    ]


def crowd_output_per_object_suite(claims_per_object: int, k: int) -> ExpectationSuiteSpec:
    """Checks on the per-object frame ``(object_id, claims, released, suppressed,
    released_claims, listed)`` built by counting the synthetic claims per object (Algorithm 1
    of PrisCrowd releases at most ``m`` claims per object; objects with fewer than ``k`` input
    claims are suppressed and must not appear)."""
    return ExpectationSuiteSpec(
        "crowd_output_per_object",
        (
            spec(
                "expect_column_values_to_be_between",
                f"object has more than m = {claims_per_object} synthetic claims",
                column=RELEASED_CLAIMS_COLUMN,
                min_value=0,
                max_value=claims_per_object,
            ),
            spec(
                "expect_column_values_to_be_between",
                f"object is released with fewer than k = {k} input claims",
                row_condition=("released", True),
                column="claims",
                min_value=k,
            ),
            spec(
                "expect_column_values_to_be_between",
                "suppressed object has synthetic claims in the release",
                row_condition=("suppressed", True),
                column=RELEASED_CLAIMS_COLUMN,
                max_value=0,
            ),
            spec(
                "expect_column_values_to_be_between",
                "object not marked released has synthetic claims in the release",
                row_condition=("released", False),
                column=RELEASED_CLAIMS_COLUMN,
                max_value=0,
            ),
            spec(
                "expect_column_values_to_be_in_set",
                "object is marked both released and suppressed",
                row_condition=("released", True),
                column="suppressed",
                value_set=[False],
            ),
            spec(
                "expect_column_values_to_be_in_set",
                "synthetic claims of an object missing from the object table",
                column=LISTED_COLUMN,
                value_set=[True],
            ),
        ),
        ("object_id",),
    )


CROWD_INPUT_METRICS = (
    "rows", "boolean_object_ids", "fractional_object_ids", "boolean_source_ids", "fractional_source_ids",
    "boolean_values", "non_numeric_values", "object_id_nulls", "source_id_nulls", "missing_values",
    "infinite_values", "duplicate_claims",
)
"""The metrics the engine computes over a crowd input (``pipelines/crowd/engine_input.py``): rows
read and rows with each problem, in the order the checks report them."""


def crowd_input_metric_suites(duplicates_policy: str) -> list[ExpectationSuiteSpec]:
    """The crowd input gate on the engine's metrics (issue 15): at least one claim; ids integers or
    text, values numbers; no null id; every value finite; and, with the duplicates policy
    ``reject``, at most one claim per (object, source). A failing check is reported at its first
    failing row, which the engine located."""
    if duplicates_policy not in DUPLICATES_POLICIES:
        raise ValueError(
            f"duplicates policy must be one of {', '.join(DUPLICATES_POLICIES)}, got {duplicates_policy!r}"
        )
    checks = [
        metric_between("rows", "no rows (empty input)", min_value=1),
        metric_between("boolean_object_ids", "identifiers must be integers or text, not booleans", max_value=0),
        metric_between("fractional_object_ids", "identifiers must be integers or text, not fractional numbers",
                       max_value=0),
        metric_between("boolean_source_ids", "identifiers must be integers or text, not booleans", max_value=0),
        metric_between("fractional_source_ids", "identifiers must be integers or text, not fractional numbers",
                       max_value=0),
        metric_between("boolean_values", "values must be numbers, not booleans", max_value=0),
        metric_between("non_numeric_values", "value is not a number", max_value=0),
        metric_between("object_id_nulls", "object id is null", max_value=0),
        metric_between("source_id_nulls", "source id is null", max_value=0),
        metric_between("missing_values", "value is missing or not a number (NaN)", max_value=0),
        metric_between("infinite_values", "value is infinite", max_value=0),
    ]
    if duplicates_policy == "reject":
        checks.append(metric_between(
            "duplicate_claims",
            "duplicate claim: the same source claimed this object before (duplicates policy 'reject')", max_value=0))
    return metric_suite("crowd_input_metrics", CROWD_INPUT_METRICS, tuple(checks))


CROWD_OUTPUT_METRICS = (
    "released_claims", "objects", "objects_released", "objects_suppressed", "objects_above_m_claims",
    "released_objects_below_k", "suppressed_objects_with_claims", "unreleased_objects_with_claims",
    "objects_released_and_suppressed", "objects_missing_from_the_object_table", "objects_listed_twice",
    "null_object_ids", "non_finite_values", "claim_indices_outside_m",
)
"""The metrics the engine computes over a crowd release's outcome (released claims and the object
table), per block of whole objects, summed."""


def crowd_output_metric_suites(claims_per_object: int, k: int) -> list[ExpectationSuiteSpec]:
    """The crowd output gate on the engine's metrics: the checks of :func:`crowd_output_claims_suites`
    and :func:`crowd_output_per_object_suite`, counted over the outcome where it lives."""
    return metric_suite("crowd_output_metrics", CROWD_OUTPUT_METRICS, (
        metric_between("null_object_ids", "object id is null", max_value=0),
        metric_between("non_finite_values", "synthetic value is missing, not a number or infinite", max_value=0),
        metric_between("claim_indices_outside_m", f"claim index outside [0, {claims_per_object})", max_value=0),
        metric_between("objects_listed_twice", "object listed more than once", max_value=0),
        metric_between("objects_above_m_claims", f"object has more than m = {claims_per_object} synthetic claims",
                       max_value=0),
        metric_between("released_objects_below_k", f"object is released with fewer than k = {k} input claims",
                       max_value=0),
        metric_between("suppressed_objects_with_claims", "suppressed object has synthetic claims in the release",
                       max_value=0),
        metric_between("unreleased_objects_with_claims",
                       "object not marked released has synthetic claims in the release", max_value=0),
        metric_between("objects_released_and_suppressed", "object is marked both released and suppressed",
                       max_value=0),
        metric_between("objects_missing_from_the_object_table",
                       "synthetic claims of an object missing from the object table", max_value=0),
    ))
