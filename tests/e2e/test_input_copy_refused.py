"""A dataset's copied input is refused with the executors' fingerprints (issue 15): no release
hashes its input on the driver (``pipelines/platform/input_prints.py``).

For every kind: a release of one dataset records its files' keyed fingerprints — the very values
the driver-side reference (``LakePolicy.fingerprints``, what lakes have always recorded) gives —
and a release of another dataset reading a byte-identical copy is refused with exit 4 and the
policy's one line, publishes nothing and is not charged (its reservation, if it made one, is given
back). The driver's own file hashing is disabled throughout: a release that fell back to it fails.
On Spark, the fragments' hashing is disabled in the driver process too, so the digests can only
come from the Python workers."""

from __future__ import annotations

import hashlib
import hmac
import shutil
from pathlib import Path

import pytest
import yaml

from pipelines.cli import main
from pipelines.engines import make_engine
from pipelines.ldp.simulation import simulate_ldp_reports
from pipelines.platform import input_prints, policy, sources
from pipelines.platform.config import load_config
from pipelines.platform.errors import ReleaseRefused
from pipelines.platform.lake import Lake
from pipelines.platform.ledger import PrivacyLedger
from pipelines.platform.policy import FINGERPRINTS_SCHEMA, FINGERPRINTS_TABLE, LakePolicy
from tests.e2e.conftest import TEST_SECRET_HEX, small_claims
from tests.e2e.conftest import write_config as crowd_config
from tests.e2e.test_filter_release import filter_case
from tests.e2e.test_ldp_release import MIXED, ldp_config
from tests.e2e.test_tabular_release import tabular_case
from tests.lake_setup import prepare_for

KINDS = ("crowd", "tabular", "ldp", "filter")


@pytest.fixture(autouse=True)
def _no_driver_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", TEST_SECRET_HEX)

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the driver hashed the input files")

    monkeypatch.setattr(LakePolicy, "fingerprints", refuse)
    monkeypatch.setattr(policy, "input_files", refuse)


def _rewrite(path: Path, **changes: object) -> Path:
    config = yaml.safe_load(path.read_text())
    config.update(changes)
    path.write_text(yaml.safe_dump(config))
    return path


def original_and_copy(kind: str, root: Path) -> tuple[Path, Path, Path]:
    """A config of dataset ``<kind>-a``, a config of dataset ``<kind>-b`` in the same lake reading a
    byte-identical copy of its input from elsewhere, and the input file."""
    first, second, lake = root / "first", root / "second", root / "lake"
    first.mkdir()
    second.mkdir()
    if kind == "crowd":
        data = first / "claims.csv"
        small_claims().to_csv(data, index=False)
        config = crowd_config(first, data, lake, dataset="crowd-a")
        shutil.copy(data, second / "claims.csv")
        copied = crowd_config(second, second / "claims.csv", lake, dataset="crowd-b")
        return config, copied, data
    if kind == "tabular":
        config = _rewrite(tabular_case(first), dataset="tabular-a", lake=str(lake))
        copied = _rewrite(tabular_case(second), dataset="tabular-b", lake=str(lake))
        for path in (config, copied):
            prepare_for(path, unit="record")
        return config, copied, first / "records.csv"
    if kind == "ldp":
        config = _rewrite(ldp_config(first, MIXED), dataset="ldp-a", lake=str(lake))
        prepare_for(config)
        simulate_ldp_reports(load_config(config))
        for name in ("reports.parquet", "catalog.json", "truth.parquet", "secrets.csv"):
            shutil.copy(first / name, second / name)
        text = config.read_text().replace(str(first), str(second))
        copied = second / "ldp.yaml"
        copied.write_text(text)
        _rewrite(copied, dataset="ldp-b")
        prepare_for(copied)
        return config, copied, first / "reports.parquet"
    config = _rewrite(filter_case(first), dataset="filter-a", lake=str(lake))
    copied = _rewrite(filter_case(second), dataset="filter-b", lake=str(lake))
    for path in (config, copied):
        prepare_for(path)
    assert main(["train-encoder", str(config)]) == 0
    assert main(["train-encoder", str(copied)]) == 0
    return config, copied, first / "records.csv"


def recorded(lake: Path) -> list[dict]:
    with Lake(lake) as opened:
        return LakePolicy(opened)._read(FINGERPRINTS_TABLE, FINGERPRINTS_SCHEMA).to_pylist()


def lake_key_digest(lake: Path, data: Path) -> str:
    with Lake(lake) as opened:
        key = LakePolicy(opened).fingerprint_key()
    return hmac.new(key, data.read_bytes(), hashlib.sha256).hexdigest()


@pytest.mark.parametrize("kind", KINDS)
def test_a_copied_input_is_refused_with_the_executors_fingerprints(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, copied, data = original_and_copy(kind, tmp_path)
    lake = tmp_path / "lake"
    assert main(["run", str(config), "--release-id", f"{kind}-a-1"]) == 0
    dataset = f"{kind}-a"
    rows = [row for row in recorded(lake) if row["dataset"] == dataset]
    assert [row["fingerprint"] for row in rows] == [lake_key_digest(lake, data)], \
        "the executors' digest is the one lakes have always recorded: HMAC-SHA256 under the lake's key"
    assert Path(rows[0]["location"]).resolve() == data.resolve()
    capsys.readouterr()

    assert main(["run", str(copied), "--release-id", f"{kind}-b-1"]) == 4
    error = capsys.readouterr().err
    assert f"this input is identical to one of dataset '{dataset}'" in error
    assert "a dataset's budget cannot be renewed by copying its input" in error
    with Lake(lake) as opened:
        assert not opened.is_published(f"{kind}-b-1")
        ledger = PrivacyLedger(opened)
        event = ledger.latest_event(f"{kind}-b", f"{kind}-b-1")
    # not charged, as before: the kinds that reserve from the config alone give the reservation back; the tabular
    # kind, which reserves once the engine counted its records, refuses before reserving
    assert (event is None) if kind == "tabular" else (event["status"] == "refunded")
    assert not [row for row in recorded(lake) if row["dataset"] == f"{kind}-b"], "a refused input is not recorded"


def test_the_executor_key_gives_the_lake_keys_digests() -> None:
    message = b"privlake input bytes" * 100
    for length in (16, 31, 32, 33, 48, 64, 65, 100):
        key = bytes(range(7, 7 + length))
        expected = hmac.new(key, message, hashlib.sha256).hexdigest()
        short = policy.executor_key_of(key)
        if 32 < length <= 64:
            assert short is None
        else:
            assert short is not None and len(short) == 32
            assert hmac.new(short, message, hashlib.sha256).hexdigest() == expected
        halves = input_prints.key_halves(key)
        assert [len(half) for half in halves] == [32, 32]
        assert hmac.new(halves[0] + halves[1], message, hashlib.sha256).hexdigest() == expected


@pytest.mark.spark
def test_on_spark_the_digests_come_from_the_workers(tmp_path: Path, spark_session,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The fragments' hashing raises in the driver process; the Python workers hash them."""
    from pipelines.tabular import engine_input
    from pipelines.tabular.pipeline import run_tabular_release

    config, copied, _ = original_and_copy("tabular", tmp_path)

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the driver hashed an input fragment")

    for module in (sources, engine_input, input_prints):
        monkeypatch.setattr(module, "fragment_fingerprint", refuse)
    with make_engine("spark", spark_session=spark_session) as engine:
        run_tabular_release(load_config(config), release_id="tabular-a-1", engine=engine)
        with pytest.raises(ReleaseRefused, match="identical to one of dataset 'tabular-a'"):
            run_tabular_release(load_config(copied), release_id="tabular-b-1", engine=engine)


@pytest.mark.parametrize("kind", ["crowd", "tabular", "filter"])
def test_a_copy_is_refused_before_its_bad_value_is_reported(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The check runs on the prints before the input gate: a release whose input has a bad value
    fails (exit 2) and, when it held its reservation by then (crowd and filter reserve from the
    config), its input is bound, so another dataset reading a copy is refused (exit 4), not told
    about the bad value. The tabular kind reserves once the engine has counted the records, after
    the gate: its failed release binds nothing (issue 32: nothing is bound without a reservation),
    and the copy fails as the original did."""
    config, copied, data = original_and_copy(kind, tmp_path)
    text = data.read_text().splitlines()
    fields = text[5].split(",")
    fields[-1 if kind == "crowd" else 1] = ""  # a missing value in a required column
    text[5] = ",".join(fields)
    bad = "\n".join(text) + "\n"
    data.write_text(bad)
    copy_path = Path(str(data).replace(str(tmp_path / "first"), str(tmp_path / "second")))
    copy_path.write_text(bad)
    assert main(["run", str(config), "--release-id", f"{kind}-a-1"]) == 2
    capsys.readouterr()
    if kind == "tabular":
        assert recorded(tmp_path / "lake") == [], "a release that never reserved binds nothing"
        assert main(["run", str(copied), "--release-id", f"{kind}-b-1"]) == 2
        assert "row 5, column 'sex': missing value" in capsys.readouterr().err
        return
    assert [row["dataset"] for row in recorded(tmp_path / "lake")] == [f"{kind}-a"]
    assert main(["run", str(copied), "--release-id", f"{kind}-b-1"]) == 4
    assert f"identical to one of dataset '{kind}-a'" in capsys.readouterr().err


def test_a_key_without_a_32_byte_form_is_checked_by_the_platforms_own_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A 48-byte lake key has no 32-byte form with the same HMAC: the kind keys its own digests and
    the platform hashes the fragments on the engine (two 32-byte halves), with the same values."""
    monkeypatch.setenv("LAKE_KEY_48", "ab" * 48)
    with Lake(tmp_path / "lake") as lake:
        LakePolicy(lake).initialize(test=True, key_variable="LAKE_KEY_48")
        assert LakePolicy(lake).executor_key() is None
    config, copied, data = original_and_copy("ldp", tmp_path)
    assert main(["run", str(config), "--release-id", "ldp-a-1"]) == 0
    assert [row["fingerprint"] for row in recorded(tmp_path / "lake")] == [
        hmac.new(bytes.fromhex("ab" * 48), data.read_bytes(), hashlib.sha256).hexdigest()]
    capsys.readouterr()
    assert main(["run", str(copied), "--release-id", "ldp-b-1"]) == 4
    assert "identical to one of dataset 'ldp-a'" in capsys.readouterr().err
