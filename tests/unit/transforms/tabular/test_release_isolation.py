"""What parallel composition over ``DS``, ``DT``, ``DP`` and the decode rule need from the in-memory release.

Parallel composition (``tabular_guarantee``) needs: the split depends on the record count and the
keyed stream only, so a replaced record lies in the same part on both neighbours; a record of
``DS`` never reaches the model; a record of ``DP`` never reaches the seed index. The decode rule
needs: a released value depends on its codes and the keyed decode stream only, never on the raw
values of the seed it came from; the released frame holds the schema's columns and nothing else.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from schemas.tabular.schema import TabularSchema
from transforms.tabular.encoding import domain_sizes, encode_records
from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.privacy_test import SeedIndex
from transforms.tabular.release import TabularReleaseParameters, release_split, tabular_release

SECRET = bytes(range(32))
SCHEMA = TabularSchema.model_validate(
    {
        "attributes": [
            {"type": "categorical", "name": "group", "categories": ["a", "b", "c"]},
            {"type": "numeric", "name": "age", "bounds": [0, 100], "bins": 5, "integer": True},
            {"type": "numeric", "name": "score", "bounds": [0.0, 1.0], "bin_edges": [0.0, 0.3, 0.7, 1.0]},
        ]
    }
)
STRUCTURE = NetworkStructure(order=(0, 1, 2), parents=((), (0,), (1,)))
PARAMETERS = TabularReleaseParameters(
    seed_fraction=0.5,
    structure_fraction=0.2,
    parameter_fraction=0.3,
    epsilon_parameters=1.0,
    dirichlet_alpha=1.0,
    omega=2,
    k=3,
    epsilon0=1.0,
    max_attempts=3000,
    batch_size=500,
    target_records=200,
)


def raw_records(count: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 3, count)
    return pd.DataFrame(
        {
            "group": np.array(["a", "b", "c"], dtype=object)[group],
            "age": np.clip(20 * group + rng.integers(0, 40, count), 0, 100),
            "score": np.clip(0.3 * group + 0.2 * rng.random(count), 0.0, 1.0),
        }
    )


def test_a_replaced_record_moves_only_its_own_part() -> None:
    codes = encode_records(raw_records(300, 1), SCHEMA).codes
    split = release_split(300, PARAMETERS, SECRET, "isolation")
    sizes = domain_sizes(SCHEMA)
    for part, position in (("seeds", int(split.seeds[7])), ("parameters", int(split.parameters[3]))):
        neighbour = codes.copy()
        neighbour[position] = (codes[position] + 1) % np.array(sizes)
        first = tabular_release(codes, SCHEMA, STRUCTURE, PARAMETERS, secret=SECRET, release_id="isolation")
        second = tabular_release(
            neighbour, SCHEMA, STRUCTURE, PARAMETERS, secret=SECRET, release_id="isolation"
        )
        for name in ("seeds", "structure", "parameters"):
            np.testing.assert_array_equal(getattr(first.split, name), getattr(second.split, name))
        same_model = all(
            np.array_equal(a, b)
            for a, b in zip(first.conditionals.tables, second.conditionals.tables, strict=True)
        )
        first_index = SeedIndex.build(codes[split.seeds], STRUCTURE, PARAMETERS.omega, sizes)
        second_index = SeedIndex.build(neighbour[split.seeds], STRUCTURE, PARAMETERS.omega, sizes)
        same_index = np.array_equal(first_index.keys, second_index.keys) and np.array_equal(
            first_index.counts, second_index.counts
        )
        if part == "seeds":
            assert same_model and not same_index
        else:
            assert same_index and not same_model


def test_released_values_depend_on_the_codes_only() -> None:
    """Two inputs whose raw values differ but fall in the same bins give the same release, value for
    value: nothing of a seed's raw numbers reaches the output."""
    first_frame = raw_records(300, 2)
    second_frame = first_frame.copy()
    edges = np.linspace(0, 100, 6)
    age_bins = np.minimum(np.searchsorted(edges, first_frame["age"], side="right") - 1, 4)
    second_frame["age"] = np.floor(edges[age_bins] + 0.5 * (edges[age_bins + 1] - edges[age_bins]))
    second_frame["score"] = np.where(
        first_frame["score"] < 0.3, 0.15, np.where(first_frame["score"] < 0.7, 0.5, 0.85)
    )
    assert not second_frame.equals(first_frame)
    first_codes = encode_records(first_frame, SCHEMA).codes
    second_codes = encode_records(second_frame, SCHEMA).codes
    np.testing.assert_array_equal(first_codes, second_codes)
    first = tabular_release(first_codes, SCHEMA, STRUCTURE, PARAMETERS, secret=SECRET, release_id="values")
    second = tabular_release(second_codes, SCHEMA, STRUCTURE, PARAMETERS, secret=SECRET, release_id="values")
    pd.testing.assert_frame_equal(first.released_records, second.released_records)
    assert list(first.released_records.columns) == list(SCHEMA.names)
    np.testing.assert_array_equal(encode_records(first.released_records, SCHEMA).codes, first.released_codes)
