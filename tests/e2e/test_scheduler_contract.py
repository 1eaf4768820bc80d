"""What a scheduler scripts against (the production issue): ``run --json`` prints only JSON Lines,
one object per release (also for a failed one); ``${ENV}`` in a config; ``--set key.path=value``;
``--version``; the release's table name in the manifest and in ``run``'s output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.cli import main
from pipelines.platform.lake import Lake
from tests.e2e.conftest import write_config


def test_run_json_prints_one_object_per_release_and_nothing_else(tmp_path: Path, claims_csv: Path, capsys) -> None:
    config = write_config(tmp_path, claims_csv, tmp_path / "lake")
    assert main(["run", str(config), "--release-id", "j-1", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["release_id"] == "j-1" and record["status"] == "published" and record["kind"] == "crowd"
    assert record["table"].startswith("releases.j_1") and record["rows"] > 0 and record["epsilon"] > 0
    with Lake(tmp_path / "lake") as lake:
        assert lake.manifest("j-1")["table"] == record["table"]
        assert lake.catalog.load_table(tuple(record["table"].split("."))).scan().to_arrow().num_rows == record["rows"]
    assert main(["run", str(config), "--release-id", "j-1", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["already_published"] is True and again["table"] == record["table"]


def test_run_json_reports_a_failed_release_as_one_json_line(tmp_path: Path, claims_csv: Path, capsys) -> None:
    config = write_config(tmp_path, claims_csv, tmp_path / "lake", prepare=False)  # not a test lake: refused
    assert main(["run", str(config), "--json"]) == 4
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    assert record["status"] == "failed" and record["exit_code"] == 4 and "test lake" in record["error"]
    assert len(captured.err.strip().splitlines()) == 1


def test_environment_references_and_overrides(tmp_path: Path, claims_csv: Path, monkeypatch, capsys) -> None:
    lake = tmp_path / "lake"
    config = write_config(tmp_path, claims_csv, lake)
    document = yaml.safe_load(config.read_text())
    document["lake"] = "${PRIVLAKE_TEST_LAKE_ROOT}/lake"
    document["synthesis"]["claims_per_object"] = "${CLAIMS_M:-2}"
    config.write_text(yaml.safe_dump(document))
    monkeypatch.delenv("PRIVLAKE_TEST_LAKE_ROOT", raising=False)
    assert main(["run", str(config)]) == 2
    assert "lake: the environment variable PRIVLAKE_TEST_LAKE_ROOT is not set" in capsys.readouterr().err
    monkeypatch.setenv("PRIVLAKE_TEST_LAKE_ROOT", str(tmp_path))
    assert main(["run", str(config), "--release-id", "env-1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 2 * Lake(lake).manifest("env-1")["objects_released"]
    assert main(["run", str(config), "--release-id", "env-2", "--set", "synthesis.claims_per_object=4",
                 "--set", "privacy.k=5"]) == 0
    manifest = Lake(lake).manifest("env-2")
    assert manifest["rows"] == 4 * manifest["objects_released"] and manifest["config"]["privacy"]["k"] == 5
    assert main(["run", str(config), "--set", "synthesis.nonsense=1"]) == 2
    assert "synthesis.nonsense: unknown key" in capsys.readouterr().err
    assert main(["run", str(config), "--set", "no-equals-sign"]) == 2


def test_version_names_the_package_and_the_code() -> None:
    completed = subprocess.run([sys.executable, "-m", "pipelines", "--version"], capture_output=True, text=True)
    assert completed.returncode == 0 and completed.stdout.startswith("privlake 0.")


@pytest.mark.parametrize("text", ["a$$b", "${HOME_NOT_SET_X:-fallback}"])
def test_interpolation_escapes_and_defaults(text: str) -> None:
    from pipelines.platform.config import interpolate_environment

    assert interpolate_environment({"key": [text]}, "c.yaml") == {"key": ["a$b" if "$$" in text else "fallback"]}


def test_progress_off_a_terminal_is_plain_lines_without_carriage_returns(tmp_path: Path, claims_csv: Path) -> None:
    import os

    config = write_config(tmp_path, claims_csv, tmp_path / "lake")
    completed = subprocess.run([sys.executable, "-m", "pipelines", "run", str(config), "--json"],
                               capture_output=True, text=True, env={**os.environ, "PRIVLAKE_PROGRESS": "1"})
    assert completed.returncode == 0, completed.stderr
    assert "\r" not in completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert any(line.startswith("privlake: synthesize [") for line in lines)
    assert all(line.startswith("privlake: ") for line in lines)
    # steps inside a stage are counted: the global weights' iterations, done of total
    assert any(line.startswith("privlake: global weights, iterations: 1 of ") for line in lines), lines
    assert json.loads(completed.stdout)["status"] == "published"


def test_progress_counts_steps_and_estimates_the_time_left(monkeypatch) -> None:
    from pipelines.platform import release

    clock = iter([0.0, 100.0, 130.0, 160.0])  # the timer made, the stage starts, one estimate, the stage ends
    monkeypatch.setattr(release.time, "perf_counter", lambda: next(clock))
    shown: list[str] = []
    timer = release.StageTimer(shown.append)
    with timer.stage("synthesize"):
        timer.report("batches", 0, 4)  # no step finished: no estimate
        timer.report("batches", 1, 4)  # 30 s for 1 step: 3 more steps, about 90 s
        timer.report("batches", 4, 4)  # done
    assert shown == ["synthesize", "batches: 0 of 4", "batches: 1 of 4, about 90 s left", "batches: 4 of 4"]


def test_json_logs_are_one_object_per_line_with_the_release_id(tmp_path: Path, claims_csv: Path) -> None:
    import os

    config = write_config(tmp_path, claims_csv, tmp_path / "lake")
    completed = subprocess.run([sys.executable, "-m", "pipelines", "run", str(config), "--release-id", "log-1",
                                "--log-format", "json"], capture_output=True, text=True, env=dict(os.environ))
    assert completed.returncode == 0, completed.stderr
    records = [json.loads(line) for line in completed.stderr.strip().splitlines()]
    stages = [record["stage"] for record in records if "stage" in record]
    assert "synthesize" in stages and all(record["release_id"] == "log-1" for record in records if "stage" in record)
    assert all({"ts", "level", "message"} <= set(record) for record in records)
    # an error (here: refused, no budget in a fresh production lake) is exactly one JSON line
    bad = write_config(tmp_path / "other", claims_csv, tmp_path / "other" / "lake", prepare=False) \
        if (tmp_path / "other").mkdir() is None else None
    failed = subprocess.run([sys.executable, "-m", "pipelines", "--log-format=json", "run", str(bad)],
                            capture_output=True, text=True, env=dict(os.environ))
    assert failed.returncode == 4
    [line] = failed.stderr.strip().splitlines()
    error = json.loads(line)
    assert error["level"] == "error" and error["exit_code"] == 4
    arguments = subprocess.run([sys.executable, "-m", "pipelines", "run", "--log-format", "json"],
                               capture_output=True, text=True)
    assert arguments.returncode == 2 and json.loads(arguments.stderr)["exit_code"] == 2


def test_the_filter_kind_without_its_extra_says_what_to_install(tmp_path: Path) -> None:
    """torch is the optional extra privlake[filter]: a filter command without it is one line, exit 2
    (and the other kinds never import it)."""
    config = tmp_path / "filter.yaml"
    config.write_text(yaml.safe_dump({
        "kind": "filter", "dataset": "people", "lake": str(tmp_path / "lake"), "feature_spec": str(tmp_path / "f.yaml"),
        "training": {"path": str(tmp_path / "t.csv")}, "input": {"path": str(tmp_path / "r.csv")},
        "labels": {"group": {"column": "group", "categories": ["a", "b"]},
                   "senior": {"column": "senior", "categories": ["no", "yes"]}},
        "choices": [{"name": "hide-group", "private": "group", "utility": "senior", "budget": 1.0}],
    }))
    code = ("import sys\n"
            "class NoTorch:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'torch':\n"
            "            raise ModuleNotFoundError(name)\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "from pipelines.cli import main\n"
            f"sys.exit(main([sys.argv[1], {str(config)!r}]))")
    for command in ("run", "train-encoder"):
        completed = subprocess.run([sys.executable, "-c", code, command], capture_output=True, text=True)
        assert completed.returncode == 2, completed.stderr
        assert completed.stderr.strip() == (
            "privlake: the filter kind needs torch, which is not installed: pip install 'privlake[filter]'")
    crowd_only = subprocess.run([sys.executable, "-c", "import sys, pipelines.cli, pipelines.kinds; "
                                 "pipelines.kinds.release_kind('crowd'); print('torch' in sys.modules)"],
                                capture_output=True, text=True, check=True)
    assert crowd_only.stdout.strip() == "False"


def test_relative_paths_in_a_config_are_relative_to_the_config_file(tmp_path: Path, claims_csv: Path) -> None:
    """A scheduler runs privlake from a temporary folder: the config must name the same files."""
    import os

    folder = tmp_path / "configs"
    folder.mkdir()
    config = write_config(folder, claims_csv, folder / "lake")
    document = yaml.safe_load(config.read_text())
    document["lake"] = "lake"
    document["input"]["path"] = "../claims.csv"
    config.write_text(yaml.safe_dump(document))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    completed = subprocess.run([sys.executable, "-m", "pipelines", "run", str(config), "--release-id", "rel-1", "--json"],
                               capture_output=True, text=True, cwd=elsewhere,
                               env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert completed.returncode == 0, completed.stderr
    assert Lake(folder / "lake").manifest("rel-1")["config"]["input"]["path"] == str(claims_csv)
    assert list(elsewhere.iterdir()) == []
