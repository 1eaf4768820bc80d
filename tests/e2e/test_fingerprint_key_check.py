"""A lake's fingerprint key is checked (issue 32 review): its keyed check value is recorded at
first use, and a release under another key — the key file replaced, or another environment
variable's value — is refused (exit 4, one line) before anything is reserved, so the recorded row
prints cannot silently stop matching and let a copy of an input buy a fresh budget."""

from __future__ import annotations

import secrets
from pathlib import Path

import pandas as pd
import yaml

from pipelines.cli import main
from tests.lake_setup import prepare_lake


def test_a_replaced_key_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    lake, key = tmp_path / "lake", tmp_path / "keys" / "lake.key"
    assert main(["init-lake", str(lake), "--test", "--key-file", str(key)]) == 0
    prepare_lake(lake, "first", "second")
    rows = [(obj, f"s{j}", float(10 * obj + j)) for obj in range(30) for j in range(6)]
    data = tmp_path / "claims.csv"
    pd.DataFrame(rows, columns=["object_id", "source_id", "value"]).to_csv(data, index=False)
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", "ab" * 32)

    copy = tmp_path / "copy" / "claims.csv"  # the same rows shuffled, elsewhere: a copy the row prints catch
    copy.parent.mkdir()
    pd.read_csv(data).sample(frac=1.0, random_state=3).to_csv(copy, index=False)

    def release(dataset: str, path: Path) -> int:
        config = tmp_path / f"{dataset}.yaml"
        config.write_text(yaml.safe_dump({
            "kind": "crowd", "dataset": dataset, "lake": str(lake), "input": {"path": str(path)},
            "privacy": {"epsilon": 1.0, "value_range": [0.0, 400.0]},
            "synthesis": {"claims_per_object": 5, "precision": 1.0}}))
        return main(["run", str(config)])

    assert release("first", data) == 0
    capsys.readouterr()
    assert release("second", copy) == 4  # the check works under the key it was made with
    assert "'first'" in capsys.readouterr().err
    key.write_text(secrets.token_hex(32) + "\n")
    assert release("second", copy) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not the key its input fingerprints were made with" in err[0]
