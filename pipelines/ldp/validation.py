"""The ldp release's validation gate: the reports before estimation, the estimate before it is published."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from pipelines.platform.validation import ValidationResult, run_suites, with_row_numbers
from schemas.ldp.expectations import ldp_input_suites, ldp_output_suites


def validate_ldp_input(frame: pd.DataFrame, *, file_name: str, mechanism_names: list[str],
                       column_names: Mapping[str, str] | None = None) -> ValidationResult:
    """Check ldp reports (``user_id, mechanism, report`` and ``row_number``): columns, nulls, one
    report per user, mechanisms named in the catalog. Issues use the file's column names."""
    return run_suites(with_row_numbers(frame), ldp_input_suites(mechanism_names), "input", file_name, column_names)


def validate_ldp_output(estimate: pd.DataFrame, *, layout: str, secrets: int) -> ValidationResult:
    """Check the released estimate before it is published."""
    return run_suites(estimate, ldp_output_suites(layout, secrets), "output")
