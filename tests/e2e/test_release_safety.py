"""Release safety: the secret never reaches the lake, a failing output is deleted with its budget
refunded (why it failed is in the operator-only record) and nothing of it is published, a charge is
final once published, and a test secret only goes into a test lake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pipelines.crowd.pipeline as crowd_pipeline
from pipelines.cli import main
from pipelines.platform.validation import ValidationIssue, ValidationResult
from tests.e2e.conftest import TEST_SECRET_HEX, write_config


def test_the_release_secret_is_written_nowhere(tmp_path: Path, claims_csv: Path, capsys) -> None:
    lake = tmp_path / "lake"
    config = write_config(tmp_path, claims_csv, lake)
    assert main(["run", str(config)]) == 0
    release_id = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["show", release_id, "--lake", str(lake), "--json"]) == 0
    shown = capsys.readouterr().out
    secret = bytes.fromhex(TEST_SECRET_HEX)
    needles = [secret, TEST_SECRET_HEX.encode(), TEST_SECRET_HEX.upper().encode()]
    files = [path for path in lake.rglob("*") if path.is_file()]
    assert len(files) > 3
    for path in files:
        content = path.read_bytes()
        for needle in needles:
            assert needle not in content, f"the secret leaked into {path}"
    for needle in needles:
        assert needle.decode("latin-1") not in shown
    assert "PRIVLAKE_TEST_SECRET" in json.loads(shown)["secret_source"]


def test_failing_output_goes_to_quarantine_and_is_refunded(
    tmp_path: Path, claims_csv: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_gate(*_args, **_kwargs) -> ValidationResult:
        issue = ValidationIssue(None, None, "value", "synthetic value out of range (injected)")
        return ValidationResult(False, [], [issue])

    monkeypatch.setattr(crowd_pipeline, "validate_crowd_output_metrics", failing_gate)
    lake = tmp_path / "lake"
    config = write_config(tmp_path, claims_csv, lake)
    code = main(["run", str(config), "--release-id", "doomed-1"])
    captured = capsys.readouterr()
    assert code == 3
    assert "quarantined" in captured.err and "injected" in captured.err
    assert len(captured.err.strip().splitlines()) == 1

    assert main(["releases", "--lake", str(lake)]) == 0
    assert capsys.readouterr().out.strip() == "no releases"
    assert not list(lake.rglob("*doomed*/*.parquet")) and not (lake / "quarantine" / "doomed-1").exists(), \
        "a refunded release keeps no output"
    staging = lake / "staging"
    assert not (staging.exists() and any(path.is_file() for path in staging.rglob("*"))), "raw input left in staging"
    assert main(["show", "doomed-1", "--lake", str(lake), "--internal", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["manifest"]["status"] == "quarantined" and "injected" in record["first_issue"]

    assert main(["ledger", "--lake", str(lake), "--json"]) == 0
    events = json.loads(capsys.readouterr().out)
    assert [event["status"] for event in events if event["release_id"] == "doomed-1"] == ["reserved", "refunded"]


def test_a_failure_after_the_commit_keeps_the_release_charged(
    tmp_path: Path, claims_csv: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Book-keeping that fails after the commit (here: the operator record) must not refund a
    published release, nor fail it."""
    from pipelines.platform.internal import OperatorRecords

    def broken(*_args, **_kwargs) -> None:
        raise OSError("disk full (injected)")

    monkeypatch.setattr(OperatorRecords, "record", broken)
    lake = tmp_path / "lake"
    config = write_config(tmp_path, claims_csv, lake)
    assert main(["run", str(config), "--release-id", "kept-1"]) == 0
    captured = capsys.readouterr()
    assert "is published, but book-keeping after the commit failed" in captured.err
    assert main(["ledger", "--lake", str(lake), "--json"]) == 0
    statuses = [event["status"] for event in json.loads(capsys.readouterr().out) if event["release_id"] == "kept-1"]
    assert statuses == ["reserved", "published"]
    assert main(["show", "kept-1", "--lake", str(lake), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "published"


def test_the_test_secret_goes_only_into_a_test_lake(tmp_path: Path, claims_csv: Path, capsys) -> None:
    lake = tmp_path / "production"
    config = write_config(tmp_path, claims_csv, lake, prepare=False)
    assert main(["budget", "set", "small", "--epsilon", "1e9", "--delta", "0.5", "--lake", str(lake)]) == 0
    capsys.readouterr()
    assert main(["run", str(config)]) == 4
    error = capsys.readouterr().err
    assert "PRIVLAKE_TEST_SECRET is set" in error and "init-lake" in error
    assert main(["ledger", "--lake", str(lake)]) == 0
    assert capsys.readouterr().out.strip() == "the ledger is empty"


def test_a_release_without_a_budget_is_refused(tmp_path: Path, claims_csv: Path, capsys) -> None:
    lake = tmp_path / "lake"
    config = write_config(tmp_path, claims_csv, lake, prepare=False)
    assert main(["init-lake", str(lake), "--test"]) == 0
    capsys.readouterr()
    assert main(["run", str(config)]) == 4
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "no privacy budget" in error and "privlake budget set small" in error


def test_the_charge_is_the_manifest_headline_and_is_named(tmp_path: Path, claims_csv: Path, capsys) -> None:
    lake = tmp_path / "lake"
    config = write_config(tmp_path, claims_csv, lake)
    assert main(["run", str(config), "--release-id", "charged-1"]) == 0
    capsys.readouterr()
    assert main(["show", "charged-1", "--lake", str(lake), "--json"]) == 0
    manifest = json.loads(capsys.readouterr().out)
    assert main(["ledger", "--lake", str(lake), "--json"]) == 0
    event = json.loads(capsys.readouterr().out)[0]
    assert (event["epsilon"], event["delta"]) == (manifest["epsilon"], manifest["delta"])
    assert manifest["charged"]["unit"] == "release" and manifest["test_lake"] is True
    assert event["steps"] == manifest["guarantee"]["steps"]
    assert "claim" in event["privacy_unit"]
    for raw_figure in ("pass_rate", "candidate_attempts", "input_fingerprint", "evaluation", "timings"):
        assert raw_figure not in manifest
