"""A copy of an Iceberg table another dataset read is refused like a copied file (issue 15 review,
finding F4): an Iceberg fragment's keyed fingerprint is of its data file's bytes (with its delete
files' and the row filter), not of its path, so a table whose data files are copies of another
table's gives the fingerprints the other dataset recorded. (With the fragments' path identity as
their fingerprint, as before, the copy published with a fresh budget.)"""

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

    def release(dataset: str, table: str, release_id: str) -> dict:
        config = conformance_config(tmp_path / "unused.csv", tmp_path / "lake")
        config["dataset"] = dataset
        config["input"] = {"table": table, "lake": str(inputs)}
        with make_engine("local") as engine:
            return release_on_engine(engine, config, release_id)

    assert len(release("first", "db.claims", "t-1")["rows"]) > 0
    with pytest.raises(ReleaseRefused, match="identical to one of dataset 'first'"):
        release("second", "db.claims_copy", "t-2")
    with Lake(tmp_path / "lake") as lake:
        assert lake.is_published("t-1") and not lake.is_published("t-2")
        event = PrivacyLedger(lake).latest_event("second", "t-2")
    assert event is not None and event["status"] == "refunded", "a refused release is not charged"
