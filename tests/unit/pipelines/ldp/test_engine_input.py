"""The ldp reports read, checked, canonicalized and counted on the engine
(``pipelines/ldp/engine_input.py`` through ``pipelines.ldp.pipeline.read_reports_on_engine``, on the
local engine): CSV and Parquet, single files and folders of several; every bad row as one
``InputError`` line naming the file, the row within it and the column, never the report; the first
failing row of the whole input wins, wherever it lies."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.engines.local import LocalEngine
from pipelines.ldp.input import read_mechanism_catalog
from pipelines.ldp.pipeline import CheckedReports, PreparedReports, listing_spec, read_reports_on_engine
from pipelines.platform.errors import InputError
from pipelines.platform.sources import list_fragments
from schemas.ldp.config import LdpConfig
from tests.unit.pipelines.input_errors import assert_input_error

CATALOG = {
    "krr_b": {"type": "krr", "epsilon": 2.0, "input_size": 4},
    "krr_a": {"type": "krr", "epsilon": 1.0, "input_size": 4},
    "geo": {"type": "truncated_geometric", "epsilon": 0.5, "lower": 10, "upper": 13},
}
RAPPOR = {"r": {"type": "rappor", "epsilon": 1.0, "input_size": 3}}


def write(path: Path, data: pd.DataFrame | pa.Table | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    elif path.suffix == ".csv":
        data.to_csv(path, index=False)
    else:
        pq.write_table(data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False), path)
    return path


def check(tmp_path: Path, source: Path, catalog: dict = CATALOG, method: str = "gibu", columns: dict | None = None,
          parallelism: int = 3, key: bytes | None = None) -> CheckedReports:
    catalog_path = tmp_path / "catalog.json"
    catalog_path.write_text(json.dumps(catalog))
    config = LdpConfig.model_validate({
        "kind": "ldp", "dataset": "d", "lake": str(tmp_path / "lake"), "estimator": {"method": method},
        "input": {"path": str(source), "catalog": str(catalog_path), "columns": columns or {}},
    })
    spec = listing_spec(config.input)
    prepared = PreparedReports(list_fragments(spec), str(source))
    return read_reports_on_engine(config, read_mechanism_catalog(catalog_path, config.secrets), prepared,
                                  LocalEngine(parallelism=parallelism), tmp_path / "staging" / "keys", key)


def counts(checked: CheckedReports) -> dict:
    return dict(zip(checked.counts["key"].tolist(), checked.counts["users"].tolist(), strict=True))


def test_csv_reports_are_text_in_mapped_columns_and_counted_by_mechanism_code(tmp_path: Path) -> None:
    source = write(tmp_path / "reports.csv", "rep,who,mech\n3,u1,krr_b\n 0 ,u2,geo\n+1,u3,krr_b\n")
    checked = check(tmp_path, source, columns={"user_id": "who", "mechanism": "mech", "report": "rep"})
    # codes in name order: geo 0, krr_a 1, krr_b 2; key = code * 4 + report
    assert counts(checked) == {0 * 4 + 0: 1, 2 * 4 + 3: 1, 2 * 4 + 1: 1}
    assert checked.n == 3 and checked.validation.success
    assert checked.fingerprint.startswith("sha256:")


def test_a_partitioned_parquet_folder_counts_like_its_single_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"user_id": np.arange(300), "mechanism": rng.choice(sorted(CATALOG), 300),
                          "report": rng.integers(0, 4, 300)})
    single = check(tmp_path / "one", write(tmp_path / "one" / "reports.parquet", frame))
    folder = tmp_path / "many" / "reports"
    for day, part in enumerate(np.array_split(np.arange(300), 4)):
        write(folder / f"day=2026-12-0{day + 1}" / "part-0.parquet", frame.iloc[part])
    write(folder / "_SUCCESS", "")
    several = check(tmp_path / "many", folder, parallelism=2)
    assert counts(several) == counts(single) and several.n == single.n == 300


def test_rappor_reports_are_counted_per_bit_vector_or_per_bit(tmp_path: Path) -> None:
    source = write(tmp_path / "reports.csv", "user_id,mechanism,report\n1,r,010\n2,r,111\n3,r,010\n")
    assert counts(check(tmp_path, source, RAPPOR)) == {"0:010": 2, "0:111": 1}
    # RAP_M: key code * (k + 1) + x holds the reports with bit x set; x = k the users
    assert counts(check(tmp_path, source, RAPPOR, method="rap_m")) == {0: 1, 1: 3, 2: 1, 3: 3}


@pytest.mark.parametrize(
    ("report", "mechanism", "row", "says", "raw"),
    [
        (["0", "4"], ["krr_a", "krr_b"], 2, "report is outside mechanism 'krr_b''s output alphabet 0..3", "4"),
        (["-1", "0"], None, 1, "report is outside mechanism 'krr_a''s output alphabet 0..3", "-1"),
        (["1", "three"], None, 2, "report is not an integer", "three"),
        (["1", "2.0"], None, 2, "report is not an integer", "2.0"),
        (["0", "1", "2", "3", "4"], ["geo"] * 5, 5, "report is outside mechanism 'geo''s output alphabet 0..3", "4"),
    ],
)
def test_bad_integer_reports_name_the_row_and_column_not_the_report(
    tmp_path: Path, report: list, mechanism: list[str] | None, row: int, says: str, raw: str
) -> None:
    frame = pd.DataFrame({"user_id": range(len(report)), "mechanism": mechanism or ["krr_a"] * len(report),
                          "answer": report})
    source = write(tmp_path / "reports.csv", frame)
    with pytest.raises(InputError) as caught:
        check(tmp_path, source, columns={"report": "answer"})
    assert_input_error(caught.value, source, says, row=row, column="answer", hides=(raw,))


@pytest.mark.parametrize(
    ("values", "row", "says", "raw"),
    [
        (pa.array([1.0, 2.5, 3.0]), 2, "report is not an integer", ("2.5", "np.float64", "float64")),
        (pa.array([1.0, float("inf"), 3.0]), 2, "report is not an integer", ("inf",)),
        (pa.array([True, False, True]), 1, "not booleans", ("True",)),
    ],
)
def test_parquet_reports_of_the_wrong_type_are_refused_without_the_value(
    tmp_path: Path, values: pa.Array, row: int, says: str, raw: tuple[str, ...]
) -> None:
    source = write(tmp_path / "reports.parquet", pa.table({"user_id": [1, 2, 3], "mechanism": ["krr_a"] * 3,
                                                           "report": values}))
    with pytest.raises(InputError) as caught:
        check(tmp_path, source)
    assert_input_error(caught.value, source, says, row=row, column="report", hides=raw)


@pytest.mark.parametrize(
    ("bits", "row", "says"),
    [
        (["010", "0100"], 2, "bit vector of length 4; the catalog's RAPPOR mechanisms report 3 bits"),
        (["010", "011", "0a1"], 3, "report is not a bit vector of 0s and 1s"),
    ],
)
def test_bad_bit_vectors_name_the_row_and_column(tmp_path: Path, bits: list[str], row: int, says: str) -> None:
    source = write(tmp_path / "reports.csv", pd.DataFrame({"user_id": range(len(bits)), "mechanism": "r",
                                                           "report": bits}))
    with pytest.raises(InputError) as caught:
        check(tmp_path, source, RAPPOR)
    assert_input_error(caught.value, source, says, row=row, column="report", hides=(bits[row - 1],))


def test_a_missing_mapped_column_names_it_and_its_role(tmp_path: Path) -> None:
    source = write(tmp_path / "reports.csv", "user_id,mechanism\n1,krr_a\n")
    with pytest.raises(InputError) as caught:
        check(tmp_path, source)
    assert_input_error(caught.value, source, "mapped column 'report' (for report) is missing",
                       "the file has: user_id, mechanism", column="report")


def test_an_input_without_rows_is_refused(tmp_path: Path) -> None:
    source = write(tmp_path / "reports.csv", "user_id,mechanism,report\n")
    with pytest.raises(InputError) as caught:
        check(tmp_path, source)
    assert_input_error(caught.value, source, "no rows (empty input)")


def several_files(folder: Path, frames: list[pd.DataFrame]) -> list[Path]:
    return [write(folder / f"part-{index}.csv", frame) for index, frame in enumerate(frames)]


def good(users: range) -> pd.DataFrame:
    return pd.DataFrame({"user_id": list(users), "mechanism": ["krr_a", "krr_b"] * (len(users) // 2),
                         "report": [index % 4 for index in range(len(users))]}).astype(object)


@pytest.mark.parametrize(
    ("column", "value", "says", "named"),
    [
        ("user_id", None, "user id is missing", "user_id"),
        ("mechanism", None, "mechanism is missing", "mechanism"),
        ("report", None, "report is missing", "report"),
        ("mechanism", "krr_secret_z", "unknown mechanism: not in the mechanism catalog", "mechanism"),
        ("report", "three-secret", "report is not an integer", "report"),
        ("report", 9, "report is outside mechanism 'krr_a''s output alphabet 0..3", "report"),
    ],
)
def test_the_first_bad_row_of_a_later_file_is_named_by_its_file_and_row(
    tmp_path: Path, column: str, value: object, says: str, named: str
) -> None:
    third = good(range(200, 210))
    third.loc[4, column] = value  # row 5 of the third file; a later row of the fourth file is bad too
    fourth = good(range(300, 310))
    fourth.loc[7, "report"] = 9
    files = several_files(tmp_path / "reports", [good(range(0, 10)), good(range(100, 110)), third, fourth])
    with pytest.raises(InputError) as caught:
        check(tmp_path, tmp_path / "reports")
    raw = (str(value),) if value is not None else ()
    assert_input_error(caught.value, files[2], says, row=5, column=named, hides=raw)


def test_a_repeated_user_names_the_later_row_and_where_the_user_came_first(tmp_path: Path) -> None:
    second = good(range(100, 110))
    second.loc[6, "user_id"] = 918273
    third = good(range(200, 210))
    third.loc[2, "user_id"] = 918273
    third.loc[8, "user_id"] = 918273
    files = several_files(tmp_path / "reports", [good(range(0, 10)), second, third])
    with pytest.raises(InputError) as caught:
        check(tmp_path, tmp_path / "reports")
    assert_input_error(caught.value, files[2], "a user sent more than one report (one report per user)",
                       f"the same user_id as {files[1]}, row 7", "2 repeated reports in all", row=3,
                       column="user_id", hides=("918273",))


def test_a_repeat_within_one_file_names_the_earlier_row(tmp_path: Path) -> None:
    frame = good(range(0, 12))
    frame.loc[9, "user_id"] = 4
    source = write(tmp_path / "reports.csv", frame)
    with pytest.raises(InputError) as caught:
        check(tmp_path, source)
    assert_input_error(caught.value, source, "one report per user", "the same user_id as row 5", row=10,
                       column="user_id")


def test_user_ids_of_two_kinds_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "reports"
    write(folder / "a.parquet", pa.table({"user_id": [1, 2], "mechanism": ["krr_a"] * 2, "report": [0, 1]}))
    write(folder / "b.parquet", pa.table({"user_id": ["x", "y"], "mechanism": ["krr_a"] * 2, "report": [0, 1]}))
    with pytest.raises(InputError) as caught:
        check(tmp_path, folder)
    assert_input_error(caught.value, folder, "user ids are integers in some files and text in others",
                       column="user_id")


@pytest.mark.parametrize(
    ("bits", "says"),
    [
        ("0100", "bit vector of length 4; the catalog's RAPPOR mechanisms report 3 bits"),
        ("0x1", "report is not a bit vector of 0s and 1s"),
        (None, "report is missing"),
    ],
)
def test_a_bad_bit_vector_in_a_later_file_is_named_by_its_file_and_row(tmp_path: Path, bits: str | None,
                                                                       says: str) -> None:
    frames = [pd.DataFrame({"user_id": range(10 * part, 10 * part + 6), "mechanism": "r",
                            "report": ["010", "111", "001", "100", "000", "011"]}).astype(object) for part in range(3)]
    frames[1].loc[3, "report"] = bits
    frames[2].loc[0, "report"] = "01"
    files = several_files(tmp_path / "reports", frames)
    with pytest.raises(InputError) as caught:
        check(tmp_path, tmp_path / "reports", RAPPOR, method="rap_m")
    assert_input_error(caught.value, files[1], says, row=4, column="report", hides=(str(bits),) if bits else ())


def test_a_boolean_report_in_a_later_parquet_file_is_named_by_its_file_and_row(tmp_path: Path) -> None:
    folder = tmp_path / "reports"
    first = write(folder / "a.parquet", pa.table({"user_id": [1, 2], "mechanism": ["krr_a"] * 2, "report": [0, 1]}))
    second = write(folder / "b.parquet", pa.table({"user_id": [3, 4], "mechanism": ["krr_a", "krr_b"],
                                                  "report": [True, False]}))
    with pytest.raises(InputError) as caught:
        check(tmp_path, folder)
    assert first.exists()
    assert_input_error(caught.value, second, "not booleans", row=1, column="report", hides=("True",))


def test_an_unsigned_report_beyond_int64_is_outside_the_alphabet(tmp_path: Path) -> None:
    source = write(tmp_path / "reports.parquet", pa.table({"user_id": [1, 2], "mechanism": ["krr_a"] * 2,
                                                           "report": pa.array([1, 2**64 - 1], pa.uint64())}))
    with pytest.raises(InputError) as caught:
        check(tmp_path, source)
    assert_input_error(caught.value, source, "outside mechanism 'krr_a''s output alphabet 0..3", row=2,
                       column="report", hides=(str(2**64 - 1),))


def test_the_input_fingerprint_is_keyed_and_does_not_depend_on_the_engine_split(tmp_path: Path) -> None:
    folder = tmp_path / "reports"
    several_files(folder, [good(range(0, 10)), good(range(10, 20)), good(range(20, 30))])
    key = bytes(range(32))
    keyed = {check(tmp_path, folder, parallelism=parallelism, key=key).fingerprint for parallelism in (1, 2, 5)}
    assert len(keyed) == 1 and next(iter(keyed)).startswith("hmac-sha256:")
    other_key = check(tmp_path, folder, key=bytes(32)).fingerprint
    unkeyed = check(tmp_path, folder).fingerprint
    assert unkeyed.startswith("sha256:") and len({next(iter(keyed)), other_key, unkeyed}) == 3
    several_files(folder, [good(range(0, 10)), good(range(10, 20)), good(range(20, 30)).assign(report=0)])
    assert check(tmp_path, folder, key=key).fingerprint not in keyed
