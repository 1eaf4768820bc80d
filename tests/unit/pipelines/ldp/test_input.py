"""The ldp reader (``pipelines/ldp/input.py``): the mechanism catalog, the reports in CSV and Parquet,
their canonical ``(mechanism_code, report)`` form, and every bad catalog or report as one
``InputError`` line naming the file, row and column."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.ldp.input import (
    canonical_reports,
    check_estimator_fits,
    read_ldp_reports,
    read_mechanism_catalog,
    reports_fingerprint,
)
from pipelines.platform.errors import ConfigError, InputError
from schemas.ldp.config import LdpInput, SecretLayout
from schemas.ldp.tables import LDP_MECHANISM_CODE
from tests.unit.pipelines.input_errors import assert_input_error
from transforms.ldp.mechanisms import BasicRappor, RandomizedResponse, TruncatedGeometric

CATALOG = {
    "krr_b": {"type": "krr", "epsilon": 2.0, "input_size": 4},
    "krr_a": {"type": "krr", "epsilon": 1.0, "input_size": 4},
    "geo": {"type": "truncated_geometric", "epsilon": 0.5, "lower": 10, "upper": 13},
}
RAPPOR = {"r": {"type": "rappor", "epsilon": 1.0, "input_size": 3}}
LINE = SecretLayout()


def write_catalog(directory: Path, document: object) -> Path:
    path = directory / "catalog.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def ldp_input(directory: Path, reports: Path, catalog: Path, file_format: str = "csv",
              columns: dict[str, str] | None = None) -> LdpInput:
    return LdpInput.model_validate({"path": reports, "format": file_format, "catalog": catalog,
                                    "columns": columns or {}})


def test_the_catalog_is_read_in_name_order(tmp_path: Path) -> None:
    catalog = read_mechanism_catalog(write_catalog(tmp_path, CATALOG), SecretLayout(values=4))
    assert catalog.names == ("geo", "krr_a", "krr_b")
    assert catalog.mechanisms == (
        TruncatedGeometric(epsilon=0.5, lower=10, upper=13),
        RandomizedResponse(epsilon=1.0, input_size=4),
        RandomizedResponse(epsilon=2.0, input_size=4),
    )
    assert catalog.specs == (
        {"type": "truncated_geometric", "epsilon": 0.5, "lower": 10, "upper": 13},
        {"type": "krr", "epsilon": 1.0, "input_size": 4},
        {"type": "krr", "epsilon": 2.0, "input_size": 4},
    )
    assert not catalog.bit_vectors and catalog.input_size == 4
    np.testing.assert_array_equal(catalog.output_sizes, [4, 4, 4])
    assert catalog.to_json() == {name: CATALOG[name] for name in ("geo", "krr_a", "krr_b")}
    nested = read_mechanism_catalog(write_catalog(tmp_path, {"mechanisms": CATALOG}), LINE)
    assert nested.names == catalog.names and nested.specs == catalog.specs


def test_a_rappor_catalog_reports_bit_vectors(tmp_path: Path) -> None:
    catalog = read_mechanism_catalog(write_catalog(tmp_path, RAPPOR), LINE)
    assert catalog.bit_vectors and catalog.mechanisms == (BasicRappor(epsilon=1.0, input_size=3),)
    np.testing.assert_array_equal(catalog.output_sizes, [3])


@pytest.mark.parametrize(
    ("document", "secrets", "says"),
    [
        ("{not json", LINE, "the mechanism catalog is not valid JSON"),
        ({}, LINE, "must be a non-empty JSON mapping of name to spec"),
        ([CATALOG["krr_a"]], LINE, "must be a non-empty JSON mapping of name to spec"),
        ({**CATALOG, "krr_b": {"type": "krr", "epsilon": 0.0, "input_size": 4}}, LINE, "mechanism 'krr_b': "),
        ({"x": {"type": "laplace", "epsilon": 1.0}}, LINE, "mechanism 'x': unknown mechanism type 'laplace'"),
        ({**CATALOG, "krr_c": {"type": "krr", "epsilon": 1.0, "input_size": 5}}, LINE,
         "mechanisms take different secret alphabets: 'geo' has 4 secrets, 'krr_c' has 5"),
        ({**RAPPOR, "k": {"type": "krr", "epsilon": 1.0, "input_size": 3}}, LINE,
         "RAPPOR (bit-vector reports) cannot be mixed with integer-report mechanisms"),
        (CATALOG, SecretLayout(values=5), "the mechanisms take 4 secrets but the config's secrets layout has 5"),
        ({"p": {"type": "planar_geometric", "epsilon": 1.0, "rows": 2, "columns": 3}},
         SecretLayout(layout="grid", rows=3, columns=2),
         "mechanism 'p' is over a 2 x 3 grid, the config's secrets are 3 x 2"),
    ],
)
def test_bad_catalogs_name_the_file(tmp_path: Path, document: object, secrets: SecretLayout, says: str) -> None:
    path = write_catalog(tmp_path, document)
    with pytest.raises(InputError) as caught:
        read_mechanism_catalog(path, secrets)
    assert_input_error(caught.value, path, says)


def test_a_missing_catalog_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        read_mechanism_catalog(tmp_path / "absent.json", LINE)
    assert_input_error(caught.value, tmp_path / "absent.json", "mechanism catalog not found")


def test_estimators_refuse_catalogs_they_cannot_take(tmp_path: Path) -> None:
    matrix = read_mechanism_catalog(write_catalog(tmp_path, CATALOG), LINE)
    rappor = read_mechanism_catalog(write_catalog(tmp_path, RAPPOR), LINE)
    path = tmp_path / "catalog.json"
    for method in ("gibu", "inv_m", "ibu_m"):
        check_estimator_fits(matrix, method, path)
    check_estimator_fits(rappor, "rap_m", path)
    check_estimator_fits(rappor, "gibu", path)
    with pytest.raises(ConfigError, match="estimator rap_m needs RAPPOR reports"):
        check_estimator_fits(matrix, "rap_m", path)
    for method in ("inv_m", "ibu_m"):
        with pytest.raises(ConfigError, match=f"estimator {method} needs one output alphabet of integer reports"):
            check_estimator_fits(rappor, method, path)


def test_fingerprint_covers_both_files_and_the_mapping(tmp_path: Path) -> None:
    reports = tmp_path / "reports.csv"
    reports.write_bytes(b"user_id,mechanism,report\n1,krr_a,0\n")
    catalog = write_catalog(tmp_path, '{"krr_a": {}}')
    settings = ldp_input(tmp_path, reports, catalog)
    expected = hashlib.sha256(
        b"user_id,mechanism,report\n1,krr_a,0\n\0" + b'{"krr_a": {}}\0'
        + b"[('mechanism', 'mechanism'), ('report', 'report'), ('user_id', 'user_id')]"
    ).hexdigest()
    assert reports_fingerprint(settings) == "sha256:" + expected


def test_csv_reports_are_read_as_text_with_row_numbers(tmp_path: Path) -> None:
    reports = tmp_path / "reports.csv"
    reports.write_text("rep,who,mech\n3,u1,krr_b\n 0 ,u2,geo\n")
    settings = ldp_input(tmp_path, reports, write_catalog(tmp_path, CATALOG),
                         columns={"user_id": "who", "mechanism": "mech", "report": "rep"})
    frame = read_ldp_reports(settings)
    assert list(frame.columns) == ["user_id", "mechanism", "report", "row_number"]
    assert frame["user_id"].tolist() == ["u1", "u2"]
    assert frame["mechanism"].tolist() == ["krr_b", "geo"]
    assert frame["report"].tolist() == ["3", " 0 "]
    assert frame["row_number"].dtype == np.int64 and frame["row_number"].tolist() == [1, 2]
    catalog = read_mechanism_catalog(settings.catalog, LINE)
    canonical = canonical_reports(frame, catalog, settings)
    assert list(canonical.columns) == [LDP_MECHANISM_CODE, "report"]
    assert canonical[LDP_MECHANISM_CODE].dtype == np.int32 and canonical[LDP_MECHANISM_CODE].tolist() == [2, 0]
    assert canonical["report"].dtype == np.int64 and canonical["report"].tolist() == [3, 0]


def test_parquet_reports_keep_integers_and_read_mechanisms_as_categories(tmp_path: Path) -> None:
    reports = tmp_path / "reports.parquet"
    pq.write_table(pa.table({"user_id": pa.array([7, 8, 9], pa.int64()), "mechanism": ["krr_a", "geo", "krr_a"],
                             "report": pa.array([1, 3, 0], pa.int32())}), reports)
    settings = ldp_input(tmp_path, reports, write_catalog(tmp_path, CATALOG), "parquet")
    frame = read_ldp_reports(settings)
    assert frame["user_id"].tolist() == [7, 8, 9]
    assert isinstance(frame["mechanism"].dtype, pd.CategoricalDtype)
    assert frame["mechanism"].astype(str).tolist() == ["krr_a", "geo", "krr_a"]
    canonical = canonical_reports(frame, read_mechanism_catalog(settings.catalog, LINE), settings)
    assert canonical[LDP_MECHANISM_CODE].tolist() == [1, 0, 1]
    assert canonical["report"].dtype == np.int64 and canonical["report"].tolist() == [1, 3, 0]


def test_rappor_reports_stay_bit_vector_text(tmp_path: Path) -> None:
    reports = tmp_path / "reports.csv"
    reports.write_text("user_id,mechanism,report\n1,r,010\n2,r,111\n")
    settings = ldp_input(tmp_path, reports, write_catalog(tmp_path, RAPPOR))
    canonical = canonical_reports(read_ldp_reports(settings), read_mechanism_catalog(settings.catalog, LINE), settings)
    assert canonical[LDP_MECHANISM_CODE].tolist() == [0, 0]
    assert canonical["report"].tolist() == ["010", "111"]


def reports_frame(report: list, mechanism: list[str] | None = None) -> pd.DataFrame:
    mechanism = mechanism or ["krr_a"] * len(report)
    return pd.DataFrame({"user_id": np.arange(len(report)), "mechanism": mechanism,
                         "report": pd.Series(report, dtype=object if any(isinstance(v, str) for v in report) else None),
                         "row_number": np.arange(1, len(report) + 1, dtype=np.int64)})


@pytest.mark.parametrize(
    ("report", "mechanism", "row", "says", "raw"),
    [
        (["0", "4"], ["krr_a", "krr_b"], 2, "report is outside mechanism 'krr_b''s output alphabet 0..3", "4"),
        (["-1", "0"], None, 1, "report is outside mechanism 'krr_a''s output alphabet 0..3", "-1"),
        (["1", "three"], None, 2, "report is not an integer", "three"),
        (["1", "2.0"], None, 2, "report is not an integer", "2.0"),
        ([1.0, 2.5, 3.0], None, 2, "report is not an integer", "2.5"),
        ([0, 1, 2, 3, 4], ["geo"] * 5, 5, "report is outside mechanism 'geo''s output alphabet 0..3", "4"),
    ],
)
def test_bad_integer_reports_name_the_row_and_column_not_the_report(
    tmp_path: Path, report: list, mechanism: list[str] | None, row: int, says: str, raw: str
) -> None:
    reports = tmp_path / "reports.csv"
    settings = ldp_input(tmp_path, reports, write_catalog(tmp_path, CATALOG),
                         columns={"report": "answer"})
    catalog = read_mechanism_catalog(settings.catalog, LINE)
    with pytest.raises(InputError) as caught:
        canonical_reports(reports_frame(report, mechanism), catalog, settings)
    assert_input_error(caught.value, reports, says, row=row, column="answer", hides=(raw,))


def test_a_fractional_parquet_report_is_not_shown_in_any_form(tmp_path: Path) -> None:
    """Once a strict xfail (the line showed ``report np.float64(2.5)``): an error line never
    carries the report, neither as a NumPy repr nor as a plain number."""
    reports = tmp_path / "reports.parquet"
    settings = ldp_input(tmp_path, reports, write_catalog(tmp_path, CATALOG), "parquet")
    with pytest.raises(InputError) as caught:
        canonical_reports(reports_frame([1.0, 2.5]), read_mechanism_catalog(settings.catalog, LINE), settings)
    assert_input_error(caught.value, reports, "report is not an integer", row=2, column="report",
                       hides=("2.5", "np.float64", "float64"))


def test_boolean_reports_are_refused(tmp_path: Path) -> None:
    reports = tmp_path / "reports.parquet"
    settings = ldp_input(tmp_path, reports, write_catalog(tmp_path, CATALOG), "parquet")
    frame = reports_frame([0, 1]).assign(report=[True, False])
    with pytest.raises(InputError) as caught:
        canonical_reports(frame, read_mechanism_catalog(settings.catalog, LINE), settings)
    assert_input_error(caught.value, reports, "not booleans", column="report")


@pytest.mark.parametrize(
    ("bits", "row", "says"),
    [
        (["010", "0100"], 2, "bit vector of length 4; the catalog's RAPPOR mechanisms report 3 bits"),
        (["010", "011", "0a1"], 3, "report is not a bit vector of 0s and 1s"),
    ],
)
def test_bad_bit_vectors_name_the_row_and_column(tmp_path: Path, bits: list[str], row: int, says: str) -> None:
    reports = tmp_path / "reports.csv"
    settings = ldp_input(tmp_path, reports, write_catalog(tmp_path, RAPPOR))
    with pytest.raises(InputError) as caught:
        canonical_reports(reports_frame(bits, ["r"] * len(bits)), read_mechanism_catalog(settings.catalog, LINE),
                          settings)
    assert_input_error(caught.value, reports, says, row=row, column="report", hides=(bits[row - 1],))


def test_file_level_report_errors_name_the_file(tmp_path: Path) -> None:
    catalog = write_catalog(tmp_path, CATALOG)
    header_only = tmp_path / "header.csv"
    header_only.write_text("user_id,mechanism,report\n")
    with pytest.raises(InputError) as caught:
        read_ldp_reports(ldp_input(tmp_path, header_only, catalog))
    assert_input_error(caught.value, header_only, "no rows (empty input)")
    no_report = tmp_path / "no_report.csv"
    no_report.write_text("user_id,mechanism\n1,krr_a\n")
    with pytest.raises(InputError) as caught:
        read_ldp_reports(ldp_input(tmp_path, no_report, catalog))
    assert_input_error(caught.value, no_report, "mapped column 'report' (for report) is missing", column="report")
