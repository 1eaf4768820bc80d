"""Issue 15, the crowd kind: claims read, checked and staged where they live.

The claims of the single-file conformance release, shuffled into hive partition folders, matched
by a glob, or read from an Iceberg table at a snapshot with a row filter, give the bit-identical
release (rows and operator figures) on the local, Spark and Beam engines; ids typed as integers in
one file and text in another are reconciled as the single file would have read them; a bad row in
a later file is named by that file and its row.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines.crowd.pipeline import run_crowd_release
from pipelines.engines import make_engine
from pipelines.platform.errors import InputError
from schemas.crowd.config import CrowdConfig
from tests.e2e.crowd_cases import (
    CONFORMANCE_SECRET_HEX,
    assert_same_release,
    conformance_claims,
    conformance_config,
    release_on_engine,
)
from tests.e2e.sources_conformance import engine_for, iceberg_snapshot, iceberg_source, shuffled_partitions
from tests.lake_setup import prepare_for


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The single-file release (local engine): what every other form of the input must give."""
    folder = tmp_path_factory.mktemp("single")
    conformance_claims().to_csv(folder / "claims.csv", index=False)
    with make_engine("local") as engine:
        return release_on_engine(engine, conformance_config(folder / "claims.csv", folder / "lake"), "sources-1")


def _release(engine_name: str, spark_session, directory: Path, source: dict, release_id: str = "sources-1") -> dict:
    config = conformance_config(directory / "unused.csv", directory / "lake")
    config["input"] = source
    with engine_for(engine_name, spark_session) as engine:
        return release_on_engine(engine, config, release_id)


def _partitioned(directory: Path, files: int) -> Path:
    return shuffled_partitions(conformance_claims(), directory / "claims", files)


ENGINES = [("local", 3), pytest.param("spark", 5, marks=pytest.mark.spark),
           pytest.param("beam", 7, marks=pytest.mark.beam)]


@pytest.mark.parametrize(("engine_name", "files"), ENGINES)
def test_a_shuffled_partitioned_folder_gives_the_single_file_release(single: dict, tmp_path: Path, spark_session,
                                                                     engine_name: str, files: int) -> None:
    folder = _partitioned(tmp_path, files)
    released = _release(engine_name, spark_session, tmp_path, {"path": str(folder)})
    assert released["engine"] == engine_name
    assert len(released["rows"]) > 0
    assert_same_release(single, released)


@pytest.mark.parametrize(("engine_name", "files"), ENGINES)
def test_a_glob_over_partitions_gives_the_single_file_release(single: dict, tmp_path: Path, spark_session,
                                                              engine_name: str, files: int) -> None:
    folder = _partitioned(tmp_path, files + 1)
    (folder / "day=2026-12-01" / "notes.txt").write_text("not matched by the glob")
    released = _release(engine_name, spark_session, tmp_path, {"path": str(folder / "day=*" / "*.parquet")})
    assert_same_release(single, released)


@pytest.mark.parametrize(("engine_name", "files"), ENGINES)
def test_an_iceberg_snapshot_with_a_row_filter_gives_the_release_of_those_rows(
    tmp_path: Path, spark_session, engine_name: str, files: int
) -> None:
    claims = conformance_claims()
    claims["region"] = np.where(np.random.default_rng(4).random(len(claims)) < 0.7, "eu", "us")
    claims.loc[claims["object_id"].isin(["same", "tiny-a"]), "region"] = "eu"
    table_rows = pa.Table.from_pandas(claims, preserve_index=False)
    later = pa.Table.from_pandas(conformance_claims().assign(region="eu").head(50), preserve_index=False)
    snapshot = iceberg_snapshot(tmp_path / "input-lake", "claims", (
        table_rows.take(pa.array(part)) for part in np.array_split(np.arange(len(claims)), files)), later)
    selected = claims[claims["region"] == "eu"].drop(columns=["region"])
    selected.to_csv(tmp_path / "selected.csv", index=False)
    with make_engine("local") as engine:
        from_file = release_on_engine(engine, conformance_config(tmp_path / "selected.csv", tmp_path / "file-lake"),
                                      "sources-1")
    from_table = _release(engine_name, spark_session, tmp_path,
                          iceberg_source("db.claims", str(tmp_path / "input-lake"), snapshot, "region = 'eu'"))
    assert 0 < len(from_table["rows"])
    assert_same_release(from_file, from_table)
    full = _release("local", None, tmp_path / "unfiltered",
                    iceberg_source("db.claims", str(tmp_path / "input-lake"), snapshot))
    assert full["figures"] != from_table["figures"], "the row filter selects rows"


def test_ids_integers_in_one_file_and_text_in_another_read_as_the_single_file(tmp_path: Path) -> None:
    """The driver's reconciliation: an input whose fragments typed their ids differently is read as
    text, a fragment's integers as their decimal digits — the single file's reading of the same
    rows (text ids, as written)."""
    claims = conformance_claims()
    numbered = claims["object_id"].str.startswith("object-")
    claims.loc[numbered, "object_id"] = claims.loc[numbered, "object_id"].str.removeprefix("object-")
    sources = pd.factorize(claims["source_id"], sort=True)[0]
    claims.loc[numbered, "source_id"] = [str(2**53 + 1 + code) for code in sources[numbered.to_numpy()]]  # beyond float64
    claims.to_csv(tmp_path / "mixed.csv", index=False)
    folder = tmp_path / "parts"
    folder.mkdir()
    claims[numbered].to_csv(folder / "a-integers.csv", index=False)
    claims[~numbered].to_csv(folder / "b-text.csv", index=False)
    with make_engine("local") as engine:
        whole = release_on_engine(engine, conformance_config(tmp_path / "mixed.csv", tmp_path / "lake-a"), "mixed-1")
        split = _release("local", None, tmp_path / "split", {"path": str(folder)}, "mixed-1")
    assert whole["rows"]["object_id"].map(type).eq(str).all()
    assert whole["figures"]["global_weights"]["sources"] > 60, "integer and text source ids both present"
    assert_same_release(whole, split)


def _failing(tmp_path: Path, source: dict, **config_overrides) -> InputError:
    config = conformance_config(tmp_path / "unused.csv", tmp_path / "lake")
    config["input"] = source
    for key, value in config_overrides.items():
        section, name = key.split("__")
        config[section][name] = value
    prepare_for(config)
    import os

    os.environ["PRIVLAKE_TEST_SECRET"] = CONFORMANCE_SECRET_HEX
    with make_engine("local", parallelism=3) as engine, pytest.raises(InputError) as caught:
        run_crowd_release(CrowdConfig.model_validate(config), engine=engine, release_id="failing-1")
    return caught.value


def _four_files(tmp_path: Path) -> tuple[pd.DataFrame, list[Path]]:
    claims = conformance_claims().astype({"value": object})
    folder = tmp_path / "claims"
    folder.mkdir()
    paths = [folder / f"part-{index}.csv" for index in range(4)]
    return claims, paths


def _write(claims: pd.DataFrame, paths: list[Path]) -> list[pd.DataFrame]:
    parts = [part.reset_index(drop=True) for part in np.array_split(claims, len(paths))]
    return parts


@pytest.mark.parametrize(("column", "value", "says"), [
    ("value", "12-secret", "value is not a number"),
    ("value", "inf", "value is infinite"),
    ("source_id", None, "source id is null"),
])
def test_the_first_bad_row_of_a_later_file_is_named_by_its_file_and_row(tmp_path: Path, column: str,
                                                                        value: object, says: str) -> None:
    claims, paths = _four_files(tmp_path)
    parts = _write(claims, paths)
    parts[2].loc[4, column] = value  # row 5 of the third file
    parts[3].loc[1, column] = value  # a later file: not the first
    for part, path in zip(parts, paths, strict=True):
        part.to_csv(path, index=False)
    error = _failing(tmp_path, {"path": str(paths[0].parent)})
    line = str(error)
    assert error.file == str(paths[2]) and error.row == 5 and error.column == column, line
    assert says in line and "2 rows in all" in line
    assert "12-secret" not in line and "\n" not in line


def test_a_duplicate_across_files_names_the_earlier_file_and_row(tmp_path: Path) -> None:
    claims, paths = _four_files(tmp_path)
    parts = _write(claims, paths)
    parts[3] = pd.concat([parts[3], parts[0].iloc[[6]]], ignore_index=True)  # row 7 of the first file again
    for part, path in zip(parts, paths, strict=True):
        part.to_csv(path, index=False)
    error = _failing(tmp_path, {"path": str(paths[0].parent)})
    assert error.file == str(paths[3]) and error.row == len(parts[3])
    assert f"the same object_id and source_id as {paths[0]}, row 7" in str(error)


def test_a_value_outside_the_range_and_a_small_object_are_named_in_a_later_file(tmp_path: Path) -> None:
    claims, paths = _four_files(tmp_path)
    parts = _write(claims, paths)
    parts[1].loc[2, "value"] = 1000.0
    for part, path in zip(parts, paths, strict=True):
        part.to_csv(path, index=False)
    error = _failing(tmp_path, {"path": str(paths[0].parent)}, privacy__out_of_range="reject")
    assert (error.file, error.row, error.column) == (str(paths[1]), 3, "value")
    assert "outside privacy.value_range" in str(error) and "1000" not in str(error)
    parts[1].loc[2, "value"] = 10.0
    for part, path in zip(parts, paths, strict=True):
        part.to_csv(path, index=False)
    tiny_file = next(index for index, part in enumerate(parts) if (part["object_id"] == "tiny-a").any())
    error = _failing(tmp_path / "again", {"path": str(paths[0].parent)}, input__small_objects="reject")
    first = int(np.flatnonzero(parts[tiny_file]["object_id"] == "tiny-a")[0]) + 1
    assert (error.file, error.row, error.column) == (str(paths[tiny_file]), first, "object_id")
    assert "an object has 2 claims, fewer than the minimum 4" in str(error)


def test_the_input_fingerprint_is_keyed_operator_only_and_does_not_depend_on_the_split(tmp_path: Path) -> None:
    import os

    folder = _partitioned(tmp_path, 4)
    os.environ["PRIVLAKE_TEST_SECRET"] = CONFORMANCE_SECRET_HEX

    def fingerprint(parallelism: int, release_id: str) -> tuple[str, dict]:
        config = conformance_config(tmp_path / "unused.csv", tmp_path / "lake")  # one lake: one fingerprint key
        config["input"] = {"path": str(folder)}
        prepare_for(config)
        with make_engine("local", parallelism=parallelism) as engine:
            outcome = run_crowd_release(CrowdConfig.model_validate(config), engine=engine, release_id=release_id)
        return outcome.internal["input_fingerprint"], outcome.manifest

    first, manifest = fingerprint(2, "print-1")
    assert first.startswith("hmac-sha256:") and "input_fingerprint" not in manifest
    assert fingerprint(5, "print-2")[0] == first, "the same files give the same fingerprint in any split"
    part = folder / "day=2026-12-02" / "part-00000.parquet"
    pd.read_parquet(part).assign(value=lambda frame: frame["value"] + 0.5).to_parquet(part, index=False)
    assert fingerprint(2, "print-3")[0] != first
