"""Arrow schemas of the tables a crowd release reads, stages and writes."""

from __future__ import annotations

import pyarrow as pa


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
    object's summary (input claim count, released, attempts, fallback and capped slots,
    suppression reason). Summary rows never leave the driver (operator figures).
    """
    return pa.schema(
        [
            pa.field("object_id", object_id_type),
            pa.field("claim_index", pa.int32()),
            pa.field("value", pa.float64()),
            pa.field("claims", pa.int64()),
            pa.field("released", pa.int64()),
            pa.field("attempts", pa.int64()),
            pa.field("fallbacks", pa.int64()),
            pa.field("capped", pa.int64()),
            pa.field("suppressed", pa.bool_()),
            pa.field("reason", pa.string()),
        ]
    )


SOURCE_LOSS_SCHEMA_FIELDS = [("loss_fixed", pa.int64()), ("objects", pa.int64())]


def source_loss_schema(source_id_type: pa.DataType) -> pa.Schema:
    """Per-source partial sums of one global-weights iteration (map-by-object output)."""
    return pa.schema([pa.field("source_id", source_id_type)] + [pa.field(n, t) for n, t in SOURCE_LOSS_SCHEMA_FIELDS])
