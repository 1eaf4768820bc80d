"""Arrow schemas of the tables the release kinds read and write."""

from __future__ import annotations

import pyarrow as pa

ROW_NUMBER = "row_number"


def claims_schema(object_id_type: pa.DataType, source_id_type: pa.DataType) -> pa.Schema:
    """Canonical input claims: ``(object_id, source_id, value)`` after the column mapping."""
    return pa.schema(
        [
            pa.field("object_id", object_id_type, nullable=False),
            pa.field("source_id", source_id_type, nullable=False),
            pa.field("value", pa.float64(), nullable=False),
        ]
    )


def synthetic_claims_schema(object_id_type: pa.DataType) -> pa.Schema:
    """Released rows of a crowd release: one row per synthetic claim."""
    return pa.schema(
        [
            pa.field("object_id", object_id_type, nullable=False),
            pa.field("claim_index", pa.int32(), nullable=False),
            pa.field("value", pa.float64(), nullable=False),
        ]
    )


def synthesis_outcome_schema(object_id_type: pa.DataType) -> pa.Schema:
    """What one synthesis pass returns per object: its released claims and one summary row.

    ``claim_index >= 0`` rows are synthetic claims; the row with ``claim_index == -1`` is the
    object's summary (input claim count, released, attempts, suppression reason). Summary rows
    never leave the driver.
    """
    return pa.schema(
        [
            pa.field("object_id", object_id_type),
            pa.field("claim_index", pa.int32()),
            pa.field("value", pa.float64()),
            pa.field("claims", pa.int64()),
            pa.field("released", pa.int64()),
            pa.field("attempts", pa.int64()),
            pa.field("suppressed", pa.bool_()),
            pa.field("reason", pa.string()),
        ]
    )


SOURCE_LOSS_SCHEMA_FIELDS = [("loss_fixed", pa.int64()), ("objects", pa.int64())]


def source_loss_schema(source_id_type: pa.DataType) -> pa.Schema:
    """Per-source partial sums of one global-weights iteration (map-by-object output)."""
    return pa.schema([pa.field("source_id", source_id_type)] + [pa.field(n, t) for n, t in SOURCE_LOSS_SCHEMA_FIELDS])


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
