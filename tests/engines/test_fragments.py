"""Inputs read, checked and canonicalized on the executors (issue 15): ``Engine.map_fragments``
over the platform's fragments (``pipelines/platform/sources.py``), the distributed first failing
row (``Engine.first_row``) and the input gate's metrics (``Engine.column_metrics``).

The expected rows never come from an engine or from ``read_fragment``: they are the values the
test wrote into each file, numbered by the file's place in path order (``ROW_ID = ordinal << 40 |
row``). Every engine, and every split of the fragments into tasks, must give exactly those rows;
the first flagged row and the metrics are brute-forced from them too.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from pyspark import cloudpickle as spark_cloudpickle

from pipelines.engines import EngineError
from pipelines.engines import spark as spark_engine_module
from pipelines.engines.base import ColumnMetrics, Engine, ForwardedError, forwardable, forwarded_error
from pipelines.platform.errors import InputError
from pipelines.platform.sources import ROW_BITS, ROW_ID, list_fragments, read_fragment, row_location
from schemas.sources import SourceSpec

# Fragment functions defined here travel to Spark executors by value (as in the conformance suite).
spark_cloudpickle.register_pickle_by_value(__import__(__name__, fromlist=["_"]))

ROWS_PER_CALL = 37
SCHEMA = pa.schema([
    ("object_id", pa.string()),
    ("source_id", pa.int64()),
    ("value", pa.float64()),
    ("day", pa.string()),
    ("bad", pa.bool_()),
    (ROW_ID, pa.int64()),
])
SIDE = {"offset": 0.5, "key": bytes(range(32))}
"""A side value with key material (32 bytes), which Spark keeps out of its broadcast."""
PARQUET_FILES = {  # path below the folder -> rows; bad (negative) values at the listed rows
    "day=2026-12-01/part-0.parquet": (120, ()),
    "day=2026-12-01/part-1.parquet": (0, ()),
    "day=2026-12-02/part-0.parquet": (200, (17, 150)),
    "day=2026-12-03/part-0.parquet": (80, ()),
    "day=2026-12-03/part-1.parquet": (150, (3,)),
}
CSV_FILES = {
    "day=2026-12-01/claims-0.csv": (90, (60,)),
    "day=2026-12-01/claims-1.csv": (40, ()),
    "day=2026-12-02/claims-0.csv": (110, (5, 6)),
}


def file_rows(seed: int, rows: int, bad: tuple[int, ...]) -> list[dict[str, Any]]:
    """Rows of one file: some null values (and NaN, which Parquet keeps), negatives at ``bad``."""
    result = []
    for row in range(rows):
        value: float | None = ((seed * 7919 + row * 104729) % 10_007) / 7.0
        if row in bad:
            value = -1.0 - row
        elif row % 23 == 5:
            value = None
        result.append({"object_id": f"o-{(seed * 31 + row) % 57:02d}-é", "source_id": (seed + row * 13) % 41 - 20,
                       "value": value})
    return result


def write_inputs(root: Path) -> dict[str, Any]:
    """The partitioned Parquet folder and the CSV glob, and the rows each must read as."""
    parquet_root = root / "claims"
    for index, (name, (rows, bad)) in enumerate(PARQUET_FILES.items()):
        path = parquet_root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = file_rows(index, rows, bad)
        if data:
            data[-1]["value"] = math.nan
        pq.write_table(pa.Table.from_pylist(data, schema=pa.schema(
            [("object_id", pa.string()), ("source_id", pa.int64()), ("value", pa.float64())])), path)
    (parquet_root / "_SUCCESS").write_bytes(b"")
    csv_root = root / "csvs"
    for index, (name, (rows, bad)) in enumerate(CSV_FILES.items()):
        path = csv_root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = file_rows(100 + index, rows, bad)
        text = pa.table({
            "object_id": [row["object_id"] for row in data],
            "source_id": [str(row["source_id"]) for row in data],
            "value": ["" if row["value"] is None else repr(row["value"]) for row in data],
        })
        pacsv.write_csv(text, path)
    (csv_root / "day=2026-12-01" / "notes.txt").write_text("not matched by the glob")
    return {
        "parquet": (SourceSpec(path=str(parquet_root)), expected_table(parquet_root, PARQUET_FILES, 0, nan_last=True)),
        "csv": (SourceSpec(path=str(csv_root / "day=*" / "claims-*.csv")),
                expected_table(csv_root, CSV_FILES, 100, nan_last=False)),
    }


def expected_table(root: Path, files: dict[str, tuple[int, tuple[int, ...]]], seed: int, nan_last: bool) -> pa.Table:
    rows = []
    for ordinal, name in enumerate(sorted(files)):
        count, bad = files[name]
        data = file_rows(seed + list(files).index(name), count, bad)
        if nan_last and data:
            data[-1]["value"] = math.nan
        for row, values in enumerate(data):
            value = None if values["value"] is None else values["value"] + SIDE["offset"]
            rows.append({**values, "value": value, "day": name.split("/")[0].split("=")[1],
                         "bad": value is not None and value < 0, ROW_ID: (ordinal << ROW_BITS) | row})
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def read_claims(fragment: Any, side: dict[str, Any]) -> pa.Table:
    """What a kind's input step does on an executor: read the fragment, cast its text or typed
    columns to the canonical types, flag the rows a check refuses."""
    assert len(side["key"]) == 32
    table = read_fragment(fragment, ["object_id", "source_id", "value", "day"])
    value = pc.add(pc.cast(table.column("value"), pa.float64()), side["offset"])
    return pa.table({
        "object_id": table.column("object_id"),
        "source_id": pc.cast(table.column("source_id"), pa.int64()),
        "value": value,
        "day": table.column("day"),
        "bad": pc.fill_null(pc.less(value, 0.0), False),
        ROW_ID: table.column(ROW_ID),
    })


def refuse_third_fragment(fragment: Any, side: Any) -> pa.Table:
    if fragment.ordinal == 2:
        raise InputError(fragment.name, "value is not a number", row=4, column="value")
    return read_claims(fragment, SIDE)


def only_bad(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
    return frame[frame["bad"]]


def nothing(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
    return frame.iloc[0:0]


def exact_rows(table: pa.Table) -> dict[str, list[Any]]:
    """The rows sorted by ``ROW_ID``, column by column, with NaN spelled out (so that NaN equals
    NaN and differs from null) and every value with its exact type."""
    ordered = table.sort_by(ROW_ID)
    assert ordered.schema == SCHEMA
    return {name: ["NaN" if isinstance(value, float) and math.isnan(value) else value
                   for value in ordered.column(name).to_pylist()] for name in ordered.column_names}


def assert_collected(engine: Engine, collection: Any, expected: pa.Table) -> None:
    """``collect`` (pandas: null and NaN both become NaN) gives the expected rows."""
    frame = engine.collect(collection).sort_values(ROW_ID, ignore_index=True)
    pd.testing.assert_frame_equal(frame, expected.sort_by(ROW_ID).to_pandas(), check_exact=True)


def expected_metrics(table: pa.Table) -> dict[str, ColumnMetrics]:
    metrics = {}
    for column in table.column_names:
        values = table.column(column).to_pylist()
        present = [value for value in values if value is not None and not (isinstance(value, float) and math.isnan(value))]
        metrics[column] = ColumnMetrics(
            rows=len(values), nulls=sum(value is None for value in values),
            nans=sum(isinstance(value, float) and math.isnan(value) for value in values),
            min=min(present) if present else None, max=max(present) if present else None,
        )
    return metrics


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return write_inputs(tmp_path_factory.mktemp("inputs"))


@pytest.fixture(
    scope="module",
    params=["local", pytest.param("spark", marks=pytest.mark.spark), pytest.param("beam", marks=pytest.mark.beam)],
)
def engine(request: pytest.FixtureRequest):
    if request.param == "local":
        from pipelines.engines.local import LocalEngine

        built: Engine = LocalEngine(parallelism=3, rows_per_call=ROWS_PER_CALL)
    elif request.param == "spark":
        from pipelines.engines.spark import SparkEngine

        built = SparkEngine(session=request.getfixturevalue("spark_session"), parallelism=4,
                            rows_per_call=ROWS_PER_CALL)
    else:
        from pipelines.engines.beam import BeamEngine

        built = BeamEngine(parallelism=5, rows_per_call=ROWS_PER_CALL)
    yield built
    built.close()


def test_the_inputs_exercise_what_they_should(inputs: dict[str, Any]) -> None:
    parquet, csv = (list_fragments(inputs[name][0]) for name in ("parquet", "csv"))
    assert len(parquet) == len(PARQUET_FILES) and len(csv) == len(CSV_FILES)
    for name in ("parquet", "csv"):
        expected = inputs[name][1]
        values = expected.column("value").to_pylist()
        assert any(value is None for value in values) and pc.sum(expected.column("bad")).as_py() >= 3
    assert any(isinstance(value, float) and math.isnan(value) for value in inputs["parquet"][1].column("value").to_pylist())


@pytest.mark.parametrize("per_task", [1, 2, 5])
@pytest.mark.parametrize("source", ["parquet", "csv"])
def test_map_fragments_reads_the_same_rows_on_every_engine_and_split(
    engine: Engine, inputs: dict[str, Any], source: str, per_task: int, tmp_path: Path
) -> None:
    spec, expected = inputs[source]
    fragments = list_fragments(spec)
    claims = engine.map_fragments(fragments, read_claims, SCHEMA, SIDE, fragments_per_task=per_task)
    assert_collected(engine, claims, expected)
    if per_task == 2:
        assert engine.count(claims) == expected.num_rows
        sums = engine.sum_by_key(claims, "day", ["source_id"])
        brute = expected.group_by("day").aggregate([("source_id", "sum")]).sort_by("day")
        assert sums["day"].tolist() == brute.column("day").to_pylist()
        assert sums["source_id"].tolist() == brute.column("source_id_sum").to_pylist()
        files = engine.write_groups(claims, "object_id", tmp_path / "staged", SCHEMA)
        staged = pa.concat_tables([pq.read_table(path) for path in files])
        assert exact_rows(staged) == exact_rows(expected)


@pytest.mark.parametrize("per_task", [1, 3])
def test_first_row_is_the_smallest_flagged_row_id_across_fragments(
    engine: Engine, inputs: dict[str, Any], per_task: int
) -> None:
    spec, expected = inputs["parquet"]
    fragments = list_fragments(spec)
    claims = engine.map_fragments(fragments, read_claims, SCHEMA, SIDE, fragments_per_task=per_task)
    flagged = engine.map_batches(claims, only_bad, SCHEMA)
    first = engine.first_row(flagged)
    bad_ids = [row_id for row_id, bad in zip(expected.column(ROW_ID).to_pylist(), expected.column("bad").to_pylist(),
                                             strict=True) if bad]
    assert first is not None and first[ROW_ID] == min(bad_ids) and first["bad"] is True
    assert len({row_id >> ROW_BITS for row_id in bad_ids}) == 2, "bad rows must lie in two fragments"
    name, row = row_location(fragments, first[ROW_ID])
    assert (Path(name).relative_to(Path(spec.path)).as_posix(), row) == ("day=2026-12-02/part-0.parquet", 18)
    assert first == expected.filter(pc.equal(expected.column(ROW_ID), min(bad_ids))).to_pylist()[0]
    assert engine.first_row(engine.map_batches(claims, nothing, SCHEMA)) is None


def test_first_row_of_an_empty_input_is_none_and_needs_an_orderable_column(engine: Engine, inputs: dict[str, Any]) -> None:
    fragments = list_fragments(inputs["csv"][0])
    empty = engine.map_fragments(fragments, lambda fragment, side: SCHEMA.empty_table(), SCHEMA, fragments_per_task=2)
    assert engine.first_row(empty) is None
    assert engine.column_metrics(empty, ["value"]) == {"value": ColumnMetrics(0, 0, 0, None, None)}
    with pytest.raises(EngineError, match="integer or string column"):
        engine.first_row(empty, "value")


def test_first_row_breaks_ties_by_the_other_columns(engine: Engine) -> None:
    schema = pa.schema([("k", pa.string()), ("a", pa.int64()), ("b", pa.float64())])
    frame = pd.DataFrame({"k": ["é", "b", "b", "c", "b", "b"] * 20, "a": [5, 9, 3, 1, 3, 3] * 20,
                          "b": [0.5, 0.1, 2.5, 0.0, 1.5, 2.0] * 20})
    assert engine.first_row(engine.from_pandas(frame, schema), "k") == {"k": "b", "a": 3, "b": 1.5}


def test_column_metrics_are_reduced_on_the_engine(engine: Engine, inputs: dict[str, Any]) -> None:
    spec, expected = inputs["parquet"]
    claims = engine.map_fragments(list_fragments(spec), read_claims, SCHEMA, SIDE, fragments_per_task=2)
    metrics = engine.column_metrics(claims)
    assert metrics == expected_metrics(expected)
    assert metrics["value"].nans == 4 and metrics["value"].nulls > 0  # the last row of each non-empty file
    assert engine.column_metrics(claims, ["day"]) == {"day": expected_metrics(expected)["day"]}


def test_an_input_error_in_one_fragment_reaches_the_driver_as_that_one_line(
    engine: Engine, inputs: dict[str, Any]
) -> None:
    spec, _ = inputs["parquet"]
    fragments = list_fragments(spec)
    with pytest.raises(InputError) as raised:  # the local engine reads at once, the others at the action
        claims = engine.map_fragments(fragments, refuse_third_fragment, SCHEMA, fragments_per_task=2)
        engine.count(engine.map_batches(claims, only_bad, SCHEMA))
    error = raised.value
    assert str(error) == f"{fragments[2].name}, row 4, column 'value': value is not a number"
    assert (error.file, error.row, error.column, error.exit_code) == (fragments[2].name, 4, "value", 2)


def test_sum_by_key_over_a_few_group_files_by_another_key_merges_every_file(engine: Engine, tmp_path: Path) -> None:
    """Regression: Spark's driver-side merge of per-file partial sums (at most 64 files) returned
    a key once per file holding it when the files were grouped by another key."""
    schema = pa.schema([("g", pa.string()), ("k", pa.int64()), ("v", pa.int64())])
    files = []
    for index, group in enumerate(["a", "b", "c"]):
        files.append(tmp_path / f"part-{index}.parquet")
        pq.write_table(pa.table({"g": [group] * 3, "k": [1, 2, index], "v": [1, 10, 100]}, schema=schema), files[-1])
    sums = engine.sum_by_key(engine.read_groups(files, "g", schema), "k", ["v"])
    assert sums.to_dict("list") == {"k": [0, 1, 2], "v": [100, 103, 130]}


@pytest.mark.parametrize("driver_merges_at_most", [64, 2])
def test_sum_by_key_over_group_files_is_exact_whoever_merges_the_partials(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, driver_merges_at_most: int
) -> None:
    """Spark sums per-file partials on the driver up to ``DRIVER_MERGE_MAX_FILES`` files and with
    its own aggregation beyond (issue 15: the aggregation then receives a row per key per file,
    not per batch); both give the exact totals, here near the int64 range and with keys in
    several files. The other engines ignore the limit."""
    monkeypatch.setattr(spark_engine_module, "DRIVER_MERGE_MAX_FILES", driver_merges_at_most)
    schema = pa.schema([("g", pa.string()), ("k", pa.int64()), ("v", pa.int64()), ("w", pa.int32())])
    big, files, expected = 2**61 + 12345, [], {}
    for index in range(5):
        keys = [index % 2, 7, 100 + index, 7]
        values = [big, -big + index, index, big // 3]
        weights = [1, None, -index, 2**31 - 1]
        files.append(tmp_path / f"part-{index}.parquet")
        pq.write_table(pa.table({"g": [f"g{index}"] * 4, "k": keys, "v": values, "w": weights}, schema=schema), files[-1])
        for key, value, weight in zip(keys, values, weights, strict=True):
            total = expected.setdefault(key, [0, 0])
            total[0] += value
            total[1] += weight or 0
    sums = engine.sum_by_key(engine.read_groups(files, "g", schema), "k", ["v", "w"])
    assert sums.to_dict("list") == {"k": sorted(expected), "v": [expected[key][0] for key in sorted(expected)],
                                    "w": [expected[key][1] for key in sorted(expected)]}


def test_only_plain_exceptions_travel_from_workers() -> None:
    error = InputError("claims.csv", "value is not a number", row=7, column="value")
    carrier = forwardable(error)
    assert isinstance(carrier, ForwardedError) and "\n" not in str(carrier)
    wrapped = RuntimeError(f"Traceback (most recent call last):\n  ...\nRuntimeError: {carrier} [while running 'x']")
    rebuilt = forwarded_error(wrapped)
    assert isinstance(rebuilt, InputError) and str(rebuilt) == str(error)
    assert (rebuilt.file, rebuilt.row, rebuilt.column, rebuilt.message) == ("claims.csv", 7, "value", "value is not a number")
    disk = forwarded_error(RuntimeError(str(forwardable(OSError(28, "No space left on device", "/staging/part")))))
    assert isinstance(disk, OSError) and (disk.errno, disk.filename) == (28, "/staging/part")
    raw = UnicodeDecodeError("utf-8", b"secret \xff", 7, 8, "invalid start byte")
    assert forwardable(raw) is raw, "bytes (raw input) never travel in an error's text"
    assert forwarded_error(RuntimeError("no carrier here")) is None


def test_spark_map_fragments_never_brings_the_rows_to_the_driver(
    inputs: dict[str, Any], spark_session: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The rows appear first in the Python workers (a ``Range`` of task indices, no scan of a
    driver-side table), and what the driver receives is one row per partition at most."""
    from pipelines.engines.spark import SparkEngine

    engine = SparkEngine(session=spark_session, parallelism=4, rows_per_call=ROWS_PER_CALL)
    spec, expected = inputs["parquet"]
    fragments = list_fragments(spec)
    frame_class = type(spark_session.range(1))
    received: list[pa.Table] = []
    real_to_arrow = frame_class.toArrow

    def recording_to_arrow(frame: Any) -> pa.Table:
        table = real_to_arrow(frame)
        received.append(table)
        return table

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("rows brought to the driver")

    monkeypatch.setattr(frame_class, "toArrow", recording_to_arrow)
    for name in ("collect", "toPandas", "toLocalIterator", "take", "head", "tail"):
        monkeypatch.setattr(frame_class, name, forbidden)
    monkeypatch.setattr(type(spark_session), "createDataFrame", forbidden)

    claims = engine.map_fragments(fragments, read_claims, SCHEMA, SIDE)
    flagged = engine.map_batches(claims, only_bad, SCHEMA)
    plan = claims.frame._jdf.queryExecution().executedPlan().toString()
    assert "Range" in plan and "LocalTableScan" not in plan and "Scan" not in plan.replace("Range", ""), plan
    fused = flagged.frame._jdf.queryExecution().executedPlan().toString()
    assert fused.count("MapInArrow") == 1, f"reading and checking must run as one Python pass: {fused}"
    assert engine.count(claims) == expected.num_rows
    files = engine.write_parquet(flagged, tmp_path / "flagged", SCHEMA)
    first = engine.first_row(flagged)
    metrics = engine.column_metrics(claims, ["value", ROW_ID])
    assert first is not None and metrics["value"].rows == expected.num_rows and len(files) == 2
    assert received and all(table.num_rows <= len(fragments) for table in received)
    assert sum(table.num_rows for table in received if ROW_ID in table.column_names) <= len(fragments)
