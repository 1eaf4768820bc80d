"""The crowd input on the engine (``pipelines/crowd/engine_input.py``) stages exactly the canonical
claims the single-file driver path made: the same ids and types, duplicates resolved by the same
policy (``keep_last`` = the largest ``ROW_ID``, ``mean`` at the first row's place), values clipped,
and the same dense source codes (``source_codes``: sorted order of the distinct source ids) —
whatever the split into files and the number of buckets."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import pipelines.crowd.engine_input as engine_input
import pipelines.crowd.pipeline as pipeline_module
from pipelines.crowd.input import apply_duplicates_policy, read_crowd_claims
from pipelines.crowd.pipeline import PreparedInput, listing_spec, read_claims_on_engine, source_codes
from pipelines.engines import make_engine
from pipelines.platform.bucket_files import read_bucket_file
from pipelines.platform.errors import InputError
from pipelines.platform.sources import list_fragments, row_error
from schemas.crowd.config import CrowdConfig
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.global_weights import SourceQuality, source_loss_contributions


def claims_with_duplicates(integers: bool) -> pd.DataFrame:
    rng = np.random.default_rng(9)
    rows = 600
    objects = rng.integers(0, 40, rows)
    sources = rng.integers(0, 25, rows)
    frame = pd.DataFrame({
        "object_id": objects if integers else [f"o{value:03d}" for value in objects],
        "source_id": sources * 3 + 1 if integers else [f"worker-{value}" for value in sources],
        "value": np.round(rng.normal(50.0, 30.0, rows), 2),  # some outside [0, 100]: clipped
    })
    return frame


def config_for(path: Path, lake: Path, duplicates: str) -> CrowdConfig:
    return CrowdConfig.model_validate({
        "kind": "crowd", "dataset": "t", "lake": str(lake),
        "input": {"path": str(path), "duplicates": duplicates},
        "privacy": {"k": 2, "gamma": 4.0, "epsilon0": 4.0, "delta": 0.01, "weight_ratio_cap": 4.0,
                    "value_range": [0.0, 100.0]},
        "synthesis": {"mechanism": "priscrowd", "claims_per_object": 2, "precision": 0.01},
        "weights": {"method": "uniform"},
    })


def driver_reference(path: Path, config: CrowdConfig) -> pd.DataFrame:
    claims = apply_duplicates_policy(read_crowd_claims(config.input), config.input.duplicates)
    claims = claims.assign(value=claims["value"].clip(0.0, 100.0))
    claims["source_id"] = source_codes(claims["source_id"])
    return claims[["object_id", "source_id", "value"]]


@pytest.mark.parametrize("integers", [True, False])
@pytest.mark.parametrize("duplicates", ["keep_last", "mean"])
@pytest.mark.parametrize("grouped", [False, True])
def test_the_staged_claims_are_the_single_file_paths_canonical_claims(tmp_path: Path, integers: bool,
                                                                      duplicates: str, grouped: bool,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if grouped:  # many fine buckets, several to a pass-2 task
        monkeypatch.setattr(engine_input, "BUCKET_INPUT_BYTES", 512)
        monkeypatch.setattr(engine_input, "TASK_CLAIMS", 300)
        monkeypatch.setattr(engine_input, "DRIVER_TASK_CLAIMS", 300)
    claims = claims_with_duplicates(integers)
    claims.to_csv(tmp_path / "claims.csv", index=False)
    folder = tmp_path / "parts"
    folder.mkdir()
    for index, part in enumerate(np.array_split(np.arange(len(claims)), 5)):
        claims.iloc[part].to_csv(folder / f"part-{index}.csv", index=False)  # file order = input order
    reference = driver_reference(tmp_path / "claims.csv", config_for(tmp_path / "claims.csv", tmp_path / "l", duplicates))
    config = config_for(folder, tmp_path / "lake", duplicates)
    with make_engine("local", parallelism=3) as engine:
        prepared = PreparedInput(list_fragments(listing_spec(config.input)), str(folder), tmp_path / "staging")
        checked = read_claims_on_engine(config, prepared, engine)
    staged = pd.concat([pq.read_table(path).to_pandas() for path in checked.object_files], ignore_index=True)
    if grouped:
        assert 1 < len(checked.object_files) < engine_input.fine_bucket_count(
            [fragment.size for fragment in prepared.fragments], 3), "buckets grouped into fewer tasks"
    order = ["object_id", "source_id"]
    pd.testing.assert_frame_equal(staged.sort_values(order, ignore_index=True),
                                  reference.sort_values(order, ignore_index=True), check_exact=True)
    assert checked.rows == len(reference) < len(claims), "duplicates were resolved"
    assert checked.clipped == int(((reference["value"] == 0.0) | (reference["value"] == 100.0)).sum()) > 0
    assert checked.sources == reference["source_id"].nunique()
    for path in checked.object_files:  # whole objects per file, sorted by object
        ids = pq.read_table(path).column("object_id").to_pylist()
        assert ids == sorted(ids)
    per_file = [set(pq.read_table(path).column("object_id").to_pylist()) for path in checked.object_files]
    assert sum(len(ids) for ids in per_file) == len(set().union(*per_file))


@pytest.mark.parametrize("ordinal", [0, 9_000])
def test_the_input_gate_names_the_exact_first_bad_row_of_a_late_fragment(tmp_path: Path, ordinal: int) -> None:
    """A ROW_ID is the fragment's ordinal shifted by 40 bits plus the row: past fragment 2^13 it
    no longer fits a float's 53 bits, so the collected summary must keep it an integer (a null
    ROW_ID column came to the driver as floats and named row 12,344 for row 12,345)."""
    claims = pd.DataFrame({"object_id": np.arange(12_400) // 10, "source_id": np.arange(12_400) % 10,
                           "value": np.full(12_400, 5.0)})
    claims["value"] = claims["value"].astype(object)
    claims.loc[12_345, "value"] = "not a number"  # data row 12,345: file line 12,347 counting the header
    claims.to_csv(tmp_path / "claims.csv", index=False)
    config = config_for(tmp_path / "claims.csv", tmp_path / "lake", "keep_last")
    fragments = [replace(fragment, ordinal=ordinal) for fragment in list_fragments(listing_spec(config.input))]
    with make_engine("local") as engine, pytest.raises(InputError) as raised:
        read_claims_on_engine(config, PreparedInput(fragments, str(tmp_path / "claims.csv"), tmp_path / "staging"),
                              engine)
    expected = row_error(fragments, (ordinal << 40) | 12_345, "x")
    assert raised.value.row == expected.row
    assert raised.value.column == "value"


@pytest.mark.parametrize("parallelism", [1, 3])
def test_pass_2_writes_the_first_global_weights_iteration_of_the_whole_input(tmp_path: Path, parallelism: int,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The first iteration's per-source sums that pass 2 writes beside its group files add up to
    the in-memory map half over every claim at once (``transforms``: uniform qualities, the public
    bandwidth), whatever the tasks; without global weights pass 2 writes none."""
    monkeypatch.setattr(engine_input, "BUCKET_INPUT_BYTES", 512)
    monkeypatch.setattr(engine_input, "DRIVER_TASK_CLAIMS", 150)
    claims = claims_with_duplicates(True).drop_duplicates(["object_id", "source_id"], keep="last")
    claims.to_csv(tmp_path / "claims.csv", index=False)
    raw = config_for(tmp_path / "claims.csv", tmp_path / "lake", "keep_last").model_dump(by_alias=True)
    raw["weights"] = {"method": "combined"}
    raw["synthesis"]["bandwidth"] = {"method": "fixed", "value": 7.5}
    config = CrowdConfig.model_validate(raw)
    with make_engine("local", parallelism=parallelism) as engine:
        prepared = PreparedInput(list_fragments(listing_spec(config.input)), "claims.csv", tmp_path / "staging")
        checked = read_claims_on_engine(config, prepared, engine)
    assert checked.first_losses is not None and len(checked.first_losses) == len(checked.object_files) > 1
    written = pd.concat([read_bucket_file(where).to_pandas() for where in checked.first_losses])
    summed = written.groupby("source_id")[["loss_fixed", "objects"]].sum().sort_index()
    staged = pd.concat([pq.read_table(path).to_pandas() for path in checked.object_files], ignore_index=True)
    block = ClaimsBlock.from_frame(staged)
    expected = source_loss_contributions(block, np.full(block.number_of_objects, 7.5), SourceQuality.uniform())
    expected = expected.set_index("source_id")[["loss_fixed", "objects"]].sort_index()
    pd.testing.assert_frame_equal(summed, expected, check_dtype=False)
    raw["weights"] = {"method": "local"}
    with make_engine("local", parallelism=parallelism) as engine:
        prepared = PreparedInput(list_fragments(listing_spec(config.input)), "claims.csv", tmp_path / "staging-2")
        assert read_claims_on_engine(CrowdConfig.model_validate(raw), prepared, engine).first_losses is None


@pytest.mark.parametrize(("fragments", "parallelism", "in_driver", "expected"), [
    (20, 4, False, 2), (20, 2, False, 4), (7, 4, False, 1), (200, 4, False, 4), (200, 100, False, 1),
    (20, 4, True, 1),
])
def test_pass_1_puts_fragments_together_only_while_every_partition_keeps_two_tasks(
        fragments: int, parallelism: int, in_driver: bool, expected: int) -> None:
    assert engine_input.fragments_per_task(fragments, parallelism, in_driver) == expected


def test_fragments_together_in_a_pass_1_task_stage_the_same_claims(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    claims = claims_with_duplicates(False)
    folder = tmp_path / "parts"
    folder.mkdir()
    for index, part in enumerate(np.array_split(np.arange(len(claims)), 7)):
        claims.iloc[part].to_csv(folder / f"part-{index}.csv", index=False)
    config = config_for(folder, tmp_path / "lake", "keep_last")
    staged = []
    for per_task in (1, 3):
        monkeypatch.setattr(pipeline_module, "fragments_per_task", lambda *_, chosen=per_task: chosen)
        with make_engine("local", parallelism=2) as engine:
            prepared = PreparedInput(list_fragments(listing_spec(config.input)), str(folder),
                                     tmp_path / f"staging-{per_task}")
            checked = read_claims_on_engine(config, prepared, engine)
        staged.append(pd.concat([pq.read_table(path).to_pandas() for path in checked.object_files], ignore_index=True))
    pd.testing.assert_frame_equal(staged[0], staged[1], check_exact=True)
    assert len(staged[0]) > 0


def test_the_small_object_gate_names_the_earliest_small_object_in_the_input(tmp_path: Path) -> None:
    """With ``small_objects: reject`` the one-line error names the first row, in input order, of
    any object with fewer than k claims, and that object's count; here not the smallest object
    id (object 2, rows 8-9) but object 7 (row 3): the staged order is by object, the report by row."""
    objects = [1, 1, 1, 7, 1, 3, 3, 3, 2, 2, 5, 5, 5]
    claims = pd.DataFrame({"object_id": objects, "source_id": np.arange(len(objects)), "value": 50.0})
    claims.to_csv(tmp_path / "claims.csv", index=False)
    raw = config_for(tmp_path / "claims.csv", tmp_path / "lake", "reject").model_dump(by_alias=True)
    raw["input"]["small_objects"] = "reject"
    raw["privacy"]["k"] = 3
    config = CrowdConfig.model_validate(raw)
    with make_engine("local") as engine, pytest.raises(InputError) as raised:
        prepared = PreparedInput(list_fragments(listing_spec(config.input)), "claims.csv", tmp_path / "staging")
        read_claims_on_engine(config, prepared, engine)
    assert raised.value.row == row_error(prepared.fragments, 3, "x").row
    assert "an object has 1 claims, fewer than the minimum 3" in str(raised.value)
