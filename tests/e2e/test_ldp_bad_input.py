"""Bad ldp input ends with one line naming the file, row and column, a non-zero exit, and nothing
published; the input files are never modified."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pipelines.cli import main
from tests.lake_setup import prepare_for

CATALOG = {
    "krr_a": {"type": "krr", "epsilon": 1.0, "input_size": 4},
    "krr_b": {"type": "krr", "epsilon": 2.0, "input_size": 4},
}
GOOD_REPORTS = pd.DataFrame({"user_id": [1, 2, 3, 4, 5], "mechanism": ["krr_a", "krr_b", "krr_a", "krr_b", "krr_a"],
                             "report": [0, 3, 2, 1, 0]})


def write_case(directory: Path, reports: pd.DataFrame | str, catalog: dict | str, method: str = "gibu",
               secrets: dict | None = None) -> Path:
    reports_path = directory / "reports.csv"
    if isinstance(reports, str):
        reports_path.write_text(reports)
    else:
        reports.to_csv(reports_path, index=False)
    catalog_path = directory / "catalog.json"
    catalog_path.write_text(catalog if isinstance(catalog, str) else json.dumps(catalog))
    config = {
        "kind": "ldp",
        "dataset": "bad",
        "lake": str(directory / "lake"),
        "input": {"path": str(reports_path), "format": "csv", "catalog": str(catalog_path)},
        "estimator": {"method": method},
    }
    if secrets is not None:
        config["secrets"] = secrets
    path = directory / "ldp.yaml"
    path.write_text(yaml.safe_dump(config))
    prepare_for(config)
    return path


def with_row(row: int, **changes: object) -> pd.DataFrame:
    frame = GOOD_REPORTS.copy()
    for column, value in changes.items():
        frame[column] = frame[column].astype(object)
        frame.loc[row, column] = value
    return frame


RAPPOR_CATALOG = {"r1": {"type": "rappor", "epsilon": 1.0, "input_size": 4}}
CASES: dict[str, tuple[Callable[[], tuple], tuple[str, ...]]] = {
    "unknown mechanism": (lambda: (with_row(2, mechanism="krr_z"), CATALOG), ("row 3", "'mechanism'", "unknown mechanism")),
    "report outside alphabet": (lambda: (with_row(3, report=4), CATALOG),
                                ("row 4", "'report'", "outside mechanism 'krr_b'", "0..3")),
    "negative report": (lambda: (with_row(0, report=-1), CATALOG), ("row 1", "outside")),
    "text report": (lambda: (with_row(1, report="three"), CATALOG), ("row 2", "report is not an integer")),
    "duplicate user": (lambda: (with_row(4, user_id=2), CATALOG), ("row 5", "more than one report")),
    "missing report": (lambda: (with_row(1, report=None), CATALOG), ("row 2", "report is missing")),
    "missing column": (lambda: (GOOD_REPORTS.drop(columns=["report"]), CATALOG), ("'report'", "missing")),
    "empty reports": (lambda: ("user_id,mechanism,report\n", CATALOG), ("no rows",)),
    "epsilon zero": (lambda: (GOOD_REPORTS, {**CATALOG, "krr_b": {"type": "krr", "epsilon": 0.0, "input_size": 4}}),
                     ("catalog.json", "mechanism 'krr_b'", "epsilon")),
    "unknown mechanism type": (lambda: (GOOD_REPORTS, {**CATALOG, "krr_b": {"type": "laplace", "epsilon": 1.0}}),
                               ("catalog.json", "unknown mechanism type")),
    "catalog not json": (lambda: (GOOD_REPORTS, "{not json"), ("catalog.json", "not valid JSON")),
    "different secret alphabets": (
        lambda: (GOOD_REPORTS, {**CATALOG, "krr_b": {"type": "krr", "epsilon": 1.0, "input_size": 5}}),
        ("different secret alphabets", "4 secrets", "5"),
    ),
    "bit vector of wrong length": (
        lambda: (pd.DataFrame({"user_id": [1, 2], "mechanism": ["r1", "r1"], "report": ["0100", "01000"]}),
                 RAPPOR_CATALOG),
        ("row 2", "'report'", "length 5", "4 bits"),
    ),
    "bit vector with other characters": (
        lambda: (pd.DataFrame({"user_id": [1, 2], "mechanism": ["r1", "r1"], "report": ["0100", "01x0"]}),
                 RAPPOR_CATALOG),
        ("row 2", "not a bit vector"),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_ldp_input_is_one_line_and_publishes_nothing(tmp_path: Path, case: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    make, expected = CASES[case]
    reports, catalog = make()
    config = write_case(tmp_path, reports, catalog)
    before = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in tmp_path.iterdir() if path.is_file()}
    assert main(["run", str(config), "--release-id", "bad-1"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    for fragment in expected:
        assert fragment in lines[0], lines[0]
    after = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in tmp_path.iterdir() if path.is_file()}
    assert after == before
    if (tmp_path / "lake").exists():
        assert main(["releases", "--lake", str(tmp_path / "lake"), "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == []


@pytest.mark.parametrize(
    ("method", "catalog", "expected"),
    [
        ("inv_m", {**CATALOG, "geo": {"type": "truncated_geometric", "epsilon": 1.0, "lower": 0, "upper": 3}}, None),
        ("inv_m", RAPPOR_CATALOG, "use rap_m or gibu"),
        ("ibu_m", RAPPOR_CATALOG, "use rap_m or gibu"),
        ("rap_m", CATALOG, "needs RAPPOR"),
    ],
)
def test_an_estimator_that_cannot_take_the_mix_says_so_and_suggests_one_that_can(
    tmp_path: Path, method: str, catalog: dict, expected: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = GOOD_REPORTS if "krr_a" in catalog else pd.DataFrame(
        {"user_id": [1, 2], "mechanism": ["r1", "r1"], "report": ["0100", "0010"]}
    )
    config = write_case(tmp_path, reports, catalog, method=method)
    code = main(["run", str(config), "--release-id", "mix-1"])
    error = capsys.readouterr().err.strip()
    if expected is None:
        assert code == 0, error
        return
    assert code == 2 and len(error.splitlines()) == 1
    assert expected in error and method in error


def test_secrets_layout_that_does_not_match_the_catalog_is_refused(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    config = write_case(tmp_path, GOOD_REPORTS, CATALOG, secrets={"layout": "line", "values": 5})
    assert main(["run", str(config), "--release-id", "layout-1"]) == 2
    error = capsys.readouterr().err.strip()
    assert "4 secrets" in error and "5" in error


@pytest.mark.spark
@pytest.mark.beam
@pytest.mark.parametrize("engine_name", ["local", "spark", "beam"])
def test_every_engine_names_the_same_first_bad_row_of_a_partitioned_input(
    tmp_path: Path, engine_name: str, spark_session
) -> None:
    """Issue 15: the reports checked where they live, fragment by fragment, in any split; the line
    names the first failing row of the whole input (file, row within it, column), not the first
    row some task happened to report — here a repeated user in the third file, before an unknown
    mechanism later in it and a report outside its alphabet in the fourth."""
    from pipelines.engines import make_engine
    from pipelines.ldp.pipeline import run_ldp_release
    from pipelines.platform.config import load_config
    from pipelines.platform.errors import InputError

    folder = tmp_path / "reports"
    frames = [GOOD_REPORTS.assign(user_id=GOOD_REPORTS["user_id"] + 10 * part).astype(object) for part in range(4)]
    frames[2].loc[1, "user_id"] = 13  # row 2 of part 2 repeats row 3 of part 1
    frames[2].loc[3, "mechanism"] = "krr_secret_z"
    frames[3].loc[0, "report"] = 7
    for part, frame in enumerate(frames):
        (folder / f"day=0{part}").mkdir(parents=True)
        frame.to_csv(folder / f"day=0{part}" / "part-0.csv", index=False)
    (folder / "_SUCCESS").write_text("")
    config_path = write_case(tmp_path, GOOD_REPORTS, CATALOG)
    document = yaml.safe_load(config_path.read_text())
    document["input"] = {"path": str(folder), "catalog": document["input"]["catalog"]}
    config_path.write_text(yaml.safe_dump(document))
    engine = make_engine("spark", spark_session=spark_session) if engine_name == "spark" else make_engine(engine_name)
    with engine, pytest.raises(InputError) as caught:
        run_ldp_release(load_config(config_path), release_id="bad-1", engine=engine)
    assert str(caught.value) == (
        f"{folder / 'day=02' / 'part-0.csv'}, row 2, column 'user_id': a user sent more than one report (one report "
        f"per user); the same user_id as {folder / 'day=01' / 'part-0.csv'}, row 3"
    )
