"""Expectation suites of the validation gate, as data (DESIGN.md, "Releases and the lake").

Each suite is a list of Great Expectations 1.x expectation types with their arguments and the
plain-language message a user sees when a row fails it. ``pipelines.validation`` turns them
into GX expectations, runs them and writes one line per failing expectation. Nothing here
imports Great Expectations or computes anything.

A check runs in *stages*: the suites of a frame are run in order and the next suite runs only
if the previous one passed (a missing column would otherwise make every later expectation on
it fail or raise, burying the real problem).

Finite values: GX 1.x has no "finite" expectation. ``expect_column_values_to_be_between``
with the float64 finite bounds ``±1.7976931348623157e308`` fails ``±inf``; NaN counts as
*missing* for that expectation, so ``expect_column_values_to_not_be_null`` (which does fail
NaN in pandas) is paired with it. Together they accept exactly the finite floats.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

FLOAT64_MAX = sys.float_info.max
INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
DUPLICATES_POLICIES = ("reject", "keep_last", "mean")

CROWD_INPUT_COLUMNS = ("object_id", "source_id", "value")
CROWD_OUTPUT_CLAIMS_COLUMNS = ("object_id", "claim_index", "value")
CROWD_OUTPUT_OBJECTS_COLUMNS = ("object_id", "claims", "released", "suppressed")
ROW_NUMBER_COLUMN = "row_number"
RELEASED_CLAIMS_COLUMN = "released_claims"
LISTED_COLUMN = "listed"


@dataclass(frozen=True)
class ExpectationSpec:
    """One GX expectation: its type (e.g. ``expect_column_values_to_not_be_null``), keyword
    arguments, the message for a failing row, and, optionally, a row condition
    ``(column, value)`` restricting it to rows where ``column == value``."""

    expectation_type: str
    kwargs: Mapping[str, Any]
    message: str
    row_condition: tuple[str, Any] | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns the expectation is about (for naming them in issues)."""
        if "column" in self.kwargs:
            return (self.kwargs["column"],)
        return tuple(self.kwargs.get("column_list", ()))


@dataclass(frozen=True)
class ExpectationSuiteSpec:
    """A stage of checks on one frame; ``index_columns`` identify an offending row in issues
    (``row_number``: the 1-based data row of the input file; else e.g. the object id)."""

    name: str
    expectations: tuple[ExpectationSpec, ...]
    index_columns: tuple[str, ...] = field(default=())


def _spec(expectation_type: str, message: str, row_condition: tuple[str, Any] | None = None, **kwargs: Any) -> ExpectationSpec:
    return ExpectationSpec(expectation_type, MappingProxyType(kwargs), message, row_condition)


def _columns_exist(name: str, columns: tuple[str, ...], index_columns: tuple[str, ...]) -> ExpectationSuiteSpec:
    return ExpectationSuiteSpec(
        name,
        tuple(_spec("expect_column_to_exist", "required column not found", column=column) for column in columns),
        index_columns,
    )


def _finite(column: str, what: str) -> tuple[ExpectationSpec, ExpectationSpec]:
    return (
        _spec("expect_column_values_to_not_be_null", f"{what} is missing or not a number (NaN)", column=column),
        _spec(
            "expect_column_values_to_be_between",
            f"{what} is infinite",
            column=column,
            min_value=-FLOAT64_MAX,
            max_value=FLOAT64_MAX,
        ),
    )


def crowd_input_suites(duplicates_policy: str) -> list[ExpectationSuiteSpec]:
    """Input claims ``(object_id, source_id, value)`` of a crowd release (issue 2, "Bad input"):
    columns present; value a float64 column; at least one claim; ids not null; values finite;
    and, when the duplicates policy is ``reject``, at most one claim per (object, source)."""
    if duplicates_policy not in DUPLICATES_POLICIES:
        raise ValueError(
            f"duplicates policy must be one of {', '.join(DUPLICATES_POLICIES)}, got {duplicates_policy!r}"
        )
    index = (ROW_NUMBER_COLUMN,)
    values: list[ExpectationSpec] = [
        _spec("expect_table_row_count_to_be_between", "the input has no claims", min_value=1),
        _spec("expect_column_values_to_not_be_null", "object id is null", column="object_id"),
        _spec("expect_column_values_to_not_be_null", "source id is null", column="source_id"),
        *_finite("value", "value"),
    ]
    if duplicates_policy == "reject":
        values.append(
            _spec(
                "expect_compound_columns_to_be_unique",
                "duplicate claim: the same source claimed this object before (duplicates policy 'reject')",
                column_list=["object_id", "source_id"],
            )
        )
    return [
        _columns_exist("crowd_input_columns", CROWD_INPUT_COLUMNS, index),
        ExpectationSuiteSpec(
            "crowd_input_types",
            (_spec("expect_column_values_to_be_of_type", "values are not float64 numbers", column="value", type_="float64"),),
            index,
        ),
        ExpectationSuiteSpec("crowd_input_values", tuple(values), index),
    ]


def crowd_output_claims_suites(claims_per_object: int) -> list[ExpectationSuiteSpec]:
    """Synthetic claims ``(object_id, claim_index, value)``: columns and types, ids not null,
    values finite, ``claim_index`` in ``[0, m)`` with ``m = claims_per_object``."""
    index = ("object_id", "claim_index")
    return [
        _columns_exist("crowd_output_claims_columns", CROWD_OUTPUT_CLAIMS_COLUMNS, ()),
        ExpectationSuiteSpec(
            "crowd_output_claims_types",
            (
                _spec("expect_column_values_to_be_of_type", "values are not float64 numbers", column="value", type_="float64"),
                _spec(
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
                _spec("expect_column_values_to_not_be_null", "object id is null", column="object_id"),
                *_finite("value", "synthetic value"),
                _spec(
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
        _columns_exist("crowd_output_objects_columns", CROWD_OUTPUT_OBJECTS_COLUMNS, ()),
        ExpectationSuiteSpec(
            "crowd_output_objects_types",
            (
                _spec(
                    "expect_column_values_to_be_in_type_list",
                    "input claim counts are not integers",
                    column="claims",
                    type_list=list(INTEGER_DTYPES),
                ),
                _spec("expect_column_values_to_be_of_type", "flags are not booleans", column="released", type_="bool"),
                _spec("expect_column_values_to_be_of_type", "flags are not booleans", column="suppressed", type_="bool"),
                _spec("expect_column_values_to_be_unique", "object listed more than once", column="object_id"),
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
            _spec(
                "expect_column_values_to_be_between",
                f"object has more than m = {claims_per_object} synthetic claims",
                column=RELEASED_CLAIMS_COLUMN,
                min_value=0,
                max_value=claims_per_object,
            ),
            _spec(
                "expect_column_values_to_be_between",
                f"object is released with fewer than k = {k} input claims",
                row_condition=("released", True),
                column="claims",
                min_value=k,
            ),
            _spec(
                "expect_column_values_to_be_between",
                "suppressed object has synthetic claims in the release",
                row_condition=("suppressed", True),
                column=RELEASED_CLAIMS_COLUMN,
                max_value=0,
            ),
            _spec(
                "expect_column_values_to_be_between",
                "object not marked released has synthetic claims in the release",
                row_condition=("released", False),
                column=RELEASED_CLAIMS_COLUMN,
                max_value=0,
            ),
            _spec(
                "expect_column_values_to_be_in_set",
                "object is marked both released and suppressed",
                row_condition=("released", True),
                column="suppressed",
                value_set=[False],
            ),
            _spec(
                "expect_column_values_to_be_in_set",
                "synthetic claims of an object missing from the object table",
                column=LISTED_COLUMN,
                value_set=[True],
            ),
        ),
        ("object_id",),
    )


LDP_INPUT_COLUMNS = ("user_id", "mechanism", "report")
LDP_OUTPUT_LINE_COLUMNS = ("value", "probability")
LDP_OUTPUT_GRID_COLUMNS = ("row", "col", "probability")


def ldp_input_suites(mechanism_names: list[str]) -> list[ExpectationSuiteSpec]:
    """Reports ``(user_id, mechanism, report)`` of an ldp release (issue 4, "On the platform"):
    columns present; at least one report; nothing null; one report per user; every mechanism
    named in the catalog. (Whether a report lies in its mechanism's output alphabet is checked
    per mechanism by the reader, which knows the alphabets.)"""
    index = (ROW_NUMBER_COLUMN,)
    return [
        _columns_exist("ldp_input_columns", LDP_INPUT_COLUMNS, index),
        ExpectationSuiteSpec(
            "ldp_input_values",
            (
                _spec("expect_table_row_count_to_be_between", "the input has no reports", min_value=1),
                _spec("expect_column_values_to_not_be_null", "user id is missing", column="user_id"),
                _spec("expect_column_values_to_not_be_null", "mechanism is missing", column="mechanism"),
                _spec("expect_column_values_to_not_be_null", "report is missing", column="report"),
                _spec(
                    "expect_column_values_to_be_in_set",
                    "unknown mechanism: not in the mechanism catalog",
                    column="mechanism",
                    value_set=list(mechanism_names),
                ),
                _spec(
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
        _columns_exist("ldp_output_columns", columns, ()),
        ExpectationSuiteSpec(
            "ldp_output_values",
            (
                _spec(
                    "expect_table_row_count_to_be_between",
                    f"the estimate must have one row per secret ({secrets})",
                    min_value=secrets,
                    max_value=secrets,
                ),
                *_finite("probability", "probability"),
                _spec(
                    "expect_column_values_to_be_between",
                    "probability outside [0, 1]",
                    column="probability",
                    min_value=0.0,
                    max_value=1.0,
                ),
                _spec(
                    "expect_column_sum_to_be_between",
                    "probabilities do not sum to 1",
                    column="probability",
                    min_value=1.0 - 1e-6,
                    max_value=1.0 + 1e-6,
                ),
                _spec(
                    "expect_compound_columns_to_be_unique" if len(labels) > 1 else "expect_column_values_to_be_unique",
                    "a secret is listed twice",
                    **({"column_list": list(labels)} if len(labels) > 1 else {"column": labels[0]}),
                ),
            ),
            labels,
        ),
    ]


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
        _spec("expect_table_row_count_to_be_between", f"the release must have {rows} records",
              min_value=rows, max_value=rows),
    ]
    for column in columns:
        values.append(_spec("expect_column_values_to_not_be_null", "synthetic value is missing", column=column))
        if column in categories:
            values.append(_spec("expect_column_values_to_be_in_set", "category outside the schema's list",
                                column=column, value_set=list(categories[column])))
        else:
            low, high = bounds[column]
            values.append(_spec("expect_column_values_to_be_between", f"value outside the schema's bounds [{low}, {high}]",
                                column=column, min_value=low, max_value=high))
    types = [
        _spec("expect_column_values_to_be_in_type_list", "values are not integers", column=column,
              type_list=list(INTEGER_DTYPES))
        for column in integer_columns
    ]
    return [
        ExpectationSuiteSpec(
            "tabular_output_columns",
            (_spec("expect_table_columns_to_match_set", "the release's columns must be exactly the schema's",
                   column_set=list(columns), exact_match=True),),
            (),
        ),
        ExpectationSuiteSpec("tabular_output_types", tuple(types), ()),
        ExpectationSuiteSpec("tabular_output_values", tuple(values), ()),
    ]


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
        _spec("expect_table_row_count_to_be_between", f"the release must have {rows} records (one per input record)",
              min_value=rows, max_value=rows),
        _spec("expect_column_values_to_be_unique", "a record is released twice", column=FILTER_RECORD_COLUMN),
        _spec("expect_column_values_to_be_in_set", "unknown choice", column=FILTER_CHOICE_COLUMN, value_set=choices),
    ]
    for column in feature_columns:
        if column in categories:
            values.append(_spec("expect_column_values_to_not_be_null", "privatized value is missing", column=column))
            values.append(_spec("expect_column_values_to_be_in_set", "category outside the spec's list",
                                column=column, value_set=list(categories[column])))
        elif bounds.get(column) is not None:
            low, high = bounds[column]  # type: ignore[misc]
            values.append(_spec("expect_column_values_to_not_be_null", "privatized value is missing", column=column))
            values.append(_spec("expect_column_values_to_be_between", f"value outside the spec's bounds [{low}, {high}]",
                                column=column, min_value=low, max_value=high))
        else:
            values.extend(_finite(column, "privatized value"))
    for column, classes in utility_classes.items():
        values.append(_spec("expect_column_values_to_be_in_set", "utility label outside its classes",
                            column=column, value_set=list(classes)))
    for choice, column in kept.items():
        values.append(_spec("expect_column_values_to_not_be_null", f"utility label missing for choice {choice!r}",
                            row_condition=(FILTER_CHOICE_COLUMN, choice), column=column))
    for choice, hidden in withheld.items():
        for column in hidden:
            values.append(_spec("expect_column_values_to_be_null", f"private label released for choice {choice!r}",
                                row_condition=(FILTER_CHOICE_COLUMN, choice), column=column))
    types = [
        _spec("expect_column_values_to_be_in_type_list", "values are not integers", column=column,
              type_list=list(INTEGER_DTYPES))
        for column in [FILTER_RECORD_COLUMN, *integer_columns]
    ]
    return [
        ExpectationSuiteSpec(
            "filter_output_columns",
            (_spec("expect_table_columns_to_match_set",
                   "the release's columns must be record, choice, the features and the utility labels",
                   column_set=columns, exact_match=True),),
            (),
        ),
        ExpectationSuiteSpec("filter_output_types", tuple(types), ()),
        ExpectationSuiteSpec("filter_output_values", tuple(values), (FILTER_RECORD_COLUMN,)),
    ]
