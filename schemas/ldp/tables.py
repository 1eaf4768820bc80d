"""Arrow schemas of the tables an ldp release stages and writes."""

from __future__ import annotations

import pyarrow as pa

LDP_MECHANISM_CODE = "mechanism_code"


def ldp_reports_schema(bit_vectors: bool) -> pa.Schema:
    """Canonical staged reports of an ldp release: the mechanism's index in the sorted catalog and
    the report, an integer index into the mechanism's output alphabet, or for RAPPOR the bit
    vector as a string of ``0``/``1`` characters (bit ``x`` is character ``x``)."""
    return pa.schema(
        [
            pa.field(LDP_MECHANISM_CODE, pa.int32(), nullable=False),
            pa.field("report", pa.string() if bit_vectors else pa.int64(), nullable=False),
        ]
    )


def ldp_report_counts_schema(bit_vectors: bool) -> pa.Schema:
    """Per-batch partial counts of users per (mechanism, report), keyed for ``sum_by_key``: an
    int64 key ``mechanism_code * output_stride + report``, or for bit vectors the string key
    ``"<mechanism_code>:<bits>"``."""
    return pa.schema(
        [
            pa.field("report_key", pa.string() if bit_vectors else pa.int64(), nullable=False),
            pa.field("users", pa.int64(), nullable=False),
        ]
    )


def ldp_bit_sums_schema() -> pa.Schema:
    """Per-batch partial RAPPOR sums for ``RAP_M``, keyed ``mechanism_code * (k + 1) + x``: for
    ``x < k`` the number of reports with bit ``x`` set, for ``x = k`` the mechanism's users."""
    return pa.schema(
        [
            pa.field("bit_key", pa.int64(), nullable=False),
            pa.field("users", pa.int64(), nullable=False),
        ]
    )


def ldp_estimate_schema(layout: str) -> pa.Schema:
    """The released estimate: ``(value, probability)`` on a line, ``(row, col, probability)`` on a grid."""
    labels = (
        [pa.field("row", pa.int32(), nullable=False), pa.field("col", pa.int32(), nullable=False)]
        if layout == "grid"
        else [pa.field("value", pa.int64(), nullable=False)]
    )
    return pa.schema([*labels, pa.field("probability", pa.float64(), nullable=False)])
