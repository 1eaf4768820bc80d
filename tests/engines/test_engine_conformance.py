"""Engine conformance: every primitive of the engine interface (pipelines/engines/base.py)
gives the same rows on the local, Spark and Beam engines.

Expected values never come from an engine: they are computed row by row with pandas and
exact Python integers on the driver (``expected_primitive_results``). Each engine runs with
its own partition count and a small ``rows_per_call`` so that groups really are spread over
partitions and cut into several calls — a batch function whose result depended on which
groups share its call would differ from the brute force.

``primitive_results`` is also what the standalone-cluster test (tests/cluster) runs against a
real Spark master, to compare it with the local engine.
"""

from __future__ import annotations

import math
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark import cloudpickle as spark_cloudpickle

from pipelines.engines import EngineError
from pipelines.engines.arrow import ROW_GROUP_ROWS
from pipelines.engines.base import Engine

ROWS_PER_CALL = 97
NUMBER_OF_ROWS = 2_000
NUMBER_OF_KEYS = 300
BIG_MAGNITUDE = 2**57

CLAIMS_SCHEMA = pa.schema(
    [
        ("object_id", pa.string()),
        ("object_number", pa.int64()),
        ("source_id", pa.int64()),
        ("value", pa.float64()),
        ("big", pa.int64()),
        ("count", pa.int32()),
        ("flag", pa.bool_()),
    ]
)
CLAIMS_DTYPES = {
    "object_id": np.dtype(object),
    "object_number": np.dtype(np.int64),
    "source_id": np.dtype(np.int64),
    "value": np.dtype(np.float64),
    "big": np.dtype(np.int64),
    "count": np.dtype(np.int32),
    "flag": np.dtype(bool),
}
SCALED_SCHEMA = pa.schema(
    [
        ("object_id", pa.string()),
        ("source_id", pa.int64()),
        ("value_scaled", pa.float64()),
        ("count", pa.int32()),
    ]
)
CALLS_SCHEMA_COLUMNS = [
    ("call_id", pa.string()),
    ("rows", pa.int64()),
    ("sorted", pa.bool_()),
    ("call_rows", pa.int64()),
]

# Batch functions defined here travel to Spark executors by value, so that executors (also a
# standalone cluster's, whose working folder is elsewhere) need not import the tests package.
spark_cloudpickle.register_pickle_by_value(__import__(__name__, fromlist=["_"]))


def claims_frame(seed: int = 20240611) -> pd.DataFrame:
    """~2,000 claims over ~300 objects: skewed group sizes, string keys (some non-ASCII, whose
    UTF-8 byte order must match code-point order), int keys (negative too), int64 values
    large enough that a float64 sum would lose their low bits."""
    generator = np.random.default_rng(seed)
    popularity = generator.gamma(1.0, 1.0, NUMBER_OF_KEYS) + 0.05
    key_index = generator.choice(NUMBER_OF_KEYS, NUMBER_OF_ROWS, p=popularity / popularity.sum())
    names = np.array(
        [f"object-{index:03d}" if index % 37 else f"objet-é{index}-対象" for index in range(NUMBER_OF_KEYS)]
    )
    signs = generator.choice(np.array([-1, 1]), NUMBER_OF_ROWS)
    return pd.DataFrame(
        {
            "object_id": names[key_index].astype(object),
            "object_number": key_index.astype(np.int64) * 1_000_003 - 150_000_000,
            "source_id": generator.integers(0, 40, NUMBER_OF_ROWS).astype(np.int64),
            "value": generator.normal(10.0, 3.0, NUMBER_OF_ROWS),
            "big": signs * (BIG_MAGNITUDE + generator.integers(1, 2**20, NUMBER_OF_ROWS)),
            "count": generator.integers(0, 1000, NUMBER_OF_ROWS).astype(np.int32),
            "flag": generator.random(NUMBER_OF_ROWS) < 0.1,
        }
    )


def statistic_schema(key: str) -> pa.Schema:
    return pa.schema(
        [
            (key, CLAIMS_SCHEMA.field(key).type),
            ("rows", pa.int64()),
            ("value_sum", pa.float64()),
            ("source_min", pa.int64()),
            ("big_max", pa.int64()),
            ("flag_any", pa.bool_()),
            ("count_total", pa.int64()),
        ]
    )


def calls_schema(key: str) -> pa.Schema:
    return pa.schema([(key, CLAIMS_SCHEMA.field(key).type), *CALLS_SCHEMA_COLUMNS])


def scale_values(frame: pd.DataFrame, side: dict[str, float]) -> pd.DataFrame:
    """A map_batches function: ``value * scale + count`` with ``scale`` from the side value."""
    return pd.DataFrame(
        {
            "object_id": frame["object_id"],
            "source_id": frame["source_id"],
            "value_scaled": frame["value"] * side["scale"] + frame["count"],
            "count": frame["count"],
        }
    )


def scale_values_again(frame: pd.DataFrame, side: dict[str, float]) -> pd.DataFrame:
    """A map_batches function on ``SCALED_SCHEMA`` rows: ``value_scaled * scale``."""
    return frame.assign(value_scaled=frame["value_scaled"] * side["scale"])


def _group_statistics(frame: pd.DataFrame, key: str, offset: float) -> pd.DataFrame:
    grouped = frame.groupby(key, sort=True)
    result = pd.DataFrame(
        {
            "rows": grouped.size().astype(np.int64),
            "value_sum": grouped["value"].agg(math.fsum) + offset,
            "source_min": grouped["source_id"].min().astype(np.int64),
            "big_max": grouped["big"].max().astype(np.int64),
            "flag_any": grouped["flag"].any().astype(bool),
            "count_total": grouped["count"]
            .agg(lambda counts: sum(int(count) for count in counts))
            .astype(np.int64),
        }
    )
    return result.reset_index()


def group_statistics_by_object_id(frame: pd.DataFrame, side: dict[str, float]) -> pd.DataFrame:
    """A map_groups function: per-object statistics (exact ``fsum`` so order does not matter)."""
    return _group_statistics(frame, "object_id", side["offset"])


def group_statistics_by_object_number(frame: pd.DataFrame, side: dict[str, float]) -> pd.DataFrame:
    return _group_statistics(frame, "object_number", side["offset"])


def _record_calls(frame: pd.DataFrame, key: str) -> pd.DataFrame:
    sizes = frame.groupby(key, sort=True).size()
    return pd.DataFrame(
        {
            key: sizes.index,
            "call_id": uuid.uuid4().hex,
            "rows": sizes.to_numpy(dtype=np.int64),
            "sorted": bool(frame[key].is_monotonic_increasing),
            "call_rows": len(frame),
        }
    )


def record_calls_by_object_id(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
    """A map_groups function that reports, per key, the call that saw it and whether the
    call's frame was sorted by the key."""
    return _record_calls(frame, "object_id")


def record_calls_by_object_number(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
    return _record_calls(frame, "object_number")


GROUP_FUNCTIONS = {
    "object_id": group_statistics_by_object_id,
    "object_number": group_statistics_by_object_number,
}
RECORD_FUNCTIONS = {"object_id": record_calls_by_object_id, "object_number": record_calls_by_object_number}
SCALE_SIDE = {"scale": 2.5}
OFFSET_SIDE = {"offset": 0.25}


def _normalized(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return frame.sort_values(by, kind="mergesort").reset_index(drop=True)


def summarize_calls(calls: pd.DataFrame, key: str) -> pd.DataFrame:
    """Per key: in how many calls it appeared, its rows, and whether every call was sorted."""
    grouped = calls.groupby(key, sort=True)
    return pd.DataFrame(
        {
            "calls": grouped["call_id"].nunique().astype(np.int64),
            "rows": grouped["rows"].sum().astype(np.int64),
            "sorted": grouped["sorted"].all().astype(bool),
        }
    ).reset_index()


def primitive_results(engine: Engine, frame: pd.DataFrame, workdir: Path) -> dict[str, Any]:
    """Every primitive once on ``engine``, each result normalized (sorted) for comparison."""
    claims = engine.from_pandas(frame, CLAIMS_SCHEMA)
    results: dict[str, Any] = {"count": engine.count(claims)}
    results["collect"] = _normalized(engine.collect(claims), ["object_id", "source_id", "value"])
    scaled = engine.map_batches(claims, scale_values, SCALED_SCHEMA, side=SCALE_SIDE)
    results["map_batches"] = _normalized(engine.collect(scaled), ["object_id", "source_id", "value_scaled"])
    for key in ("object_id", "object_number"):
        statistics = engine.map_groups(
            claims, key, GROUP_FUNCTIONS[key], statistic_schema(key), side=OFFSET_SIDE
        )
        results[f"map_groups:{key}"] = _normalized(engine.collect(statistics), [key])
        calls = engine.map_groups(claims, key, RECORD_FUNCTIONS[key], calls_schema(key))
        results[f"calls:{key}"] = summarize_calls(engine.collect(calls), key)
        results[f"sum_by_key:{key}"] = engine.sum_by_key(claims, key, ["big", "count"])
    clustered = engine.cluster_by_key(claims, "object_id")
    statistics = engine.map_groups(
        clustered, "object_id", group_statistics_by_object_id, statistic_schema("object_id"), OFFSET_SIDE
    )
    results["clustered:map_groups"] = _normalized(engine.collect(statistics), ["object_id"])
    paths = engine.write_parquet(scaled, workdir / "scaled", SCALED_SCHEMA)
    results["write_parquet"] = _normalized(
        pa.concat_tables([pq.read_table(path) for path in paths]).to_pandas(),
        ["object_id", "source_id", "value_scaled"],
    )
    engine.unpersist(clustered)
    group_files = engine.write_groups(
        engine.map_batches(claims, scale_values, SCALED_SCHEMA, side=SCALE_SIDE), "source_id", workdir / "groups",
        SCALED_SCHEMA,
    )
    staged = engine.read_groups(group_files, "source_id", SCALED_SCHEMA)
    results["read_groups:sum_by_key"] = engine.sum_by_key(staged, "source_id", ["count"])
    results["read_groups:map_batches"] = _normalized(
        engine.collect(engine.map_batches(staged, scale_values_again, SCALED_SCHEMA, side=SCALE_SIDE)),
        ["object_id", "source_id", "value_scaled"],
    )
    return results


def expected_primitive_results(frame: pd.DataFrame) -> dict[str, Any]:
    """``primitive_results`` computed directly with pandas and Python integers."""
    expected: dict[str, Any] = {"count": len(frame)}
    expected["collect"] = _normalized(frame, ["object_id", "source_id", "value"])
    scaled = pd.DataFrame(
        {
            "object_id": frame["object_id"],
            "source_id": frame["source_id"],
            "value_scaled": [
                value * SCALE_SIDE["scale"] + int(count)
                for value, count in zip(frame["value"], frame["count"], strict=True)
            ],
            "count": frame["count"],
        }
    )
    expected["map_batches"] = _normalized(scaled, ["object_id", "source_id", "value_scaled"])
    for key in ("object_id", "object_number"):
        rows = []
        for key_value, group in frame.groupby(key, sort=True):
            rows.append(
                {
                    key: key_value,
                    "rows": len(group),
                    "value_sum": math.fsum(group["value"].tolist()) + OFFSET_SIDE["offset"],
                    "source_min": int(group["source_id"].min()),
                    "big_max": int(group["big"].max()),
                    "flag_any": bool(group["flag"].any()),
                    "count_total": sum(int(count) for count in group["count"]),
                }
            )
        statistics = pd.DataFrame(rows).astype(
            {
                key: CLAIMS_DTYPES[key],
                "rows": np.int64,
                "source_min": np.int64,
                "big_max": np.int64,
                "count_total": np.int64,
            }
        )
        expected[f"map_groups:{key}"] = statistics
        expected[f"calls:{key}"] = pd.DataFrame(
            {
                key: statistics[key],
                "calls": np.ones(len(statistics), dtype=np.int64),
                "rows": statistics["rows"],
                "sorted": True,
            }
        )
        sums = {
            key_value: (sum(int(big) for big in group["big"]), sum(int(count) for count in group["count"]))
            for key_value, group in frame.groupby(key, sort=True)
        }
        expected[f"sum_by_key:{key}"] = pd.DataFrame(
            {
                key: pd.Series(list(sums), dtype=CLAIMS_DTYPES[key]),
                "big": np.array([total for total, _ in sums.values()], dtype=np.int64),
                "count": np.array([total for _, total in sums.values()], dtype=np.int64),
            }
        )
    expected["clustered:map_groups"] = expected["map_groups:object_id"]
    expected["write_parquet"] = expected["map_batches"]
    count_per_source = {
        source: sum(int(count) for count in group["count"]) for source, group in frame.groupby("source_id", sort=True)
    }
    expected["read_groups:sum_by_key"] = pd.DataFrame(
        {
            "source_id": np.array(list(count_per_source), dtype=np.int64),
            "count": np.array(list(count_per_source.values()), dtype=np.int64),
        }
    )
    expected["read_groups:map_batches"] = _normalized(
        scaled.assign(value_scaled=[value * SCALE_SIDE["scale"] for value in scaled["value_scaled"]]),
        ["object_id", "source_id", "value_scaled"],
    )
    return expected


def assert_results_equal(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        if isinstance(value, pd.DataFrame):
            pd.testing.assert_frame_equal(actual[name], value, check_exact=True, obj=name)
        else:
            assert actual[name] == value, name


@pytest.fixture(scope="module")
def claims() -> pd.DataFrame:
    return claims_frame()


@pytest.fixture(
    scope="module",
    params=[
        "local",
        pytest.param("spark", marks=pytest.mark.spark),
        pytest.param("beam", marks=pytest.mark.beam),
    ],
)
def engine(request: pytest.FixtureRequest):
    """Each engine with its own partition count (3, 4 and 5) and ``ROWS_PER_CALL`` rows per call."""
    if request.param == "local":
        from pipelines.engines.local import LocalEngine

        built: Engine = LocalEngine(parallelism=3, rows_per_call=ROWS_PER_CALL)
    elif request.param == "spark":
        from pipelines.engines.spark import SparkEngine

        built = SparkEngine(
            session=request.getfixturevalue("spark_session"), parallelism=4, rows_per_call=ROWS_PER_CALL
        )
    else:
        from pipelines.engines.beam import BeamEngine

        built = BeamEngine(parallelism=5, rows_per_call=ROWS_PER_CALL)
    yield built
    built.close()


def test_claims_fixture_exercises_what_it_should(claims: pd.DataFrame) -> None:
    sizes = claims.groupby("object_id").size()
    assert 250 <= len(sizes) <= NUMBER_OF_KEYS and sizes.max() < ROWS_PER_CALL
    assert claims.groupby("object_id")["object_number"].nunique().max() == 1
    totals = claims.groupby("object_id")["big"].apply(lambda big: sum(int(value) for value in big))
    float_totals = claims.groupby("object_id")["big"].apply(lambda big: int(big.astype(np.float64).sum()))
    assert (totals != float_totals).mean() > 0.5, (
        "float64 sums must be inexact here, or exactness is untested"
    )
    assert totals.abs().max() < 2**63


def test_every_primitive_matches_the_brute_force(
    engine: Engine, claims: pd.DataFrame, tmp_path: Path
) -> None:
    actual = primitive_results(engine, claims, tmp_path)
    assert_results_equal(actual, expected_primitive_results(claims))
    assert actual["collect"].dtypes.to_dict() == CLAIMS_DTYPES


def test_map_groups_cuts_calls_at_key_boundaries_within_the_row_bound(
    engine: Engine, claims: pd.DataFrame
) -> None:
    giant = claims.iloc[: 2 * ROWS_PER_CALL].assign(object_id="object-giant")
    collection = engine.from_pandas(pd.concat([claims, giant], ignore_index=True), CLAIMS_SCHEMA)
    calls = engine.collect(
        engine.map_groups(collection, "object_id", record_calls_by_object_id, calls_schema("object_id"))
    )
    assert calls.groupby("object_id")["call_id"].nunique().max() == 1
    assert calls["sorted"].all()
    per_call = calls.groupby("call_id")["rows"].sum()
    assert per_call.sum() == NUMBER_OF_ROWS + len(giant)
    assert (calls.groupby("call_id")["call_rows"].first() == per_call).all()
    giant_call = calls.loc[calls["object_id"] == "object-giant", "call_id"].item()
    assert (calls["call_id"] == giant_call).sum() == 1 and per_call[giant_call] == len(giant)
    assert per_call.drop(giant_call).max() <= ROWS_PER_CALL
    assert len(per_call) >= math.ceil(NUMBER_OF_ROWS / ROWS_PER_CALL)


def test_map_batches_calls_stay_within_the_row_bound(engine: Engine, claims: pd.DataFrame) -> None:
    def call_sizes(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
        return pd.DataFrame({"call_id": [uuid.uuid4().hex], "rows": [len(frame)]})

    schema = pa.schema([("call_id", pa.string()), ("rows", pa.int64())])
    sizes = engine.collect(engine.map_batches(engine.from_pandas(claims, CLAIMS_SCHEMA), call_sizes, schema))
    assert sizes["rows"].sum() == NUMBER_OF_ROWS
    assert sizes["rows"].max() <= ROWS_PER_CALL and (sizes["rows"] > 0).all()


def calls_and_statistics(engine: Engine, collection: Any) -> tuple[Any, Any]:
    """The two ``map_groups`` by ``object_id`` the clustering tests run: who saw which key, and
    the per-object statistics."""
    calls = engine.map_groups(collection, "object_id", record_calls_by_object_id, calls_schema("object_id"))
    statistics = engine.map_groups(
        collection, "object_id", group_statistics_by_object_id, statistic_schema("object_id"), OFFSET_SIDE
    )
    return calls, statistics


def executed_plan(collection: Any) -> str:
    """A Spark collection's physical plan as text."""
    return collection.frame._jdf.queryExecution().executedPlan().toString()


def test_map_groups_on_a_clustered_collection_needs_no_new_shuffle(
    engine: Engine, claims: pd.DataFrame
) -> None:
    clustered = engine.cluster_by_key(engine.from_pandas(claims, CLAIMS_SCHEMA), "object_id")
    assert engine.cluster_by_key(clustered, "object_id") is clustered
    first, second = calls_and_statistics(engine, clustered)
    if engine.name == "spark":
        for mapped in (first, second):
            plan = executed_plan(mapped)
            above_cache = plan.split("InMemoryTableScan")[0]
            assert "InMemoryTableScan" in plan and "Exchange" not in above_cache, plan
    if engine.name == "beam":
        assert clustered.materialized and all(Path(path).exists() for path in clustered.materialized)
    calls = summarize_calls(engine.collect(first), "object_id")
    assert (calls["calls"] == 1).all() and calls["sorted"].all() and calls["rows"].sum() == NUMBER_OF_ROWS
    expected = expected_primitive_results(claims)["map_groups:object_id"]
    pd.testing.assert_frame_equal(
        _normalized(engine.collect(second), ["object_id"]), expected, check_exact=True
    )
    engine.unpersist(clustered)


def test_write_groups_files_hold_whole_sorted_groups_and_read_groups_maps_them_without_a_shuffle(
    engine: Engine, claims: pd.DataFrame, tmp_path: Path
) -> None:
    collection = engine.from_pandas(claims, CLAIMS_SCHEMA)
    files = engine.write_groups(collection, "object_id", tmp_path / "groups", CLAIMS_SCHEMA)
    assert len(files) >= 2 and sorted(path.name for path in (tmp_path / "groups").iterdir()) == [f.name for f in files]
    keys_per_file = []
    for path in files:
        table = pq.read_table(path)
        assert table.schema == CLAIMS_SCHEMA and table.num_rows > 0
        keys = table.column("object_id").to_pylist()
        assert [key.encode() for key in keys] == sorted(key.encode() for key in keys), path
        keys_per_file.append(set(keys))
    assert sum(len(keys) for keys in keys_per_file) == len(set().union(*keys_per_file)), "a group spans files"
    assert set().union(*keys_per_file) == set(claims["object_id"])

    staged = engine.read_groups(files, "object_id", CLAIMS_SCHEMA)
    assert engine.count(staged) == NUMBER_OF_ROWS
    calls, statistics = calls_and_statistics(engine, staged)
    if engine.name == "spark":
        for mapped in (calls, statistics):
            plan = executed_plan(mapped)
            assert "Exchange" not in plan and "FileScan" not in plan and "Range" in plan, plan
        chained = engine.map_batches(statistics, lambda frame, side: frame, statistic_schema("object_id"))
        plan = executed_plan(chained)
        assert plan.count("MapInArrow") == 1, f"consecutive Python stages must run as one pass: {plan}"
    summary = summarize_calls(engine.collect(calls), "object_id")
    assert (summary["calls"] == 1).all() and summary["sorted"].all() and summary["rows"].sum() == NUMBER_OF_ROWS
    expected = expected_primitive_results(claims)["map_groups:object_id"]
    pd.testing.assert_frame_equal(_normalized(engine.collect(statistics), ["object_id"]), expected, check_exact=True)
    rewritten = engine.write_parquet(statistics, tmp_path / "rewritten", statistic_schema("object_id"))
    read_back = pa.concat_tables([pq.read_table(path) for path in rewritten]).to_pandas()
    pd.testing.assert_frame_equal(_normalized(read_back, ["object_id"]), expected, check_exact=True)
    assert engine.count(engine.read_groups([], "object_id", CLAIMS_SCHEMA)) == 0


NUMBERED_SCHEMA = CLAIMS_SCHEMA.append(pa.field("row", pa.int64(), nullable=False))


def unchanged(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
    return frame


def test_write_by_key_layout_is_a_function_of_the_rows_alone(
    engine: Engine, claims: pd.DataFrame, tmp_path: Path
) -> None:
    """The same rows computed two ways — as given, and reversed then clustered on another key —
    give the same files, row for row: each file one shard of the key, sorted by the key and then
    ``order``. (Writing the partitions as they are, ``write_parquet``, fails this: its files follow
    how the rows were computed.)"""
    numbered = claims.assign(row=np.arange(len(claims), dtype=np.int64))
    as_given = engine.from_pandas(numbered, NUMBERED_SCHEMA)
    regrouped = engine.map_groups(engine.from_pandas(numbered.iloc[::-1], NUMBERED_SCHEMA), "source_id", unchanged,
                                  NUMBERED_SCHEMA, keeps_groups=True)
    first = engine.write_by_key(as_given, "object_id", ["row"], 3, tmp_path / "first", NUMBERED_SCHEMA)
    second = engine.write_by_key(regrouped, "object_id", ["row"], 3, tmp_path / "second", NUMBERED_SCHEMA)
    assert 2 <= len(first) <= 3 and [path.name for path in first] == [path.name for path in second]
    assert sorted(path.name for path in (tmp_path / "first").iterdir()) == [path.name for path in first]
    keys_per_file = []
    for one, other in zip(first, second, strict=True):
        table = pq.read_table(one)
        assert table.schema == NUMBERED_SCHEMA and table.num_rows > 0
        assert table.equals(pq.read_table(other)), f"{one.name} differs with the rows' partitioning"
        keys = [key.encode() for key in table.column("object_id").to_pylist()]
        ordered = list(zip(keys, table.column("row").to_pylist(), strict=True))
        assert ordered == sorted(ordered), f"{one.name} is not sorted by object_id, then row"
        keys_per_file.append(set(keys))
    assert sum(len(keys) for keys in keys_per_file) == len(set().union(*keys_per_file)), "a key spans files"
    read_back = pa.concat_tables([pq.read_table(path) for path in first]).to_pandas()
    assert sorted(read_back["row"]) == list(range(NUMBER_OF_ROWS))


def test_written_row_groups_follow_the_row_count_alone(engine: Engine, tmp_path: Path) -> None:
    """Every engine writes a file's rows in row groups of ``arrow.ROW_GROUP_ROWS`` (the last one
    shorter), whatever batches it computed them in (Spark hands over
    ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows, 10,000 by default): a release file's row
    groups are a function of its row count (docs/PRIVACY.md, "The layout of a release")."""
    rows = 2 * ROW_GROUP_ROWS + 1_234
    schema = pa.schema([pa.field("object_id", pa.string()), pa.field("row", pa.int64(), nullable=False)])
    frame = pd.DataFrame({"object_id": (np.arange(rows) // 10).astype(str), "row": np.arange(rows, dtype=np.int64)})
    files = engine.write_by_key(engine.from_pandas(frame, schema), "object_id", ["row"], 1, tmp_path / "one", schema)
    metadata = pq.ParquetFile(files[0]).metadata
    assert [metadata.row_group(group).num_rows for group in range(metadata.num_row_groups)] == [
        ROW_GROUP_ROWS, ROW_GROUP_ROWS, 1_234]


def test_persist_and_unpersist_keep_the_rows(engine: Engine, claims: pd.DataFrame) -> None:
    scaled = engine.map_batches(
        engine.from_pandas(claims, CLAIMS_SCHEMA), scale_values, SCALED_SCHEMA, SCALE_SIDE
    )
    persisted = engine.persist(scaled)
    assert engine.count(persisted) == NUMBER_OF_ROWS
    expected = expected_primitive_results(claims)["map_batches"]
    pd.testing.assert_frame_equal(
        _normalized(engine.collect(persisted), ["object_id", "source_id", "value_scaled"]),
        expected,
        check_exact=True,
    )
    engine.unpersist(persisted)
    assert engine.count(persisted) == NUMBER_OF_ROWS


def test_write_parquet_is_deterministic_plain_parquet(
    engine: Engine, claims: pd.DataFrame, tmp_path: Path
) -> None:
    statistics = engine.map_groups(
        engine.from_pandas(claims, CLAIMS_SCHEMA),
        "object_id",
        group_statistics_by_object_id,
        statistic_schema("object_id"),
        OFFSET_SIDE,
    )
    first = engine.write_parquet(statistics, tmp_path / "first", statistic_schema("object_id"))
    second = engine.write_parquet(statistics, tmp_path / "second", statistic_schema("object_id"))
    assert first and [path.name for path in first] == [path.name for path in second]
    assert sorted(path.name for path in (tmp_path / "first").iterdir()) == [path.name for path in first]
    for one, other in zip(first, second, strict=True):
        one_table, other_table = pq.read_table(one), pq.read_table(other)
        assert one_table.num_rows > 0
        assert one_table.schema == statistic_schema("object_id") and one_table.schema.metadata is None
        assert one_table.sort_by("object_id").equals(other_table.sort_by("object_id"))
    expected = expected_primitive_results(claims)["map_groups:object_id"]
    read_back = engine.collect(engine.read_parquet(first, statistic_schema("object_id")))
    pd.testing.assert_frame_equal(_normalized(read_back, ["object_id"]), expected, check_exact=True)


def test_empty_results_keep_the_declared_columns(
    engine: Engine, claims: pd.DataFrame, tmp_path: Path
) -> None:
    def drop_everything(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
        return frame.iloc[0:0]

    empty = engine.map_batches(engine.from_pandas(claims, CLAIMS_SCHEMA), drop_everything, CLAIMS_SCHEMA)
    collected = engine.collect(empty)
    assert len(collected) == 0 and collected.dtypes.to_dict() == CLAIMS_DTYPES
    assert engine.write_parquet(empty, tmp_path / "empty", CLAIMS_SCHEMA) == []
    sums = engine.sum_by_key(empty, "object_id", ["big"])
    assert list(sums.columns) == ["object_id", "big"] and len(sums) == 0


def test_sum_by_key_refuses_a_total_beyond_int64(engine: Engine, tmp_path: Path) -> None:
    frame = pd.DataFrame({"object_id": ["a", "b", "a", "c"], "big": [2**62, 1, 2**62, 5]})
    schema = pa.schema([("object_id", pa.string()), ("big", pa.int64())])
    with pytest.raises(EngineError, match="exceeds the int64 range"):
        engine.sum_by_key(engine.from_pandas(frame, schema), "object_id", ["big"])
    halves = [frame.iloc[[0, 2]], frame.iloc[[1, 3]]]
    files = [arrow_file(half, schema, tmp_path / f"part-{index}.parquet") for index, half in enumerate(halves)]
    with pytest.raises(EngineError, match="exceeds the int64 range"):
        engine.sum_by_key(engine.read_groups(files, "object_id", schema), "object_id", ["big"])


def arrow_file(frame: pd.DataFrame, schema: pa.Schema, path: Path) -> Path:
    pq.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False), path)
    return path


@pytest.mark.spark
def test_make_engine_refuses_what_it_cannot_run_in_one_sentence() -> None:
    from pipelines.engines import make_engine

    closed_port = _closed_loopback_port()
    cases = [
        (lambda: make_engine("flink"), "unknown engine 'flink'"),
        (lambda: make_engine("local", master="local[2]"), "does not apply to the local engine"),
        (lambda: make_engine("spark", master="yarn://x"), "is not a Spark master URL"),
        (
            lambda: make_engine("spark", master=f"spark://127.0.0.1:{closed_port}"),
            "cannot reach the Spark master",
        ),
    ]
    for build, message in cases:
        started = time.monotonic()
        with pytest.raises(EngineError, match=message) as raised:
            build()
        assert time.monotonic() - started < 5 and "\n" not in str(raised.value)


def _closed_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_null_keys_form_one_group_sorted_first(engine: Engine) -> None:
    frame = pd.DataFrame({"object_id": [None, "b", None, "a", "b", None], "big": [1, 2, 3, 4, 5, 6]})
    schema = pa.schema([("object_id", pa.string()), ("big", pa.int64())])
    collection = engine.from_pandas(frame, schema)

    def first_key_and_total(group_frame: pd.DataFrame, side: Any) -> pd.DataFrame:
        keys = group_frame["object_id"].tolist()
        runs = [key for index, key in enumerate(keys) if index == 0 or key != keys[index - 1]]
        return pd.DataFrame({"runs": ["|".join(str(key) for key in runs)], "rows": [len(keys)]})

    runs_schema = pa.schema([("runs", pa.string()), ("rows", pa.int64())])
    runs = engine.collect(engine.map_groups(collection, "object_id", first_key_and_total, runs_schema))
    assert runs["rows"].sum() == 6
    all_runs = [run.split("|") for run in runs["runs"]]
    assert sum(run.count("None") for run in all_runs) == 1
    assert all(run.index("None") == 0 for run in all_runs if "None" in run)
    sums = engine.sum_by_key(collection, "object_id", ["big"])
    assert sums["object_id"].tolist() == [None, "a", "b"] and sums["big"].tolist() == [10, 4, 7]
