"""Reading commands never write (the reliability issue's row 6: every ``privlake ledger`` added an
orphan ``metadata.json`` to the ledger table, and failed on a read-only lake).

Every reading command runs on a lake with a published release, its ledger, budgets and operator
record; the lake's files (names, sizes, modification times, contents) must be identical afterwards,
and an empty folder reads as an empty lake without becoming one. A lake opened for reading opens its
SQLite catalog with ``mode=ro`` (``Lake.for_reading``), so no write can happen by accident either.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pipelines.cli import main
from tests.e2e.conftest import write_config

READING_COMMANDS = [
    ["releases"], ["releases", "--json"], ["show", "r-1"], ["show", "r-1", "--json"], ["show", "r-1", "--internal"],
    ["ledger"], ["ledger", "--json"], ["ledger", "--dataset", "small"], ["models"], ["models", "--json"],
    ["budget", "show", "small"], ["budget", "list", "--json"],
]


def snapshot(folder: Path) -> dict[str, tuple[int, int, str]]:
    return {str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns,
                                            hashlib.sha256(path.read_bytes()).hexdigest())
            for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture
def lake(tmp_path: Path, claims_csv: Path) -> Path:
    lake = tmp_path / "lake"
    assert main(["run", str(write_config(tmp_path, claims_csv, lake)), "--release-id", "r-1"]) == 0
    return lake


@pytest.mark.parametrize("command", READING_COMMANDS, ids=" ".join)
def test_a_reading_command_leaves_every_file_of_the_lake_untouched(lake: Path, command: list[str], capsys) -> None:
    before = snapshot(lake)
    assert main([*command, "--lake", str(lake)]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.strip()
    assert snapshot(lake) == before


def test_export_writes_only_its_output_file(lake: Path, tmp_path: Path) -> None:
    before = snapshot(lake)
    out = tmp_path / "out.parquet"
    assert main(["export", "r-1", "--lake", str(lake), "--out", str(out)]) == 0
    assert out.is_file() and snapshot(lake) == before


def test_an_empty_folder_reads_as_an_empty_lake_and_stays_empty(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in (["releases"], ["ledger"], ["models"], ["budget", "list"]):
        assert main([*command, "--lake", str(empty)]) == 0, command
    assert list(empty.iterdir()) == []
    assert "no releases" in capsys.readouterr().out


def test_a_malformed_manifest_is_reported_not_fatal_for_the_whole_lake(lake: Path, tmp_path: Path, claims_csv: Path,
                                                                        capsys) -> None:
    """``releases`` lists the other releases and names the one it cannot read (it used to exit 1)."""
    from pipelines.platform.lake import MANIFEST_PROPERTY, Lake

    assert main(["run", str(write_config(tmp_path, claims_csv, lake)), "--release-id", "r-2"]) == 0
    with Lake(lake) as opened:
        table = opened.catalog.load_table(opened.release_identifier("r-1"))
        with table.transaction() as transaction:
            transaction.set_properties({MANIFEST_PROPERTY: '{"epsilon": '})
    capsys.readouterr()
    assert main(["releases", "--lake", str(lake)]) == 0
    captured = capsys.readouterr()
    assert "r-2" in captured.out and "r-1" in captured.out
    assert "release r-1" in captured.err and "not a JSON object" in captured.err
    assert main(["releases", "--lake", str(lake), "--json"]) == 0
    assert '"unreadable"' in capsys.readouterr().out
