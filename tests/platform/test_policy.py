"""Lake policy (``pipelines/platform/policy.py``): budgets an operator sets, datasets bound to their
inputs, keyed fingerprints with the key outside the lake, test lakes — and the CLI that sets them."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from pipelines.cli import main
from pipelines.platform.errors import PrivlakeError, ReleaseRefused
from pipelines.platform.lake import Lake
from pipelines.platform.policy import FINGERPRINTS_SCHEMA, FINGERPRINTS_TABLE, LakePolicy


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    with Lake(tmp_path / "lake") as opened:
        yield opened


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def files_under(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


def test_a_release_without_a_budget_is_refused(lake: Lake, tmp_path: Path) -> None:
    data = write(tmp_path / "in" / "a.csv", "x\n1\n")
    with pytest.raises(ReleaseRefused, match="dataset 'claims' has no privacy budget.*privlake budget set claims"):
        LakePolicy(lake).admit("claims", data)


def test_budgets_are_set_listed_and_the_latest_wins(lake: Lake) -> None:
    policy = LakePolicy(lake)
    policy.set_budget("claims", 1.0, 1e-6)
    policy.set_budget("other", 2.0, 1e-5, unit="record")
    policy.set_budget("claims", 0.5, 1e-7)
    budgets = {budget.dataset: budget for budget in policy.budgets()}
    assert (budgets["claims"].epsilon, budgets["claims"].delta, budgets["claims"].unit) == (0.5, 1e-7, "release")
    assert budgets["other"].unit == "record"
    for bad in ((float("inf"), 1e-6, "release"), (1.0, 1.0, "release"), (0.0, 1e-6, "release"), (1.0, 1e-6, "claim")):
        with pytest.raises(PrivlakeError):
            policy.set_budget("claims", *bad)


def test_a_dataset_cannot_be_renamed_to_renew_its_budget(lake: Lake, tmp_path: Path) -> None:
    policy = LakePolicy(lake)
    policy.set_budget("emotion", 10.0, 1e-6)
    policy.set_budget("emotion_v2", 10.0, 1e-6)
    folder = tmp_path / "in"
    first = write(folder / "day1.csv", "x\n1\n2\n")
    policy.admit("emotion", folder)
    policy.check_inputs("emotion", "r1", folder)
    with pytest.raises(ReleaseRefused, match="belongs to dataset 'emotion', not 'emotion_v2'"):
        policy.admit("emotion_v2", first)
    write(folder / "day2.csv", "x\n3\n")
    policy.admit("emotion", folder / "day2.csv")  # a new file in the same location: same budget
    copy = write(tmp_path / "elsewhere" / "copy.csv", first.read_text())
    policy.admit("emotion_v2", copy)
    with pytest.raises(ReleaseRefused, match="identical to one of dataset 'emotion'"):
        policy.check_inputs("emotion_v2", "r4", copy)
    policy.check_inputs("emotion", "r5", copy)  # the same dataset may read its data from another place


def test_fingerprints_are_keyed_with_a_key_outside_the_lake(lake: Lake, tmp_path: Path) -> None:
    policy = LakePolicy(lake)
    policy.set_budget("claims", 1.0, 1e-6)
    data = write(tmp_path / "in" / "a.csv", "x\n42\n")
    policy.check_inputs("claims", "r1", data)
    stored = policy._read(FINGERPRINTS_TABLE, FINGERPRINTS_SCHEMA).to_pylist()
    assert len(stored) == 1
    assert stored[0]["fingerprint"] != hashlib.sha256(data.read_bytes()).hexdigest(), "an unkeyed hash can be tested"
    key_files = [path for path in Path(os.environ["PRIVLAKE_KEY_DIR"]).iterdir() if path.suffix == ".key"]
    assert key_files and all(lake.root not in path.parents for path in key_files)
    assert oct(key_files[0].stat().st_mode & 0o777) == "0o600"
    key = next(path for path in key_files if path.read_text().strip() and policy.fingerprint_key().hex() in path.read_text())
    assert key.read_text().strip() not in "".join(path.read_text(errors="ignore") for path in files_under(lake.root))
    with pytest.raises(PrivlakeError, match="outside the lake"):
        LakePolicy(lake).initialize(test=False, key_file=lake.root / "inside.key")


def test_a_missing_key_refuses_the_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Lake(tmp_path / "lake") as lake:
        policy = LakePolicy(lake)
        policy.initialize(test=False, key_variable="LAKE_KEY_FOR_TEST")
        policy.set_budget("claims", 1.0, 1e-6)
        data = write(tmp_path / "a.csv", "x\n1\n")
        monkeypatch.delenv("LAKE_KEY_FOR_TEST", raising=False)
        with pytest.raises(ReleaseRefused, match="LAKE_KEY_FOR_TEST"):
            policy.check_inputs("claims", "r1", data)
        monkeypatch.setenv("LAKE_KEY_FOR_TEST", "ab" * 32)
        policy.check_inputs("claims", "r1", data)


def test_a_lake_keeps_its_kind(lake: Lake) -> None:
    policy = LakePolicy(lake)
    assert policy.lake_kind() is None and not policy.is_test_lake()
    policy.initialize(test=True)
    assert policy.is_test_lake()
    with pytest.raises(ReleaseRefused, match="already a test lake"):
        policy.initialize(test=False)


def test_the_budget_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = tmp_path / "lake"
    data = write(tmp_path / "in" / "a.csv", "x\n1\n")
    assert main(["budget", "set", "claims", "--epsilon", "2", "--delta", "1e-6", "--location", str(data),
                 "--lake", str(lake)]) == 0
    assert "budget epsilon=2 at delta=1e-06" in capsys.readouterr().out
    assert main(["budget", "show", "claims", "--lake", str(lake), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["epsilon"], shown["delta"], shown["unit"], shown["spent_epsilon"]) == (2.0, 1e-6, "release", 0.0)
    assert shown["locations"] == [str(data.resolve())]
    assert main(["budget", "list", "--lake", str(lake), "--json"]) == 0
    assert [row["dataset"] for row in json.loads(capsys.readouterr().out)] == ["claims"]
    assert main(["budget", "show", "nothing", "--lake", str(lake)]) == 2
    assert main(["budget", "set", "claims", "--epsilon", "inf", "--delta", "1e-6", "--lake", str(lake)]) == 2
    assert "finite" in capsys.readouterr().err
    before = files_under(lake)
    assert main(["budget", "list", "--lake", str(lake)]) == 0
    assert main(["ledger", "--lake", str(lake)]) == 0
    assert files_under(lake) == before, "reading commands never write"


def test_init_lake_makes_a_test_lake(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = tmp_path / "lake"
    assert main(["init-lake", str(lake), "--test"]) == 0
    assert "test lake" in capsys.readouterr().out
    with Lake(lake) as opened:
        assert LakePolicy(opened).is_test_lake()
    assert main(["init-lake", str(lake)]) == 4


def test_folder_and_glob_inputs_are_fingerprinted_without_their_markers(lake: Lake, tmp_path: Path) -> None:
    """Two datasets' partitioned folders both hold an empty ``_SUCCESS`` (and ``.crc`` files): those
    are not data and must not make one look like a copy of the other; a glob's matches are
    fingerprinted like a folder's files."""
    policy = LakePolicy(lake)
    policy.set_budget("first", 1.0, 1e-6)
    policy.set_budget("second", 1.0, 1e-6)
    for name, text in (("first", "x\n1\n"), ("second", "x\n2\n")):
        write(tmp_path / name / "day=01" / "part-0.csv", text)
        write(tmp_path / name / "_SUCCESS", "")
        write(tmp_path / name / "day=01" / ".part-0.csv.crc", "crc")
    policy.check_inputs("first", "r1", tmp_path / "first")
    policy.check_inputs("second", "r2", tmp_path / "second")
    stored = policy._read(FINGERPRINTS_TABLE, FINGERPRINTS_SCHEMA).to_pylist()
    assert sorted(Path(row["location"]).name for row in stored) == ["part-0.csv", "part-0.csv"]
    copy = write(tmp_path / "copy" / "day=01" / "part-0.csv", "x\n1\n")
    with pytest.raises(ReleaseRefused, match="identical to one of dataset 'first'"):
        policy.check_inputs("second", "r3", f"{copy.parent.parent}/day=*/*.csv")
