"""Import discipline of a small release (issue 16, "Fast start"), and the validation gate's worker.

A release on the local engine imports no engine it does not run (PySpark, Apache Beam), no torch
unless it is a filter release, and keeps Great Expectations out of its own process: GX is imported
by the gate's worker, a child process, while the release imports, reads and plans
(``pipelines/platform/validation.py``). Each release runs in a fresh interpreter, ``privlake run``
as a scheduler calls it, and reports the modules it loaded. The worker must give GX's in-process
outcomes exactly: same checks, same issue lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipelines.crowd.validation import validate_crowd_input
from pipelines.platform import validation
from schemas.crowd.expectations import crowd_input_suites
from tests.e2e.conftest import small_claims, write_config

ROOT = Path(__file__).resolve().parents[2]
WATCHED = ("great_expectations", "pyspark", "apache_beam", "torch", "sqlalchemy.dialects.postgresql")
SECRET_HEX = "d15c" * 16

RUN_AND_LIST_MODULES = """
import json, sys
from pipelines.cli import main
code = main(["run", sys.argv[1], "--json"])
watched = {watched!r}
print(json.dumps({{"exit": code, "loaded": sorted(m for m in watched if m in sys.modules)}}))
"""


def run_in_fresh_process(config: Path, **environment: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST_MODULES.format(watched=WATCHED), str(config)],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
        env={**os.environ, "PRIVLAKE_TEST_SECRET": SECRET_HEX, **environment},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["exit"] == 0, done.stderr[-3000:]
    return report


def printed_by_python(code: str) -> str:
    """What ``python -c code`` prints in a fresh interpreter (its modules are its own)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def canonical_claims() -> pd.DataFrame:
    """The small claims with the canonical column names the gate's suites check."""
    return small_claims().rename(columns={"question": "object_id", "worker": "source_id", "answer": "value"})


def crowd_config(directory: Path) -> Path:
    claims = directory / "claims.csv"
    small_claims().to_csv(claims, index=False)
    return write_config(directory, claims, directory / "lake")


def tabular_config(directory: Path) -> Path:
    from tests.e2e.test_tabular_release import census_like, tabular_case

    return tabular_case(directory, census_like(800))


def ldp_config(directory: Path) -> Path:
    from pipelines.ldp.simulation import simulate_ldp_reports
    from pipelines.platform.config import load_config
    from tests.e2e.test_ldp_release import MIXED
    from tests.e2e.test_ldp_release import ldp_config as make_config

    path = make_config(directory, MIXED)
    os.environ["PRIVLAKE_TEST_SECRET"] = SECRET_HEX
    simulate_ldp_reports(load_config(path))
    return path


CASES = {"crowd": crowd_config, "tabular": tabular_config, "ldp": ldp_config}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_local_release_imports_no_engine_no_torch_and_validates_outside_its_process(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)
    config = CASES[kind](tmp_path)
    report = run_in_fresh_process(config)
    assert report["loaded"] == [], f"a local {kind} release imported {report['loaded']}"


def test_without_the_worker_the_gate_runs_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``PRIVLAKE_GATE_WORKER=0``: GX in the release's process (the check above can fail)."""
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)
    report = run_in_fresh_process(crowd_config(tmp_path), PRIVLAKE_GATE_WORKER="0")
    assert "great_expectations" in report["loaded"]


def test_the_command_line_alone_imports_nothing_heavy() -> None:
    """``privlake --help`` (and so the start of every command) loads no data library."""
    code = ("import sys\nfrom pipelines.cli import build_parser\nbuild_parser()\n"
            "print(sorted(m for m in ('pandas', 'numpy', 'pyarrow', 'pyiceberg', 'great_expectations', 'scipy') "
            "if m in sys.modules))")
    assert printed_by_python(code).strip() == "[]"


@pytest.fixture(scope="module")
def worker():
    started = validation._GateWorker()
    yield started
    started.close()


def bad_frames() -> list[pd.DataFrame]:
    good = canonical_claims()
    frames = [good]
    for column, value in (("value", np.nan), ("value", np.inf), ("source_id", None), ("object_id", None)):
        frame = good.copy()
        frame.loc[[3, 17], column] = value
        frames.append(frame)
    frames.append(pd.concat([good, good.iloc[[5, 9]]], ignore_index=True))
    frames.append(good.drop(columns=["source_id"]))
    frames.append(good.assign(value=good["value"].astype(str)))
    return frames


@pytest.mark.parametrize("policy", ["reject", "mean"])
def test_the_worker_gives_gx_outcomes_exactly_as_in_process(worker, policy: str) -> None:
    for frame in bad_frames():
        frame = validation.with_row_numbers(frame)
        for suite in crowd_input_suites(policy):
            outcomes = worker.run(frame, suite)
            assert outcomes is not None, "the worker did not answer"
            here = [outcome for _, outcome in validation.run_suite_here(frame, suite)]
            assert repr(outcomes) == repr(here)  # repr: NaN in a result is not equal to itself


def test_issue_lines_are_the_same_through_the_worker(worker, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = {}
    for through_worker in (False, True):
        monkeypatch.setattr(validation, "_WORKER", worker if through_worker else None)
        lines[through_worker] = [
            json.dumps(validate_crowd_input(frame, file_name="claims.csv", duplicates_policy="reject",
                                            column_names={"value": "answer"}).to_json(), sort_keys=True)
            for frame in bad_frames()
        ]
    assert lines[True] == lines[False]
    assert sum('"success": false' in line for line in lines[True]) >= 6


def test_a_dead_worker_leaves_the_gate_to_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    dead = validation._GateWorker()
    dead.process.kill()
    dead.process.wait()
    monkeypatch.setattr(validation, "_WORKER", dead)
    frame = validation.with_row_numbers(canonical_claims().assign(value=np.inf))
    result = validate_crowd_input(frame, file_name="claims.csv", duplicates_policy="reject")
    assert not result.success and "infinite" in result.first_line()
    assert dead.broken


def test_the_grid_distance_imports_pot_without_torch_only_when_called() -> None:
    """POT (and with it scikit-learn and networkx) loads only for a grid's EMD, never torch."""
    code = ("import sys, numpy as np\nfrom transforms.ldp import distribution_metrics as m\nbefore = 'ot' in sys.modules\n"
            "m.earth_movers_distance_grid(np.full(4, 0.25), np.array([1.0, 0, 0, 0]), 2, 2)\n"
            "print(before, 'ot' in sys.modules, 'torch' in sys.modules)")
    assert printed_by_python(code).split() == ["False", "True", "False"]


def test_the_worker_defers_what_gx_imports_for_expectations_privlake_does_not_use() -> None:
    """In the worker, Altair and scipy.stats are registered but not run by GX's import (the
    check fails without ``prepare_gx_imports``: both then load in full)."""
    code = ("import sys\nfrom pipelines.platform import validation as v\n"
            "v.prepare_gx_imports()\nimport great_expectations\n"
            "print(sorted(type(sys.modules[name]).__name__ for name in v.DEFERRED_FOR_GX))")
    assert printed_by_python(code).strip() == "['_LazyModule', '_LazyModule']"
    plain = "import sys\nimport great_expectations\nprint(type(sys.modules['altair']).__name__)"
    assert printed_by_python(plain).strip() == "module"
