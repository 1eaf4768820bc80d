"""The ldp release's validation gate: the engine's metrics of the reports before estimation, the
estimate before it is published."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from pipelines.platform.validation import ValidationResult, run_suites, validate_metrics
from schemas.ldp.expectations import ldp_input_metric_suites, ldp_output_suites


def validate_ldp_metrics(metrics: Mapping[str, Any], file_name: str) -> ValidationResult:
    """Check the metrics the engine computed over the reports (``schemas/ldp/expectations.py``,
    ``LDP_INPUT_METRICS``): rows, problems per kind, repeated users, kinds of user id."""
    return validate_metrics(metrics, ldp_input_metric_suites(), "input", file_name)


def validate_ldp_output(estimate: pd.DataFrame, *, layout: str, secrets: int) -> ValidationResult:
    """Check the released estimate before it is published."""
    return run_suites(estimate, ldp_output_suites(layout, secrets), "output")
