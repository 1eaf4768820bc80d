"""Engine protection (issue 12, item 6): the release secret in a side value never reaches a file or
a pipeline graph, Spark sessions run authenticated and encrypted, and what cannot be protected is
refused (``EngineRefused``) unless the configuration opts out.

The files and graphs of whole releases are scanned in tests/e2e/test_secret_never_on_disk.py; here
each engine's route for a side value is checked directly, with its negative control.
"""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pydantic import ValidationError
from pyspark import cloudpickle as spark_cloudpickle

from pipelines.engines import EngineError, EngineRefused, make_engine
from pipelines.engines import check_protection as check_request
from pipelines.engines.base import KEY_BYTES, join_key_material, split_key_material
from pipelines.engines.spark import (
    AUTH_SECRET_FILE_VARIABLE,
    PROTECTION_SETTINGS,
    check_protection,
    missing_protection,
)
from schemas.base import BeamSettings, EngineSettings, SparkSettings
from tests.e2e.test_secret_never_on_disk import Needles, pipeline_graph_bytes

spark_cloudpickle.register_pickle_by_value(__import__(__name__, fromlist=["_"]))

SCHEMA = pa.schema([("key", pa.int64()), ("value", pa.int64())])
MARKER = "side-marker-3f1c9a"


def add_secret_byte(frame: pd.DataFrame, side: dict[str, Any]) -> pd.DataFrame:
    """A batch function that needs the side's secret: adds its first byte (and the offset)."""
    return frame.assign(value=frame["value"] + side["secret"][0] + side["offset"])


def side_with(secret: bytes) -> dict[str, Any]:
    return {"secret": secret, "offset": 1000, "marker": MARKER, "digest_like": b"d" * 31}


def frame() -> pd.DataFrame:
    return pd.DataFrame({"key": range(40), "value": range(40)})


def expected(secret: bytes) -> list[int]:
    return [value + secret[0] + 1000 for value in range(40)]


@pytest.fixture
def unset_secret_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AUTH_SECRET_FILE_VARIABLE, raising=False)


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A loopback port that accepts TCP connections (so a master URL on it counts as reachable)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_key_material_is_split_out_of_a_side_and_joined_back() -> None:
    secret, other = os.urandom(KEY_BYTES), os.urandom(KEY_BYTES)
    side = {"a": secret, "b": [secret, other], "short": b"x" * 31, "long": b"y" * 33, "text": "z" * 32}
    payload, keys = split_key_material(side)
    assert keys == (secret, other)
    assert secret not in payload and other not in payload
    assert b"x" * 31 in payload and b"y" * 33 in payload
    assert join_key_material(payload, keys) == side


@pytest.mark.spark
def test_spark_broadcasts_a_side_without_its_secret(spark_session: Any) -> None:
    """The broadcast file PySpark writes holds the side (its marker) but not the secret; the batch
    function still sees the secret. Negative control: a plain broadcast of the same side holds it
    (the session of the test suite has no io encryption, so the file is a plain pickle)."""
    secret = os.urandom(KEY_BYTES)
    with make_engine("spark", spark_session=spark_session) as engine:
        mapped = engine.map_batches(engine.from_pandas(frame(), SCHEMA), add_secret_byte, SCHEMA, side=side_with(secret))
        assert sorted(engine.collect(mapped)["value"]) == expected(secret)
        (handle,) = engine._broadcasts
        written = Path(handle._path).read_bytes()
        assert MARKER.encode() in written
        assert Needles.of(secret).find_in(written) == []
        leaky = engine._broadcast(side_with(secret))
        assert Needles.of(secret).find_in(Path(leaky._path).read_bytes()) != []


@pytest.mark.spark
def test_spark_map_groups_reads_the_secret_from_the_closure(spark_session: Any) -> None:
    secret = os.urandom(KEY_BYTES)
    with make_engine("spark", spark_session=spark_session) as engine:
        source = engine.from_pandas(frame(), SCHEMA)
        mapped = engine.map_groups(source, "key", add_secret_byte, SCHEMA, side=side_with(secret))
        again = engine.map_batches(mapped, add_secret_byte, SCHEMA, side=side_with(secret))
        assert sorted(engine.collect(again)["value"]) == [value + secret[0] + 1000 for value in expected(secret)]
        for handle in engine._broadcasts:
            assert Needles.of(secret).find_in(Path(handle._path).read_bytes()) == []


def test_protection_settings_are_required_of_cluster_masters_only() -> None:
    assert missing_protection(PROTECTION_SETTINGS) == []
    assert missing_protection({"spark.authenticate": "TRUE"}) == [
        "spark.io.encryption.enabled", "spark.network.crypto.enabled"]
    for embedded in ("local", "local[2]", "local[*]", "local[2,4]"):
        check_protection(embedded, {}, allow_unencrypted=False)
    for cluster in ("spark://127.0.0.1:7077", "yarn", "k8s://https://api:6443", "local-cluster[2,1,1024]"):
        with pytest.raises(EngineRefused, match="spark.network.crypto.enabled"):
            check_protection(cluster, {"spark.io.encryption.enabled": "true"}, allow_unencrypted=False)
        check_protection(cluster, {}, allow_unencrypted=True)
        check_protection(cluster, PROTECTION_SETTINGS, allow_unencrypted=False)


def test_an_engine_request_is_checked_without_starting_the_engine() -> None:
    """What a release can ask before it reads its input (``make_engine`` checks it again)."""
    check_request("local")
    check_request("spark", master="spark://127.0.0.1:9")  # privlake's defaults protect it
    check_request("spark", master="local[2]", spark_conf={"spark.io.encryption.enabled": "false"})
    with pytest.raises(EngineRefused, match="spark.authenticate"):
        check_request("spark", master="yarn", spark_conf={"spark.authenticate": "false"})
    check_request("spark", master="yarn", spark_conf={"spark.authenticate": "false"}, allow_unencrypted=True)
    check_request("beam", beam_options=[])
    with pytest.raises(EngineRefused, match="--runner=FlinkRunner"):
        check_request("beam", beam_options=["--runner=FlinkRunner"])
    check_request("beam", beam_options=["--runner=FlinkRunner"], allow_unencrypted=True, parallelism=3)


@pytest.mark.spark
def test_a_cluster_session_without_encryption_is_refused_before_anything_starts(unset_secret_file: None) -> None:
    with pytest.raises(EngineRefused, match="spark.io.encryption.enabled.*allow_unencrypted"):
        make_engine("spark", master="spark://127.0.0.1:9", spark_conf={"spark.io.encryption.enabled": "false"})
    # opted out, the run goes on to the reachability check (nothing listens on port 9)
    with pytest.raises(EngineError, match="cannot reach the Spark master"):
        make_engine("spark", master="spark://127.0.0.1:9", spark_conf={"spark.io.encryption.enabled": "false"},
                    allow_unencrypted=True)


@pytest.mark.spark
def test_a_standalone_master_needs_the_shared_secret_from_an_operator_only_file(
    tmp_path: Path, listening_port: int, unset_secret_file: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    master = f"spark://127.0.0.1:{listening_port}"
    with pytest.raises(EngineError, match=AUTH_SECRET_FILE_VARIABLE):
        make_engine("spark", master=master)
    shared = tmp_path / "auth.secret"
    shared.write_text("s3cret\n")
    shared.chmod(0o644)
    with pytest.raises(EngineError, match="may be read by other users"):
        make_engine("spark", master=master, auth_secret_file=str(shared))
    monkeypatch.setenv(AUTH_SECRET_FILE_VARIABLE, str(tmp_path / "missing"))
    with pytest.raises(EngineError, match="cannot read the Spark authentication secret file"):
        make_engine("spark", master=master)


def test_the_config_cannot_hold_the_cluster_secret_and_opts_out_explicitly() -> None:
    with pytest.raises(ValidationError, match="auth_secret_file"):
        SparkSettings(conf={"spark.authenticate.secret": "s3cret"})
    settings = EngineSettings()
    assert settings.spark.allow_unencrypted is False and settings.beam.allow_unencrypted is False
    assert SparkSettings(allow_unencrypted=True).allow_unencrypted is True
    assert BeamSettings(allow_unencrypted=True).allow_unencrypted is True
    assert "allow_unencrypted" in EngineSettings().model_dump()["spark"]


@pytest.mark.beam
@pytest.mark.parametrize("options", [["--runner=DirectRunner"], ["--direct_running_mode=multi_processing"]])
def test_beam_outside_this_process_is_refused_unless_opted_out(options: list[str]) -> None:
    with pytest.raises(EngineRefused, match="allow_unencrypted"):
        make_engine("beam", beam_options=options)
    with make_engine("beam", beam_options=options, allow_unencrypted=True) as engine:
        assert engine.protection()["in_process"] is False


@pytest.mark.beam
def test_beam_keeps_the_side_out_of_the_pipeline_graph() -> None:
    """In process the graph names the side by a token; the opted-out route (a runner elsewhere)
    pickles it into the graph, secret included: the negative control of the graph scan."""
    import apache_beam as beam

    secret = os.urandom(KEY_BYTES)
    graphs = {}
    for options, allow in (([], False), (["--direct_running_mode=multi_processing"], True)):
        with make_engine("beam", beam_options=options, allow_unencrypted=allow) as engine:
            mapped = engine.map_groups(engine.from_pandas(frame(), SCHEMA), "key", add_secret_byte, SCHEMA,
                                       side=side_with(secret))
            pipeline = beam.Pipeline(options=engine.options)
            engine._expand(pipeline, mapped, itertools.count())
            graphs[engine.protection()["in_process"]] = pipeline_graph_bytes(pipeline)
            if engine.protection()["in_process"]:
                assert sorted(engine.collect(mapped)["value"]) == expected(secret)
    assert MARKER.encode() in graphs[False]
    assert Needles.of(secret).find_in(graphs[False]) != []
    assert Needles.of(secret).find_in(graphs[True]) == []


@pytest.mark.beam
def test_beam_drops_held_sides_with_its_caches() -> None:
    from pipelines.engines import beam as beam_engine

    with make_engine("beam") as engine:
        engine.map_batches(engine.from_pandas(frame(), SCHEMA), add_secret_byte, SCHEMA, side=side_with(b"k" * 32))
        assert engine._held_tokens and all(token in beam_engine._HELD_SIDES for token in engine._held_tokens)
        held = list(engine._held_tokens)
        engine.drop_cached()
        assert not any(token in beam_engine._HELD_SIDES for token in held)


@pytest.mark.spark
def test_spark_protection_is_described(spark_session: Any) -> None:
    with make_engine("spark", spark_session=spark_session) as engine:
        described = engine.protection()
    assert described["engine"] == "spark" and described["master"] == "local[2]"
    assert set(described) >= {"io_encryption", "authentication", "network_encryption", "allow_unencrypted"}
    assert make_engine("local").protection()["in_process"] is True


def test_the_configs_opt_out_and_secret_file_reach_the_engine(tmp_path: Path) -> None:
    """A helper's benchmark found the config's engine.spark.allow_unencrypted (and auth_secret_file,
    and engine.beam.allow_unencrypted) dropped on the way to the engine: the opt-out the refusal
    message recommends never took effect."""
    from pipelines.platform.release import engine_request

    spark = EngineSettings(name="spark", spark=SparkSettings(
        master="yarn", conf={"spark.authenticate": "false"}, allow_unencrypted=True,
        auth_secret_file=tmp_path / "secret"))
    chosen, options = engine_request(spark, None, None)
    assert options["allow_unencrypted"] is True and options["auth_secret_file"] == str(tmp_path / "secret")
    check_request(chosen, **{key: value for key, value in options.items() if key != "auth_secret_file"})
    default = engine_request(EngineSettings(name="spark", spark=SparkSettings(master="yarn",
                                                                              conf={"spark.authenticate": "false"})),
                             None, None)
    with pytest.raises(EngineRefused):
        check_request(default[0], **default[1])
    beam = engine_request(EngineSettings(name="beam", beam=BeamSettings(options=["--runner=FlinkRunner"],
                                                                         allow_unencrypted=True)), None, None)
    check_request(beam[0], **beam[1])
