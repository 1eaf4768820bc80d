"""The tabular release (plausible-deniability synthesis over a DP Bayesian network), written once
over the engine interface.

Bindschaedler, Shokri, Gunter (VLDB 2017), learning in the style of PrivBayes (Zhang et al. 2014);
the mathematics is in ``transforms/tabular`` and ``transforms/tabular/release.py`` is the
in-memory reference this pipeline must equal on every engine.

1. Refuse early: the guarantee is computed from the config alone; the ledger reserves it.
2. While the engine starts: read the schema and the records, encode them over the public domains
   (one line naming file, row and column for any bad value), check the table is large enough for
   the split and ``k``, split the positions with the keyed permutation, stage coded Parquet.
3. Structure learning on ``DT``: per greedy step, one pass counts every candidate's tables
   (sparse partial tables per partition, summed exactly); the driver makes the
   exponential-mechanism choice.
4. Parameters on ``DP``: one pass counts the m tables; the driver adds discrete Laplace noise.
5. The seed index: one pass counts ``DS`` by its kept attributes (``groupBy().count()``).
6. Synthesis: keyed batches of candidates run on the workers (seeds, index and model broadcast),
   in rounds until ``n`` records pass or the attempt cap; the release is the first ``n`` passing
   candidates in batch order, whatever the partitioning.
7. Write from the workers, validate (GX), publish data and manifest in one Iceberg commit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.engines import storage
from pipelines.engines.base import Collection, Engine
from pipelines.platform.errors import InputError, PrivlakeError
from pipelines.platform.release import (
    ReleaseContext,
    ReleaseKind,
    ReleaseResult,
    StageTimer,
)
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
    released_rows,
    seed_key_rows,
    synthesis_rows,
    table_count_rows,
)
from pipelines.tabular.input import read_schema, read_tabular_records
from pipelines.tabular.report_page import marginal_summaries
from pipelines.tabular.validation import validate_tabular_output
from schemas.tabular.config import TabularConfig
from schemas.tabular.schema import CategoricalAttribute, TabularSchema
from transforms.core.guarantee import choose_t
from transforms.core.keyed_randomness import keyed_generator
from transforms.tabular.data_split import DataSplit, minimum_record_count
from transforms.tabular.encoding import domain_sizes
from transforms.tabular.guarantee import release_guarantee, split_total_epsilon
from transforms.tabular.network_structure import NetworkStructure
from transforms.tabular.parameter_learning import (
    noisy_conditional_distributions,
    table_attributes,
)
from transforms.tabular.privacy_test import SeedIndex
from transforms.tabular.release import (
    PURPOSE_PARAMETER_NOISE,
    PURPOSE_STRUCTURE,
    TabularReleaseParameters,
    release_split,
)
from transforms.tabular.seed_synthesis import kept_and_resampled
from transforms.tabular.structure_learning import (
    StructureLearningStep,
    choose_first_attribute,
    choose_step,
    structure_epsilon_per_step,
    validate_structure_constraints,
)

TABULAR_WORKER_MODULES = ("pipelines.tabular.blocks",)
DEFAULT_ATTEMPTS_PER_RECORD = 20
WHOLE_RELEASE_DELTA = 1e-6
"""δ of the whole-release statement when the configuration gives the parts with ``t`` (no ``delta``)."""


@dataclass(frozen=True)
class PrivacyParts:
    epsilon_structure: float
    epsilon_parameters: float
    epsilon0: float
    t: int


def privacy_parts(config: TabularConfig) -> PrivacyParts:
    """The budget parts: derived from a total ε and δ target, or given explicitly."""
    privacy = config.privacy
    try:
        if privacy.epsilon is not None:
            assert privacy.delta is not None
            split = split_total_epsilon(privacy.epsilon, privacy.delta, privacy.k, privacy.gamma)
            return PrivacyParts(split.epsilon_structure, split.epsilon_parameters, split.epsilon0, split.t)
        assert privacy.epsilon0 is not None and privacy.epsilon_structure is not None
        assert privacy.epsilon_parameters is not None
        t = privacy.t if privacy.t is not None else choose_t(privacy.k, privacy.epsilon0, privacy.delta)
        return PrivacyParts(privacy.epsilon_structure, privacy.epsilon_parameters, privacy.epsilon0, t)
    except ValueError as error:
        raise PrivlakeError(f"privacy: {error}") from None


def output_schema(schema: TabularSchema) -> pa.Schema:
    """The released table: the input's column names; categories as text, integer attributes as
    int64, other numeric attributes as float64."""
    fields = []
    for attribute in schema.attributes:
        if isinstance(attribute, CategoricalAttribute):
            kind = pa.string()
        else:
            kind = pa.int64() if attribute.integer else pa.float64()
        fields.append(pa.field(attribute.name, kind, nullable=False))
    return pa.schema(fields)


def synthesis_schema(schema: TabularSchema) -> pa.Schema:
    extra = [pa.field("batch", pa.int64(), nullable=False), pa.field("position", pa.int64(), nullable=False)]
    return pa.schema([*extra, *output_schema(schema), pa.field("passes", pa.int64(), nullable=False)])


def staged_schema(attribute_count: int) -> pa.Schema:
    return pa.schema(
        [pa.field(name, pa.int32(), nullable=False) for name in code_columns(attribute_count)]
        + [pa.field("part", pa.int8(), nullable=False)]
    )


@dataclass(frozen=True)
class TabularPlan:
    """What a tabular release decides from its configuration and schema alone."""

    schema: TabularSchema
    parts: PrivacyParts
    omega: int


def plan_release(context: ReleaseContext) -> TabularPlan:
    """The schema and the model's limits checked, ω resolved and the guarantee's parts split, from
    the configuration alone."""
    config = context.config
    schema = read_schema(config.input.schema_path)
    sizes = domain_sizes(schema)
    try:
        validate_structure_constraints(sizes, config.model.max_degree, config.model.complexity_cap, schema.names)
    except ValueError as error:
        raise PrivlakeError(f"model: {error}") from None
    omega = len(sizes) if config.synthesis.omega == "all" else int(config.synthesis.omega)
    if not 0 <= omega <= len(sizes):
        raise PrivlakeError(f"synthesis.omega: must be between 0 and the number of attributes ({len(sizes)})")
    parts = privacy_parts(config)
    return TabularPlan(schema, parts, omega)


def guarantee_for(config: TabularConfig, plan: TabularPlan, parameters: TabularReleaseParameters,
                  seeds: int) -> dict[str, Any]:
    """The release's guarantee (``transforms/tabular/guarantee.py`` ``release_guarantee``): public
    parameters only — the configuration and the public number of seeds ``|DS|``."""
    parts = plan.parts
    return release_guarantee(
        parts.epsilon_structure, parts.epsilon_parameters, parts.epsilon0, config.privacy.gamma, config.privacy.k,
        parts.t, omega_all=plan.omega == len(domain_sizes(plan.schema)), max_attempts=parameters.max_attempts,
        seeds=seeds, delta=config.privacy.delta or WHOLE_RELEASE_DELTA,
    )


@dataclass(frozen=True)
class PreparedRecords:
    staged: Path
    codes: np.ndarray
    frame: pd.DataFrame
    split: DataSplit
    parameters: TabularReleaseParameters
    clipped: dict[str, int]
    minimum_records: int
    guarantee: dict[str, Any]


def prepare_records(context: ReleaseContext, plan: TabularPlan) -> PreparedRecords:
    """Read and encode the records, split them (keyed) into seeds, structure and parameter data,
    reserve the guarantee (it needs the public ``|DS|``) before anything private is computed, and
    stage the coded records for the engine."""
    config, timer, secret, release_id = context.config, context.timer, context.secret, context.release_id
    schema, parts, omega = plan.schema, plan.parts, plan.omega
    settings = config.input
    with timer.stage("read input"):
        records = read_tabular_records(settings, schema)
    codes = records.encoded.codes
    record_count = codes.shape[0]
    split_fractions = config.split
    needed = minimum_record_count(config.privacy.k, split_fractions.seeds, split_fractions.structure,
                                  split_fractions.parameters)
    if record_count < needed:
        raise InputError(
            str(settings.path),
            f"the table has {record_count} records; the split (seeds {split_fractions.seeds}) and "
            f"k = {config.privacy.k} need at least {needed}",
        )
    target = config.synthesis.records or record_count
    parameters = TabularReleaseParameters(
        seed_fraction=split_fractions.seeds,
        structure_fraction=split_fractions.structure,
        parameter_fraction=split_fractions.parameters,
        epsilon_parameters=parts.epsilon_parameters,
        dirichlet_alpha=config.model.dirichlet_alpha,
        omega=omega,
        k=config.privacy.k,
        epsilon0=parts.epsilon0,
        max_attempts=config.synthesis.max_attempts or DEFAULT_ATTEMPTS_PER_RECORD * target,
        batch_size=config.synthesis.batch_size,
        target_records=target,
    )
    with timer.stage("split and stage"):
        split = release_split(record_count, parameters, secret, release_id)
        guarantee = guarantee_for(config, plan, parameters, int(split.seeds.size))
        context.reserve(guarantee)
        part = np.full(record_count, PART_UNUSED, dtype=np.int8)
        part[split.seeds], part[split.structure], part[split.parameters] = PART_SEEDS, PART_STRUCTURE, PART_PARAMETERS
        columns = {name: codes[:, index] for index, name in enumerate(code_columns(codes.shape[1]))}
        table = pa.table({**columns, "part": part}, schema=staged_schema(codes.shape[1]))
        staged = storage.write_table(table, context.staging / "input" / "records.parquet", row_group_size=1 << 20)
    return PreparedRecords(staged, codes, records.frame, split, parameters, records.encoded.clipped, needed,
                           guarantee)


def _count_tables(engine: Engine, records: Collection, part: int, sizes: tuple[int, ...],
                  tables: list[tuple[int, ...]]) -> dict[tuple[int, ...], np.ndarray]:
    """One pass over ``part``: every table in ``tables``."""
    plan = TablePass.plan(part, sizes, tables)
    schema = pa.schema([pa.field("cell", pa.int64(), nullable=False), pa.field("records", pa.int64(), nullable=False)])
    sums = engine.sum_by_key(engine.map_batches(records, table_count_rows, schema, side=plan), "cell", ["records"])
    return plan.unpack(sums)


def learn_structure_on_engine(engine: Engine, records: Collection, sizes: tuple[int, ...], structure_records: int,
                              config: TabularConfig, epsilon_structure: float, rng: np.random.Generator,
                              timer: StageTimer) -> NetworkStructure:
    """The greedy build of ``transforms.tabular.structure_learning.learn_structure`` with each step's
    tables counted in one engine pass; the same draws in the same order, so the same network."""
    model = config.model
    attribute_count = len(sizes)
    first = choose_first_attribute(attribute_count, rng)
    if attribute_count == 1:
        return NetworkStructure(order=(first,), parents=((),))
    epsilon_step = structure_epsilon_per_step(epsilon_structure, attribute_count)
    placed, remaining = [first], [a for a in range(attribute_count) if a != first]
    parents: list[tuple[int, ...]] = [()] * attribute_count
    tables: dict[tuple[int, ...], np.ndarray] = {}
    while remaining:
        timer.report("structure learning, steps", len(placed) - 1, attribute_count - 1)
        step = StructureLearningStep.plan(placed, remaining, sizes, model.score, model.max_degree, model.complexity_cap)
        missing = [key for key in step.table_keys if key not in tables]
        if missing:
            tables.update(_count_tables(engine, records, PART_STRUCTURE, sizes, missing))
        chosen = choose_step(step.candidates, tables, structure_records, model.score, epsilon_step, rng)
        parents[chosen.child] = chosen.parents
        placed.append(chosen.child)
        remaining.remove(chosen.child)
    return NetworkStructure(order=tuple(placed), parents=tuple(parents))


def _seed_index(engine: Engine, records: Collection, seeds_codes: np.ndarray, structure: NetworkStructure,
                omega: int, sizes: tuple[int, ...]) -> SeedIndex:
    if not SeedIndex.fits_one_key(structure, omega, sizes):
        return SeedIndex.build(seeds_codes, structure, omega, sizes)
    kept, _ = kept_and_resampled(structure, omega)
    schema = pa.schema([pa.field("seed_key", pa.int64(), nullable=False), pa.field("seeds", pa.int64(), nullable=False)])
    partial = engine.map_batches(records, seed_key_rows, schema, side=SeedKeySide(kept, sizes))
    counts = engine.sum_by_key(partial, "seed_key", ["seeds"])
    return SeedIndex.from_key_counts(structure, omega, sizes, counts["seed_key"].to_numpy(np.int64),
                                     counts["seeds"].to_numpy(np.int64))


@dataclass(frozen=True)
class SynthesisResult:
    rounds: list[Collection]
    cut: Cut
    attempts: int
    passed: int
    batches: int


def _synthesize(engine: Engine, side: SynthesisSide, schema: TabularSchema, timer: StageTimer) -> SynthesisResult:
    """Rounds of keyed batches until the target passes or the cap: each round's batch count is
    planned from the pass rate so far (more batches only cost time; the release is the first
    ``target`` passing candidates in batch order either way)."""
    parameters = side.parameters
    target = int(parameters.target_records or 0)
    batch_size = parameters.batch_size
    batch_cap = math.ceil(parameters.max_attempts / batch_size)
    out_schema = synthesis_schema(schema)
    batch_schema = pa.schema([pa.field("batch", pa.int64(), nullable=False)])
    rounds: list[Collection] = []
    passes: dict[int, int] = {}
    next_batch = 0
    parallelism = max(1, int(getattr(engine, "parallelism", 2) or 2))
    while True:
        done = sum(passes.values())
        if done >= target or next_batch >= batch_cap:
            break
        attempts_so_far = min(next_batch * batch_size, parameters.max_attempts)
        rate = max(done, 1) / attempts_so_far if attempts_so_far else 1.0
        wanted = math.ceil((target - done) / max(rate * batch_size, 1e-9) * 1.1)
        count = int(min(batch_cap - next_batch, max(wanted, parallelism)))
        timer.report(f"synthesis, batches {next_batch}..{next_batch + count - 1}, records", done, target)
        batches = pd.DataFrame({"batch": np.arange(next_batch, next_batch + count, dtype=np.int64)})
        outcome = engine.persist(
            engine.map_batches(engine.from_pandas(batches, batch_schema), synthesis_rows, out_schema, side=side)
        )
        rounds.append(outcome)
        counted = engine.sum_by_key(outcome, "batch", ["passes"])
        passes.update(zip(counted["batch"].astype(int).tolist(), counted["passes"].astype(int).tolist(), strict=True))
        next_batch += count
    ordered = [passes.get(batch, 0) for batch in range(next_batch)]
    cumulative = np.cumsum(ordered) if ordered else np.zeros(0, dtype=np.int64)
    if next_batch and cumulative[-1] >= target:
        last = int(np.searchsorted(cumulative, target, side="left"))
        before = int(cumulative[last - 1]) if last else 0
        needed = target - before
        positions = np.sort(np.concatenate([
            engine.collect(engine.map_batches(outcome, batch_positions, pa.schema(
                [pa.field("batch", pa.int64(), nullable=False), pa.field("position", pa.int64(), nullable=False)]
            ), side=last))["position"].to_numpy(np.int64)
            for outcome in rounds
        ]))
        last_position = int(positions[needed - 1]) if needed else -1
        attempts = last * batch_size + last_position + 1
        passed = target
    else:
        last = next_batch - 1
        last_position = batch_size
        attempts = min(next_batch * batch_size, parameters.max_attempts)
        passed = int(cumulative[-1]) if next_batch else 0
    cut = Cut(last, last_position, tuple(schema.names))
    return SynthesisResult(rounds, cut, attempts, passed, next_batch)


def run_on_engine(context: ReleaseContext, plan: TabularPlan, prepared: PreparedRecords,
                  engine: Engine) -> ReleaseResult:
    config, timer, secret, release_id = context.config, context.timer, context.secret, context.release_id
    schema, parts, omega = plan.schema, plan.parts, plan.omega
    sizes = domain_sizes(schema)
    parameters = prepared.parameters
    split = prepared.split
    records = engine.persist(engine.read_parquet([prepared.staged], staged_schema(len(sizes))))
    with timer.stage("structure learning"):
        structure = learn_structure_on_engine(
            engine, records, sizes, int(split.structure.size), config, parts.epsilon_structure,
            keyed_generator(secret, release_id, PURPOSE_STRUCTURE, 0), timer,
        )
    with timer.stage("parameter learning"):
        counts = _count_tables(engine, records, PART_PARAMETERS, sizes, table_attributes(structure))
        conditionals = noisy_conditional_distributions(
            [counts[attributes] for attributes in table_attributes(structure)], structure, sizes,
            parameters.epsilon_parameters, parameters.dirichlet_alpha,
            keyed_generator(secret, release_id, PURPOSE_PARAMETER_NOISE, 0),
        )
    seeds_codes = prepared.codes[split.seeds]
    with timer.stage("seed index"):
        index = _seed_index(engine, records, seeds_codes, structure, omega, sizes)
    engine.unpersist(records)
    side = SynthesisSide(seeds_codes, index, structure, conditionals, schema, parameters, secret, release_id)
    with timer.stage("synthesize"):
        result = _synthesize(engine, side, schema, timer)
    out_schema = output_schema(schema)
    files: list[Path] = []
    with timer.stage("write staging"):
        for number, outcome in enumerate(result.rounds):
            released = engine.map_batches(outcome, released_rows, out_schema, side=result.cut)
            files += engine.write_parquet(released, context.staging / "data" / f"round-{number}", out_schema)
            engine.unpersist(outcome)
    with timer.stage("validate output"):
        released_frame = (
            storage.read_files(files).to_pandas() if files else out_schema.empty_table().to_pandas()
        )
        output_validation = validate_tabular_output(released_frame, schema, result.passed)
    guarantee = prepared.guarantee
    evaluation = {}
    if config.evaluation.holdout is not None and len(released_frame):  # nothing released: nothing to evaluate
        with timer.stage("evaluate"):
            from pipelines.tabular.report import evaluation_report

            evaluation = evaluation_report(config, schema, released_frame, prepared.frame, seeds_codes, secret, release_id)
    manifest: dict[str, Any] = {
        **context.manifest_identity(),
        "status": "published" if output_validation.success else "quarantined",
        "epsilon": guarantee["epsilon"],
        "delta": guarantee["delta"],
        "privacy_unit": guarantee["privacy_unit"],
        "guarantee": guarantee,
        "rows": int(len(released_frame)),
        "target_records": int(parameters.target_records or 0),
        "omega": omega,
        "split": {"seeds": int(split.seeds.size), "structure": int(split.structure.size),
                  "parameters": int(split.parameters.size)},
        "network": {**structure.to_json(), "attribute_names": list(schema.names)},
        "engine": engine.name,
        "validation": {"output": output_validation.to_json()},
        **context.manifest_provenance(),
    }
    internal = {
        "note": "computed from the raw records: operator figures outside the release's guarantee",
        "input_rows": int(prepared.codes.shape[0]),
        "reached_target": bool(result.passed >= int(parameters.target_records or 0)),
        "candidate_attempts": int(result.attempts),
        "pass_rate": result.passed / result.attempts if result.attempts else None,
        "batches": int(result.batches),
        "clipped_values": prepared.clipped,
        "validation": {
            "input": {
                "success": True,
                "checks": [
                    "columns are exactly the schema's attributes",
                    "no missing values",
                    "every value inside its attribute's public domain (categories, bounds), or clipped as the schema allows",
                    f"at least {prepared.minimum_records} records for the split and k",
                ],
                "note": "checked while encoding; any failure stops the release with one line naming file, row and column",
            },
        },
        "evaluation": evaluation,
        # `privlake report`: marginals and associations of the original and released records (shares, not rows)
        "report": marginal_summaries(schema, prepared.codes, released_frame) if len(released_frame) else {},
    }
    return ReleaseResult(files, out_schema, manifest, output_validation.success, output_validation.first_line(),
                         internal)


def summary_line(manifest: dict[str, Any]) -> str:
    return (
        f"published {manifest['rows']} synthetic records (omega {manifest['omega']}) on {manifest['engine']}; "
        f"epsilon={manifest['epsilon']:.4g}, delta={manifest['delta']:.3g} per {manifest['privacy_unit']}"
    )


KIND = ReleaseKind(
    name="tabular",
    config_model=TabularConfig,
    worker_modules=TABULAR_WORKER_MODULES,
    plan=plan_release,
    prepare=prepare_records,
    run_on_engine=run_on_engine,
    summary=summary_line,
    show_keys=("omega", "target_records"),
)


run_tabular_release = KIND.run
