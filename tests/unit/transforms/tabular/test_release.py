"""The in-memory reference of a whole tabular release: reproducibility, the release loop's cut, and real data."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from schemas.tabular.schema import TabularSchema, load_tabular_schema
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

REPOSITORY = Path(__file__).resolve().parents[4]
DATASETS = REPOSITORY.parent / "shared" / "datasets"

SCHEMA = TabularSchema.model_validate(
    {
        "attributes": [
            {"type": "categorical", "name": "group", "categories": ["a", "b", "c"]},
            {"type": "numeric", "name": "level", "bounds": [0.5, 4.5], "bins": 4, "integer": True},
            {"type": "numeric", "name": "score", "bounds": [0, 1], "bins": 5},
            {"type": "categorical", "name": "flag", "categories": ["no", "yes"]},
        ]
    }
)
STRUCTURE = NetworkStructure(order=(0, 1, 2, 3), parents=((), (0,), (1,), (0, 2)))
PARAMETERS = TabularReleaseParameters(
    seed_fraction=0.5,
    structure_fraction=0.2,
    parameter_fraction=0.3,
    epsilon_parameters=1.0,
    dirichlet_alpha=1.0,
    omega=2,
    k=5,
    epsilon0=0.5,
    max_attempts=20_000,
    batch_size=300,
)


def correlated_codes(count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 3, count)
    level = np.clip(group + rng.integers(0, 2, count), 0, 3)
    score = np.clip(level + rng.integers(-1, 2, count), 0, 4)
    flag = (score + group > 3).astype(int)
    return np.stack([group, level, score, flag], axis=1).astype(np.int32)


def test_release_is_reproducible_and_depends_on_the_secret(fixed_secret: bytes) -> None:
    codes = correlated_codes(2000, 1)
    first = tabular_release(codes, SCHEMA, STRUCTURE, PARAMETERS, secret=fixed_secret, release_id="r")
    second = tabular_release(codes, SCHEMA, STRUCTURE, PARAMETERS, secret=fixed_secret, release_id="r")
    other = tabular_release(codes, SCHEMA, STRUCTURE, PARAMETERS, secret=bytes(32), release_id="r")
    np.testing.assert_array_equal(first.released_codes, second.released_codes)
    pd.testing.assert_frame_equal(first.released_records, second.released_records)
    assert not np.array_equal(first.released_codes, other.released_codes)
    assert first.reached_target and first.passed == first.target_records == 2000
    assert first.released_codes.shape == (2000, 4) and len(first.released_records) == 2000
    assert first.pass_rate == pytest.approx(first.passed / first.attempts)
    np.testing.assert_array_equal(encode_records(first.released_records, SCHEMA).codes, first.released_codes)


def test_release_is_the_first_passing_candidates_of_independent_batches(fixed_secret: bytes) -> None:
    codes = correlated_codes(1500, 2)
    parameters = dataclasses.replace(PARAMETERS, target_records=700)
    release = tabular_release(codes, SCHEMA, STRUCTURE, parameters, secret=fixed_secret, release_id="cut")
    split = release_split(len(codes), parameters, fixed_secret, "cut")
    sizes = domain_sizes(SCHEMA)
    conditionals = learn_conditionals(
        codes[split.parameters], STRUCTURE, sizes, parameters, fixed_secret, "cut"
    )
    seeds = codes[split.seeds]
    index = SeedIndex.build(seeds, STRUCTURE, parameters.omega, sizes)
    batches = [
        run_batch(b, seeds, index, STRUCTURE, conditionals, SCHEMA, parameters, fixed_secret, "cut")
        for b in reversed(range(release.batches))
    ][::-1]
    passing = np.concatenate([batch.codes[batch.passed] for batch in batches])
    np.testing.assert_array_equal(release.released_codes, passing[:700])
    frames = pd.concat([batch.decoded_passing for batch in batches], ignore_index=True).iloc[:700]
    pd.testing.assert_frame_equal(release.released_records, frames)
    flat_passed = np.concatenate([batch.passed for batch in batches])
    assert release.attempts == int(np.flatnonzero(flat_passed)[699]) + 1
    for batch in batches:
        np.testing.assert_array_equal(batch.k_prime, index.agreeing_counts(batch.codes))
        kept_rows = seeds[batch.seed_positions]
        np.testing.assert_array_equal(batch.codes[:, :2], kept_rows[:, :2])


def test_attempt_cap_stops_a_release_that_cannot_pass(fixed_secret: bytes) -> None:
    codes = correlated_codes(400, 3)
    parameters = dataclasses.replace(PARAMETERS, k=10_000, max_attempts=1000, batch_size=256)
    release = tabular_release(codes, SCHEMA, STRUCTURE, parameters, secret=fixed_secret, release_id="cap")
    assert release.attempts == 1000 and release.batches == 4
    assert release.passed == 0 and release.pass_rate == 0.0 and not release.reached_target
    assert release.released_codes.shape == (0, 4)
    assert list(release.released_records.columns) == list(SCHEMA.names)
    assert release.released_records["level"].dtype == np.int64


def test_copying_seeds_with_a_trivial_test_releases_seed_records(fixed_secret: bytes) -> None:
    codes = correlated_codes(600, 4)
    parameters = dataclasses.replace(PARAMETERS, omega=0, k=1, epsilon0=50.0, target_records=200)
    release = tabular_release(codes, SCHEMA, STRUCTURE, parameters, secret=fixed_secret, release_id="copy")
    seeds = {tuple(row) for row in codes[release.split.seeds].tolist()}
    assert release.passed == 200 and release.attempts == 200
    assert all(tuple(row) in seeds for row in release.released_codes.tolist())


def test_release_on_the_real_adult_training_file(fixed_secret: bytes) -> None:
    schema = load_tabular_schema(REPOSITORY / "examples" / "tabular_adult_schema.yaml")
    frame = pd.read_csv(
        DATASETS / "adult" / "adult-train.csv",
        header=None,
        names=list(schema.names),
        skipinitialspace=True,
        dtype=str,
    )
    codes = encode_records(frame, schema).codes
    order = tuple(range(15))
    structure = NetworkStructure(order=order, parents=((),) + tuple((j - 1,) for j in range(1, 15)))
    parameters = dataclasses.replace(
        PARAMETERS, omega=11, k=20, epsilon0=0.5, target_records=5000, max_attempts=200_000, batch_size=8192
    )
    release = tabular_release(codes, schema, structure, parameters, secret=fixed_secret, release_id="adult")
    assert release.reached_target and len(release.released_records) == 5000
    assert list(release.released_records.columns) == list(schema.names)
    assert 0.0 < release.pass_rate <= 1.0
    np.testing.assert_array_equal(
        encode_records(release.released_records, schema).codes, release.released_codes
    )
