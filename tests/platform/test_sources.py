"""The platform's input sources (``pipelines/platform/sources.py``, issue 15): an input — a file, a
folder, a glob, an Iceberg table — listed on the driver as fragments from metadata alone, each
fragment read alone by an executor (here: a fresh process), rows named by ids that map back to
"file, row N", and fingerprints that do not depend on how the fragments were split."""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipelines.engines import storage
from pipelines.engines.storage import Location
from pipelines.platform.config import validate_document
from pipelines.platform.errors import ConfigError, InputError
from pipelines.platform.sources import (
    ROW_BITS,
    ROW_ID,
    Fragment,
    fingerprint_fragments,
    fragment_fingerprint,
    input_fingerprint,
    list_fragments,
    read_fragment,
    resolve_source,
    row_error,
    row_location,
)
from schemas.sources import SourceSpec

ROOT = Path(__file__).resolve().parents[2]


def claims(first: int, rows: int = 3) -> pa.Table:
    return pa.table({"object_id": [f"o{first + i}" for i in range(rows)],
                     "value": pa.array([float(first + i) for i in range(rows)], pa.float64())})


def partitioned_folder(root: Path, order: list[tuple[str, int]] | None = None) -> Path:
    """``root/day=.../part-N.parquet`` (written in ``order``), plus what Spark leaves beside them."""
    for day, part in order or [("2026-12-01", 0), ("2026-12-01", 1), ("2026-12-02", 0)]:
        folder = root / f"day={day}"
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(claims(100 * part + int(day[-2:])), folder / f"part-{part}.parquet")
    (root / "_SUCCESS").write_bytes(b"")
    (root / "day=2026-12-01" / ".part-0.parquet.crc").write_bytes(b"not parquet")
    (root / "_temporary" / "0").mkdir(parents=True, exist_ok=True)
    (root / "_temporary" / "0" / "part-9.parquet").write_bytes(b"half written")
    return root


def relative(fragments: list[Fragment], root: Path) -> list[str]:
    return [Path(fragment.name).relative_to(root).as_posix() for fragment in fragments]


def one_line(error: pytest.ExceptionInfo[InputError]) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


# ---- listing ------------------------------------------------------------------------------------


def test_hive_partition_folders_become_columns_and_spark_leftovers_are_skipped(tmp_path: Path) -> None:
    root = partitioned_folder(tmp_path / "claims")
    fragments = list_fragments(SourceSpec(path=str(root)))
    assert relative(fragments, root) == ["day=2026-12-01/part-0.parquet", "day=2026-12-01/part-1.parquet",
                                         "day=2026-12-02/part-0.parquet"]
    assert [fragment.ordinal for fragment in fragments] == [0, 1, 2]
    assert {fragment.format for fragment in fragments} == {"parquet"}
    assert fragments[2].partition_values == {"day": "2026-12-02"}

    table = pa.concat_tables(read_fragment(fragment, ["day", "object_id", "value"]) for fragment in fragments)
    assert table.schema.field("day").type == pa.string()
    assert table.schema.field("value").type == pa.float64()  # Parquet keeps its types
    assert table.column("day").to_pylist() == ["2026-12-01"] * 6 + ["2026-12-02"] * 3
    assert table.column("object_id").to_pylist()[:3] == ["o1", "o2", "o3"]
    assert table.column_names == ["day", "object_id", "value", ROW_ID]


def test_partition_values_are_unquoted_and_the_hive_null_folder_is_a_null(tmp_path: Path) -> None:
    for folder in ("region=eu%2Fwest", "region=__HIVE_DEFAULT_PARTITION__"):
        (tmp_path / folder).mkdir()
        pq.write_table(claims(0, 2), tmp_path / folder / "part-0.parquet")
    fragments = list_fragments(SourceSpec(path=str(tmp_path)))
    values = [read_fragment(fragment, ["region"]).column("region").to_pylist() for fragment in fragments]
    assert sorted(values, key=str) == [["eu/west", "eu/west"], [None, None]]


def test_partition_folders_that_disagree_are_refused_and_partition_columns_name_the_levels(tmp_path: Path) -> None:
    mixed = tmp_path / "mixed"
    for folder in ("day=1/hour=2", "day=1"):
        (mixed / folder).mkdir(parents=True, exist_ok=True)
        pq.write_table(claims(0), mixed / folder / f"part-{folder.count('/')}.parquet")
    with pytest.raises(InputError, match=r"partition folders differ: a file lies under folder keys \(day\) where another lies "
                                           r"under \(day, hour\)$"):
        list_fragments(SourceSpec(path=str(mixed)))

    bare = tmp_path / "bare"
    for year, month in (("2026", "11"), ("2026", "12")):
        (bare / year / f"month={month}").mkdir(parents=True)
        pq.write_table(claims(int(month)), bare / year / f"month={month}" / "data.parquet")
    fragments = list_fragments(SourceSpec(path=str(bare), partition_columns=["year", "month"]))
    assert [fragment.partition_values for fragment in fragments] == [{"year": "2026", "month": "11"},
                                                                     {"year": "2026", "month": "12"}]
    assert [fragment.partition for fragment in list_fragments(SourceSpec(path=str(bare), partition_columns=[]))] \
        == [(), ()]
    with pytest.raises(InputError, match="partition_columns names 1 folder levels but a file lies 2 below the input's root$"):
        list_fragments(SourceSpec(path=str(bare), partition_columns=["year"]))
    with pytest.raises(InputError, match="level month= where partition_columns names mon"):
        list_fragments(SourceSpec(path=str(bare), partition_columns=["year", "mon"]))


def test_a_glob_lists_its_matches(tmp_path: Path) -> None:
    root = partitioned_folder(tmp_path / "claims")
    firsts = list_fragments(SourceSpec(path=f"{root}/day=*/part-0.parquet"))
    assert relative(firsts, root) == ["day=2026-12-01/part-0.parquet", "day=2026-12-02/part-0.parquet"]
    assert firsts[1].partition_values == {"day": "2026-12-02"}  # the root is the glob's leading folders
    assert len(list_fragments(SourceSpec(path=f"{root}/**/*.parquet"))) == 3
    assert relative(list_fragments(SourceSpec(path=f"{root}/day=2026-12-0[!1]/part-?.parquet")), root) == [
        "day=2026-12-02/part-0.parquet"]
    with pytest.raises(InputError, match="no file matches the glob") as error:
        list_fragments(SourceSpec(path=f"{root}/day=*/*.csv"))
    assert one_line(error).startswith(f"{root}/day=*/*.csv: ")


def test_formats_are_inferred_and_a_mix_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("object_id,value\no1,1\n")
    pq.write_table(claims(0), tmp_path / "b.parquet")
    with pytest.raises(InputError, match=r"mixes CSV and Parquet files \(a.csv, b.parquet"):
        list_fragments(SourceSpec(path=str(tmp_path)))
    with pytest.raises(InputError, match="mixes CSV and Parquet"):
        list_fragments(SourceSpec(path=str(tmp_path), format="csv"))
    assert [fragment.format for fragment in list_fragments(SourceSpec(path=f"{tmp_path}/*.csv"))] == ["csv"]

    hive = tmp_path / "hive"
    hive.mkdir()
    pq.write_table(claims(0), hive / "000000_0")  # Hive names its files without a suffix
    with pytest.raises(InputError, match="cannot tell the format of 000000_0 from its name: set format"):
        list_fragments(SourceSpec(path=str(hive)))
    (only,) = list_fragments(SourceSpec(path=str(hive), format="parquet"))
    assert read_fragment(only, ["value"]).column("value").to_pylist() == [0.0, 1.0, 2.0]


def test_format_errors_name_files_without_their_folders(tmp_path: Path) -> None:
    """A partition folder may hold a private value: the format errors name a file by its base name
    only (checked after the third issue-15 review: they always did; this keeps it so)."""
    for folder, name in (("value=61.37", "000000_0"), ("value=70.5", "b.parquet"), ("value=61.37", "a.csv")):
        (tmp_path / folder).mkdir(exist_ok=True)
        pq.write_table(claims(0), tmp_path / folder / name)
    with pytest.raises(InputError, match="mixes CSV and Parquet files") as mixed:
        list_fragments(SourceSpec(path=str(tmp_path)))
    (tmp_path / "value=61.37" / "a.csv").unlink()
    (tmp_path / "value=70.5" / "b.parquet").unlink()
    with pytest.raises(InputError, match="cannot tell the format of 000000_0 from its name") as unknown:
        list_fragments(SourceSpec(path=str(tmp_path)))
    for error in (mixed, unknown):
        assert "61.37" not in one_line(error) and "70.5" not in one_line(error)


def test_the_canonical_order_does_not_depend_on_the_order_files_were_written(tmp_path: Path) -> None:
    days = [("2026-12-0" + str(day), part) for day in (1, 2, 3) for part in (0, 1, 2)]
    shuffled = days[:]
    random.Random(7).shuffle(shuffled)
    first = partitioned_folder(tmp_path / "a", days)
    second = partitioned_folder(tmp_path / "b", shuffled)
    listed = [list_fragments(SourceSpec(path=str(root))) for root in (first, second)]
    assert relative(listed[0], first) == relative(listed[1], second)
    assert relative(listed[0], first) == sorted(relative(listed[0], first))
    tables = [pa.concat_tables(read_fragment(fragment, ["day", "value"]) for fragment in fragments)
              for fragments in listed]
    assert tables[0].equals(tables[1])


# ---- reading and row identifiers ----------------------------------------------------------------


def test_row_ids_are_monotone_and_name_the_file_and_row(tmp_path: Path) -> None:
    (tmp_path / "part-0.csv").write_text("object_id,value,note\no1,1.5,x\n\no2,NA,y\no3,  ,z\n")
    (tmp_path / "part-1.csv").write_text("object_id,value,note\no4,bad,x\no5,2,y\n")
    fragments = list_fragments(SourceSpec(path=str(tmp_path)))
    tables = [read_fragment(fragment, ["value", "object_id"]) for fragment in fragments]
    first = tables[0]
    assert first.column_names == ["value", "object_id", ROW_ID]
    assert first.schema.field("value").type == pa.string()  # CSV is text, as read_input_table reads it
    assert first.column("value").to_pylist() == ["1.5", None, "  "]  # NA is missing; blank lines are no rows
    ids = pa.concat_tables(tables).column(ROW_ID).to_pylist()
    assert ids == sorted(ids) and ids[0] == 0 and ids[3] == 1 << ROW_BITS

    # the first bad value, found by a minimum over row ids, named by file and data row
    bad = min(row_id for table in tables for row_id, value in zip(table.column(ROW_ID).to_pylist(),
                                                                  table.column("value").to_pylist(), strict=True)
              if value == "bad")
    assert row_location(fragments, bad) == (str(tmp_path / "part-1.csv"), 1)
    assert row_location(fragments, ids[2]) == (str(tmp_path / "part-0.csv"), 3)
    error = row_error(fragments, bad, "value is not a number", column="value")
    assert str(error) == f"{tmp_path / 'part-1.csv'}, row 1, column 'value': value is not a number"
    with pytest.raises(ValueError, match="belongs to no fragment"):
        row_location(fragments, 7 << ROW_BITS)


def test_reading_names_missing_columns_without_echoing_data(tmp_path: Path) -> None:
    (tmp_path / "headerless.csv").write_text("secret-1,42\nsecret-2,43\n")
    (fragment,) = list_fragments(SourceSpec(path=str(tmp_path / "headerless.csv")))
    with pytest.raises(InputError, match=r"headerless.csv, column 'object_id': the file has no such column \(its first row names none") as error:
        read_fragment(fragment, ["object_id", "value"])
    assert "secret" not in one_line(error)

    pq.write_table(claims(0), tmp_path / "claims.parquet")
    (fragment,) = list_fragments(SourceSpec(path=str(tmp_path / "claims.parquet")))
    with pytest.raises(InputError, match=r"column 'source_id': the file has no such column \(it has: object_id, value\)"):
        read_fragment(fragment, ["source_id"])
    assert read_fragment(fragment).column_names == ["object_id", "value", ROW_ID]


def test_a_partition_key_that_is_also_a_file_column_is_refused(tmp_path: Path) -> None:
    (tmp_path / "object_id=o1").mkdir()
    pq.write_table(claims(0), tmp_path / "object_id=o1" / "part-0.parquet")
    (fragment,) = list_fragments(SourceSpec(path=str(tmp_path)))
    for columns in (None, ["object_id", "value"]):
        with pytest.raises(InputError, match="column 'object_id': both a partition folder key and a column"):
            read_fragment(fragment, columns)
    assert read_fragment(fragment, ["value"]).num_rows == 3  # the key not read: nothing ambiguous


READ_PICKLED = """
import pickle, sys
import pyarrow as pa
from pipelines.platform.sources import read_fragment
with open(sys.argv[1], "rb") as handle:
    fragments, columns = pickle.load(handle)
for index, (fragment, wanted) in enumerate(zip(fragments, columns)):
    with pa.OSFile(f"{sys.argv[2]}.{index}", "wb") as sink:
        table = read_fragment(fragment, wanted)
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
"""


def test_a_pickled_fragment_is_read_alike_in_a_fresh_process(tmp_path: Path, iceberg_lake: dict) -> None:
    root = partitioned_folder(tmp_path / "claims")
    (tmp_path / "text.csv").write_text("object_id,value\no1,NA\no2,3\n")
    fragments = [list_fragments(SourceSpec(path=str(root)))[2], list_fragments(SourceSpec(path=str(tmp_path / "text.csv")))[0],
                 list_fragments(SourceSpec(table="db.claims", lake=iceberg_lake["root"], row_filter="value > 2"))[1]]
    columns = [["value", "day"], None, ["object_id"]]
    shipped = tmp_path / "fragments.pickle"
    shipped.write_bytes(pickle.dumps((fragments, columns)))
    done = subprocess.run([sys.executable, "-c", READ_PICKLED, str(shipped), str(tmp_path / "out.arrow")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    for index, (fragment, wanted) in enumerate(zip(fragments, columns, strict=True)):
        with pa.OSFile(f"{tmp_path / 'out.arrow'}.{index}", "rb") as source:
            there = pa.ipc.open_file(source).read_all()
        assert there.equals(read_fragment(fragment, wanted)) and there.num_rows > 0


# ---- Iceberg tables -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def iceberg_lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """An embedded lake (SQLite catalog) with ``db.claims``: two appends, then a delete (pyiceberg
    writes it copy-on-write: an overwrite snapshot)."""
    from pipelines.platform.lake import Lake

    root = tmp_path_factory.mktemp("input-lake")
    with Lake(root) as lake:
        lake.catalog.create_namespace("db")
        table = lake.catalog.create_table("db.claims", schema=claims(0).schema)
        table.append(claims(0, 4))
        first = table.current_snapshot().snapshot_id
        table.append(claims(10, 5))
        second = table.current_snapshot().snapshot_id
        table.delete("value < 2")
        yield {"root": root, "table": lake.catalog.load_table("db.claims"), "first": first, "second": second}


def through_fragments(spec: SourceSpec, columns: list[str]) -> pa.Table:
    fragments = list_fragments(spec)
    table = pa.concat_tables(read_fragment(fragment, columns) for fragment in fragments)
    ids = table.column(ROW_ID).to_pylist()
    assert ids == sorted(ids)
    return table.drop_columns([ROW_ID])


@pytest.mark.parametrize("case", ["first snapshot", "second snapshot", "current, filtered", "filtered snapshot"])
def test_an_iceberg_table_read_through_fragments_equals_its_scan(iceberg_lake: dict, case: str) -> None:
    table = iceberg_lake["table"]
    snapshot_id, row_filter = {
        "first snapshot": (iceberg_lake["first"], None),
        "second snapshot": (iceberg_lake["second"], None),
        "current, filtered": (None, "value >= 3.0 and object_id != 'o12'"),
        "filtered snapshot": (iceberg_lake["second"], "value < 11"),
    }[case]
    spec = SourceSpec(table="db.claims", lake=iceberg_lake["root"], snapshot_id=snapshot_id, row_filter=row_filter)
    got = through_fragments(spec, ["object_id", "value"])
    expected = table.scan(row_filter=row_filter or "true", snapshot_id=snapshot_id).to_arrow()
    assert got.num_rows > 0
    assert got.cast(expected.schema).sort_by("object_id").equals(expected.sort_by("object_id"))
    if case == "current, filtered":
        assert sorted(got.column("object_id").to_pylist()) == ["o10", "o11", "o13", "o14", "o3"]


def test_the_input_lake_may_be_a_mapping_or_a_lake_file(iceberg_lake: dict, tmp_path: Path) -> None:
    root = iceberg_lake["root"]
    mapping = {"catalog": {"type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}"},
               "warehouse": (root / "warehouse").as_uri(), "state": str(tmp_path / "state")}
    (tmp_path / "lake.yaml").write_text(yaml.safe_dump({"lake": mapping}))
    by_folder = list_fragments(SourceSpec(table="db.claims", lake=root))
    assert [fragment.name for fragment in by_folder] == sorted(fragment.name for fragment in by_folder)  # canonical
    assert len(by_folder) == 2
    for lake in (mapping, str(tmp_path / "lake.yaml")):
        spec = validate_document(SourceSpec, {"table": "db.claims", "lake": lake}, "release.yaml: input")
        assert [fragment.name for fragment in list_fragments(spec)] == [fragment.name for fragment in by_folder]
    assert not (tmp_path / "state").exists()  # an input lake is only read


def test_the_order_of_a_scan_plan_does_not_change_the_fragments(iceberg_lake: dict,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from pyiceberg.table import DataScan

    spec = SourceSpec(table="db.claims", lake=iceberg_lake["root"])
    planned = list_fragments(spec)
    plan_files = DataScan.plan_files
    monkeypatch.setattr(DataScan, "plan_files", lambda scan: list(plan_files(scan))[::-1])
    assert list_fragments(spec) == planned


def test_an_iceberg_fragment_travels_without_column_statistics(iceberg_lake: dict) -> None:
    fragments = list_fragments(SourceSpec(table="db.claims", lake=iceberg_lake["root"]))
    task = pickle.loads(fragments[0].iceberg.task)
    assert task.file.lower_bounds is None and task.file.upper_bounds is None  # raw values stay on the driver
    assert task.file.file_path.endswith(fragments[0].name)
    assert len(pickle.dumps(fragments[0])) < 4096
    assert all("uri" not in key for key, _ in fragments[0].iceberg.properties)  # the catalog's settings stay home


def test_an_iceberg_input_is_refused_in_one_line(iceberg_lake: dict, tmp_path: Path) -> None:
    lake = iceberg_lake["root"]
    cases = [
        (SourceSpec(table="db.nope", lake=lake), "table db.nope: no such table in the lake"),
        (SourceSpec(table="db.claims", lake=lake, snapshot_id=12345), "snapshot_id 12345: no such snapshot"),
        (SourceSpec(table="db.claims", lake=lake, row_filter="day = '1'"), "row_filter names column 'day', which"),
        (SourceSpec(table="db.claims", lake=lake, row_filter="value > 1000000.0"), "no data files to read at snapshot"),
        (SourceSpec(table="db.claims", lake=tmp_path / "nowhere"), "no lake folder here"),
    ]
    for spec, message in cases:
        with pytest.raises(InputError, match=message) as error:
            list_fragments(spec)
        one_line(error)
    (fragment,) = list_fragments(SourceSpec(table="db.claims", lake=lake, snapshot_id=iceberg_lake["first"]))
    with pytest.raises(InputError, match=r"^table db.claims, column 'day': the table has no such column \(it has: object_id, value\)$"):
        read_fragment(fragment, ["day"])


# ---- fingerprints -------------------------------------------------------------------------------


def test_the_input_fingerprint_does_not_depend_on_the_split(tmp_path: Path, iceberg_lake: dict) -> None:
    root = partitioned_folder(tmp_path / "claims", [(f"2026-12-0{day}", part) for day in (1, 2) for part in range(3)])
    fragments = list_fragments(SourceSpec(path=str(root)))
    whole = input_fingerprint(fragments, fingerprint_fragments(fragments))
    tasks = [fragments[4:], fragments[1:2], fragments[:1], fragments[2:4]]  # any split, any order of arrival
    gathered = [pair for task in tasks for pair in fingerprint_fragments(task)]
    assert input_fingerprint(fragments, gathered) == whole
    assert input_fingerprint(fragments[::-1], gathered) == whole  # the ordinals give the order, not the list
    assert input_fingerprint(fragments, dict(reversed(gathered))) == whole
    with pytest.raises(ValueError, match="fingerprints for 5 fragments where the input has 6"):
        input_fingerprint(fragments, gathered[:-1])

    # a file's fingerprint is its bytes: with the lake's key, the policy's keyed fingerprint
    key = bytes(range(32))
    data = Path(fragments[0].name).read_bytes()
    assert fragment_fingerprint(fragments[0]) == "sha256:" + hashlib.sha256(data).hexdigest()
    assert fragment_fingerprint(fragments[0], key) == "hmac-sha256:" + hmac.new(key, data, hashlib.sha256).hexdigest()

    # other bytes, or the same bytes under another partition value, are another input
    pq.write_table(claims(999), fragments[5].name)
    assert input_fingerprint(fragments, fingerprint_fragments(fragments)) != whole
    pq.write_table(claims(100 * 2 + 2), fragments[5].name)  # the original bytes back
    assert input_fingerprint(fragments, fingerprint_fragments(fragments)) == whole
    os.rename(root / "day=2026-12-02", root / "day=2026-12-03")
    moved = list_fragments(SourceSpec(path=str(root)))
    assert input_fingerprint(moved, fingerprint_fragments(moved)) != whole

    table = list_fragments(SourceSpec(table="db.claims", lake=iceberg_lake["root"]))
    assert input_fingerprint(table, fingerprint_fragments(table)) == input_fingerprint(
        table, fingerprint_fragments(list_fragments(SourceSpec(table="db.claims", lake=iceberg_lake["root"],
                                                                snapshot_id=iceberg_lake["table"].current_snapshot()
                                                                .snapshot_id))))


# ---- one-line errors ----------------------------------------------------------------------------


def test_missing_empty_and_unreadable_inputs_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError) as error:
        list_fragments(SourceSpec(path=str(tmp_path / "absent.parquet")))
    assert one_line(error) == f"{tmp_path / 'absent.parquet'}: file or folder not found"

    (tmp_path / "empty" / "_SUCCESS").parent.mkdir()
    (tmp_path / "empty" / "_SUCCESS").write_bytes(b"")
    with pytest.raises(InputError, match="no data files in the folder") as error:
        list_fragments(SourceSpec(path=str(tmp_path / "empty")))
    assert one_line(error).startswith(str(tmp_path / "empty"))

    (tmp_path / "broken.parquet").write_bytes(b"secret,row\n" * 10)
    (fragment,) = list_fragments(SourceSpec(path=str(tmp_path / "broken.parquet")))
    with pytest.raises(InputError, match="cannot be read as PARQUET: not a Parquet file") as error:
        read_fragment(fragment, ["value"])
    assert "secret" not in one_line(error)

    (tmp_path / "ragged.csv").write_text("object_id,value\no1,1\no2,2,secret-extra\n")
    (fragment,) = list_fragments(SourceSpec(path=str(tmp_path / "ragged.csv")))
    with pytest.raises(InputError, match=r"row 2: cannot be read as CSV: a row has 3 fields where the header has 2"
                       ) as error:
        read_fragment(fragment)
    assert "secret" not in one_line(error)
    (tmp_path / "blank.csv").write_text("")
    (fragment,) = list_fragments(SourceSpec(path=str(tmp_path / "blank.csv")))
    with pytest.raises(InputError, match="empty file: no header and no rows"):
        read_fragment(fragment)
    with pytest.raises(InputError, match="'ROW_ID' is the platform's row identifier"):
        read_fragment(fragment, [ROW_ID])


# ---- the config model ---------------------------------------------------------------------------


@pytest.mark.parametrize(("document", "message"), [
    ({}, "give exactly one of path"),
    ({"path": "a.csv", "table": "db.t", "lake": "lake"}, "give exactly one of path"),
    ({"table": "db.t"}, "table needs lake"),
    ({"table": "claims", "lake": "lake"}, "table: table must be an Iceberg table identifier"),
    ({"path": "a.csv", "row_filter": "x > 1"}, "row_filter: only with table"),
    ({"table": "db.t", "lake": "lake", "format": "csv"}, "format and partition_columns are for path inputs"),
    ({"table": "db.t", "lake": "lake", "row_filter": "x >>> 1"}, "row_filter: row_filter is not a valid pyiceberg"),
    ({"path": "a", "partition_columns": ["day", "day"]}, "a column is named twice"),
    ({"path": "a", "compression": "gzip"}, "compression: unknown key"),
])
def test_a_source_setting_is_checked_in_one_line(document: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        validate_document(SourceSpec, document, "release.yaml: input")
    assert "\n" not in str(error.value) and str(error.value).startswith("release.yaml: input: ")


def test_relative_paths_are_relative_to_the_config(tmp_path: Path) -> None:
    spec = resolve_source(SourceSpec(path="data/day=*/part-*.parquet"), tmp_path)
    assert spec.path == f"{tmp_path}/data/day=*/part-*.parquet"
    assert resolve_source(SourceSpec(path="s3://bucket/in/"), tmp_path).path == "s3://bucket/in/"
    assert resolve_source(SourceSpec(table="db.t", lake=Path("../lake")), tmp_path / "conf").lake == tmp_path / "lake"


def test_the_module_imports_no_engine_and_no_pyiceberg() -> None:
    code = ("import sys, pipelines.platform.sources, schemas.sources; "
            "print(sorted(m for m in ('pyspark', 'apache_beam', 'pyiceberg') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# ---- object storage -----------------------------------------------------------------------------


@pytest.mark.services
def test_a_partitioned_prefix_on_object_storage(tmp_path: Path) -> None:
    from tests.services import s3_server

    with s3_server(tmp_path) as s3:
        s3.create_bucket("inputs")
        properties = {"s3.endpoint": s3.endpoint, "s3.access-key-id": s3.access_key,
                      "s3.secret-access-key": s3.secret_key, "s3.region": s3.region}
        prefix = Location("s3://inputs/claims", tuple(sorted(properties.items())))
        for day, first in (("2026-12-02", 20), ("2026-12-01", 10)):
            storage.write_table(claims(first), prefix / f"day={day}" / "part-0.parquet")
        storage.write_bytes(prefix / "_SUCCESS", b"")
        started = time.monotonic()
        fragments = list_fragments(SourceSpec(path="s3://inputs/claims/"), properties=properties)
        assert [fragment.name for fragment in fragments] == ["s3://inputs/claims/day=2026-12-01/part-0.parquet",
                                                             "s3://inputs/claims/day=2026-12-02/part-0.parquet"]
        shipped = pickle.loads(pickle.dumps(fragments))  # the properties travel with the locations
        table = pa.concat_tables(read_fragment(fragment, ["day", "object_id"]) for fragment in shipped)
        assert table.column("object_id").to_pylist() == ["o10", "o11", "o12", "o20", "o21", "o22"]
        globbed = list_fragments(SourceSpec(path="s3://inputs/claims/day=*-02/*.parquet"), properties=properties)
        assert [fragment.partition_values for fragment in globbed] == [{"day": "2026-12-02"}]
        data = storage.read_bytes(fragments[0].where)
        assert fragment_fingerprint(shipped[0]) == "sha256:" + hashlib.sha256(data).hexdigest()
        assert time.monotonic() - started < 30

        # a CSV's bad row is numbered on object storage too (the parser's message holds the row: not shown)
        storage.write_bytes(Location("s3://inputs/text/ragged.csv", prefix.properties),
                            b"object_id,value\no1,1\no2,2,secret\n")
        (ragged,) = list_fragments(SourceSpec(path="s3://inputs/text/ragged.csv"), properties=properties)
        with pytest.raises(InputError, match=r"^s3://inputs/text/ragged.csv, row 2: cannot be read as CSV: a row has 3"
                           ) as error:
            read_fragment(ragged)
        assert "secret" not in one_line(error)

