"""The tabular seeds for ``omega < all`` stay on the engine (``pipelines/tabular/seeds.py``, issue 15):
staged where the tasks run and read by the synthesis batches, the seed index counted on the engine
even when the kept attributes' key needs blocks — and the release is the in-memory reference's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipelines.engines.local import LocalEngine
from pipelines.platform.config import load_config
from pipelines.tabular import seeds as staged_seeds
from pipelines.tabular.pipeline import privacy_parts, run_tabular_release
from schemas.tabular.schema import load_tabular_schema
from tests.e2e.test_tabular_release import SECRET_HEX, census_like, exported_rows, tabular_case
from transforms.core.keyed_randomness import keyed_generator, secret_from_hex
from transforms.tabular import privacy_test
from transforms.tabular.encoding import domain_sizes, encode_records
from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.privacy_test import SeedIndex
from transforms.tabular.release import (
    PURPOSE_STRUCTURE,
    TabularReleaseParameters,
    release_split,
    tabular_release,
)
from transforms.tabular.seed_synthesis import synthesize_candidates
from transforms.tabular.structure_learning import learn_structure


def test_the_key_limit_is_the_indexs() -> None:
    assert staged_seeds.KEY_LIMIT == privacy_test._KEY_LIMIT


def test_staged_seeds_give_the_rows_of_the_matrix(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    matrix = rng.integers(0, 50, size=(1000, 5)).astype(np.int32)
    cuts = [0, 130, 131, 600, 1000]
    files = []
    for number, (start, end) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
        where = staged_seeds.seeds_file(tmp_path, number)
        where.write_bytes(matrix[start:end].tobytes())
        files.append(where)
    seeds = staged_seeds.StagedSeeds(tuple(files), tuple(cuts[:-1]), 1000, 5)
    positions = rng.integers(0, 1000, size=4000)
    np.testing.assert_array_equal(seeds.take_rows(positions), matrix[positions])
    with pytest.raises(IndexError):
        seeds.take_rows(np.array([1000]))
    structure = NetworkStructure(order=(0, 1, 2, 3, 4), parents=((), (), (), (), ()))
    # the same candidates from the staged seeds as from the matrix (draws in the same order)
    from transforms.tabular.parameter_learning import ConditionalTables

    conditionals = ConditionalTables(domain_sizes=(50,) * 5, parents=structure.parents,
                                     tables=tuple(np.full(50, 1 / 50) for _ in range(5)))
    for omega in (0, 2):
        first = synthesize_candidates(matrix, structure, conditionals, omega, 300, np.random.default_rng(9))
        second = synthesize_candidates(seeds, structure, conditionals, omega, 300, np.random.default_rng(9))
        np.testing.assert_array_equal(first.codes, second.codes)
        np.testing.assert_array_equal(first.seed_positions, second.seed_positions)


@pytest.fixture
def small_key_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept attributes of a few categories overflow 'one key', so the index is built in blocks."""
    monkeypatch.setattr(privacy_test, "_KEY_LIMIT", 5)
    monkeypatch.setattr(staged_seeds, "KEY_LIMIT", 5)


def test_the_index_in_blocks_counted_on_the_engine_is_builds(small_key_limit: None) -> None:
    from pipelines.tabular.pipeline import _seed_index

    rng = np.random.default_rng(2)
    sizes = (4, 3, 5, 2, 6)
    codes = np.stack([rng.integers(0, size, 900) for size in sizes], axis=1).astype(np.int32)
    parts = rng.integers(0, 4, 900).astype(np.int8)
    structure = NetworkStructure(order=(2, 0, 4, 1, 3), parents=((2,), (0,), (), (1,), (0, 2)))
    frame = pd.DataFrame({f"a{index}": codes[:, index] for index in range(5)})
    frame["part"] = parts
    frame_schema = pa.schema([*(pa.field(f"a{index}", pa.int32()) for index in range(5)), pa.field("part", pa.int8())])

    class Records:
        part_sizes = (int((parts == 0).sum()), 0, 0)

        def map(self, engine, fn, schema, side=None):  # noqa: ANN001, ANN201
            return engine.map_batches(engine.from_pandas(frame, frame_schema), fn, schema, side=side)

    with LocalEngine(parallelism=3) as engine:
        for omega in (0, 1, 2):
            expected = SeedIndex.build(codes[parts == 0], structure, omega, sizes)
            assert len(expected.blocks) > 1
            found = _seed_index(engine, Records(), structure, omega, sizes)
            assert found.blocks == expected.blocks
            for mine, theirs in zip(found.block_ranks, expected.block_ranks, strict=True):
                np.testing.assert_array_equal(mine, theirs)
            np.testing.assert_array_equal(found.keys, expected.keys)
            np.testing.assert_array_equal(found.counts, expected.counts)


@pytest.mark.parametrize("blocked", [False, True])
def test_omega_below_all_never_brings_a_record_to_the_driver_and_equals_the_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, blocked: bool) -> None:
    """Every frame the engine hands the driver is recorded: none holds records' codes (the seeds
    were once collected); the release equals ``transforms/tabular/release.py`` on the same records,
    with the index in one key or in blocks."""
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", SECRET_HEX)
    if blocked:
        request.getfixturevalue("small_key_limit")
    received: list[pd.DataFrame] = []
    for name in ("collect", "sum_by_key"):
        original = getattr(LocalEngine, name)

        def recording(self, *args, __original=original, **kwargs):  # noqa: ANN001, ANN202
            result = __original(self, *args, **kwargs)
            received.append(result)
            return result

        monkeypatch.setattr(LocalEngine, name, recording)
    config = load_config(tabular_case(tmp_path))
    outcome = run_tabular_release(config, release_id="tab-1")
    assert outcome.manifest["omega"] == 4
    assert not [list(frame.columns) for frame in received if "a0" in frame.columns], "records' codes reached the driver"
    n = len(census_like())
    assert max(len(frame) for frame in received) < n * 0.29, "nothing as large as the seeds reached the driver"

    schema = load_tabular_schema(config.input.schema_path)
    sizes = domain_sizes(schema)
    codes = encode_records(census_like(), schema).codes
    secret = secret_from_hex(SECRET_HEX)
    parts = privacy_parts(config)
    parameters = TabularReleaseParameters(
        seed_fraction=config.split.seeds, structure_fraction=config.split.structure,
        parameter_fraction=config.split.parameters, epsilon_parameters=parts.epsilon_parameters,
        dirichlet_alpha=1.0, omega=4, k=12, epsilon0=parts.epsilon0, max_attempts=20 * 1500, batch_size=500,
        target_records=1500,
    )
    split = release_split(len(codes), parameters, secret, "tab-1")
    structure = learn_structure(codes[split.structure], sizes, "mutual_information", parts.epsilon_structure, 2, 64,
                                keyed_generator(secret, "tab-1", PURPOSE_STRUCTURE, 0))
    assert blocked == (not SeedIndex.fits_one_key(structure, 4, sizes))
    reference = tabular_release(codes, schema, structure, parameters, secret=secret, release_id="tab-1")
    rows = exported_rows(Path(config.lake), "tab-1")
    expected = reference.released_records.sort_values(list(rows.columns), ignore_index=True)
    pd.testing.assert_frame_equal(rows, expected, check_dtype=False, check_exact=True)

