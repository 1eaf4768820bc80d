"""Tables of a tabular release's engine-side input (issue 15): what a fragment's task returns.

A task that reads one input fragment (``pipelines/tabular/engine_input.py``) returns rows of
:func:`tabular_input_summary_schema`: ``entry`` says what a row is — a metric (``code``, the value in
``count``; for a problem, its first row's ``ROW_ID``), the fragment's row count (``code`` its
ordinal) or the fragment's fingerprint (``code`` its ordinal). Never a value of the input.
"""

from __future__ import annotations

import pyarrow as pa

ROW_ID = "ROW_ID"


def tabular_input_summary_schema() -> pa.Schema:
    return pa.schema([
        pa.field("entry", pa.int32(), nullable=False),
        pa.field("code", pa.int64(), nullable=False),
        pa.field(ROW_ID, pa.int64()),
        pa.field("count", pa.int64(), nullable=False),
        pa.field("fingerprint", pa.string()),
    ])


TABULAR_METRICS_SCHEMA = pa.schema([pa.field("code", pa.int64(), nullable=False),
                                    pa.field("count", pa.int64(), nullable=False)])
TABULAR_FRAGMENT_ROWS_SCHEMA = pa.schema([pa.field("code", pa.int64(), nullable=False),
                                          pa.field("count", pa.int64(), nullable=False),
                                          pa.field("fingerprint", pa.string())])


def staged_codes_schema(attribute_count: int) -> pa.Schema:
    """A fragment's encoded records as its task stages them: one int32 code per attribute
    (``a0``, ``a1``, ... in schema order) and the row's ``ROW_ID``."""
    return pa.schema([pa.field(f"a{index}", pa.int32(), nullable=False) for index in range(attribute_count)]
                     + [pa.field(ROW_ID, pa.int64(), nullable=False)])


PROBLEM_ROWS_SCHEMA = pa.schema([pa.field(ROW_ID, pa.int64()), pa.field("code", pa.int64(), nullable=False)])
SPLIT_COUNTS_SCHEMA = pa.schema([pa.field("part", pa.int64(), nullable=False),
                                 pa.field("records", pa.int64(), nullable=False)])
