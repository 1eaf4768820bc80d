"""The platform's text-record reader (``sources.read_text_fragment``, issue 15): a fragment read as
``TableReading`` reads one file on the driver (``pipelines.platform.input.read_records_table``) —
CSV as text with or without a header, spaces after separators dropped, ``recode`` first, then the
null spellings — with the platform's ``ROW_ID``; the tabular and filter kinds share it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.platform.errors import ConfigError, InputError
from pipelines.platform.input import read_records_table
from pipelines.platform.sources import ROW_BITS, TextReading, list_fragments, read_text_fragment
from schemas.base import TableReading
from schemas.sources import SourceSpec

NAMES = ("age", "work", "income")
CSV = (
    "age, work, income\n"
    "39, State-gov, <=50K\n"
    "\n"
    "50,  Self-emp, >50K.\n"
    " NA , ?, <=50K\n"
    '41, "Private, large", null\n'
    "28,, >50K\n"
)


def both(path: Path, header: bool = True, recode: dict | None = None, ordinal: int = 0) -> tuple[pd.DataFrame, ...]:
    recode = recode or {}
    file_format = "parquet" if path.suffix == ".parquet" else "csv"
    expected = read_records_table(TableReading(path=path, format=file_format, header=header, recode=recode), NAMES)
    fragments = list_fragments(SourceSpec(path=str(path), format="csv" if path.suffix != ".parquet" else None))
    fragment = fragments[0]
    if ordinal:
        from dataclasses import replace

        fragment = replace(fragment, ordinal=ordinal)
    frame, row_ids = read_text_fragment(fragment, TextReading.of(header, NAMES, recode))
    return expected, frame, row_ids


def test_a_csv_reads_as_the_driver_side_reader_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "adult.csv"
    path.write_text(CSV)
    expected, frame, row_ids = both(path, recode={"income": {">50K.": ">50K"}}, ordinal=3)
    pd.testing.assert_frame_equal(frame, expected)
    assert frame["income"].tolist() == ["<=50K", ">50K", "<=50K", None, ">50K"]
    assert frame["age"].tolist() == ["39", "50", None, "41", "28"] and frame["work"].tolist()[-1] is None
    np.testing.assert_array_equal(row_ids, (3 << ROW_BITS) + np.arange(5))


def test_a_headerless_csv_takes_the_given_names(tmp_path: Path) -> None:
    path = tmp_path / "rows.txt"
    path.write_text(CSV.split("\n", 1)[1])
    expected, frame, _ = both(path, header=False)
    assert list(frame.columns) == list(NAMES)
    pd.testing.assert_frame_equal(frame, expected)


def test_parquet_keeps_its_types_and_nulls_and_is_recoded(tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"age": [39, None], "work": ["NA", "x"], "income": [">50K.", "<=50K"]}), path)
    expected, frame, _ = both(path, recode={"income": {">50K.": ">50K"}})
    pd.testing.assert_frame_equal(frame, expected)
    assert frame["work"].tolist() == ["NA", "x"]  # Parquet text is never a null spelling


def test_a_recode_of_an_absent_column_and_a_broken_csv_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "adult.csv"
    path.write_text(CSV)
    fragment = list_fragments(SourceSpec(path=str(path)))[0]
    with pytest.raises(ConfigError, match=r"^recode: column 'nope' is not in .*adult.csv$"):
        read_text_fragment(fragment, TextReading.of(True, NAMES, {"nope": {"a": "b"}}))
    path.write_text("age,work,income\n1,2,3\n4,5,6,SECRET\n")
    with pytest.raises(InputError) as caught:
        read_text_fragment(list_fragments(SourceSpec(path=str(path)))[0], TextReading.of(True, NAMES, {}))
    assert "SECRET" not in str(caught.value) and "cannot be read as CSV" in str(caught.value)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InputError, match="empty file"):
        read_text_fragment(list_fragments(SourceSpec(path=str(empty)))[0], TextReading.of(True, NAMES, {}))
