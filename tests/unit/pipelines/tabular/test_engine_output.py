"""The tabular output checked where it was written (issue 15): ``released_summary`` per released
file, the gate on the summed metrics (``validate_tabular_output_metrics``) failing for the same
problems the row-level gate fails for, and the report's figures from engine-counted tables equal
to ``marginal_summaries`` over the rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.engines import make_engine
from pipelines.tabular.pipeline import check_output_on_engine, output_schema
from pipelines.tabular.report_page import marginal_summaries, marginal_summaries_from_tables
from pipelines.tabular.validation import validate_tabular_output, validate_tabular_output_metrics
from schemas.tabular.schema import TabularSchema
from transforms.tabular.encoding import domain_sizes, encode_records

SCHEMA = TabularSchema.model_validate({"attributes": [
    {"type": "numeric", "name": "age", "bounds": [0, 100], "bins": 4, "integer": True},
    {"type": "categorical", "name": "work", "categories": ["a", "b", "c"]},
    {"type": "numeric", "name": "score", "bounds": [0.0, 1.0], "bins": 3},
]})


def released(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"age": rng.integers(0, 101, rows).astype(np.int64),
                         "work": rng.choice(["a", "b", "c"], rows), "score": rng.uniform(0, 1, rows)})


def write(frames: list[pd.DataFrame], folder: Path) -> list[Path]:
    files = []
    for number, frame in enumerate(frames):
        files.append(folder / f"part-{number}.parquet")
        pq.write_table(pa.Table.from_pandas(frame, schema=output_schema(SCHEMA), preserve_index=False), files[-1])
    return files


def test_good_released_files_pass_and_give_the_row_level_report(tmp_path: Path) -> None:
    frames = [released(300, 1), released(0, 2), released(257, 3)]
    with make_engine("local") as engine:
        checked = check_output_on_engine(engine, write(frames, tmp_path), SCHEMA)
    whole = pd.concat(frames, ignore_index=True)
    assert checked.rows == 557
    assert validate_tabular_output_metrics(checked.metrics, SCHEMA, 557).success
    assert validate_tabular_output(whole, SCHEMA, 557).success
    original = encode_records(released(400, 9), SCHEMA).codes
    from transforms.tabular.contingency import contingency_counts

    sizes = domain_sizes(SCHEMA)
    tables = {key: contingency_counts(original, key, sizes) for key in [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2)]}
    assert marginal_summaries_from_tables(SCHEMA, tables, 400, checked.tables, checked.rows) == marginal_summaries(
        SCHEMA, original, whole)


@pytest.mark.parametrize(("column", "value", "message"), [
    ("work", None, "synthetic value is missing"),
    ("work", "z", "category outside the schema's list"),
    ("score", 1.5, "value outside the schema's bounds [0.0, 1.0]"),
    ("age", np.nan, "synthetic value is missing"),
])
def test_a_bad_released_value_fails_the_gate_as_on_the_rows(tmp_path: Path, column: str, value: object,
                                                            message: str) -> None:
    frames = [released(50, 4), released(50, 5).astype({"age": "float64"}).astype(object)]
    frames[1].loc[7, column] = value
    files = write(frames[:1], tmp_path)
    bad = frames[1].astype({"age": "float64", "score": "float64"})
    pq.write_table(pa.Table.from_pandas(bad, preserve_index=False), tmp_path / "bad.parquet")  # types as found
    files.append(tmp_path / "bad.parquet")
    with make_engine("local") as engine:
        checked = check_output_on_engine(engine, files, SCHEMA)
    result = validate_tabular_output_metrics(checked.metrics, SCHEMA, 100)
    assert not result.success
    assert message in result.first_line() and column in result.first_line()
    assert validate_tabular_output_metrics(checked.metrics, SCHEMA, 99).success is False  # and the count


def test_a_wrong_record_count_fails_the_gate(tmp_path: Path) -> None:
    with make_engine("local") as engine:
        checked = check_output_on_engine(engine, write([released(20, 6)], tmp_path), SCHEMA)
    result = validate_tabular_output_metrics(checked.metrics, SCHEMA, 21)
    assert not result.success and "the release must have 21 records" in result.first_line()
