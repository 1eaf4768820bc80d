"""The tabular release (plausible-deniability synthesis over a DP Bayesian network), written once
over the engine interface.

Bindschaedler, Shokri, Gunter (VLDB 2017), learning in the style of PrivBayes (Zhang et al. 2014);
the mathematics is in ``transforms/tabular`` and ``transforms/tabular/release.py`` is the
in-memory reference this pipeline must equal on every engine.

1. Refuse early: the schema and the model's limits are checked from the config alone.
2. While the engine starts: list the input (``sources.list_fragments``: a file, a folder with hive
   partitions, a glob or an Iceberg snapshot, as fragments; metadata only, never a row). Then on
   the engine (``pipelines/tabular/engine_input.py``), one task per fragment: read the records as
   a file is read (CSV text, header or the schema's names, recode, null spellings), flag every bad
   value by attribute and problem, encode and stage the codes with their ``ROW_ID``; the input
   gate (Great Expectations) on the engine's metrics; a bad input is one line at its first bad
   value (``first_row``: file, row, column). With the public record count ``n``: the guarantee
   (it needs ``|DS|``) is reserved, then one task splits the positions ``0..n-1`` (``ROW_ID``
   order) with the keyed permutation and the staged codes are read with their parts.
3. Structure learning on ``DT``: per greedy step, one pass counts every candidate's tables
   (sparse partial tables per partition, summed exactly); the driver makes the
   exponential-mechanism choice.
4. Parameters on ``DP``: one pass counts the m tables; the driver adds discrete Laplace noise.
5. The seed index: one pass counts ``DS`` by its kept attributes (``groupBy().count()``; one pass
   per block of kept attributes when their joint values overflow an int64 key). With ``omega <
   all`` one pass stages the seeds' codes where the tasks run, one file per fragment in position
   order (``pipelines/tabular/seeds.py``); the driver never holds a seed.
6. Synthesis: keyed batches of candidates run on the workers (index and model broadcast; a batch
   reads the staged seeds it draws), in rounds until ``n`` records pass or the attempt cap; the
   release is the first ``n`` passing candidates in batch order, whatever the partitioning.
7. Write from the workers, validate (GX), publish data and manifest in one Iceberg commit.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.engines import storage
from pipelines.engines.base import Collection, Engine
from pipelines.platform.errors import InputError, PrivlakeError
from pipelines.platform.fragment_tasks import ROW_SKETCHES_SCHEMA, row_sketch_entries
from pipelines.platform.policy import LakePolicy
from pipelines.platform.release import (
    ReleaseContext,
    ReleaseKind,
    ReleaseResult,
    StageTimer,
)
from pipelines.platform.row_prints import RowPrinting
from pipelines.platform.selection import refuse_private_partitions, refuse_private_selection
from pipelines.platform.sources import (
    ROW_ID,
    SUFFIX_FORMATS,
    Fragment,
    TextReading,
    input_fingerprint,
    list_fragments,
    row_error,
)
from pipelines.tabular.blocks import (
    PART_ALL,
    PART_PARAMETERS,
    PART_SEEDS,
    PART_STRUCTURE,
    RECORD_KEY,
    Cut,
    SeedKeySide,
    SynthesisSide,
    TablePass,
    batch_positions,
    code_columns,
    keyed_records,
    released_rows,
    seed_key_rows,
    synthesis_rows,
    table_count_rows,
)
from pipelines.tabular.engine_input import (
    CLIPPED,
    NOT_INTEGERS,
    NULLS,
    OUTSIDE,
    RELEASED_CELL,
    RELEASED_METRIC,
    RELEASED_SUMMARY_SCHEMA,
    ROW_SKETCH,
    ROWS,
    OutputCheck,
    PartLookup,
    RecordReading,
    ReleasedFile,
    SampleReading,
    SplitJob,
    StagedFragment,
    StagedPass,
    codes_file,
    fragment_entries,
    metric_entries,
    problem_entries,
    read_record_fragment,
    released_entries,
    released_metric,
    released_summary,
    sample_rows,
    staged_rows,
    write_split,
)
from pipelines.tabular.input import private_columns, read_schema
from pipelines.tabular.report_page import MAX_ATTRIBUTES as MAX_REPORT_ATTRIBUTES
from pipelines.tabular.report_page import marginal_summaries_from_tables
from pipelines.tabular.seeds import (
    SeedWriting,
    StagedSeeds,
    index_blocks,
    partial_index,
    seed_block_key_rows,
    seeds_file,
    write_fragment_seeds,
)
from pipelines.tabular.validation import (
    released_metric_name,
    validate_tabular_metrics,
    validate_tabular_output_metrics,
)
from schemas.base import LakeLocation
from schemas.tabular.config import TabularConfig, TabularInput
from schemas.tabular.schema import CategoricalAttribute, NumericAttribute, TabularSchema
from schemas.tabular.tables import (
    PROBLEM_ROWS_SCHEMA,
    SPLIT_COUNTS_SCHEMA,
    TABULAR_FRAGMENT_ROWS_SCHEMA,
    TABULAR_METRICS_SCHEMA,
    tabular_input_summary_schema,
)
from transforms.core.guarantee import choose_t
from transforms.core.keyed_randomness import keyed_generator
from transforms.tabular.data_split import minimum_record_count, part_sizes
from transforms.tabular.encoding import domain_sizes, problem_reason
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
)
from transforms.tabular.seed_synthesis import kept_and_resampled
from transforms.tabular.structure_learning import (
    StructureLearningStep,
    choose_first_attribute,
    choose_step,
    structure_epsilon_per_step,
    validate_structure_constraints,
)

TABULAR_WORKER_MODULES = ("pipelines.tabular.blocks", "pipelines.tabular.engine_input", "pipelines.tabular.seeds")
PURPOSE_EVALUATION_SAMPLE = "tabular-evaluation-sample"
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
    refuse_private_selection(config.input, private_columns(schema), "tabular")
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
    """What the driver knows of the records before the engine reads them: their fragments (file
    names, sizes, scan tasks — metadata, never a row) and how error lines name the input."""

    fragments: list[Fragment]
    name: str


@dataclass(frozen=True)
class CheckedRecords:
    """The records as the engine found them: their count, each fragment's first position (in
    ``ROW_ID`` order), the staged codes' files, the values clipped per attribute, the input gate's
    result on the engine's metrics and the input's keyed fingerprint."""

    rows: int
    offsets: tuple[int, ...]
    staged: list[StagedFragment]
    clipped: dict[str, int]
    validation: Any
    fingerprint: str


def listing_spec(settings: TabularInput) -> TabularInput:
    """The input as listed: a single file without a format and without a known suffix is CSV (a
    tabular input's format always defaulted to CSV)."""
    if settings.format is None and settings.path is not None and not any(
        character in settings.path for character in "*?["
    ) and os.path.isfile(settings.path) and os.path.splitext(settings.path)[1].lower() not in SUFFIX_FORMATS:
        return settings.model_copy(update={"format": "csv"})
    return settings


def prepare_records(context: ReleaseContext, plan: TabularPlan) -> PreparedRecords:
    """While the engine starts: list the input (metadata only). The records are read, checked,
    encoded and staged by the engine (``pipelines/tabular/engine_input.py``)."""
    config = context.config
    with context.timer.stage("list input"):
        spec = listing_spec(config.input)
        properties = config.lake.properties if isinstance(config.lake, LakeLocation) else None
        fragments = list_fragments(spec, properties=properties)
        refuse_private_partitions(fragments, private_columns(plan.schema), "tabular")
    return PreparedRecords(fragments, spec.path if spec.path is not None else f"table {spec.table}")


def text_reading(config: TabularConfig, schema: TabularSchema) -> TextReading:
    settings = config.input
    return TextReading.of(settings.header, schema.names, settings.recode)


def input_fingerprint_key(lake: Any) -> bytes:
    """A 32-byte key for the tabular input's fingerprints, derived from the lake's fingerprint key
    (kept outside the lake): 32 bytes, so the engines treat it as key material."""
    return hmac.new(LakePolicy(lake).fingerprint_key(), b"privlake-tabular-input-fingerprint", hashlib.sha256).digest()


def read_records_on_engine(config: TabularConfig, schema: TabularSchema, prepared: PreparedRecords, engine: Engine,
                           codes_folder: Any, fingerprint_key: bytes | None = None,
                           fragment_key: bytes | None = None,
                           check_prints: Callable[[list[tuple[int, str]], list[str]], None] | None = None,
                           row_printing: RowPrinting | None = None) -> CheckedRecords:
    """Read, check, encode and stage the records on the engine (one task per fragment); the input
    gate (Great Expectations) on the engine's metrics. Raises the one-line error of the first bad
    value, as a read of one file names it: the first attribute (schema order) with a bad value,
    its first problem (missing, then the wrong kind, then outside the bounds), its first row.

    The fragments are fingerprinted where they are read, under ``fragment_key`` (the lake's key as
    ``ReleaseContext.fragment_key`` gives it; ``fingerprint_key`` when there is none), and
    ``check_prints`` (the policy's check, ``ReleaseContext.check_input_fingerprints``) gets them,
    with each fragment's sketch of its canonical records (``row_printing``), before the input gate;
    the input's fingerprint is those digests keyed by ``fingerprint_key``."""
    fragments = prepared.fragments
    side = RecordReading(schema, text_reading(config, schema), codes_folder, fragment_key or fingerprint_key,
                         row_printing)
    summary = engine.persist(engine.map_fragments(fragments, read_record_fragment, tabular_input_summary_schema(), side))
    try:
        listed = engine.collect(engine.map_batches(summary, fragment_entries, TABULAR_FRAGMENT_ROWS_SCHEMA))
        fragment_prints = list(zip(listed["code"].astype(int).tolist(), listed["fingerprint"].tolist(), strict=True))
        if check_prints is not None:
            sketches = engine.collect(engine.map_batches(summary, row_sketch_entries, ROW_SKETCHES_SCHEMA,
                                                         side=(ROW_SKETCH, "fingerprint")))
            check_prints(fragment_prints, sketches["sketch"].tolist())
        sums = engine.sum_by_key(engine.map_batches(summary, metric_entries, TABULAR_METRICS_SCHEMA), "code", ["count"])
        by_code = dict(zip(sums["code"].astype(int), sums["count"].astype(int), strict=True))
        problems = sorted(code for code, count in by_code.items() if code != ROWS and code < CLIPPED and count > 0)
        metrics = {"rows": by_code.get(ROWS, 0), "missing_values": 0, "values_not_in_domain": 0,
                   "values_outside_bounds": 0}
        for code in problems:
            metrics[("missing_values", "values_not_in_domain", "values_outside_bounds")[code % 4 - 1]] += by_code[code]
        validation = validate_tabular_metrics(metrics, prepared.name)
        if not validation.success:
            if not problems:
                raise InputError(prepared.name, validation.issues[0].message)
            code = problems[0]
            first = engine.first_row(engine.map_batches(summary, problem_entries, PROBLEM_ROWS_SCHEMA, side=code), ROW_ID)
            assert first is not None
            attribute = schema.attributes[code // 4]
            raise row_error(fragments, int(first[ROW_ID]), problem_reason(attribute, code % 4), column=attribute.name)
    finally:
        engine.unpersist(summary)
    rows_of = dict(zip(listed["code"].astype(int), listed["count"].astype(int), strict=True))
    offsets, total = [], 0
    for fragment in fragments:
        offsets.append(total)
        total += rows_of[fragment.ordinal]
    files = [StagedFragment(codes_file(codes_folder, fragment.ordinal), fragment.ordinal) for fragment in fragments
             if rows_of[fragment.ordinal]]
    clipped = {attribute.name: by_code.get(CLIPPED + position, 0) for position, attribute in enumerate(schema.attributes)
               if isinstance(attribute, NumericAttribute)}
    prints = input_fingerprint(fragments, fragment_prints)
    return CheckedRecords(total, tuple(offsets), files, clipped, validation,
                          _records_fingerprint(prints, config, fingerprint_key))


def _records_fingerprint(input_print: str, config: TabularConfig, key: bytes | None) -> str:
    """The input's fingerprint (``sources.input_fingerprint`` over the per-fragment digests computed
    on the engine) with the schema file and how the records are read; an HMAC under ``key``."""
    settings = config.input
    digest = hmac.new(key, digestmod=hashlib.sha256) if key is not None else hashlib.sha256()
    digest.update(input_print.encode() + b"\0")
    digest.update(settings.schema_path.read_bytes() + b"\0")
    digest.update(repr((settings.header, sorted((column, sorted(mapping.items()))
                                                 for column, mapping in settings.recode.items()))).encode())
    return ("hmac-sha256:" if key is not None else "sha256:") + digest.hexdigest()


def release_parameters(config: TabularConfig, plan: TabularPlan, record_count: int) -> TabularReleaseParameters:
    split_fractions = config.split
    target = config.synthesis.records or record_count
    return TabularReleaseParameters(
        seed_fraction=split_fractions.seeds,
        structure_fraction=split_fractions.structure,
        parameter_fraction=split_fractions.parameters,
        epsilon_parameters=plan.parts.epsilon_parameters,
        dirichlet_alpha=config.model.dirichlet_alpha,
        omega=plan.omega,
        k=config.privacy.k,
        epsilon0=plan.parts.epsilon0,
        max_attempts=config.synthesis.max_attempts or DEFAULT_ATTEMPTS_PER_RECORD * target,
        batch_size=config.synthesis.batch_size,
        target_records=target,
    )


@dataclass(frozen=True)
class StagedRecords:
    """The encoded records as the engine staged them (one file per fragment with records), how a
    record's part of the split is found, and the split's sizes."""

    fragments: list[StagedFragment]
    parts: PartLookup
    part_sizes: tuple[int, int, int]

    def map(self, engine: Engine, fn: Any, schema: pa.Schema, side: Any = None) -> Collection:
        """``fn(frame, side)`` over every record (codes, ``part``, ``ROW_ID``), one task per staged
        file: a pass of the release reads the staged files where the engine runs its tasks."""
        return engine.map_fragments(self.fragments, staged_rows, schema, StagedPass(fn, side, self.parts))


def _count_tables(engine: Engine, records: StagedRecords, part: int, sizes: tuple[int, ...],
                  tables: list[tuple[int, ...]]) -> dict[tuple[int, ...], np.ndarray]:
    """One pass over ``part``: every table in ``tables``."""
    plan = TablePass.plan(part, sizes, tables)
    schema = pa.schema([pa.field("cell", pa.int64(), nullable=False), pa.field("records", pa.int64(), nullable=False)])
    sums = engine.sum_by_key(records.map(engine, table_count_rows, schema, plan), "cell", ["records"])
    return plan.unpack(sums)


def learn_structure_on_engine(engine: Engine, records: StagedRecords, sizes: tuple[int, ...], structure_records: int,
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


SEED_KEYS_SCHEMA = pa.schema([pa.field("seed_key", pa.int64(), nullable=False),
                              pa.field("seeds", pa.int64(), nullable=False)])


def _seed_index(engine: Engine, records: StagedRecords, structure: NetworkStructure, omega: int,
                sizes: tuple[int, ...]) -> SeedIndex:
    """The seed index, counted on the engine: seeds per joint value of the kept attributes (one
    ``sum_by_key``); when those values overflow one int64 key, block by block as ``SeedIndex.build``
    keys them (one ``sum_by_key`` per block: the block's distinct keys are its ranks, the last
    block's keys and counts the index). The driver holds the distinct keys only."""
    kept, _ = kept_and_resampled(structure, omega)
    if SeedIndex.fits_one_key(structure, omega, sizes):
        partial = records.map(engine, seed_key_rows, SEED_KEYS_SCHEMA, SeedKeySide(kept, sizes))
        counts = engine.sum_by_key(partial, "seed_key", ["seeds"])
        return SeedIndex.from_key_counts(structure, omega, sizes, counts["seed_key"].to_numpy(np.int64),
                                         counts["seeds"].to_numpy(np.int64))
    blocks = index_blocks(structure, omega, sizes, records.part_sizes[0])
    ranks: list[np.ndarray] = []
    while True:
        side = partial_index(kept, sizes, blocks[:len(ranks) + 1], tuple(ranks))
        counted = engine.sum_by_key(records.map(engine, seed_block_key_rows, SEED_KEYS_SCHEMA, side), "seed_key",
                                    ["seeds"])
        order = np.argsort(counted["seed_key"].to_numpy(np.int64), kind="stable")
        keys = counted["seed_key"].to_numpy(np.int64)[order]
        if len(ranks) == len(blocks) - 1:
            return partial_index(kept, sizes, blocks, tuple(ranks), keys, counted["seeds"].to_numpy(np.int64)[order])
        ranks.append(keys)


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


def stage_split(context: ReleaseContext, engine: Engine, checked: CheckedRecords,
                parameters: TabularReleaseParameters) -> StagedRecords:
    """The split of the record positions (a keyed permutation of ``0..n-1``, positions in ``ROW_ID``
    order) computed in one engine task and written as one byte per position, which every pass
    over the staged codes reads a record's part from."""
    fractions = (parameters.seed_fraction, parameters.structure_fraction, parameters.parameter_fraction)
    parts_file = context.staging / "input" / "parts.bin"
    job = SplitJob(checked.rows, fractions, context.secret, context.release_id, parts_file)
    one = engine.from_pandas(pd.DataFrame({"task": np.zeros(1, dtype=np.int64)}),
                             pa.schema([pa.field("task", pa.int64(), nullable=False)]))
    counts = engine.collect(engine.map_batches(one, write_split, SPLIT_COUNTS_SCHEMA, side=job))
    by_part = dict(zip(counts["part"].astype(int), counts["records"].astype(int), strict=True))
    sizes = (by_part.get(PART_SEEDS, 0), by_part.get(PART_STRUCTURE, 0), by_part.get(PART_PARAMETERS, 0))
    return StagedRecords(checked.staged, PartLookup(parts_file, checked.offsets), sizes)


SEED_COUNTS_SCHEMA = pa.schema([pa.field("ordinal", pa.int64(), nullable=False),
                                pa.field("seeds", pa.int64(), nullable=False)])


def stage_seeds(context: ReleaseContext, engine: Engine, records: StagedRecords, attribute_count: int) -> StagedSeeds:
    """The seeds for ``omega < all`` (whose synthesis keeps attributes from the seeds; ``omega = all``
    needs only their number), staged where the engine runs its tasks: each staged fragment's seeds
    in position (``ROW_ID``) order to a file of its own (``pipelines/tabular/seeds.py``). The driver
    gets one count per fragment, never a seed."""
    folder = context.staging / "input" / "seeds"
    counted = engine.collect(records.map(engine, write_fragment_seeds, SEED_COUNTS_SCHEMA,
                                         SeedWriting(folder, attribute_count)))
    counted = counted[counted["seeds"] > 0].sort_values("ordinal")
    counts = counted["seeds"].to_numpy(np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if counts.size else counts
    total = int(counts.sum())
    if total != records.part_sizes[0]:
        raise RuntimeError(f"staged {total} seeds where the split has {records.part_sizes[0]}")
    return StagedSeeds(tuple(seeds_file(folder, int(ordinal)) for ordinal in counted["ordinal"]),
                       tuple(int(offset) for offset in offsets), total, attribute_count)


def evaluation_sample(context: ReleaseContext, plan: TabularPlan, prepared: PreparedRecords, checked: CheckedRecords,
                      records: StagedRecords, engine: Engine) -> tuple[pd.DataFrame, np.ndarray]:
    """The evaluation's records read again on the engine, at most ``evaluation.sample_records`` of
    them (all when the input has no more; beyond, a keyed sample of positions): their typed
    values (the evaluation's classifiers train on them) and the seeds' codes among them, in
    position order. The driver holds the sample only."""
    config, schema = context.config, plan.schema
    cap = config.evaluation.sample_records
    n = checked.rows
    if n <= cap:
        positions = np.arange(n, dtype=np.int64)
    else:
        rng = keyed_generator(context.secret, context.release_id, PURPOSE_EVALUATION_SAMPLE, 0)
        positions = np.sort(rng.choice(n, size=cap, replace=False)).astype(np.int64)
    side = SampleReading(schema, text_reading(config, schema), checked.offsets, positions, records.parts)
    chosen = [fragment for fragment, start, end in zip(
        prepared.fragments, checked.offsets, (*checked.offsets[1:], n), strict=True)
        if np.searchsorted(positions, start) < np.searchsorted(positions, end)]
    attribute_count = len(schema.attributes)
    sampled = engine.collect(engine.map_fragments(chosen, sample_rows, sample_schema(schema), side))
    sampled = sampled.sort_values(ROW_ID, kind="stable").reset_index(drop=True)
    training = typed_columns(sampled, schema)
    seeds = sampled.loc[sampled["part"].to_numpy() == PART_SEEDS, code_columns(attribute_count)].to_numpy(np.int32)
    return training, seeds


def typed_columns(frame: pd.DataFrame, schema: TabularSchema) -> pd.DataFrame:
    return pd.DataFrame({name: frame[name].to_numpy() for name in schema.names})


def sample_schema(schema: TabularSchema) -> pa.Schema:
    return pa.schema([*output_schema(schema), *records_schema(len(schema.attributes))])


def records_schema(attribute_count: int) -> pa.Schema:
    return pa.schema([*staged_schema(attribute_count), pa.field(ROW_ID, pa.int64(), nullable=False)])


def original_tables(engine: Engine, records: StagedRecords, sizes: tuple[int, ...]) -> dict[tuple[int, ...], np.ndarray]:
    """Every attribute's one-way and every pair's two-way counts over all records (the report's
    original marginals and associations), counted on the engine."""
    shown = range(min(len(sizes), MAX_REPORT_ATTRIBUTES))
    tables = [(a,) for a in shown] + [(a, b) for a in shown for b in shown if a < b]
    return _count_tables(engine, records, PART_ALL, sizes, tables)


@dataclass(frozen=True)
class CheckedOutput:
    """The released records as the engine found them: their count, the output gate's metrics and
    the report's one-way and pairwise tables of their codes."""

    rows: int
    metrics: dict[str, int]
    tables: dict[tuple[int, ...], np.ndarray]


RELEASE_FILE_RECORDS = 500_000
"""Released records per file of the release, about (docs/PRIVACY.md, "The layout of a release")."""


def write_release_files(engine: Engine, rounds: list[Path], out_schema: pa.Schema, released: int,
                        folder: Path) -> list[Path]:
    """The release's files from the synthesis rounds' files: records by a fixed hash of their
    values into a file count set by the released record count, each file sorted by that hash and
    the values — a function of the released records alone (the rounds' files follow how many
    synthesis rounds ran, which follows the pass rate, operator-only)."""
    keyed = out_schema.append(pa.field(RECORD_KEY, pa.int64(), nullable=False))
    # read as group files so that the local engine streams them (nothing maps by groups here)
    records = engine.read_groups_streaming(rounds, out_schema.names[0], out_schema)
    return engine.write_by_key(engine.map_batches(records, keyed_records, keyed), RECORD_KEY, out_schema.names,
                               max(1, -(-released // RELEASE_FILE_RECORDS)), folder, out_schema)


def check_output_on_engine(engine: Engine, files: list[Path], schema: TabularSchema) -> CheckedOutput:
    """The released files read where they were written, one task each (``released_summary``):
    the output gate's metrics and the report's tables, summed on the engine."""
    sizes = domain_sizes(schema)
    shown = range(min(len(sizes), MAX_REPORT_ATTRIBUTES))
    plan = TablePass.plan(PART_ALL, sizes, [(a,) for a in shown] + [(a, b) for a in shown for b in shown if a < b])
    released = [ReleasedFile(where, number) for number, where in enumerate(files)]
    summary = engine.persist(engine.map_fragments(released, released_summary, RELEASED_SUMMARY_SCHEMA,
                                                  OutputCheck(schema, plan)))
    try:
        pair = pa.schema([pa.field("key", pa.int64(), nullable=False), pa.field("count", pa.int64(), nullable=False)])
        sums = engine.sum_by_key(engine.map_batches(summary, released_entries, pair, side=RELEASED_METRIC), "key",
                                 ["count"])
        cells = engine.sum_by_key(engine.map_batches(summary, released_entries, pair, side=RELEASED_CELL), "key",
                                  ["count"])
    finally:
        engine.unpersist(summary)
    by_code = dict(zip(sums["key"].astype(int), sums["count"].astype(int), strict=True))
    metrics = {"rows": by_code.get(0, 0)}
    for position, attribute in enumerate(schema.attributes):
        for kind in (NULLS, OUTSIDE, NOT_INTEGERS):
            metrics[released_metric_name(attribute.name, kind)] = by_code.get(released_metric(position, kind), 0)
    tables = plan.unpack(cells.rename(columns={"key": "cell", "count": "records"}))
    return CheckedOutput(metrics["rows"], metrics, tables)


def released_sample(context: ReleaseContext, files: list[Path], count: int, cap: int) -> pd.DataFrame:
    """The released records the evaluation reads: all of them (in file order) up to ``cap``, beyond
    it a keyed sample of ``cap`` (read file by file)."""
    if count <= cap:
        return storage.read_files(files).to_pandas()
    rng = keyed_generator(context.secret, context.release_id, PURPOSE_EVALUATION_SAMPLE, 1)
    chosen = np.sort(rng.choice(count, size=cap, replace=False))
    pieces, start = [], 0
    for where in files:
        table = storage.parquet_file(where).read()
        inside = chosen[(chosen >= start) & (chosen < start + table.num_rows)] - start
        if inside.size:
            pieces.append(table.take(pa.array(inside)))
        start += table.num_rows
    return pa.concat_tables(pieces).to_pandas()


def run_on_engine(context: ReleaseContext, plan: TabularPlan, prepared: PreparedRecords,
                  engine: Engine) -> ReleaseResult:
    config, timer, secret, release_id = context.config, context.timer, context.secret, context.release_id
    schema, omega = plan.schema, plan.omega
    parts = plan.parts
    sizes = domain_sizes(schema)
    with timer.stage("read input"):
        fragment_key = context.fragment_key()
        checked = read_records_on_engine(
            config, schema, prepared, engine, context.staging / "input" / "codes", input_fingerprint_key(context.lake),
            fragment_key, lambda prints, sketches: context.check_input_fingerprints(
                engine, prepared.fragments, prints if fragment_key is not None else None, sketches),
            context.row_printing(prepared.fragments))
    record_count = checked.rows
    split_fractions = config.split
    needed = minimum_record_count(config.privacy.k, split_fractions.seeds, split_fractions.structure,
                                  split_fractions.parameters)
    if record_count < needed:
        raise InputError(
            prepared.name,
            f"the table has {record_count} records; the split (seeds {split_fractions.seeds}) and "
            f"k = {config.privacy.k} need at least {needed}",
        )
    parameters = release_parameters(config, plan, record_count)
    seed_count = part_sizes(record_count, parameters.seed_fraction, parameters.structure_fraction,
                            parameters.parameter_fraction)[0]
    with timer.stage("split and stage"):
        guarantee = guarantee_for(config, plan, parameters, seed_count)
        context.reserve(guarantee)
        records = stage_split(context, engine, checked, parameters)
    split_sizes = records.part_sizes
    with timer.stage("structure learning"):
        structure = learn_structure_on_engine(
            engine, records, sizes, split_sizes[1], config, parts.epsilon_structure,
            keyed_generator(secret, release_id, PURPOSE_STRUCTURE, 0), timer,
        )
    with timer.stage("parameter learning"):
        counts = _count_tables(engine, records, PART_PARAMETERS, sizes, table_attributes(structure))
        conditionals = noisy_conditional_distributions(
            [counts[attributes] for attributes in table_attributes(structure)], structure, sizes,
            parameters.epsilon_parameters, parameters.dirichlet_alpha,
            keyed_generator(secret, release_id, PURPOSE_PARAMETER_NOISE, 0),
        )
    with timer.stage("seed index"):
        seeds_codes = None if omega == len(sizes) else stage_seeds(context, engine, records, len(sizes))
        index = _seed_index(engine, records, structure, omega, sizes)
    originals = original_tables(engine, records, sizes)
    side = SynthesisSide(seeds_codes, index, structure, conditionals, schema, parameters, secret, release_id,
                         seed_count=split_sizes[0])
    with timer.stage("synthesize"):
        result = _synthesize(engine, side, schema, timer)
    out_schema = output_schema(schema)
    rounds: list[Path] = []
    with timer.stage("write staging"):
        for number, outcome in enumerate(result.rounds):
            released = engine.map_batches(outcome, released_rows, out_schema, side=result.cut)
            rounds += engine.write_parquet(released, context.staging / "rounds" / f"round-{number}", out_schema)
            engine.unpersist(outcome)
    with timer.stage("validate output"):
        checked_output = check_output_on_engine(engine, rounds, schema)
        released_count = checked_output.rows
        output_validation = validate_tabular_output_metrics(checked_output.metrics, schema, result.passed)
    with timer.stage("write staging"):
        files = write_release_files(engine, rounds, out_schema, released_count, context.staging / "data")
    evaluation = {}
    if config.evaluation.holdout is not None and released_count:  # nothing released: nothing to evaluate
        with timer.stage("evaluate"):
            from pipelines.tabular.report import evaluation_report

            training, sampled_seeds = evaluation_sample(context, plan, prepared, checked, records, engine)
            released_frame = released_sample(context, rounds, released_count, config.evaluation.sample_records)
            evaluation = evaluation_report(config, schema, released_frame, training, sampled_seeds, secret, release_id)
            evaluation["input_records_read"] = int(len(training))
            evaluation["released_records_read"] = int(len(released_frame))
    manifest: dict[str, Any] = {
        **context.manifest_identity(),
        "status": "published" if output_validation.success else "quarantined",
        "epsilon": guarantee["epsilon"],
        "delta": guarantee["delta"],
        "privacy_unit": guarantee["privacy_unit"],
        "guarantee": guarantee,
        "rows": int(released_count),
        "target_records": int(parameters.target_records or 0),
        "omega": omega,
        "split": {"seeds": int(split_sizes[0]), "structure": int(split_sizes[1]),
                  "parameters": int(split_sizes[2])},
        "network": {**structure.to_json(), "attribute_names": list(schema.names)},
        "engine": engine.name,
        "validation": {"output": output_validation.to_json()},
        **context.manifest_provenance(),
    }
    internal = {
        "note": "computed from the raw records: operator figures outside the release's guarantee",
        "input_rows": int(record_count),
        "input_fingerprint": checked.fingerprint,
        "reached_target": bool(result.passed >= int(parameters.target_records or 0)),
        "candidate_attempts": int(result.attempts),
        "pass_rate": result.passed / result.attempts if result.attempts else None,
        "batches": int(result.batches),
        "clipped_values": checked.clipped,
        "validation": {
            "input": {
                "success": True,
                "checks": [
                    "columns are exactly the schema's attributes",
                    "no missing values",
                    "every value inside its attribute's public domain (categories, bounds), or clipped as the schema allows",
                    f"at least {needed} records for the split and k",
                ],
                "note": "checked on the engine while encoding (Great Expectations on the engine's metrics); any "
                        "failure stops the release with one line naming file, row and column",
                "metrics": checked.validation.to_json(),
            },
        },
        "evaluation": evaluation,
        # `privlake report`: marginals and associations of the original and released records (shares, not rows)
        "report": marginal_summaries_from_tables(schema, originals, record_count, checked_output.tables,
                                                 released_count) if released_count else {},
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
    reserves_on_engine=True,
)


run_tabular_release = KIND.run
