"""A copy of an Iceberg table another dataset read is refused like a copied file (issue 15 reviews,
findings F4 and R5): an Iceberg fragment's keyed fingerprint is of its data file's bytes alone, as
the file read as plain Parquet, so a table whose data files are copies of another table's, the
same files read as a Parquet folder, or the table read with another row filter give the
fingerprints the other dataset recorded. (With the fragments' path identity as their fingerprint
the copied table published with a fresh budget; with the row filter in the digest, a filter that
keeps every row did.)"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines.engines import make_engine
from pipelines.platform.errors import ReleaseRefused
from pipelines.platform.lake import Lake
from pipelines.platform.ledger import PrivacyLedger
from tests.e2e.crowd_cases import conformance_config, release_on_engine


def test_a_release_reading_a_copied_table_is_refused(tmp_path: Path) -> None:
    generator = np.random.default_rng(4)
    claims = pd.DataFrame([(obj, f"s{source}", round(float(generator.uniform(1, 99)), 2))
                           for obj in range(30) for source in range(5)], columns=["object_id", "source_id", "value"])
    rows = pa.Table.from_pandas(claims, preserve_index=False)
    inputs = tmp_path / "input-lake"
    with Lake(inputs) as lake:
        lake.catalog.create_namespace("db")
        original = lake.catalog.create_table("db.claims", schema=rows.schema)
        original.append(rows)
        copies = tmp_path / "copies"
        copies.mkdir()
        copied = []
        for task in original.scan().plan_files():  # the operator copies the table's files
            target = copies / Path(task.file.file_path.removeprefix("file://")).name
            shutil.copyfile(task.file.file_path.removeprefix("file://"), target)
            copied.append(str(target))
        lake.catalog.create_table("db.claims_copy", schema=rows.schema).add_files(copied)
        again = []
        for path in copied:  # a second copy, read with a row filter that keeps every row
            target = Path(path).with_name("again-" + Path(path).name)
            shutil.copyfile(path, target)
            again.append(str(target))
        lake.catalog.create_table("db.claims_again", schema=rows.schema).add_files(again)

    def release(dataset: str, source: dict, release_id: str) -> dict:
        config = conformance_config(tmp_path / "unused.csv", tmp_path / "lake")
        config["dataset"] = dataset
        config["input"] = source
        with make_engine("local") as engine:
            return release_on_engine(engine, config, release_id)

    assert len(release("first", {"table": "db.claims", "lake": str(inputs)}, "t-1")["rows"]) > 0
    copies_read = [
        ("second", {"table": "db.claims_copy", "lake": str(inputs)}),
        ("third", {"path": str(copies / "0*.parquet"), "format": "parquet"}),
        ("fourth", {"table": "db.claims_again", "lake": str(inputs), "row_filter": "object_id >= 0"}),
    ]
    for number, (dataset, source) in enumerate(copies_read, start=2):
        with pytest.raises(ReleaseRefused, match="identical to one of dataset 'first'"):
            release(dataset, source, f"t-{number}")
        with Lake(tmp_path / "lake") as lake:
            assert not lake.is_published(f"t-{number}")
            event = PrivacyLedger(lake).latest_event(dataset, f"t-{number}")
        assert event is not None and event["status"] == "refunded", f"{dataset}: a refused release is not charged"
    with Lake(tmp_path / "lake") as lake:
        assert lake.is_published("t-1")
