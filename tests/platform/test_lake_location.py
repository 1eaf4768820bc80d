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
    recorded = location.model_dump(mode="json")  # what a manifest records: type, name, warehouse only
    assert recorded == {"catalog": {"type": "sql", "name": "books"}, "warehouse": str(folder / "warehouse")}

    with open_lake(location) as lake:
        assert lake.staging_root == folder / "staging" and lake.root == folder / "state"
        assert lake.warehouse_folder == folder / "warehouse"
        assert "books" in lake.description and "s3cr3t" not in lake.description
        lake.ensure_namespace("releases")
    assert (folder / "staging").is_dir()


def test_a_release_config_and_a_plain_path_are_lakes_too(tmp_path: Path) -> None:
    config = tmp_path / "conf" / "release.yaml"
    config.parent.mkdir()
    # only the lake is read: the config's other ${VARIABLES} need not be set to name its lake
    config.write_text("kind: crowd\ndataset: d\nlake: ../elsewhere/lake\ninput: {path: '${UNSET_DATA_DIR}'}\n")
    with pytest.raises(ConfigError, match="no lake here"):
        lake_argument(str(config))  # a typo in a file's lake path is refused like a typo on the command line
    (tmp_path / "elsewhere" / "lake").mkdir(parents=True)
    assert lake_argument(str(config)) == tmp_path / "elsewhere" / "lake"
    assert lake_argument(str(config), must_exist=False) == tmp_path / "elsewhere" / "lake"
    with pytest.raises(ConfigError, match="no such lake file"):
        lake_argument(str(tmp_path / "typo-lake.yaml"), must_exist=False)  # init-lake must not make a folder of it
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
        "slash": "postgresql+psycopg2://priv:Ab/cd+EF@host/db", "query": "postgresql://h/db?user=u&password=S3",
        "adls.account-key": "k", "adls.connection-string": "c", "header.Authorization": "Bearer x",
        "s3.sse.key": "k", "adls.sas-token": "s",
    })
    assert redacted == {"uri": "postgresql+psycopg2://user:***@db:5432/catalog", "token": "***", "credential": "***",
                        "s3.access-key-id": "***", "s3.session-token": "***", "s3.endpoint": "http://127.0.0.1:9000",
                        "slash": "postgresql+psycopg2://priv:***@host/db", "query": "postgresql://h/db?user=u&password=***",
                        "adls.account-key": "***", "adls.connection-string": "***", "header.Authorization": "***",
                        "s3.sse.key": "***", "adls.sas-token": "***"}


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
    slashed = OSError(errno.ECONNREFUSED, "Connection refused for postgresql://priv:Ab/cd+EF@db/catalog")
    assert "Ab/cd" not in str(expected_failure(slashed))
    aws = OSError("When reading information for key 'x': AWS Error NETWORK_CONNECTION during HeadObject")
    assert isinstance(expected_failure(aws), TransientFailure)
    assert expected_failure(ValueError("Connection refused")) is None  # not an I/O error: a bug

    def raised_by(module: str, name: str, text: str) -> Exception:
        kind = type(name, (Exception,), {})
        kind.__module__ = module
        return kind(text)

    dns = raised_by("sqlalchemy.exc", "OperationalError", 'could not translate host name "db.internal" to address')
    assert isinstance(expected_failure(dns), TransientFailure)
    assert isinstance(expected_failure(raised_by("botocore.exceptions", "EndpointConnectionError", "glue")),
                      TransientFailure)
    for refused in (OSError("AWS Error ACCESS_DENIED during PutObject operation"),
                    OSError("AWS Error NO_SUCH_BUCKET during HeadBucket"),
                    raised_by("sqlalchemy.exc", "OperationalError", 'password authentication failed for user "u"')):
        failure = expected_failure(refused)
        assert isinstance(failure, ConfigError) and failure.exit_code == 2, refused
        assert "check the lake's credentials" in str(failure)


def test_an_aborted_object_store_write_never_reaches_the_final_name(tmp_path: Path) -> None:
    """Closing an object-store stream completes its upload: an attempt that fails mid-way must
    have written under its own temporary name, never the final one (a truncated Parquet file at
    the final name would be published)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.services import s3_server

    table = pa.table({"x": list(range(1000))})
    with s3_server(tmp_path) as s3:
        s3.create_bucket("bucket-1")
        properties = {"s3.endpoint": s3.endpoint, "s3.access-key-id": s3.access_key,
                      "s3.secret-access-key": s3.secret_key, "s3.region": s3.region}
        folder = storage.location("s3://bucket-1/staging/r-1", properties)
        sink = storage.ParquetSink(folder / "part-00000.parquet", table.schema, "7")
        sink.write(table.slice(0, 5))
        sink.abort()
        assert s3.keys("bucket-1") in ([], ["staging/r-1/"])
        written = storage.write_table(table, folder / "part-00001.parquet", row_group_size=100)
        assert storage.parquet_file(written).metadata.num_row_groups == 10
        assert pq.read_table(storage.open_input(written)).equals(table)
        assert [key for key in s3.keys("bucket-1") if not key.endswith("/")] == ["staging/r-1/part-00001.parquet"]


def test_two_hosts_sharing_staging_see_each_others_leases(tmp_path: Path) -> None:
    """Hosts A and B run releases into one catalog lake with one (shared) staging location and
    their own state folders: B's recovery (the start of each of its runs) must neither refund A's
    running reservation nor delete A's staging — the leases live beside the shared staging."""
    from pipelines.platform.ledger import PrivacyLedger
    from pipelines.platform.recovery import Lease, recover
    from tests.platform.test_ledger import budget, pure

    def host(name: str) -> LakeLocation:
        return LakeLocation(catalog={"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}"},
                            warehouse=(tmp_path / "warehouse").as_uri(), staging=str(tmp_path / "shared-staging"),
                            state=tmp_path / f"state-{name}")

    with open_lake(host("a")) as lake_a, open_lake(host("b")) as lake_b:
        with Lease(lake_a, "running-1", "claims", "crowd"):
            PrivacyLedger(lake_a).reserve("claims", "running-1", "crowd", pure(0.5), budget(1.0))
            staged = lake_a.staging_directory("running-1")
            storage.write_bytes(staged / "input.parquet", b"raw")
            done = recover(lake_b)
            assert done.refunded == [] and done.staging_removed == [] and done.live == ["running-1"]
            assert storage.exists(staged / "input.parquet")
        done = recover(lake_b)  # A's release ended without publishing (its lease is gone): refunded now
        assert done.refunded == [("claims", "running-1")] and done.staging_removed == ["running-1"]


@pytest.mark.parametrize("staging", ["{warehouse}", "{warehouse}/staging", "{parent}", "{state}/x", "s3://bucket"])
def test_staging_that_overlaps_the_warehouse_or_state_is_refused(tmp_path: Path, staging: str) -> None:
    location = LakeLocation(catalog={"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}"},
                            warehouse=(tmp_path / "lake" / "warehouse").as_uri(), state=tmp_path / "state",
                            staging=staging.format(warehouse=tmp_path / "lake" / "warehouse",
                                                   parent=tmp_path / "lake", state=tmp_path / "state"))
    with pytest.raises(ConfigError, match="staging"):
        open_lake(location)


def test_a_lake_error_never_echoes_a_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The values of a lake mapping may be credentials from ${ENV} references: an error names the
    key and what is wrong, never the value (here a URI put where the catalog's mapping belongs)."""
    monkeypatch.setenv("LAKE_TEST_PASSWORD", "T0PSECRET")
    path = tmp_path / "lake.yaml"
    path.write_text('lake:\n  catalog: "postgresql+psycopg2://priv:${LAKE_TEST_PASSWORD}@db/iceberg"\n'
                    "  warehouse: s3://b/w\n")
    with pytest.raises(ConfigError, match="catalog") as caught:
        lake_argument(str(path))
    assert "T0PSECRET" not in str(caught.value) and "postgresql" not in str(caught.value)
    path.write_text('lake:\n  catalog: {type: sql}\n  warehouse: s3://b/w\n  staging: ["${LAKE_TEST_PASSWORD}"]\n')
    with pytest.raises(ConfigError, match="staging") as caught:
        lake_argument(str(path))
    assert "T0PSECRET" not in str(caught.value)
