"""The tabular release's worker-side functions (``pipelines/tabular/blocks.py``) on small hand-built
frames: counting passes against ``contingency_counts`` and hand counts, the seed index against
``SeedIndex.build``, and keyed synthesis batches against ``run_batch`` and the in-memory
``tabular_release``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipelines.tabular.blocks import (
    PART_PARAMETERS,
    PART_SEEDS,
    PART_STRUCTURE,
    PART_UNUSED,
    Cut,
    SeedKeySide,
    SynthesisSide,
    TablePass,
    batch_positions,
    code_columns,
    frame_codes,
    released_rows,
    seed_key_rows,
    synthesis_rows,
    table_count_rows,
)
from schemas.tabular.schema import TabularSchema
from transforms.tabular.contingency import contingency_counts
from transforms.tabular.encoding import domain_sizes, encode_records
from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.privacy_test import SeedIndex
from transforms.tabular.release import (
    TabularReleaseParameters,
    learn_conditionals,
    release_split,
    run_batch,
    tabular_release,
)
from transforms.tabular.seed_synthesis import kept_and_resampled

SECRET = bytes(range(32))
SIZES = (3, 2, 4)


def staged(codes: np.ndarray, part: np.ndarray) -> pd.DataFrame:
    frame = pd.DataFrame({name: codes[:, index].astype(np.int32) for index, name in enumerate(code_columns(codes.shape[1]))})
    frame["part"] = part.astype(np.int8)
    return frame


def random_staged(seed: int, rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    codes = np.column_stack([rng.integers(0, size, rows) for size in SIZES])
    return staged(codes, rng.integers(0, 4, rows))


def test_code_columns_and_frame_codes() -> None:
    assert code_columns(3) == ["a0", "a1", "a2"]
    frame = pd.DataFrame({"part": [0, 1], "a1": [5, 6], "a0": [1, 2]})
    codes = frame_codes(frame, 2)
    assert codes.dtype == np.int32 and codes.tolist() == [[1, 5], [2, 6]]


def test_a_pass_plans_consecutive_cell_ranges() -> None:
    plan = TablePass.plan(PART_STRUCTURE, SIZES, [(0, 2), (1,), (), (2, 1, 0)])
    assert plan.offsets == (0, 12, 14, 15)
    assert plan.tables == ((0, 2), (1,), (), (2, 1, 0)) and plan.domain_sizes == SIZES


def test_hand_counted_tables_of_one_part() -> None:
    codes = np.array([[0, 1, 3], [2, 0, 0], [0, 1, 3], [1, 1, 2], [0, 0, 1]])
    frame = staged(codes, np.array([PART_PARAMETERS, PART_PARAMETERS, PART_PARAMETERS, PART_SEEDS, PART_PARAMETERS]))
    plan = TablePass.plan(PART_PARAMETERS, SIZES, [(0, 1), ()])
    counts = table_count_rows(frame, plan)
    assert counts["cell"].dtype == np.int64 and counts["records"].dtype == np.int64
    # (a0, a1) cells a0 * 2 + a1: (0,1) twice, (2,0) once, (0,0) once; the empty table counts the 4 rows.
    assert dict(zip(counts["cell"], counts["records"], strict=True)) == {1: 2, 4: 1, 0: 1, 6: 4}
    tables = plan.unpack(counts)
    np.testing.assert_array_equal(tables[(0, 1)], [[1, 2], [0, 0], [1, 0]])
    assert tables[()].shape == () and int(tables[()]) == 4


@pytest.mark.parametrize("part", [PART_SEEDS, PART_STRUCTURE, PART_PARAMETERS, PART_UNUSED])
def test_summed_partial_counts_are_the_contingency_tables_of_the_part(part: int) -> None:
    frame = random_staged(part, 600)
    tables = [(0,), (1, 0), (2, 1), (0, 1, 2)]
    plan = TablePass.plan(part, SIZES, tables)
    partials = pd.concat([table_count_rows(piece, plan) for piece in np.array_split(frame, 4)])
    sums = partials.groupby("cell", as_index=False)["records"].sum()
    unpacked = plan.unpack(sums)
    rows = frame_codes(frame[frame["part"] == part], 3)
    for table in tables:
        np.testing.assert_array_equal(unpacked[table], contingency_counts(rows, table, SIZES))


def test_seed_keys_rebuild_the_seed_index() -> None:
    frame = random_staged(7, 400)
    structure = NetworkStructure(order=(2, 0, 1), parents=((2,), (0,), ()))
    omega = 1
    kept, _ = kept_and_resampled(structure, omega)
    assert kept == (2, 0)
    side = SeedKeySide(kept, SIZES)
    partials = pd.concat([seed_key_rows(piece, side) for piece in np.array_split(frame, 3)])
    sums = partials.groupby("seed_key", as_index=False)["seeds"].sum()
    seeds = frame_codes(frame[frame["part"] == PART_SEEDS], 3)
    hand: dict[int, int] = {}
    for row in seeds:
        key = int(row[2]) * SIZES[0] + int(row[0])
        hand[key] = hand.get(key, 0) + 1
    assert dict(zip(sums["seed_key"], sums["seeds"], strict=True)) == hand
    rebuilt = SeedIndex.from_key_counts(structure, omega, SIZES, sums["seed_key"].to_numpy(np.int64),
                                        sums["seeds"].to_numpy(np.int64))
    direct = SeedIndex.build(seeds, structure, omega, SIZES)
    np.testing.assert_array_equal(rebuilt.keys, direct.keys)
    np.testing.assert_array_equal(rebuilt.counts, direct.counts)


SCHEMA = TabularSchema.model_validate(
    {
        "attributes": [
            {"type": "categorical", "name": "group", "categories": ["a", "b", "c"]},
            {"type": "numeric", "name": "age", "bounds": [0, 100], "bins": 4, "integer": True},
            {"type": "numeric", "name": "score", "bounds": [0.0, 1.0], "bin_edges": [0.0, 0.5, 1.0]},
        ]
    }
)
STRUCTURE = NetworkStructure(order=(0, 1, 2), parents=((), (0,), (1,)))


def release_inputs(target: int, max_attempts: int) -> tuple[np.ndarray, SynthesisSide]:
    rng = np.random.default_rng(5)
    group = rng.integers(0, 3, 240)
    frame = pd.DataFrame({"group": np.array(["a", "b", "c"], dtype=object)[group],
                          "age": np.clip(25 * group + rng.integers(0, 30, 240), 0, 100),
                          "score": rng.random(240)})
    codes = encode_records(frame, SCHEMA).codes
    parameters = TabularReleaseParameters(seed_fraction=0.5, structure_fraction=0.2, parameter_fraction=0.3,
                                          epsilon_parameters=1.0, dirichlet_alpha=1.0, omega=2, k=3, epsilon0=1.0,
                                          max_attempts=max_attempts, batch_size=64, target_records=target)
    split = release_split(len(codes), parameters, SECRET, "blocks")
    sizes = domain_sizes(SCHEMA)
    conditionals = learn_conditionals(codes[split.parameters], STRUCTURE, sizes, parameters, SECRET, "blocks")
    seeds = codes[split.seeds]
    side = SynthesisSide(seeds_codes=seeds, seed_index=SeedIndex.build(seeds, STRUCTURE, 2, sizes),
                         structure=STRUCTURE, conditionals=conditionals, schema=SCHEMA, parameters=parameters,
                         secret=SECRET, release_id="blocks")
    return codes, side


def test_synthesis_rows_are_the_passing_candidates_of_run_batch_within_the_cap() -> None:
    _, side = release_inputs(target=1000, max_attempts=150)
    frame = synthesis_rows(pd.DataFrame({"batch": np.array([2, 0, 1], dtype=np.int64)}), side)
    assert list(frame.columns) == ["batch", "position", "group", "age", "score", "passes"]
    assert (frame["passes"] == 1).all() and frame["passes"].dtype == np.int64
    for batch, examined in ((0, 64), (1, 64), (2, 150 - 128)):
        outcome = run_batch(batch, side.seeds_codes, side.seed_index, side.structure, side.conditionals, side.schema,
                            side.parameters, side.secret, side.release_id)
        passing = np.flatnonzero(outcome.passed)
        rows = frame[frame["batch"] == batch].reset_index(drop=True)
        assert rows["position"].tolist() == passing[passing < examined].tolist()
        expected = outcome.decoded_passing.iloc[: int((passing < examined).sum())].reset_index(drop=True)
        pd.testing.assert_frame_equal(rows[["group", "age", "score"]], expected)
    assert 0 < len(frame) and frame["position"].max() < 64
    assert frame.loc[frame["batch"] == 2, "position"].max() < 22
    positions = batch_positions(frame, 1)
    assert list(positions.columns) == ["batch", "position"]
    assert positions["position"].tolist() == frame.loc[frame["batch"] == 1, "position"].tolist()


def test_released_rows_cut_where_the_in_memory_release_stops() -> None:
    codes, side = release_inputs(target=70, max_attempts=2000)
    reference = tabular_release(codes, SCHEMA, STRUCTURE, side.parameters, secret=SECRET, release_id="blocks")
    assert reference.reached_target and reference.batches >= 2
    batches = np.arange(reference.batches, dtype=np.int64)
    # Batches run in any grouping and order give the same rows.
    frame = pd.concat([synthesis_rows(pd.DataFrame({"batch": batches[::-1][index::2]}), side) for index in (0, 1)],
                      ignore_index=True)
    ordered = frame.sort_values(["batch", "position"], ignore_index=True)
    last = ordered.iloc[69]
    cut = Cut(int(last["batch"]), int(last["position"]), SCHEMA.names)
    released = released_rows(frame, cut)
    assert list(released.columns) == ["group", "age", "score"] and len(released) == 70
    in_order = released.loc[frame.loc[released.index].sort_values(["batch", "position"]).index].reset_index(drop=True)
    pd.testing.assert_frame_equal(in_order, reference.released_records)
    assert reference.attempts == cut.last_batch * 64 + cut.last_position + 1
