"""The shared input reading (``pipelines/platform/input.py``): fingerprints against hashlib, whole
tables read as text (CSV) or with their types (Parquet), and every read error as one line naming the
file (and the column where there is one)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.platform.errors import ConfigError, InputError
from pipelines.platform.input import (
    NULL_SPELLINGS,
    apply_recode,
    as_missing,
    csv_problem,
    domain_reason,
    file_fingerprint,
    files_digest,
    first_line,
    parquet_problem,
    read_input_table,
    read_table,
)
from schemas.base import StrictModel, TableReading
from tests.unit.pipelines.input_errors import assert_input_error


class Columns(StrictModel):
    """A kind's mapping of its canonical columns (roles) to the file's columns."""

    object_id: str = "item"
    source_id: str = "worker"
    value: str = "answer"


class MappedInput(StrictModel):
    """A ``MappedTableSettings`` of no particular kind."""

    path: Path
    format: Literal["csv", "parquet"] = "csv"
    columns: Columns = Columns()


def mapped(path: Path, file_format: str = "csv") -> MappedInput:
    return MappedInput(path=path, format=file_format)


def test_fingerprints_are_sha256_of_the_bytes_in_order(tmp_path: Path) -> None:
    first, second = tmp_path / "a.bin", tmp_path / "b.bin"
    first.write_bytes(b"alpha\n")
    second.write_bytes(bytes(range(256)) * 5000)
    assert files_digest([first, second]).hexdigest() == hashlib.sha256(
        b"alpha\n" + bytes(range(256)) * 5000
    ).hexdigest()
    expected = hashlib.sha256(b"alpha\n\0" + bytes(range(256)) * 5000 + b"\0").hexdigest()
    assert file_fingerprint(first, second) == "sha256:" + expected
    assert file_fingerprint(second, first) != file_fingerprint(first, second)


def test_first_line_of_an_error() -> None:
    assert first_line(ValueError("one\ntwo\nthree")) == "one"
    assert first_line(ValueError("  padded  \n")) == "padded"
    assert first_line(KeyError()) == "KeyError"


def test_csv_columns_are_read_as_text_in_the_wanted_order(tmp_path: Path) -> None:
    path = tmp_path / "claims.csv"
    path.write_text('answer,ignored,worker,item\n1.5,x,7,"a"\n,y,"",b\n 2 ,z,08,c\n')
    table = read_input_table(mapped(path), ["item", "worker", "answer"])
    assert table.column_names == ["item", "worker", "answer"]
    assert all(field.type == pa.string() for field in table.schema)
    assert table.to_pydict() == {
        "item": ["a", "b", "c"],
        "worker": ["7", None, "08"],
        "answer": ["1.5", None, " 2 "],
    }


def test_csv_null_spellings_are_missing_and_other_text_is_kept(tmp_path: Path) -> None:
    """The one missing-value rule of CSV inputs (``NULL_SPELLINGS``): empty (quoted or not) and
    the listed spellings are nulls; anything else, ``None`` or ``none`` included, is text."""
    assert set(NULL_SPELLINGS) == {"", "NA", "N/A", "n/a", "NULL", "null", "Null", "NaN", "nan", "NAN", "#N/A"}
    path = tmp_path / "claims.csv"
    spellings = [*NULL_SPELLINGS[1:], '""']
    kept = ["None", "none", "na-1", "-", "0"]
    path.write_text("item,worker,answer\n" + "".join(f"{s},{s},{s}\n" for s in spellings + kept))
    table = read_input_table(mapped(path), ["item", "worker", "answer"])
    for column in table.column_names:
        assert table.column(column).to_pylist() == [None] * len(spellings) + kept
    frame = pd.DataFrame({"a": [*NULL_SPELLINGS, " NA ", "  ", *kept]})
    assert as_missing(frame)["a"].tolist() == [None] * (len(NULL_SPELLINGS) + 2) + kept


def test_parquet_columns_keep_their_types_and_dictionary_columns_are_categorical(tmp_path: Path) -> None:
    path = tmp_path / "claims.parquet"
    pq.write_table(
        pa.table(
            {
                "item": pa.array([3, 1, 2], pa.int32()),
                "worker": pa.array(["u", "v", "u"]),
                "answer": pa.array([0.25, -1.0, 2.0**60], pa.float64()),
                "extra": pa.array([True, False, True]),
            }
        ),
        path,
    )
    table = read_input_table(mapped(path, "parquet"), ["item", "worker", "answer"], dictionary_columns=("worker",))
    assert table.column_names == ["item", "worker", "answer"]
    assert table.schema.field("item").type == pa.int32()
    assert table.schema.field("answer").type == pa.float64()
    assert pa.types.is_dictionary(table.schema.field("worker").type)
    frame = table.to_pandas()
    assert frame["item"].tolist() == [3, 1, 2]
    assert frame["answer"].tolist() == [0.25, -1.0, 2.0**60]
    assert isinstance(frame["worker"].dtype, pd.CategoricalDtype)
    assert frame["worker"].astype(str).tolist() == ["u", "v", "u"]
    plain = read_input_table(mapped(path, "parquet"), ["worker"])
    assert plain.schema.field("worker").type == pa.string()


def test_read_input_table_errors_name_the_file_and_the_column(tmp_path: Path) -> None:
    missing = tmp_path / "absent.csv"
    with pytest.raises(InputError) as caught:
        read_input_table(mapped(missing), ["item"])
    assert_input_error(caught.value, missing, "file not found")

    with pytest.raises(InputError) as caught:
        read_input_table(mapped(tmp_path), ["item"])
    assert_input_error(caught.value, tmp_path, "is not a file")

    empty = tmp_path / "empty.csv"
    empty.write_text("\n")
    with pytest.raises(InputError) as caught:
        read_input_table(mapped(empty), ["item"])
    assert_input_error(caught.value, empty, "empty file: no header and no rows")

    no_answer = tmp_path / "no_answer.csv"
    no_answer.write_text("item,worker\n1,2\n")
    with pytest.raises(InputError) as caught:
        read_input_table(mapped(no_answer), ["item", "worker", "answer"])
    assert_input_error(
        caught.value, no_answer, "mapped column 'answer' (for value) is missing; the file has: item, worker",
        column="answer",
    )

    wide = tmp_path / "wide.parquet"
    pq.write_table(pa.table({f"c{index:02d}": [index] for index in range(14)}), wide)
    with pytest.raises(InputError) as caught:
        read_input_table(mapped(wide, "parquet"), ["c00", "worker"])
    assert_input_error(
        caught.value, wide, "mapped column 'worker' (for source_id) is missing; the file has: "
        + ", ".join(f"c{index:02d}" for index in range(12)) + " ...",
        column="worker",
    )

    ragged = tmp_path / "ragged.csv"
    ragged.write_text("item,worker,answer\n1,2,3\n\n4,5,secret-source-id,7\n")
    with pytest.raises(InputError) as caught:
        read_input_table(mapped(ragged), ["item", "worker", "answer"])
    assert_input_error(caught.value, ragged, "cannot be read as CSV: a row has 4 fields where the header has 3",
                       row=2, hides=("secret-source-id", "4,5"))

    short = tmp_path / "short.csv"
    short.write_text("item,worker,answer\n1,2,3\n4,5,6\n7,private-name\n")
    with pytest.raises(InputError) as caught:
        read_input_table(mapped(short), ["item", "worker", "answer"])
    assert_input_error(caught.value, short, "a row has 2 fields where the header has 3", row=3,
                       hides=("private-name",))

    latin = tmp_path / "latin.csv"
    latin.write_bytes("item,worker,answer\n1,Jos\xe9,3\n".encode("latin-1"))
    with pytest.raises(InputError) as caught:
        read_input_table(mapped(latin), ["item", "worker", "answer"])
    assert_input_error(caught.value, latin, "cannot be read as CSV: not valid UTF-8 text", hides=("Jos", "xe9"))

    not_parquet = tmp_path / "text.parquet"
    not_parquet.write_text("item,worker,answer\n1,secret,3\n")
    with pytest.raises(InputError) as caught:
        read_input_table(mapped(not_parquet, "parquet"), ["item"])
    assert_input_error(caught.value, not_parquet, "cannot be read as PARQUET: not a Parquet file", hides=("secret",))


def test_read_table_gives_text_columns_with_stripped_names_and_leading_spaces_dropped(tmp_path: Path) -> None:
    path = tmp_path / "adult.csv"
    path.write_text(" age , workclass,income\n39, State-gov, <=50K\n50, NA,>50K.\n 7,,\n")
    frame = read_table(TableReading(path=path), ["unused"])
    assert list(frame.columns) == ["age", "workclass", "income"]
    assert all(frame[column].dtype == object for column in frame.columns)
    assert frame.to_dict("list") == {
        "age": ["39", "50", "7"],
        "workclass": ["State-gov", "NA", ""],
        "income": ["<=50K", ">50K.", ""],
    }


def test_read_table_names_the_columns_of_a_headerless_csv(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("1, a\n2, b\n")
    frame = read_table(TableReading(path=path, header=False), ["number", "letter"])
    assert frame.to_dict("list") == {"number": ["1", "2"], "letter": ["a", "b"]}


def test_read_table_keeps_parquet_types(tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"n": pa.array([1, 2], pa.int64()), "x": [0.5, 1.5], "s": ["a", None]}), path)
    frame = read_table(TableReading(path=path, format="parquet"), ["ignored"])
    assert frame["n"].dtype == "int64" and frame["x"].dtype == "float64" and frame["s"].dtype == object
    assert frame["n"].tolist() == [1, 2] and frame["x"].tolist() == [0.5, 1.5] and frame["s"].tolist() == ["a", None]


def test_read_table_errors_name_the_file(tmp_path: Path) -> None:
    cases: list[tuple[Path, str, str]] = []
    cases.append((tmp_path / "absent.csv", "csv", "file not found"))
    cases.append((tmp_path, "csv", "is not a file"))
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    cases.append((empty, "csv", "empty file: no header and no rows"))
    undecodable = tmp_path / "latin.csv"
    undecodable.write_bytes(b"a,b\n\xff\xfe,1\n")
    cases.append((undecodable, "csv", "cannot be read as CSV: not valid UTF-8 text"))
    not_parquet = tmp_path / "text.parquet"
    not_parquet.write_text("a,b\n1,2\n")
    cases.append((not_parquet, "parquet", "cannot be read as PARQUET: not a Parquet file"))
    for path, file_format, message in cases:
        with pytest.raises(InputError) as caught:
            read_table(TableReading(path=path, format=file_format), ["a", "b"])
        assert_input_error(caught.value, path, message)


@pytest.mark.parametrize("header", [True, False])
def test_a_ragged_csv_row_is_named_by_its_data_row_never_its_text(tmp_path: Path, header: bool) -> None:
    path = tmp_path / "ragged.csv"
    path.write_text(("a,b\n" if header else "") + "1,2\n\n3,4\n5,private,extra\n")
    with pytest.raises(InputError) as caught:
        read_table(TableReading(path=path, header=header), ["a", "b"])
    says = "a row has 3 fields where the header has 2" if header else "a row has 3 fields where 2 columns are named"
    assert_input_error(caught.value, path, "cannot be read as CSV: " + says, row=3, hides=("private", "extra"))


def test_an_unknown_parser_message_is_replaced_not_echoed(tmp_path: Path) -> None:
    error = ValueError("something new went wrong near 'Jane Doe, 1961-02-03'")
    csv = csv_problem(tmp_path / "x.csv", error)
    assert str(csv) == f"{tmp_path / 'x.csv'}: cannot be read as CSV: malformed CSV (ValueError)"
    parquet = parquet_problem(tmp_path / "x.parquet", pa.ArrowInvalid("bad page holding 'Jane Doe'"))
    assert str(parquet) == f"{tmp_path / 'x.parquet'}: cannot be read as PARQUET: corrupt or unsupported Parquet file (ArrowInvalid)"


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("missing value (null/NaN)", "missing value (blank or a null spelling)"),
        ("value 'Jane' is not one of the schema's categories", "value is not one of the schema's categories"),
        ("value 'x is not a number' is not a number", "value is not a number"),
        ("value np.float64(101.0) is outside the bounds [0.0, 100.0]", "value is outside the bounds [0.0, 100.0]"),
        ("value '[1, 2] is outside the bounds [3, 4]' is outside the bounds [0.0, 9.0]",
         "value is outside the bounds [0.0, 9.0]"),
        ("not a finite number: 'Jane'", "value is not a finite number"),
        ("category 'Jane' is not in the feature's category list", "value is not in the feature's category list"),
        ("label np.int64(3) is not in the label's category list", "label is not in the label's category list"),
        ("an unforeseen reason quoting 'Jane'", "value is outside its column's public domain"),
    ],
)
def test_domain_reasons_keep_their_words_and_drop_the_value(message: str, reason: str) -> None:
    assert domain_reason(message) == reason


def test_recode_maps_spellings_and_refuses_an_unknown_column(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    reading = TableReading(path=path, recode={"income": {">50K.": ">50K", "<=50K.": "<=50K"}})
    frame = pd.DataFrame({"income": [">50K.", "<=50K", "<=50K.", ">50K"], "age": ["1", ">50K.", "3", "4"]})
    recoded = apply_recode(frame, reading)
    assert recoded["income"].tolist() == [">50K", "<=50K", "<=50K", ">50K"]
    assert recoded["age"].tolist() == ["1", ">50K.", "3", "4"]
    with pytest.raises(ConfigError) as caught:
        apply_recode(pd.DataFrame({"age": ["1"]}), reading)
    assert str(caught.value) == f"recode: column 'income' is not in {path}"


def test_blank_text_is_missing_and_numbers_are_untouched() -> None:
    frame = pd.DataFrame({"s": ["a", "", "   ", " b"], "n": [0, 1, 2, 3], "x": [0.0, float("nan"), 1.0, 2.0]})
    result = as_missing(frame)
    assert result["s"].tolist() == ["a", None, None, " b"]
    assert result["n"].tolist() == [0, 1, 2, 3] and result["n"].dtype == "int64"
    assert result["x"].isna().tolist() == [False, True, False, False]


def test_a_csv_without_a_header_row_is_named_without_showing_its_first_row(tmp_path: Path) -> None:
    """A first row that names none of the mapped columns is probably data (a file without a
    header): the error says so instead of listing it."""
    headerless = tmp_path / "headerless.csv"
    headerless.write_text("17,Jane Roe,4.5\n18,John Doe,3.5\n")
    with pytest.raises(InputError) as caught:
        read_input_table(mapped(headerless), ["item", "worker", "answer"])
    assert_input_error(caught.value, headerless, "mapped column 'item' (for object_id) is missing; its first row "
                       "names none of the expected columns (a CSV without a header row?)", column="item",
                       hides=("Jane Roe", "17", "4.5"))
    parquet = tmp_path / "other.parquet"
    pq.write_table(pa.table({"Jane Roe": [1]}), parquet)
    with pytest.raises(InputError) as caught:
        read_input_table(mapped(parquet, "parquet"), ["item"])
    assert_input_error(caught.value, parquet, "the file has: Jane Roe", column="item")
