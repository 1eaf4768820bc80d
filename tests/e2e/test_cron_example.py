"""The cron and systemd examples (``examples/cron/``, ``examples/systemd/``): the wrapper script
runs a real release on the local engine into a test lake (the release id from the day, a first
attempt's exit 75 retried, the same day again publishing nothing); its handling of every other
exit code (final ones logged and not retried, 75 and kills retried with growing delays, then given
up), its lock and its settings are checked with a stand-in executable; the cron line is checked and
the units pass ``systemd-analyze verify`` (where systemd is installed) and a structural check.

For the real release ``privlake`` is reached through a recording wrapper that runs the real command
and appends each exit code to a file; for a transient failure it makes the first attempts ask for a
Spark master nobody listens on, and privlake itself exits 75, as when a cluster is down."""

from __future__ import annotations

import configparser
import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.platform.lake import Lake
from tests.e2e.conftest import write_config

PROJECT = Path(__file__).resolve().parents[2]
WRAPPER = PROJECT / "examples" / "cron" / "privlake-release.sh"
CRONTAB = PROJECT / "examples" / "cron" / "privlake.cron"
SERVICE = PROJECT / "examples" / "systemd" / "privlake-release@.service"
TIMER = PROJECT / "examples" / "systemd" / "privlake-release@.timer"
PRIVLAKE = Path(sys.executable).with_name("privlake")
INSTALLED = "/opt/privlake"  # where the examples say the project is installed


def recorder(directory: Path) -> Path:
    """A ``privlake`` that runs the real one and records its exit codes in ``directory/calls``; the
    first ``$FLAKY_ATTEMPTS`` attempts ask for an unreachable Spark master (exit 75)."""
    calls = directory / "calls"
    script = directory / "privlake_recorder"
    script.write_text(
        "#!/bin/sh\n"
        f"calls={shlex.quote(str(calls))}\n"
        'made=0; [ -f "$calls" ] && made=$(wc -l < "$calls")\n'
        'if [ "$made" -lt "${FLAKY_ATTEMPTS:-0}" ]; then set -- "$@" --engine spark --master spark://127.0.0.1:9; fi\n'
        f"{shlex.quote(str(PRIVLAKE))} \"$@\"\n"
        'code=$?; echo "$code" >> "$calls"; exit $code\n',
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script


def exit_codes(directory: Path) -> list[int]:
    calls = directory / "calls"
    return [int(code) for code in calls.read_text().split()] if calls.exists() else []


def run_wrapper(directory: Path, config: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "PRIVLAKE_BIN": settings.get("PRIVLAKE_BIN") or str(recorder(directory)),
        "PRIVLAKE_RELEASE_PREFIX": "small",
        "PRIVLAKE_RELEASE_DATE": "20260301",
        "PRIVLAKE_LOCK_FILE": str(directory / "release.lock"),
        "PRIVLAKE_RETRY_DELAY": "0",
        **settings,
    }
    return subprocess.run([str(WRAPPER), str(config), *args], capture_output=True, text=True, env=environment,
                          timeout=120)


def published(lake: Path) -> list[str]:
    with Lake.for_reading(lake) as opened:
        return sorted(manifest["release_id"] for manifest in opened.list_releases())


def test_the_days_release_is_retried_past_a_transient_failure_and_published_once(
    tmp_path: Path, claims_csv: Path
) -> None:
    assert PRIVLAKE.is_file(), PRIVLAKE
    lake = tmp_path / "lake"
    config = write_config(tmp_path, claims_csv, lake)
    first = run_wrapper(tmp_path, config, FLAKY_ATTEMPTS="1")
    assert first.returncode == 0, first.stderr
    assert exit_codes(tmp_path) == [75, 0]
    assert "exit 75, transient infrastructure failure: retrying in 0s" in first.stderr
    records = [json.loads(line) for line in first.stdout.splitlines()]
    assert [record["status"] for record in records] == ["failed", "published"]
    assert records[1]["release_id"] == "small-20260301" and records[1]["already_published"] is False
    assert published(lake) == ["small-20260301"]
    # The same day again (cron fired twice, an operator re-ran it): the same id, nothing new.
    again = run_wrapper(tmp_path, config)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["already_published"] is True
    assert exit_codes(tmp_path) == [75, 0, 0] and published(lake) == ["small-20260301"]


def stand_in(directory: Path, code: int) -> Path:
    """An executable in privlake's place that records its call and exits ``code`` at once (a code
    of 128 + N: it kills itself with signal N), for the wrapper's handling of every exit code
    without a release per code (the real codes are tested in ``test_cli_bad_input.py``)."""
    script = directory / "stand_in"
    ending = f"kill -{code - 128} $$" if code >= 128 else f"exit {code}"
    script.write_text(f"#!/bin/sh\necho {code} >> {shlex.quote(str(directory / 'calls'))}\n{ending}\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("code", [2, 3, 4, 5, 1])
def test_a_final_exit_code_is_logged_with_its_meaning_and_not_retried(tmp_path: Path, code: int) -> None:
    result = run_wrapper(tmp_path, tmp_path / "release.yaml", PRIVLAKE_BIN=str(stand_in(tmp_path, code)))
    assert result.returncode == code
    assert exit_codes(tmp_path) == [code]
    meaning = {2: "bad input", 3: "quarantine", 4: "refused by budget or policy", 5: "nothing to release", 1: "a bug"}
    assert f"exit {code}, " in result.stderr and meaning[code] in result.stderr and "not retried" in result.stderr


def test_a_transient_exit_is_retried_with_growing_delays_then_given_up(tmp_path: Path) -> None:
    result = run_wrapper(tmp_path, tmp_path / "release.yaml", PRIVLAKE_BIN=str(stand_in(tmp_path, 75)),
                         PRIVLAKE_MAX_ATTEMPTS="3", PRIVLAKE_RETRY_DELAY="1", PRIVLAKE_MAX_RETRY_DELAY="2")
    assert result.returncode == 75
    assert exit_codes(tmp_path) == [75] * 3
    assert "retrying in 1s" in result.stderr and "retrying in 2s" in result.stderr
    assert "giving up after 3 attempts" in result.stderr


def test_a_release_killed_by_a_signal_is_retried(tmp_path: Path) -> None:
    result = run_wrapper(tmp_path, tmp_path / "release.yaml", PRIVLAKE_BIN=str(stand_in(tmp_path, 128 + 9)),
                         PRIVLAKE_MAX_ATTEMPTS="2")
    assert result.returncode == 137 and exit_codes(tmp_path) == [137, 137]
    assert "killed by signal 9: retrying" in result.stderr


def test_a_run_that_cannot_get_the_lock_starts_nothing(tmp_path: Path, claims_csv: Path) -> None:
    config = write_config(tmp_path, claims_csv, tmp_path / "lake", prepare=False)
    with open(tmp_path / "release.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a release of the same config still running
        result = run_wrapper(tmp_path, config, PRIVLAKE_LOCK_WAIT="0")
    assert result.returncode == 75
    assert "still holds" in result.stderr and exit_codes(tmp_path) == []


@pytest.mark.parametrize(("setting", "value"), [("PRIVLAKE_RELEASE_DATE", "2026-03-01"),
                                                ("PRIVLAKE_RETRY_DELAY", "soon"),
                                                ("PRIVLAKE_RELEASE_PREFIX", "a b")])
def test_bad_settings_are_refused_with_exit_2(tmp_path: Path, claims_csv: Path, setting: str, value: str) -> None:
    config = write_config(tmp_path, claims_csv, tmp_path / "lake", prepare=False)
    result = run_wrapper(tmp_path, config, **{setting: value})
    assert result.returncode == 2 and exit_codes(tmp_path) == []


def test_the_cron_line_runs_the_wrapper_on_a_config() -> None:
    jobs = [line.split() for line in CRONTAB.read_text().splitlines()
            if line.strip() and not line.startswith("#") and "=" not in line.split()[0]]
    assert len(jobs) == 1
    minute, hour, day, month, weekday, user, command, config, *rest = jobs[0]
    assert minute.isdigit() and hour.isdigit() and (day, month, weekday) == ("*", "*", "*") and user == "privlake"
    assert command == f"{INSTALLED}/{WRAPPER.relative_to(PROJECT)}" and config.endswith(".yaml")
    assert os.access(WRAPPER, os.X_OK)
    assert subprocess.run(["bash", "-n", str(WRAPPER)]).returncode == 0


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string(path.read_text())
    return parser


def test_the_systemd_units_are_valid(tmp_path: Path) -> None:
    service, timer = unit(SERVICE), unit(TIMER)
    assert service["Service"]["Type"] == "oneshot" and service["Service"]["SuccessExitStatus"] == "5"
    exec_start = service["Service"]["ExecStart"].split()
    assert exec_start[0] == f"{INSTALLED}/{WRAPPER.relative_to(PROJECT)}" and exec_start[1] == "/etc/privlake/%i.yaml"
    assert timer["Timer"]["Unit"] == "privlake-release@%i.service" and timer["Timer"]["Persistent"] == "true"
    assert timer["Install"]["WantedBy"] == "timers.target"
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return  # the structural checks above are all there is without systemd
    # An instance of each template, pointed at this checkout (verify checks that ExecStart exists).
    for template, text in ((SERVICE, SERVICE.read_text()), (TIMER, TIMER.read_text())):
        instance = tmp_path / template.name.replace("@.", "@sample.")
        instance.write_text(text.replace(INSTALLED, str(PROJECT)))
    completed = subprocess.run([analyze, "verify", *(str(path) for path in sorted(tmp_path.iterdir()))],
                               capture_output=True, text=True, cwd=tmp_path)
    assert completed.returncode == 0 and not completed.stdout.strip() and not completed.stderr.strip(), (
        completed.stdout + completed.stderr)
