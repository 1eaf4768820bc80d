"""The filter's training input takes the forms ``input`` takes (``pipelines/filter/training_input.py``,
issue 15): a folder (hive partitions), a glob or an Iceberg table gives the training records — and
their keyed sample under ``training.max_records`` — of one file holding the same records in
``ROW_ID`` order; a config naming one file reads it exactly as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines.filter import training_input
from pipelines.filter.input import read_training_records
from pipelines.platform.errors import InputError
from schemas.filter.config import FilterConfig, FilterTableReading, FilterTrainingInput, LabelDefinition
from schemas.filter.features import FeatureSpec
from tests.e2e.test_filter_release import FEATURES, people

SPEC = FeatureSpec.model_validate(FEATURES)
LABELS = {"group": LabelDefinition.model_validate({"column": "group", "categories": ["a", "b"]}),
          "senior": LabelDefinition.model_validate({"column": "senior", "categories": ["no", "yes"]})}


def split_into_folder(frame: pd.DataFrame, root: Path, file_format: str, pieces: int = 4) -> None:
    """``frame`` in ``pieces`` files under hive folders ``part=NN/``, in an order their paths keep."""
    for number, chunk in enumerate(np.array_split(np.arange(len(frame)), pieces)):
        folder = root / f"part={number:02d}"
        folder.mkdir(parents=True)
        piece = frame.iloc[chunk]
        if file_format == "csv":
            piece.to_csv(folder / "rows.csv", index=False)
        else:
            piece.to_parquet(folder / "rows.parquet", index=False)


def read(settings: dict, seed: int = 7):  # noqa: ANN201
    return training_input.read_training_input(FilterTrainingInput.model_validate(settings), SPEC, LABELS,
                                              np.random.default_rng(seed))


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
@pytest.mark.parametrize("cap", [120, 10_000])
def test_a_folder_or_a_glob_gives_the_records_of_one_file(tmp_path: Path, file_format: str, cap: int) -> None:
    frame = people(500, seed=3)
    single = tmp_path / f"training.{file_format}"
    frame.to_csv(single, index=False) if file_format == "csv" else frame.to_parquet(single, index=False)
    split_into_folder(frame, tmp_path / "folder", file_format)
    expected, print_ = read({"path": str(single), "max_records": cap})
    assert set(print_) == {"file_sha256"}
    for path in (tmp_path / "folder", tmp_path / "folder" / "part=*" / f"rows.{file_format}"):
        found, found_print = read({"path": str(path), "max_records": cap})
        np.testing.assert_array_equal(found.features, expected.features)
        for label in LABELS:
            np.testing.assert_array_equal(found.labels[label], expected.labels[label])
        assert set(found_print) == {"input_sha256"}
    assert len(expected.features) == min(cap, 500)


def test_one_file_reads_as_before(tmp_path: Path) -> None:
    """The path a config naming one file takes is the chunked reader it always used."""
    frame = people(300, seed=5)
    path = tmp_path / "training.data"  # no known suffix: CSV, as the old default format
    frame.to_csv(path, index=False)
    found, _ = read({"path": str(path), "max_records": 100})
    before = read_training_records(FilterTableReading(path=path, max_records=100), SPEC, LABELS,
                                   np.random.default_rng(7))
    np.testing.assert_array_equal(found.features, before.features)


def test_a_bad_value_in_a_later_file_names_that_file_and_row(tmp_path: Path) -> None:
    frame = people(400, seed=4).astype(object)
    frame.iloc[310, 2] = "SECRET-COLOUR"
    split_into_folder(frame, tmp_path / "folder", "csv")
    with pytest.raises(InputError) as caught:
        read({"path": str(tmp_path / "folder")})
    assert str(caught.value) == (f"{tmp_path / 'folder' / 'part=03' / 'rows.csv'}, row 11, column 'colour': "
                                 "value is not in the feature's category list")
    assert "SECRET" not in str(caught.value)


def test_an_iceberg_table_with_a_row_filter_gives_those_records(tmp_path: Path) -> None:
    from pipelines.platform.lake import Lake

    frame = people(400, seed=6)
    frame["day"] = np.where(np.arange(400) < 250, "d1", "d2")
    with Lake(tmp_path / "source-lake") as lake:
        lake.ensure_namespace("db")
        table = lake.catalog.create_table(("db", "training"), schema=pa.Schema.from_pandas(frame, preserve_index=False))
        table.append(pa.Table.from_pandas(frame.iloc[:200], preserve_index=False))
        table.append(pa.Table.from_pandas(frame.iloc[200:], preserve_index=False))
    kept = frame[frame["day"] == "d1"].reset_index(drop=True)
    kept.to_parquet(tmp_path / "kept.parquet", index=False)
    expected, _ = read({"path": str(tmp_path / "kept.parquet")})
    found, found_print = read({"table": "db.training", "lake": str(tmp_path / "source-lake"),
                               "row_filter": "day = 'd1'"})

    def rows(records) -> np.ndarray:  # noqa: ANN001 - the table's data files come in path order
        matrix = np.column_stack([records.features, records.labels["group"], records.labels["senior"]])
        return matrix[np.lexsort(matrix.T[::-1])]

    np.testing.assert_array_equal(rows(found), rows(expected))
    assert set(found_print) == {"input_sha256"}


def test_the_config_takes_the_input_forms_and_keeps_a_file() -> None:
    base = {"kind": "filter", "dataset": "d", "lake": "lake", "feature_spec": "features.yaml",
            "input": {"path": "records.csv"},
            "labels": {"group": {"column": "group", "categories": ["a", "b"]},
                       "senior": {"column": "senior", "categories": ["no", "yes"]}},
            "choices": [{"name": "c", "private": "group", "utility": "senior", "budget": 1.0}]}
    for training in ({"path": "training.csv", "max_records": 10}, {"path": "parts/*.parquet"},
                     {"path": "folder", "header": False, "columns": ["a", "b"]},
                     {"table": "db.training", "lake": "lake", "snapshot_id": 3, "row_filter": "day = 'd1'"}):
        FilterConfig.model_validate({**base, "training": training})
    with pytest.raises(ValueError, match="exactly one of path"):
        FilterConfig.model_validate({**base, "training": {"path": "a.csv", "table": "db.t", "lake": "lake"}})
    with pytest.raises(ValueError, match="needs `columns`"):
        FilterConfig.model_validate({**base, "training": {"path": "a.csv", "header": False}})


def test_train_encoder_and_a_release_read_a_partitioned_training_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the CLI: ``train-encoder`` and a release that trains its filters read a hive-partitioned
    training folder; the stored encoder names the input's fingerprint."""

    import yaml

    from pipelines.cli import main
    from tests.e2e.test_filter_release import SECRET_HEX, filter_case

    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)
    config = filter_case(tmp_path)
    split_into_folder(people(800, seed=1), tmp_path / "training", "csv", pieces=3)
    settings = yaml.safe_load(config.read_text())
    settings["training"] = {"path": "training", "max_records": 500}
    config.write_text(yaml.safe_dump(settings))
    assert main(["train-encoder", str(config), "--json"]) == 0
    assert main(["run", str(config), "--release-id", "filter-folder-1"]) == 0
    assert main(["models", "--lake", str(tmp_path / "lake"), "--json"]) == 0


def test_the_models_list_names_the_training_inputs_fingerprint(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.filter.pipeline import train_encoder
    from pipelines.platform.config import load_config
    from tests.e2e.test_filter_release import SECRET_HEX, filter_case

    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)
    config = filter_case(tmp_path)
    split_into_folder(people(800, seed=1), tmp_path / "training", "parquet", pieces=2)
    import yaml

    settings = yaml.safe_load(config.read_text())
    settings["training"] = {"path": "training/part=*/rows.parquet"}
    config.write_text(yaml.safe_dump(settings))
    stored = train_encoder(load_config(config))
    assert set(stored["data_fingerprint"]) >= {"features_sha256", "input_sha256"}


@pytest.mark.parametrize("folder", [False, True])
def test_without_a_fingerprint_no_training_file_is_hashed(tmp_path: Path, folder: bool,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A release that trains its filters keeps no training fingerprint (``fingerprint=False``): the
    driver then reads only the sample's files, never hashes the whole training input; the records
    are those of the fingerprinted read."""
    frame = people(300, seed=5)
    path = tmp_path / "training.parquet"
    frame.to_parquet(path, index=False)
    if folder:
        split_into_folder(frame, tmp_path / "folder", "parquet")
        path = tmp_path / "folder"
    settings = FilterTrainingInput.model_validate({"path": str(path), "max_records": 100})
    expected, prints = read({"path": str(path), "max_records": 100})
    assert prints

    def hashed(*_: object) -> None:
        raise AssertionError("a training file was hashed")

    monkeypatch.setattr(training_input, "file_fingerprint", hashed)
    monkeypatch.setattr(training_input, "fingerprint_fragments", hashed)
    found, none = training_input.read_training_input(settings, SPEC, LABELS, np.random.default_rng(7), fingerprint=False)
    assert none == {}
    np.testing.assert_array_equal(found.features, expected.features)
