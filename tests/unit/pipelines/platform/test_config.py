"""Config loading (``pipelines/platform/config.py``) fails fast on hostile files: bounded YAML
(size, alias expansion, self-reference, depth), one bounded line per config error, the lake path
checked before any work; and ``errors.expected_failure`` maps file-system errors to exit codes."""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections import namedtuple
from pathlib import Path

import pytest

from pipelines.platform import config as config_module
from pipelines.platform.config import (
    MAX_YAML_BYTES,
    MAX_YAML_NODES,
    apply_overrides,
    check_lake_path,
    load_yaml_text,
    override_key_parts,
    parse_config,
    read_yaml,
)
from pipelines.platform.errors import (
    MAX_LINE,
    ConfigError,
    PrivlakeError,
    TransientFailure,
    expected_failure,
    one_line,
)

BILLION_LAUGHS = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(f"{name}: &{name} [{', '.join([f'*{previous}'] * 9)}]"
          for previous, name in zip("abcdefgh", "bcdefghi", strict=True)),
    ]
)


def test_an_alias_bomb_is_refused_at_once_without_expanding_it() -> None:
    started = time.perf_counter()
    with pytest.raises(ConfigError) as caught:
        load_yaml_text("kind: crowd\n" + BILLION_LAUGHS, "bomb.yaml")
    assert time.perf_counter() - started < 2.0
    assert str(caught.value) == (
        f"bomb.yaml: the YAML document expands to more than {MAX_YAML_NODES:,} values (aliases repeat content); refused"
    )


def test_aliases_within_the_bound_are_expanded_as_usual(monkeypatch: pytest.MonkeyPatch) -> None:
    document = load_yaml_text("base: &base {k: 4, gamma: 2.0}\nfirst: *base\nsecond: [*base, *base]\n", "ok.yaml")
    assert document == {"base": {"k": 4, "gamma": 2.0}, "first": {"k": 4, "gamma": 2.0},
                        "second": [{"k": 4, "gamma": 2.0}] * 2}
    # the bound counts an alias's content again: root + key x + list of 3 (4) + key y + the alias (4) = 11
    monkeypatch.setattr(config_module, "MAX_YAML_NODES", 11)
    assert load_yaml_text("x: &x [1, 2, 3]\ny: *x\n", "edge.yaml") == {"x": [1, 2, 3], "y": [1, 2, 3]}
    with pytest.raises(ConfigError, match="expands to more than 11 values"):
        load_yaml_text("x: &x [1, 2, 3]\ny: *x\nz: 1\n", "edge.yaml")


def test_a_document_that_refers_to_itself_or_nests_too_deeply_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^loop.yaml: the YAML document refers to itself through an alias; refused$"):
        load_yaml_text("a: &a [1, *a]\n", "loop.yaml")
    with pytest.raises(ConfigError, match=r"^deep.yaml: not valid YAML: nested too deeply$"):
        load_yaml_text("[" * 20_000 + "]" * 20_000, "deep.yaml")


def test_yaml_syntax_errors_are_one_line_with_the_position() -> None:
    with pytest.raises(ConfigError) as caught:
        load_yaml_text("kind: crowd\nprivacy: {k: 4\n  gamma: [\n", "broken.yaml")
    text = str(caught.value)
    assert text.startswith("broken.yaml: not valid YAML: ") and "line " in text and "\n" not in text


def test_a_large_file_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("kind: crowd\n" + "# padding\n" * (MAX_YAML_BYTES // 10 + 1))
    monkeypatch.setattr(Path, "read_text", lambda *_a, **_k: pytest.fail("a refused file must not be read"))
    with pytest.raises(ConfigError, match=r"huge.yaml: the config file is [\d,]+ bytes; at most 1,048,576 \(refused unread\)"):
        read_yaml(path, "config")


def test_a_config_error_is_one_bounded_line_even_when_it_echoes_a_value() -> None:
    document = {"kind": "crowd", "dataset": "ok\n" + "x" * 10_000, "lake": "lake",
                "input": {"path": "in.csv"}, "privacy": {}, "synthesis": {}}
    with pytest.raises(ConfigError) as caught:
        parse_config(document, "long.yaml")
    text = str(caught.value)
    assert "\n" not in text and len(text) <= MAX_LINE
    assert text.startswith("long.yaml: dataset: ")
    with pytest.raises(ConfigError) as caught:
        parse_config({"kind": "x" * 5000}, "kind.yaml")
    assert len(str(caught.value)) < 200 and str(caught.value).startswith("kind.yaml: kind: must be one of")


def test_one_line_flattens_and_cuts() -> None:
    assert one_line("a\n  b\tc") == "a b c"
    assert one_line("x" * 500, 20) == "x" * 17 + "..."


def test_a_lake_path_that_is_a_file_or_under_one_is_refused(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a lake")
    with pytest.raises(ConfigError) as caught:
        check_lake_path(afile, "c.yaml")
    assert str(caught.value) == f"c.yaml: lake: {afile}: is a file, not a folder"
    with pytest.raises(ConfigError) as caught:
        check_lake_path(afile / "sub" / "lake", "c.yaml")
    assert str(caught.value) == f"c.yaml: lake: {afile / 'sub' / 'lake'}: cannot be created: {afile} is a file"


def test_a_lake_that_cannot_be_created_or_is_read_only_is_refused(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"^c.yaml: lake: /proc/privlake-lake: cannot be created \("):
        check_lake_path(Path("/proc/privlake-lake"), "c.yaml")
    existing = tmp_path / "lake"
    existing.mkdir()
    real_access = os.access
    monkeypatch.setattr(config_module.os, "access",
                        lambda path, mode: False if Path(path) == existing else real_access(path, mode))
    with pytest.raises(ConfigError, match=r"lake: .*/lake: is read-only \(cannot write into it\)$"):
        check_lake_path(existing, "c.yaml")
    with pytest.raises(ConfigError, match=r"lake: .*/lake/new: cannot be created: .*/lake is read-only$"):
        check_lake_path(existing / "new", "c.yaml")
    assert not (existing / "new").exists()


def test_a_usable_lake_path_passes_and_is_not_created(tmp_path: Path) -> None:
    check_lake_path(tmp_path / "a" / "b" / "lake", "c.yaml")
    assert not (tmp_path / "a").exists(), "the check probes and removes what it made"
    check_lake_path(tmp_path, "c.yaml")
    check_lake_path(Path("s3://bucket/lake"), "c.yaml")


def test_a_full_device_is_transient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(config_module.shutil, "disk_usage", lambda _path: usage(10**9, 10**9 - 4096, 4096))
    with pytest.raises(TransientFailure) as caught:
        check_lake_path(tmp_path / "lake", "c.yaml")
    assert caught.value.exit_code == 75 and "no space left on the device (4,096 bytes free" in str(caught.value)
    assert shutil.disk_usage is not None


@pytest.mark.parametrize(
    ("code", "exit_code"),
    [(errno.ENOSPC, 75), (errno.EDQUOT, 75), (errno.EIO, 75), (errno.EROFS, 2), (errno.EACCES, 2),
     (errno.ENOTDIR, 2), (errno.EISDIR, 2)],
)
def test_file_system_errors_map_to_the_exit_codes(code: int, exit_code: int) -> None:
    mapped = expected_failure(OSError(code, os.strerror(code), "/lake/warehouse/x.parquet"))
    assert mapped is not None and mapped.exit_code == exit_code
    assert str(mapped).startswith("/lake/warehouse/x.parquet: " + os.strerror(code))


def test_other_errors_stay_bugs_and_expected_ones_are_themselves() -> None:
    assert expected_failure(ValueError("boom")) is None
    assert expected_failure(OSError(errno.ENOENT, "No such file or directory")) is None
    refused = PrivlakeError("x")
    assert expected_failure(refused) is refused


def test_set_reaches_keys_that_hold_dots_through_quotes() -> None:
    document = {"lake": {"catalog": {"type": "sql"}, "properties": {"s3.endpoint": "http://old"}}, "privacy": {"k": 3}}
    apply_overrides(document, ['lake.properties."s3.endpoint"=http://127.0.0.1:9000',
                               "lake.properties.'s3.access-key-id'=${KEY}", "privacy.k=5",
                               'engine.spark.conf."spark.sql.shuffle.partitions"=8'], "config.yaml")
    assert document["lake"]["properties"] == {"s3.endpoint": "http://127.0.0.1:9000", "s3.access-key-id": "${KEY}"}
    assert document["privacy"] == {"k": 5}
    assert document["engine"] == {"spark": {"conf": {"spark.sql.shuffle.partitions": 8}}}
    # without quotes the dots are sections (the old meaning, unchanged)
    apply_overrides(document, ["lake.properties.s3.endpoint=x"], "config.yaml")
    assert document["lake"]["properties"]["s3"] == {"endpoint": "x"}
    assert override_key_parts('a."b=c".d') == ["a", "b=c", "d"]
    apply_overrides(document, ['labels."x=y"=1'], "config.yaml")  # the first = outside quotes splits
    assert document["labels"] == {"x=y": 1}
    for bad in ['lake."s3.endpoint=x', "lake..x=1", ".x=1", 'lake.""=1', "x"]:
        with pytest.raises(ConfigError, match="expected key.path=value"):
            apply_overrides(document, [bad], "config.yaml")
