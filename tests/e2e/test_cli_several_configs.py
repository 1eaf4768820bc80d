"""``privlake run A.yaml B.yaml ...``: several releases in order on one engine started once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pipelines.platform.release as release_run
from tests.e2e.conftest import small_claims, write_config
from tests.e2e.test_cli_bad_input import assert_one_line_failure, run_cli


def _configs(tmp_path: Path, names: list[str], prepare: bool = True, **overrides: object) -> tuple[list[Path], Path]:
    lake = tmp_path / "lake"
    paths = []
    for index, name in enumerate(names):
        folder = tmp_path / name
        folder.mkdir()
        data = folder / "claims.csv"
        small_claims(seed=10 + index).to_csv(data, index=False)
        paths.append(write_config(folder, data, lake, prepare=prepare, dataset=name, **overrides))
    return paths, lake


def test_several_configs_share_one_engine_and_a_bad_one_fails_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (first, broken, third), lake = _configs(tmp_path, ["first", "broken", "third"])
    (broken.parent / "claims.csv").unlink()
    started = []
    real_start = release_run.start_engine

    def counting_start(*arguments, **keywords):
        engine = real_start(*arguments, **keywords)
        started.append(engine)
        return engine

    monkeypatch.setattr(release_run, "start_engine", counting_start)
    code, out, err = run_cli(capsys, "run", str(first), str(broken), str(third))

    assert_one_line_failure(code, err, str(broken), "claims.csv")
    assert len(started) == 1, "every release must run on the one engine started for the batch"
    lines = out.strip().splitlines()
    assert len(lines) == 4 and lines[0].startswith("published") and lines[2].startswith("published")
    released_ids = [lines[1], lines[3]]
    code, out, _ = run_cli(capsys, "releases", "--lake", str(lake), "--json")
    assert code == 0
    listed = {release["release_id"]: release["dataset"] for release in json.loads(out)}
    assert listed == {released_ids[0]: "first", released_ids[1]: "third"}


def test_one_release_id_for_several_configs_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (first, second), lake = _configs(tmp_path, ["first", "second"])
    code, _, err = run_cli(capsys, "run", str(first), str(second), "--release-id", "r1")
    assert_one_line_failure(code, err, "--release-id")
    assert not (lake / "staging").exists() or not any((lake / "staging").rglob("*.parquet"))


def test_configs_asking_for_different_engines_are_refused_before_any_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (local_config,), lake = _configs(tmp_path, ["local"], prepare=False)
    data = tmp_path / "beam.csv"
    small_claims(seed=5).to_csv(data, index=False)
    beam_config = write_config(tmp_path, data, lake, prepare=False, dataset="beam", engine={"name": "beam"})
    code, out, err = run_cli(capsys, "run", str(local_config), str(beam_config))
    assert_one_line_failure(code, err, str(beam_config), "beam", "local", "one engine")
    assert out == ""
    assert not lake.exists()


def test_an_unexpected_error_in_one_release_does_not_stop_the_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (first, failing, third), lake = _configs(tmp_path, ["first", "failing", "third"])
    real_run = release_run.run_release

    def failing_run(kind, config, request):
        if config.dataset == "failing":
            raise RuntimeError("worker lost\nsecond line")
        return real_run(kind, config, request)

    monkeypatch.setattr(release_run, "run_release", failing_run)
    code, out, err = run_cli(capsys, "run", str(first), str(failing), str(third))
    assert code == 1
    assert_one_line_failure(code, err, str(failing), "internal error", "RuntimeError: worker lost")
    assert len(out.strip().splitlines()) == 4
    code, out, _ = run_cli(capsys, "releases", "--lake", str(lake), "--json")
    assert sorted(release["dataset"] for release in json.loads(out)) == ["first", "third"]
