"""Arrow schemas of the tables an ldp release stages and writes."""

from __future__ import annotations

import pyarrow as pa

LDP_MECHANISM_CODE = "mechanism_code"


ROW_ID = "ROW_ID"
"""The platform's row identifier (``pipelines/platform/sources.py``): ``ordinal << 40 | row``."""


def ldp_input_summary_schema(text_keys: bool) -> pa.Schema:
    """What the engine's task for one input fragment returns (``pipelines/ldp/engine_input.py``):
    rows whose ``entry`` says what they are — a partial count of the sufficient statistics
    (``key``: ``mechanism_code * output_stride + report``, RAPPOR's ``mechanism_code * (k + 1) + x``
    bit sums, or the text ``"<mechanism_code>:<bits>"`` of a bit-vector group; ``users``), a metric
    (``code``; its value in ``users``; for a problem, its first row's ``ROW_ID`` and a ``detail``)
    or the fragment's ``fingerprint``. ``code`` comes right after ``entry``, so ``first_row`` breaks a
    tie on ``ROW_ID`` by the problem's code."""
    return pa.schema([
        pa.field("entry", pa.int32(), nullable=False),
        pa.field("code", pa.int32(), nullable=False),
        pa.field(ROW_ID, pa.int64()),
        pa.field("detail", pa.int64()),
        pa.field("key", pa.string() if text_keys else pa.int64()),
        pa.field("users", pa.int64(), nullable=False),
        pa.field("fingerprint", pa.string()),
    ])


def ldp_counts_schema(text_keys: bool) -> pa.Schema:
    """The summaries' partial counts, keyed for ``sum_by_key``."""
    return pa.schema([pa.field("key", pa.string() if text_keys else pa.int64(), nullable=False),
                      pa.field("users", pa.int64(), nullable=False)])


LDP_METRICS_SCHEMA = pa.schema([pa.field("code", pa.int64(), nullable=False),
                                pa.field("users", pa.int64(), nullable=False)])
"""The summaries' metrics, keyed by metric code for ``sum_by_key``."""
LDP_FINGERPRINTS_SCHEMA = pa.schema([pa.field("code", pa.int64(), nullable=False), pa.field("fingerprint", pa.string())])
"""The fragments' fingerprints, by fragment ordinal."""


def ldp_estimate_schema(layout: str) -> pa.Schema:
    """The released estimate: ``(value, probability)`` on a line, ``(row, col, probability)`` on a grid."""
    labels = (
        [pa.field("row", pa.int32(), nullable=False), pa.field("col", pa.int32(), nullable=False)]
        if layout == "grid"
        else [pa.field("value", pa.int64(), nullable=False)]
    )
    return pa.schema([*labels, pa.field("probability", pa.float64(), nullable=False)])
