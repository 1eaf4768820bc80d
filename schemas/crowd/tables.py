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


SOURCE_LOSS_SCHEMA_FIELDS = [("loss_fixed", pa.int64()), ("objects", pa.int64())]


def source_loss_schema(source_id_type: pa.DataType) -> pa.Schema:
    """Per-source partial sums of one global-weights iteration (map-by-object output)."""
    return pa.schema([pa.field("source_id", source_id_type)] + [pa.field(n, t) for n, t in SOURCE_LOSS_SCHEMA_FIELDS])


ROW_ID = "ROW_ID"
"""The platform's row identifier (``pipelines/platform/sources.py``): ``fragment << 40 | row``."""


def crowd_input_summary_schema() -> pa.Schema:
    """What one input fragment's task returns (``pipelines/crowd/engine_input.py``, pass 1):
    metrics (``code``, ``count``, the first failing row's ``ROW_ID``) and the fragment's
    fingerprint: a few rows, collected (its distinct sources go to a file beside its claims)."""
    return pa.schema([
        pa.field("entry", pa.int32(), nullable=False),
        pa.field("code", pa.int32(), nullable=False),
        pa.field(ROW_ID, pa.int64()),
        pa.field("count", pa.int64(), nullable=False),
        pa.field("fingerprint", pa.string()),
    ])


def crowd_sources_schema(source_id_type: pa.DataType) -> pa.Schema:
    """Distinct source ids with a count (the engine's distinct over the fragments' source files)."""
    return pa.schema([pa.field("source_id", source_id_type), pa.field("count", pa.int64())])


def crowd_group_summary_schema() -> pa.Schema:
    """What one object bucket's task returns (pass 2: duplicates, clipping, per-object counts):
    metrics with a first ``ROW_ID`` and a ``detail`` (the earlier row of a duplicate, the claims of
    a small object), per-source object counts (``key`` = source code) and the staged file's rows
    (``key`` = bucket)."""
    return pa.schema([
        pa.field("entry", pa.int32(), nullable=False),
        pa.field("code", pa.int32(), nullable=False),
        pa.field(ROW_ID, pa.int64()),
        pa.field("count", pa.int64(), nullable=False),
        pa.field("detail", pa.int64()),
        pa.field("key", pa.int64()),
    ])


def crowd_output_summary_schema(object_id_type: pa.DataType) -> pa.Schema:
    """What the output check returns per block of released objects: metric counts, suppression
    reasons, a few released object ids (the report's sample objects) and the released median of
    the evaluation's sampled objects."""
    return pa.schema([
        pa.field("entry", pa.int32(), nullable=False),
        pa.field("code", pa.int64(), nullable=False),
        pa.field("count", pa.int64(), nullable=False),
        pa.field("object_id", object_id_type),
        pa.field("value", pa.float64()),
        pa.field("reason", pa.string()),
    ])


def crowd_medians_schema(object_id_type: pa.DataType) -> pa.Schema:
    """Per-object medians (the evaluation's keyed sample)."""
    return pa.schema([pa.field("object_id", object_id_type), pa.field("value", pa.float64())])
