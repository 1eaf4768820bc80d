"""The sources conformance pattern every kind's end-to-end tests share (issue 15): the rows of a
single-file release written as another form of input — a shuffled hive-partitioned folder, a glob
of files, an Iceberg table at a snapshot with a row filter — released on an engine and compared
with the single-file release (``test_crowd_sources.py``, ``test_tabular_sources.py``,
``test_filter_sources.py``, ``test_ldp_release.py``).

The inputs:

- :func:`shuffled_partitions`: rows shuffled into ``day=2026-12-NN/part-00000.parquet`` partitions;
- :func:`partitioned_by`: rows split by a column's value into ``column=value/part-NN.parquet``
  files written in a shuffled order, returned in the folder's canonical order;
- :func:`text_parts`: a text (CSV lines) split into numbered files, with a file a glob must not match;
- :func:`iceberg_snapshot`, :func:`snapshot_rows` and :func:`iceberg_source`: a table whose snapshot
  is followed by a later append, the rows a snapshot and row filter select, the input that names
  them; :func:`filtered_snapshot` all three, with the selected rows written as one file.

The releases: :func:`engine_for` (Spark on the session's ``spark_session``), :func:`spark_for` (the
session a parametrized test needs), :func:`release_rows`
(a config's release: the manifest with the operator record, and the released rows) and
:func:`assert_same_release` (the same rows in the same order, and the same figures).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.engines import make_engine
from pipelines.platform.config import load_config
from pipelines.platform.lake import Lake

# ----------------------------------------------------------------------------- inputs


def shuffled_partitions(rows: pd.DataFrame, folder: Path, files: int) -> Path:
    """``rows`` in a random order (seeded by ``files``) split into ``files`` hive partitions
    ``folder/day=2026-12-NN/part-00000.parquet``, with a ``_SUCCESS`` marker the reader skips."""
    order = np.random.default_rng(files).permutation(len(rows))
    for index, part in enumerate(np.array_split(order, files)):
        day = folder / f"day=2026-12-{index + 1:02d}"
        day.mkdir(parents=True)
        rows.iloc[part].to_parquet(day / "part-00000.parquet", index=False)
    (folder / "_SUCCESS").write_text("")
    return folder


def partitioned_by(rows: pd.DataFrame, folder: Path, column: str, rng: np.random.Generator,
                   files_per_value: int = 3) -> pd.DataFrame:
    """``rows`` as Parquet under ``folder/<column>=<value>/part-NN.parquet`` (``files_per_value``
    files per value, written in a shuffled order, with a ``_SUCCESS`` marker); returns the rows in
    the folder's canonical order (paths sorted, rows in file order), with ``column`` last as the
    reader puts a partition column."""
    pieces = []
    for value in sorted(rows[column].unique()):
        chosen = rows[rows[column] == value].drop(columns=[column])
        for number, part in enumerate(np.array_split(np.arange(len(chosen)), files_per_value)):
            pieces.append((folder / f"{column}={value}" / f"part-{number:02d}.parquet", chosen.iloc[part]))
    for index in rng.permutation(len(pieces)):
        path, frame = pieces[index]
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    (folder / "_SUCCESS").write_text("")
    ordered = sorted(pieces, key=lambda piece: str(piece[0]))
    return pd.concat([frame.assign(**{column: path.parent.name.split("=", 1)[1]}) for path, frame in ordered],
                     ignore_index=True)


def text_parts(folder: Path, text: str, lines_per_file: int, decoy: bool = True) -> list[Path]:
    """``text``'s lines split into ``folder/rows-N.csv`` files of ``lines_per_file`` lines (and,
    with ``decoy``, a ``notes.txt`` a ``rows-*.csv`` glob does not match)."""
    lines = text.splitlines(keepends=True)
    folder.mkdir(parents=True)
    paths = []
    for number, start in enumerate(range(0, len(lines), lines_per_file)):
        paths.append(folder / f"rows-{number}.csv")
        paths[-1].write_text("".join(lines[start:start + lines_per_file]))
    if decoy:
        (folder / "notes.txt").write_text("not matched by the glob\n")
    return paths


def iceberg_snapshot(lake_folder: Path, name: str, parts: Iterable[pa.Table], later: pa.Table) -> int:
    """A table ``db.<name>`` in the lake at ``lake_folder``: ``parts`` appended one snapshot each,
    then ``later`` (after the returned snapshot: a release at that snapshot never reads it)."""
    parts = list(parts)
    with Lake(lake_folder) as lake:
        lake.catalog.create_namespace("db")
        table = lake.catalog.create_table(f"db.{name}", schema=parts[0].schema)
        for part in parts:
            table.append(part)
        snapshot = table.current_snapshot().snapshot_id
        table.append(later)
    return snapshot


def iceberg_source(table: str, lake: str, snapshot: int | None, row_filter: str | None = None) -> dict:
    """The input naming ``table`` of ``lake`` at ``snapshot`` with ``row_filter`` (when given)."""
    source: dict[str, Any] = {"table": table, "lake": lake, "snapshot_id": snapshot}
    if row_filter is not None:
        source["row_filter"] = row_filter
    return source


def snapshot_rows(lake_folder: Path, table: str, snapshot: int, row_filter: str) -> tuple[pd.DataFrame, int]:
    """The rows the snapshot and row filter select, in ``ROW_ID`` order as the platform reads them
    (``ROW_ID`` dropped), and the number of fragments."""
    from pipelines.platform.sources import ROW_ID, list_fragments, read_fragment
    from schemas.sources import SourceSpec

    spec = SourceSpec(table=table, lake=lake_folder, snapshot_id=snapshot, row_filter=row_filter)
    fragments = list_fragments(spec)
    selected = pa.concat_tables([read_fragment(fragment) for fragment in fragments]).to_pandas()
    return selected.drop(columns=[ROW_ID]), len(fragments)


def filtered_snapshot(directory: Path, rows: pa.Table, split: int, row_filter: str) -> tuple[dict, pd.DataFrame, int]:
    """``rows`` as the Iceberg table ``db.people`` of ``directory/table/input-lake``: rows
    ``[0, split)`` and ``[split, 2 split)`` appended, the snapshot taken, the rest appended after it.
    Returns the input naming the snapshot with ``row_filter`` (``lake: input-lake``, for a config
    in ``directory/table``), the rows it selects — also written as ``directory/file/records.parquet``
    — and the number of fragments."""
    (directory / "table").mkdir()
    lake = directory / "table" / "input-lake"
    snapshot = iceberg_snapshot(lake, "people", [rows.slice(0, split), rows.slice(split, split)], rows.slice(2 * split))
    selected, fragments = snapshot_rows(lake, "db.people", snapshot, row_filter)
    (directory / "file").mkdir()
    selected.to_parquet(directory / "file" / "records.parquet", index=False)
    return iceberg_source("db.people", "input-lake", snapshot, row_filter), selected, fragments


# ----------------------------------------------------------------------------- releases


def spark_for(request: Any, engine_name: str) -> object:
    """The ``spark_session`` fixture when ``engine_name`` is Spark (else ``None``: no session started)."""
    return request.getfixturevalue("spark_session") if engine_name == "spark" else None


def engine_for(name: str, spark_session: object = None) -> Any:
    """A new engine by name; Spark on ``spark_session``."""
    return make_engine("spark", spark_session=spark_session) if name == "spark" else make_engine(name)


def release_rows(run: Callable[..., Any], config_path: Path, engine_name: str, spark_session: object,
                 release_id: str, before: Callable[[Any], Any] | None = None) -> tuple[dict, pd.DataFrame]:
    """``run`` (a kind's release function) on the config at ``config_path`` (its lake ``lake``
    beside it), ``before(config)`` first: the manifest with the operator record, and the rows."""
    config = load_config(config_path)
    if before is not None:
        before(config)
    with engine_for(engine_name, spark_session) as engine:
        outcome = run(config, release_id=release_id, engine=engine)
    rows = Lake(config_path.parent / "lake").read_release(release_id).to_pandas()
    return {**outcome.manifest, **outcome.internal}, rows


def assert_same_release(found: tuple[dict, pd.DataFrame], expected: tuple[dict, pd.DataFrame],
                        keys: Sequence[str]) -> None:
    """The same rows in the same order, bit for bit, and the same figures under ``keys``."""
    pd.testing.assert_frame_equal(found[1], expected[1], check_exact=True)
    for key in keys:
        assert found[0][key] == expected[0][key], key
