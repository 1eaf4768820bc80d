"""A whole tabular release in memory, on one machine: the reference the engines must match.

Issue 3, steps 3 and 5–8 (Bindschaedler, Shokri, Gunter, VLDB 2017, Mechanism 1 with Privacy
Test 2, over a PrivBayes-style network). Structure learning (step 4) is not done here: the caller
learns the structure on ``codes[release_split(...).structure]`` and passes it in; the guarantee
holds only if it was learned on that part alone.

1. Split the record positions with the stream ``(PURPOSE_SPLIT, 0)``.
2. Count ``(*parents[j], j)`` on ``DP`` and learn the noisy conditionals with ``(PURPOSE_PARAMETER_NOISE, 0)``.
3. Index ``DS`` by the kept attributes.
4. Batch ``b = 0, 1, …``: ``batch_size`` candidates from ``(PURPOSE_CANDIDATES, b)``, their ``k'``
   from the index, the test's thresholds from ``(PURPOSE_TEST_THRESHOLD, b)``; the passing
   candidates are decoded with ``(PURPOSE_DECODE, b)`` (all of the batch's passing candidates,
   in order, so a worker needs no knowledge of the cut).
5. Candidates are examined in batch order, position order within a batch, until ``target_records``
   have passed or ``max_attempts`` candidates have been examined; the passing ones examined so far
   are released. Candidates beyond the cut (in the last batch) are generated and tested in the same
   vectorized call, but their outcomes are discarded and never influence the output.

Neighbouring datasets have the same public number of records and differ by one replaced record;
the guarantee is ``tabular_guarantee`` with ``max_attempts`` as the number of test invocations.

Every stream is keyed by the batch number, so batches can run anywhere, in any order, and give the
same release. In this model ``k'`` does not depend on ``γ`` (all seeds that can produce a candidate
produce it with the same probability); ``γ`` enters only the guarantee.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from schemas.tabular.schema import TabularSchema
from transforms.core.keyed_randomness import keyed_generator
from transforms.tabular.contingency import contingency_counts
from transforms.tabular.data_split import DataSplit, split_positions
from transforms.tabular.encoding import decode_records, domain_sizes
from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.parameter_learning import (
    ConditionalTables,
    noisy_conditional_distributions,
    table_attributes,
)
from transforms.tabular.privacy_test import SeedIndex, plausible_deniability_test
from transforms.tabular.seed_synthesis import synthesize_candidates

PURPOSE_SPLIT = "tabular-split"
PURPOSE_STRUCTURE = "tabular-structure"
PURPOSE_PARAMETER_NOISE = "tabular-parameter-noise"
PURPOSE_CANDIDATES = "tabular-candidates"
PURPOSE_TEST_THRESHOLD = "tabular-test-threshold"
PURPOSE_DECODE = "tabular-decode"


@dataclass(frozen=True)
class TabularReleaseParameters:
    """Public parameters of the synthesis (every one from the configuration, none from the data)."""

    seed_fraction: float
    structure_fraction: float
    parameter_fraction: float
    epsilon_parameters: float
    dirichlet_alpha: float
    omega: int
    k: int
    epsilon0: float
    max_attempts: int
    batch_size: int = 65_536
    target_records: int | None = None

    def __post_init__(self) -> None:
        for name in ("k", "max_attempts", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer")
        if self.target_records is not None and (
            isinstance(self.target_records, bool)
            or not isinstance(self.target_records, int)
            or self.target_records < 0
        ):
            raise ValueError("target_records must be a non-negative integer")
        if not self.epsilon0 > 0:
            raise ValueError("epsilon0 must be positive")


@dataclass(frozen=True)
class BatchOutcome:
    """One batch: its candidates, their ``k'`` and test outcomes, and the decoded passing candidates."""

    codes: np.ndarray
    seed_positions: np.ndarray
    k_prime: np.ndarray
    passed: np.ndarray
    decoded_passing: pd.DataFrame


@dataclass(frozen=True)
class TabularRelease:
    released_codes: np.ndarray
    released_records: pd.DataFrame
    attempts: int
    passed: int
    pass_rate: float
    reached_target: bool
    target_records: int
    batches: int
    split: DataSplit
    conditionals: ConditionalTables


def release_split(
    record_count: int, parameters: TabularReleaseParameters, secret: bytes, release_id: str
) -> DataSplit:
    """The release's split of record positions into ``DS``, ``DT``, ``DP`` (step 3)."""
    return split_positions(
        record_count,
        parameters.seed_fraction,
        parameters.structure_fraction,
        parameters.parameter_fraction,
        keyed_generator(secret, release_id, PURPOSE_SPLIT, 0),
    )


def learn_conditionals(
    parameter_codes: np.ndarray,
    structure: NetworkStructure,
    sizes: tuple[int, ...],
    parameters: TabularReleaseParameters,
    secret: bytes,
    release_id: str,
) -> ConditionalTables:
    """Step 5 on the parameter part ``DP``."""
    counts = [
        contingency_counts(parameter_codes, attributes, sizes) for attributes in table_attributes(structure)
    ]
    return noisy_conditional_distributions(
        counts,
        structure,
        sizes,
        parameters.epsilon_parameters,
        parameters.dirichlet_alpha,
        keyed_generator(secret, release_id, PURPOSE_PARAMETER_NOISE, 0),
    )


def run_batch(
    batch: int,
    seeds_codes: np.ndarray,
    seed_index: SeedIndex,
    structure: NetworkStructure,
    conditionals: ConditionalTables,
    schema: TabularSchema,
    parameters: TabularReleaseParameters,
    secret: bytes,
    release_id: str,
) -> BatchOutcome:
    """Steps 6–7 for batch ``batch``: synthesize, count ``k'``, test, decode the passing candidates."""
    candidates = synthesize_candidates(
        seeds_codes,
        structure,
        conditionals,
        parameters.omega,
        parameters.batch_size,
        keyed_generator(secret, release_id, PURPOSE_CANDIDATES, batch),
    )
    k_prime = seed_index.agreeing_counts(candidates.codes)
    passed = plausible_deniability_test(
        k_prime,
        parameters.k,
        parameters.epsilon0,
        keyed_generator(secret, release_id, PURPOSE_TEST_THRESHOLD, batch),
    )
    decoded = decode_records(
        candidates.codes[passed], schema, keyed_generator(secret, release_id, PURPOSE_DECODE, batch)
    )
    return BatchOutcome(candidates.codes, candidates.seed_positions, k_prime, passed, decoded)


def tabular_release(
    codes: np.ndarray,
    schema: TabularSchema,
    structure: NetworkStructure,
    parameters: TabularReleaseParameters,
    *,
    secret: bytes,
    release_id: str,
) -> TabularRelease:
    """The whole release of the coded records ``codes`` (module docstring); ``target_records``
    defaults to the number of input records."""
    codes = np.asarray(codes)
    sizes = domain_sizes(schema)
    if codes.ndim != 2 or codes.shape[1] != len(sizes) or structure.attribute_count != len(sizes):
        raise ValueError("codes, schema and structure must have the same attributes")
    record_count = codes.shape[0]
    target = record_count if parameters.target_records is None else parameters.target_records
    split = release_split(record_count, parameters, secret, release_id)
    if split.seeds.size == 0:
        raise ValueError("the seed part DS is empty")
    conditionals = learn_conditionals(
        codes[split.parameters], structure, sizes, parameters, secret, release_id
    )
    seeds_codes = codes[split.seeds]
    seed_index = SeedIndex.build(seeds_codes, structure, parameters.omega, sizes)

    released_codes: list[np.ndarray] = []
    released_frames: list[pd.DataFrame] = []
    attempts = passed_count = batch = 0
    while passed_count < target and attempts < parameters.max_attempts:
        outcome = run_batch(
            batch, seeds_codes, seed_index, structure, conditionals, schema, parameters, secret, release_id
        )
        examined = min(parameters.batch_size, parameters.max_attempts - attempts)
        passing_positions = np.flatnonzero(outcome.passed[:examined])
        needed = target - passed_count
        if passing_positions.size >= needed:
            examined = int(passing_positions[needed - 1]) + 1
            passing_positions = passing_positions[:needed]
        released_codes.append(outcome.codes[passing_positions])
        released_frames.append(outcome.decoded_passing.iloc[: passing_positions.size])
        attempts += examined
        passed_count += int(passing_positions.size)
        batch += 1
    no_records = np.zeros((0, len(sizes)), dtype=np.int32)
    empty = decode_records(no_records, schema, keyed_generator(secret, release_id, PURPOSE_DECODE, "empty"))
    return TabularRelease(
        released_codes=np.concatenate([no_records, *released_codes]),
        released_records=pd.concat([empty, *released_frames], ignore_index=True),
        attempts=attempts,
        passed=passed_count,
        pass_rate=passed_count / attempts if attempts else 0.0,
        reached_target=passed_count >= target,
        target_records=target,
        batches=batch,
        split=split,
        conditionals=conditionals,
    )
