"""The filter's training records read on the driver are bounded (issue 15): ``training.max_records``
(default 10^6) records at most — a larger file gives a keyed sample of that many, read in chunks,
equal to the same rows of the whole file; a smaller one is read whole, as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import pipelines.platform.input as platform_input
from pipelines.filter.input import read_records, read_training_records
from pipelines.platform.errors import InputError
from schemas.filter.config import FilterTableReading, LabelDefinition
from schemas.filter.features import FeatureSpec
from tests.e2e.test_filter_release import FEATURES, people

SPEC = FeatureSpec.model_validate(FEATURES)
LABELS = {"group": LabelDefinition.model_validate({"column": "group", "categories": ["a", "b"]})}


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_a_large_file_gives_the_keyed_sample_of_its_rows(tmp_path: Path, file_format: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    frame = people(500, seed=3)
    path = tmp_path / f"training.{file_format}"
    frame.to_csv(path, index=False) if file_format == "csv" else frame.to_parquet(path, index=False)
    whole = read_records(FilterTableReading(path=path, format=file_format), SPEC, LABELS)
    original = platform_input.table_chunks
    monkeypatch.setattr(platform_input, "table_chunks", lambda reading, names: original(reading, names, 64))
    reading = FilterTableReading(path=path, format=file_format, max_records=120)
    sample = read_training_records(reading, SPEC, LABELS, np.random.default_rng(7))
    chosen = np.sort(np.random.default_rng(7).choice(500, size=120, replace=False))
    np.testing.assert_array_equal(sample.features, whole.features[chosen])
    np.testing.assert_array_equal(sample.labels["group"], whole.labels["group"][chosen])
    same = read_training_records(FilterTableReading(path=path, format=file_format, max_records=500), SPEC, LABELS,
                                 np.random.default_rng(7))
    np.testing.assert_array_equal(same.features, whole.features)


def test_a_bad_value_in_the_sample_names_its_row_in_the_file(tmp_path: Path) -> None:
    frame = people(300, seed=4).astype(object)
    chosen = np.sort(np.random.default_rng(9).choice(300, size=50, replace=False))
    frame.iloc[chosen[10], 2] = "SECRET-COLOUR"
    path = tmp_path / "training.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(InputError) as caught:
        read_training_records(FilterTableReading(path=path, max_records=50), SPEC, LABELS, np.random.default_rng(9))
    assert str(caught.value) == (f"{path}, row {chosen[10] + 1}, column 'colour': "
                                 "value is not in the feature's category list")
