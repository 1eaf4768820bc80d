"""A lake on object storage and a real SQL catalog, named by a YAML ``lake:`` mapping: an S3 API
(moto's server) and PostgreSQL, both started on loopback by the fixture (``tests/services.py``).
A crowd release runs through the console script on Spark ``local[2]`` into it, and another
process reads the release back with plain pyiceberg by its table name; credentials are ``${ENV}``
references and never reach the manifest; a catalog that does not answer is transient (exit 75)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import small_claims, write_config
from tests.services import PostgresServer, S3Server, free_port, postgres_server, s3_server

pytestmark = pytest.mark.services
PRIVLAKE = Path(sys.executable).parent / "privlake"
SECRET = "0b7e" * 16
BUCKET = "privlake-lake"


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[S3Server, PostgresServer]]:
    logs = tmp_path_factory.mktemp("service-logs")
    with s3_server(logs) as s3, postgres_server() as postgres:
        s3.create_bucket(BUCKET)
        yield s3, postgres


def environment(s3: S3Server, postgres: PostgresServer) -> dict[str, str]:
    return {**os.environ, "PRIVLAKE_TEST_SECRET": SECRET, "PYSPARK_PYTHON": sys.executable,
            "CATALOG_PASSWORD": postgres.password, "S3_KEY_ID": s3.access_key, "S3_SECRET": s3.secret_key}


def lake_mapping(s3: S3Server, postgres: PostgresServer, prefix: str, staging: str = "./staging",
                 port: int | None = None) -> dict:
    """A lake mapping whose credentials are environment references, as an operator writes it."""
    catalog_uri = postgres.uri(password="${CATALOG_PASSWORD}")
    if port is not None:
        catalog_uri = catalog_uri.replace(f":{postgres.port}/", f":{port}/")
    return {"catalog": {"type": "sql", "uri": catalog_uri}, "warehouse": f"s3://{BUCKET}/{prefix}",
            "staging": staging, "state": "./state",
            "properties": {"s3.endpoint": s3.endpoint, "s3.access-key-id": "${S3_KEY_ID}",
                           "s3.secret-access-key": "${S3_SECRET}", "s3.region": s3.region}}


def lake_file(folder: Path, s3: S3Server, postgres: PostgresServer, prefix: str, port: int | None = None,
              staging: str = "./staging") -> Path:
    path = folder / "lake.yaml"
    path.write_text(yaml.safe_dump({"lake": lake_mapping(s3, postgres, prefix, staging, port)}))
    return path


def staged(keys: list[str], prefix: str) -> list[str]:
    """The objects under a staging prefix (not the empty folder markers pyarrow leaves behind)."""
    return [key for key in keys if key.startswith(f"{prefix}/") and not key.endswith("/")]


def privlake(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PRIVLAKE), *args], env=env, capture_output=True, text=True, timeout=600)


def prepared_lake(tmp_path: Path, s3: S3Server, postgres: PostgresServer, prefix: str,
                  staging: str = "./staging") -> tuple[Path, Path]:
    """A test lake on the services with a budget for the dataset, made through the CLI."""
    env = environment(s3, postgres)
    lake = lake_file(tmp_path, s3, postgres, prefix, staging=staging)
    init = privlake(env, "init-lake", str(lake), "--test")
    assert init.returncode == 0, init.stderr
    assert postgres.password not in init.stdout and s3.secret_key not in init.stdout
    budget = privlake(env, "budget", "set", "small", "--epsilon", "1e9", "--delta", "0.5", "--lake", str(lake))
    assert budget.returncode == 0, budget.stderr
    claims = tmp_path / "claims.csv"
    small_claims().to_csv(claims, index=False)
    config = write_config(tmp_path, claims, tmp_path / "unused-local-lake", prepare=False)
    return lake, config


READ_BACK = textwrap.dedent("""\
    import json, sys
    from pyiceberg.catalog import load_catalog
    settings = json.loads(sys.argv[1])
    catalog = load_catalog("privlake", **settings["catalog"])  # a SQL catalog keys its rows by its name
    table = catalog.load_table(settings["table"])
    rows = table.scan().to_arrow()
    files = [task.file.file_path for task in table.scan().plan_files()]
    index = catalog.load_table("releases._index").scan().to_arrow().to_pylist()
    print(json.dumps({"rows": rows.num_rows, "columns": rows.column_names, "location": table.location(),
                      "files": files, "index": [[row["release_id"], row["table"]] for row in index]}))
    """)


@pytest.mark.spark
def test_crowd_release_on_spark_into_s3_and_postgres_read_back_by_another_process(
    tmp_path: Path, services: tuple[S3Server, PostgresServer]
) -> None:
    s3, postgres = services
    env = environment(s3, postgres)
    # staging in the bucket too: the executors write the release there, no shared folder
    lake, config = prepared_lake(tmp_path, s3, postgres, "spark", staging=f"s3://{BUCKET}/staging-spark")

    run = privlake(env, "run", str(config), "--lake", str(lake), "--engine", "spark", "--master", "local[2]",
                   "--release-id", "objstore-1", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["status"] == "published" and result["release_id"] == "objstore-1"
    table = result["table"]

    # a fresh process, plain pyiceberg, nothing of privlake: the release by its table name
    reader_settings = {"table": table, "catalog": {
        "type": "sql", "uri": postgres.uri(), "s3.endpoint": s3.endpoint, "s3.access-key-id": s3.access_key,
        "s3.secret-access-key": s3.secret_key, "s3.region": s3.region}}
    read = subprocess.run([sys.executable, "-c", READ_BACK, json.dumps(reader_settings)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert read.returncode == 0, read.stderr
    back = json.loads(read.stdout)
    shown = privlake(env, "show", "objstore-1", "--lake", str(lake), "--json")
    assert shown.returncode == 0, shown.stderr
    manifest = json.loads(shown.stdout)
    assert back["rows"] == manifest["rows"] > 0
    assert "object_id" in back["columns"]
    assert back["index"] == [["objstore-1", table]]  # consumers find releases through the index
    assert back["location"].startswith(f"s3://{BUCKET}/spark/")
    assert back["files"] and all(file.startswith(f"s3://{BUCKET}/spark/") for file in back["files"])
    stored = s3.keys(BUCKET)
    assert all(file.removeprefix(f"s3://{BUCKET}/") in stored for file in back["files"])

    # credentials came from the environment and are in no output and not in the manifest
    for text in (run.stdout, run.stderr, shown.stdout):
        assert postgres.password not in text and s3.secret_key not in text and s3.access_key not in text
    # the consumers' manifest names the catalog's type and name and the warehouse, nothing else
    assert manifest["config"]["lake"] == {"catalog": {"type": "sql"}, "warehouse": f"s3://{BUCKET}/spark"}
    assert s3.endpoint not in shown.stdout and str(postgres.port) not in json.dumps(manifest["config"])

    # the listing, the ledger and a re-run read the same catalog; staging is left empty
    listed = json.loads(privlake(env, "releases", "--lake", str(lake), "--json").stdout)
    assert [entry["release_id"] for entry in listed] == ["objstore-1"]
    ledger = privlake(env, "ledger", "--lake", str(lake), "--json")
    assert ledger.returncode == 0 and "objstore-1" in ledger.stdout
    again = privlake(env, "run", str(config), "--lake", str(lake), "--release-id", "objstore-1")
    assert again.returncode == 0 and "already published" in again.stdout
    assert not (tmp_path / "staging").exists() and not (tmp_path / "state" / "staging").exists()
    assert staged(s3.keys(BUCKET), "staging-spark") == [], "staging is emptied"


def test_a_catalog_that_does_not_answer_is_transient(
    tmp_path: Path, services: tuple[S3Server, PostgresServer]
) -> None:
    s3, postgres = services
    env = environment(s3, postgres)
    dead = lake_file(tmp_path, s3, postgres, "dead", port=free_port())
    listed = privlake(env, "releases", "--lake", str(dead))
    assert listed.returncode == 75, listed.stderr
    assert len(listed.stderr.strip().splitlines()) == 1 and "did not answer" in listed.stderr
    assert postgres.password not in listed.stderr

    lake, config = prepared_lake(tmp_path, s3, postgres, "local")
    dead_config = yaml.safe_load(lake.read_text())
    dead_config["lake"]["catalog"]["uri"] = dead_config["lake"]["catalog"]["uri"].replace(
        f":{postgres.port}/", f":{free_port()}/")
    (tmp_path / "dead-lake.yaml").write_text(yaml.safe_dump(dead_config))
    refused = privlake(env, "run", str(config), "--lake", str(tmp_path / "dead-lake.yaml"), "--release-id", "x-1")
    assert refused.returncode == 75, refused.stderr
    assert "Traceback" not in refused.stderr

    # the local engine into the same services: published, listed, its files in the bucket
    run = privlake(env, "run", str(config), "--lake", str(lake), "--release-id", "objstore-local")
    assert run.returncode == 0, run.stderr
    assert any(key.startswith("local/releases/") and key.endswith(".parquet") for key in s3.keys(BUCKET))


def _kind_case(kind: str, directory: Path) -> tuple[Path, str]:
    from tests.e2e import test_report

    if kind == "crowd-beam":
        small_claims().to_csv(directory / "claims.csv", index=False)
        return write_config(directory, directory / "claims.csv", directory / "local-lake", prepare=False,
                            engine={"name": "beam"}), "crowd-beam-1"
    make = {"tabular": test_report._tabular, "ldp": test_report._ldp, "filter": test_report._filter}[kind]
    return make(directory)


@pytest.mark.parametrize("kind", [pytest.param("crowd-beam", marks=pytest.mark.beam), "tabular", "ldp", "filter"])
def test_every_kind_stages_in_object_storage(
    tmp_path: Path, services: tuple[S3Server, PostgresServer], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kind's whole release — its driver-staged input, the engine's output, the publish copy —
    with staging as an ``s3://`` prefix and the warehouse in the bucket: nothing on local disk."""
    from pipelines.cli import main

    s3, postgres = services
    for name, value in environment(s3, postgres).items():
        monkeypatch.setenv(name, value)
    mapping = lake_mapping(s3, postgres, f"kind-{kind}", staging=f"s3://{BUCKET}/staging-{kind}")
    mapping["state"] = str(tmp_path / "state")
    config_path, release_id = _kind_case(kind, tmp_path)  # also trains the filter's VAE (local lake)
    config = yaml.safe_load(config_path.read_text())
    lake = tmp_path / "lake.yaml"
    lake.write_text(yaml.safe_dump({"lake": mapping}))
    assert main(["init-lake", str(lake), "--test"]) == 0
    unit = "record" if kind == "tabular" else "release"  # the small tabular case has omega < all
    assert main(["budget", "set", config["dataset"], "--epsilon", "1e9", "--delta", "0.5", "--unit", unit,
                 "--lake", str(lake)]) == 0
    if kind == "filter":
        config["lake"] = mapping  # the VAE lives in the lake: train it into this one
        config_path.write_text(yaml.safe_dump(config))
        assert main(["train-encoder", str(config_path)]) == 0
    assert main(["run", str(config_path), "--lake", str(lake), "--release-id", release_id]) == 0
    keys = s3.keys(BUCKET)
    assert any(key.startswith(f"kind-{kind}/releases/") and key.endswith(".parquet") for key in keys)
    assert staged(keys, f"staging-{kind}") == [], "staging is emptied after the commit"
    assert not (tmp_path / "state" / "staging").exists()


def test_a_release_killed_with_its_staging_in_the_bucket_is_recovered(
    tmp_path: Path, services: tuple[S3Server, PostgresServer]
) -> None:
    """Killed after its files were copied into the warehouse (staging still full, in the bucket):
    recovery refunds it and empties its staging prefix; the rerun publishes once."""
    s3, postgres = services
    env = {**environment(s3, postgres), "PRIVLAKE_LEASE_SECONDS": "1"}
    lake, config = prepared_lake(tmp_path, s3, postgres, "killed", staging=f"s3://{BUCKET}/staging-killed")
    killed = subprocess.run([sys.executable, "-m", "pipelines", "run", str(config), "--lake", str(lake),
                             "--release-id", "killed-1"], env={**env, "PRIVLAKE_FAILPOINT": "publish:files-moved"},
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    assert staged(s3.keys(BUCKET), "staging-killed/killed-1"), "staged in the bucket"
    assert staged(s3.keys(BUCKET), "staging-killed/_leases") == ["staging-killed/_leases/killed-1.json"]
    time.sleep(1.5)  # the killed run's lease expires
    recovered = privlake(env, "recover", "--lake", str(lake), "--json")
    assert recovered.returncode == 0, recovered.stderr
    report = json.loads(recovered.stdout)
    assert report["refunded"] == [{"dataset": "small", "release_id": "killed-1"}]
    assert report["staging_removed"] == ["killed-1"]
    assert staged(s3.keys(BUCKET), "staging-killed") == []
    rerun = privlake(env, "run", str(config), "--lake", str(lake), "--release-id", "killed-1", "--json")
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["status"] == "published"
