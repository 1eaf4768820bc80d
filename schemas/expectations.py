"""Expectation suites of the validation gate, as data (DESIGN.md, "Releases and the lake").

Each suite is a list of Great Expectations 1.x expectation types with their arguments and the
plain-language message a user sees when a row fails it. ``pipelines.platform.validation`` turns them
into GX expectations, runs them and writes one line per failing expectation. Nothing here
imports Great Expectations or computes anything. This module holds what the suites share; each
kind's suites live in its package (``schemas/crowd/expectations.py``, …).

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

from schemas.tables import ROW_NUMBER

FLOAT64_MAX = sys.float_info.max
INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


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


def spec(expectation_type: str, message: str, row_condition: tuple[str, Any] | None = None, **kwargs: Any) -> ExpectationSpec:
    return ExpectationSpec(expectation_type, MappingProxyType(kwargs), message, row_condition)


def columns_exist(name: str, columns: tuple[str, ...], index_columns: tuple[str, ...]) -> ExpectationSuiteSpec:
    return ExpectationSuiteSpec(
        name,
        tuple(spec("expect_column_to_exist", "required column not found", column=column) for column in columns),
        index_columns,
    )


def finite(column: str, what: str) -> tuple[ExpectationSpec, ExpectationSpec]:
    return (
        spec("expect_column_values_to_not_be_null", f"{what} is missing or not a number (NaN)", column=column),
        spec(
            "expect_column_values_to_be_between",
            f"{what} is infinite",
            column=column,
            min_value=-FLOAT64_MAX,
            max_value=FLOAT64_MAX,
        ),
    )


__all__ = ["ROW_NUMBER", "FLOAT64_MAX", "INTEGER_DTYPES", "ExpectationSpec", "ExpectationSuiteSpec", "spec", "columns_exist", "finite"]


METRICS_ROW = "metrics_row"
"""The index column of an engine-metrics frame (one row; ``pipelines/platform/validation.py``,
``validate_metrics``)."""


def metric_between(metric: str, message: str, min_value: float | None = None,
                   max_value: float | None = None) -> ExpectationSpec:
    """A check on one metric an engine computed over a whole input (a count of rows, nulls, bad
    values, repeats...): its value lies in ``[min_value, max_value]``."""
    return spec("expect_column_values_to_be_between", message, column=metric, min_value=min_value,
                max_value=max_value)


def metric_suite(name: str, metrics: tuple[str, ...], checks: tuple[ExpectationSpec, ...]) -> list[ExpectationSuiteSpec]:
    """The stages that validate an engine-metrics frame: every metric present, then ``checks``."""
    return [columns_exist(f"{name}_present", metrics, (METRICS_ROW,)),
            ExpectationSuiteSpec(name, checks, (METRICS_ROW,))]
