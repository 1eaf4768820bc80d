"""The ldp catalog reader (``pipelines/ldp/input.py``): the mechanism catalog in name order, and every
bad catalog as one ``InputError`` line naming the file. (The reports are read on the engine:
``test_engine_input.py``.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipelines.ldp.input import (
    check_estimator_fits,
    read_mechanism_catalog,
)
from pipelines.platform.errors import ConfigError, InputError
from schemas.ldp.config import SecretLayout
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
