"""What ``--lake`` and a config's ``lake:`` accept: a folder, or a YAML mapping (catalog,
warehouse, staging, properties, state) with ``${ENV}`` credentials that are redacted wherever the
mapping is recorded; and which failures of a lake's services are transient (exit 75)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from pipelines.engines import storage
from pipelines.engines.storage import Location
from pipelines.platform.config import lake_argument
from pipelines.platform.errors import ConfigError, TransientFailure, expected_failure
from pipelines.platform.lake import Lake, open_lake
from schemas.base import LakeLocation, redacted_properties

MAPPING = """\
lake:
  catalog: {{type: sql, uri: "sqlite:///{catalog}", name: books}}
  warehouse: ./warehouse
  staging: ./staging
  state: ./state
  properties: {{s3.secret-access-key: "${{LAKE_TEST_SECRET_KEY}}", s3.region: eu-1, s3.connect-timeout: 5}}
"""


def test_a_yaml_mapping_is_read_with_environment_credentials_and_paths_relative_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKE_TEST_SECRET_KEY", "s3cr3t-value")
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "lake.yaml").write_text(MAPPING.format(catalog=tmp_path / "catalog.db"))
    monkeypatch.chdir(tmp_path)
    location = lake_argument(str(folder / "lake.yaml"))
    assert isinstance(location, LakeLocation)
    assert location.warehouse == str(folder / "warehouse")
    assert location.staging == str(folder / "staging") and location.state == folder / "state"
    assert location.properties["s3.secret-access-key"] == "s3cr3t-value"
    assert location.properties["s3.connect-timeout"] == "5"
    recorded = location.model_dump(mode="json")
    assert recorded["properties"]["s3.secret-access-key"] == "***"
    assert "s3cr3t-value" not in str(recorded)

    with open_lake(location) as lake:
        assert lake.staging_root == folder / "staging" and lake.root == folder / "state"
        assert lake.warehouse_folder == folder / "warehouse"
        assert "books" in lake.description and "s3cr3t" not in lake.description
        lake.ensure_namespace("releases")
    assert (folder / "staging").is_dir()


def test_a_release_config_and_a_plain_path_are_lakes_too(tmp_path: Path) -> None:
    config = tmp_path / "release.yaml"
    config.write_text("kind: crowd\ndataset: d\nlake: ../elsewhere/lake\n")
    assert lake_argument(str(config)) == (tmp_path.parent / "elsewhere" / "lake").resolve()
    Lake(tmp_path / "plain").close()
    assert lake_argument(str(tmp_path / "plain")) == tmp_path / "plain"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("lake:\n  warehouse: s3://b/p\n", "catalog"),
        ("lake:\n  catalog: {uri: 'sqlite://'}\n", "warehouse"),
        ("lake:\n  catalog: {}\n  warehouse: w\n", "needs a type"),
        ("lake:\n  catalog: {type: sql, uri: x}\n  warehouse: w\n  extra: 1\n", "extra"),
        ("- a list\n", "not a lake folder"),
    ],
)
def test_a_bad_mapping_is_one_config_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "lake.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message) as caught:
        lake_argument(str(path))
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_object_store_staging_is_a_location_that_carries_the_lake_properties(tmp_path: Path) -> None:
    location = LakeLocation(catalog={"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}"},
                            warehouse=str(tmp_path / "w"), staging="s3://bucket/staging/",
                            properties={"s3.secret-access-key": "k3y", "s3.region": "eu-1"}, state=tmp_path / "s")
    with open_lake(location) as lake:
        staging = lake.staging_root
        assert isinstance(staging, Location) and str(staging) == "s3://bucket/staging/"
        assert dict(staging.properties) == {"s3.secret-access-key": "k3y", "s3.region": "eu-1"}
        release = staging / "r-1"
        assert str(release / "input") == "s3://bucket/staging/r-1/input"
        assert (release / "input").name == "input" and (release / "input").parent == release
        assert "k3y" not in repr(release) and "k3y" not in str(release)
        assert not (tmp_path / "s" / "staging").exists()  # no local staging folder is made
    assert storage.location("file:///tmp/x") == Path("/tmp/x") and storage.location("rel/x") == Path("rel/x")


def test_other_files_and_missing_folders_are_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match="not a lake folder"):
        lake_argument(str(tmp_path / "notes.txt"))
    with pytest.raises(ConfigError, match="no lake here"):
        lake_argument(str(tmp_path / "missing"))


def test_redaction_covers_secret_keys_and_uri_passwords() -> None:
    redacted = redacted_properties({
        "uri": "postgresql+psycopg2://user:pa55@db:5432/catalog", "token": "t0k", "credential": "c:d",
        "s3.access-key-id": "AKIA", "s3.session-token": "st", "s3.endpoint": "http://127.0.0.1:9000",
    })
    assert redacted == {"uri": "postgresql+psycopg2://user:***@db:5432/catalog", "token": "***", "credential": "***",
                        "s3.access-key-id": "***", "s3.session-token": "***", "s3.endpoint": "http://127.0.0.1:9000"}


def test_unreachable_services_are_transient_and_name_no_credentials() -> None:
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    assert isinstance(expected_failure(refused), TransientFailure)

    class OperationalError(Exception):
        pass

    OperationalError.__module__ = "sqlalchemy.exc"
    wrapped = RuntimeError("loading the catalog failed")
    wrapped.__cause__ = OperationalError(
        'connection to server at "db" failed: Connection refused for postgresql://user:pa55@db/catalog')
    failure = expected_failure(wrapped)
    assert isinstance(failure, TransientFailure) and failure.exit_code == 75
    assert "pa55" not in str(failure) and "did not answer" in str(failure)
    aws = OSError("When reading information for key 'x': AWS Error NETWORK_CONNECTION during HeadObject")
    assert isinstance(expected_failure(aws), TransientFailure)
    assert expected_failure(ValueError("Connection refused")) is None  # not an I/O error: a bug
