"""A release's public layout — its data files and the row order a reader of the table gets — is a
function of the released rows alone (docs/PRIVACY.md, "The layout of a release").

The privacy review of issue 15 (finding F3) showed it followed the input's byte size: the engine
input buckets objects by the bytes it lists, and the release's files followed those buckets, so
one claim's value written with more digits changed the public table's files. Here two inputs hold
the same claims — one CSV file, and three CSV files whose values are written with many trailing
zeros (the same numbers, several times the bytes: more buckets) — and their releases must be
the same table in the same order, in the same number of files.

The tabular release's files had followed its synthesis rounds and the engine's partitions of each
round (finding F7: the number of rounds follows the pass rate). The same release on two partition
counts must be the same table in the same order, in the same files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from pipelines.engines.local import LocalEngine
from pipelines.platform.config import load_config
from pipelines.platform.lake import Lake
from pipelines.tabular.pipeline import run_tabular_release
from tests.e2e.crowd_cases import conformance_config, release_on_engine
from tests.e2e.test_tabular_release import SECRET_HEX, tabular_case

OBJECTS, CLAIMS_PER_OBJECT = 3_000, 4


def write_claims(folder: Path, files: int, padding: int) -> Path:
    """The same claims as ``files`` CSV files, each value followed by ``padding`` zeros."""
    generator = np.random.default_rng(31)
    claims = pd.DataFrame({
        "object_id": np.repeat(np.arange(OBJECTS), CLAIMS_PER_OBJECT),
        "source_id": [f"w{index:02d}" for index in np.tile(np.arange(CLAIMS_PER_OBJECT), OBJECTS)],
        "value": [f"{value:.2f}" + "0" * padding for value in generator.uniform(1.0, 99.0, OBJECTS * CLAIMS_PER_OBJECT)],
    })
    folder.mkdir(parents=True)
    for index, part in enumerate(np.array_split(np.arange(len(claims)), files)):
        claims.iloc[part].to_csv(folder / f"part-{index}.csv", index=False)
    return folder if files > 1 else folder / "part-0.csv"


def release(tmp_path: Path, name: str, files: int, padding: int) -> tuple[pd.DataFrame, list[str], int]:
    source = write_claims(tmp_path / name / "claims", files, padding)
    config = conformance_config(source, tmp_path / name / "lake", k=3)
    config["synthesis"]["claims_per_object"] = 2
    config["weights"] = {"method": "uniform"}
    input_bytes = sum(path.stat().st_size for path in (tmp_path / name / "claims").iterdir())
    with LocalEngine(parallelism=2) as engine:
        release_on_engine(engine, config, "layout-1")
    table = Lake(config["lake"]).read_release("layout-1").to_pandas()
    return table, rows_per_file(tmp_path / name / "lake", "layout_1"), input_bytes


def rows_per_file(lake: Path, stem: str) -> list[int]:
    return [pq.read_metadata(path).num_rows for path in sorted(lake.rglob(f"{stem}*/data/**/*.parquet"))]


def test_the_release_layout_does_not_follow_the_input_bytes_or_files(tmp_path: Path) -> None:
    plain, plain_files, plain_bytes = release(tmp_path, "plain", files=1, padding=0)
    padded, padded_files, padded_bytes = release(tmp_path, "padded", files=3, padding=60)
    assert padded_bytes > 3 * plain_bytes, "the inputs must differ in size enough to change the engine's buckets"
    assert len(plain) == OBJECTS * 2 and plain_files, "the release must hold every object's claims"
    assert padded_files == plain_files, "the release's files differ with the input's bytes"
    pd.testing.assert_frame_equal(padded, plain, check_exact=True)  # same rows in the same order


def test_the_tabular_release_layout_does_not_follow_rounds_or_partitions(tmp_path: Path,
                                                                        monkeypatch) -> None:
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)
    layouts = []
    for parallelism in (2, 5):
        folder = tmp_path / f"p{parallelism}"
        folder.mkdir()
        config = load_config(tabular_case(folder, synthesis__omega="all", synthesis__records=1500,
                                          synthesis__batch_size=400))
        with LocalEngine(parallelism=parallelism) as engine:
            run_tabular_release(config, release_id="layout-2", engine=engine)
        layouts.append((Lake(folder / "lake").read_release("layout-2").to_pandas(),
                        rows_per_file(folder / "lake", "layout_2")))
    (first, first_files), (second, second_files) = layouts
    assert len(first) > 0 and first_files, "the release must hold records"
    assert second_files == first_files, "the release's files follow the engine's partitions"
    pd.testing.assert_frame_equal(second, first, check_exact=True)
