"""Release safety: the secret never reaches the lake, a failing output is quarantined with its
budget refunded, and nothing of it is published."""

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
    config = write_config(tmp_path, claims_csv, lake, privacy__budget={"epsilon": 100.0, "delta": 0.5})
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

    monkeypatch.setattr(crowd_pipeline, "validate_crowd_output", failing_gate)
    lake = tmp_path / "lake"
    config = write_config(tmp_path, claims_csv, lake, privacy__budget={"epsilon": 100.0, "delta": 0.5})
    code = main(["run", str(config), "--release-id", "doomed-1"])
    captured = capsys.readouterr()
    assert code == 3
    assert "quarantined" in captured.err and "injected" in captured.err
    assert len(captured.err.strip().splitlines()) == 1

    assert main(["releases", "--lake", str(lake)]) == 0
    assert capsys.readouterr().out.strip() == "no releases"
    quarantined = json.loads((lake / "quarantine" / "doomed-1" / "manifest.json").read_text())
    assert quarantined["status"] == "quarantined"
    assert quarantined["validation"]["output"]["success"] is False
    assert list((lake / "quarantine" / "doomed-1").rglob("*.parquet"))
    staging = lake / "staging"
    assert not (staging.exists() and any(path.is_file() for path in staging.rglob("*"))), "raw input left in staging"

    assert main(["ledger", "--lake", str(lake), "--json"]) == 0
    events = json.loads(capsys.readouterr().out)
    assert [event["status"] for event in events if event["release_id"] == "doomed-1"] == ["reserved", "refunded"]
