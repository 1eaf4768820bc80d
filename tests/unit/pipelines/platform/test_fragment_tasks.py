"""What the kinds' fragment tasks share (``pipelines/platform/fragment_tasks.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.platform.errors import InputError
from pipelines.platform.fragment_tasks import (
    any_problem,
    code_counts,
    decoded,
    entry_rows,
    fingerprints,
    located_problems,
    read_mapped_columns,
)
from pipelines.platform.sources import ROW_BITS, ROW_ID, list_fragments, row_positions
from schemas.sources import SourceSpec


def test_mapped_columns_are_read_with_row_ids_and_a_missing_one_is_named_as_mapped(tmp_path: Path) -> None:
    pq.write_table(pa.table({"who": [1, 2], "what": ["a", "b"]}), tmp_path / "part.parquet")
    fragment = list_fragments(SourceSpec(path=str(tmp_path / "part.parquet")))[0]
    table, row_ids = read_mapped_columns(fragment, {"who": "user_id", "what": "report"})
    assert table.column("who").to_pylist() == [1, 2] and table.column(ROW_ID).to_pylist() == row_ids.tolist()
    with pytest.raises(InputError, match=r"mapped column 'missing' \(for mechanism\) is missing; the file has: "):
        read_mapped_columns(fragment, {"who": "user_id", "missing": "mechanism"})


def test_problems_are_located_at_their_first_row_in_code_order() -> None:
    problems = {3: np.array([False, True, True]), 1: np.array([False, False, True]), 2: np.zeros(3, dtype=bool)}
    row_ids = np.array([10, 11, 12])
    assert any_problem(problems, 3).tolist() == [False, True, True]
    assert list(located_problems(problems, row_ids)) == [(1, 2, 12, 1), (3, 1, 11, 2)]


def test_entry_rows_fill_the_given_columns_code_zero_and_nulls() -> None:
    schema = pa.schema([pa.field("entry", pa.int32(), nullable=False), pa.field("code", pa.int32(), nullable=False),
                        pa.field(ROW_ID, pa.int64()), pa.field("count", pa.int64()), pa.field("text", pa.string())])
    rows = entry_rows(schema, 7, 2, count=np.array([4, 5]), text=pa.array([1, 2]))
    assert rows.schema == schema
    assert rows.to_pylist() == [{"entry": 7, "code": 0, ROW_ID: None, "count": 4, "text": "1"},
                                {"entry": 7, "code": 0, ROW_ID: None, "count": 5, "text": "2"}]
    frame = pd.concat([rows.to_pandas(), pd.DataFrame({"entry": [1, 2], "code": [3, 4], "count": [6, 0],
                                                       "fingerprint": [None, "sha256:x"]})], ignore_index=True)
    assert code_counts(frame, 7).to_dict("list") == {"code": [0, 0], "count": [4, 5]}
    assert code_counts(frame, (1, 7)).to_dict("list") == {"code": [0, 0, 3], "count": [4, 5, 6]}
    assert fingerprints(frame, 2).to_dict("list") == {"code": [4], "fingerprint": ["sha256:x"]}


def test_a_dictionary_column_is_decoded_and_row_ids_become_positions() -> None:
    column = pa.chunked_array([pa.array(["a", "b"]).dictionary_encode(), pa.array(["b"]).dictionary_encode()])
    assert decoded(column).to_pylist() == ["a", "b", "b"] and decoded(column).type == pa.string()
    row_ids = np.array([(1 << ROW_BITS) + 2, 0, (2 << ROW_BITS)], dtype=np.int64)
    assert row_positions(row_ids, (0, 5, 9)).tolist() == [7, 0, 9]
