"""The crowd release (PrisCrowd), written once over the engine interface.

Stages (each a job on the chosen engine; ``transforms/`` does the mathematics):

1. Refuse early: a published release id is a no-op; the ledger reserves the budget before the
   claims are read and refuses a release that would exceed it.
2. While the engine starts, list the input (``sources.list_fragments``: a file, a folder with
   hive partitions, a glob or an Iceberg snapshot, as fragments; metadata only, never a row).
3. On the engine (``pipelines/crowd/engine_input.py``): one task per fragment reads, types,
   checks and fingerprints its claims and writes them bucketed by object; the input gate (Great
   Expectations on the engine's metrics) names the first failing row; one task per bucket then
   resolves duplicates, clips, codes the sources (dense codes in the sorted order of the distinct
   source ids) and counts claims per object, staging whole objects as group files. The driver
   holds the listing, the metrics and the distinct source ids (as the source qualities do), never
   a claim. With the source-level unit, the contribution bound (at most L objects per source) is
   a map by source first, and the engine then shuffles by object.
4. The group files of step 3 (with the source-level unit, the bounded claims staged again by
   object, ``write_groups``) are what every later job maps over by object, without a shuffle or
   an engine cache, its workers reading the files themselves (``read_groups``); each block puts
   its objects in canonical order and takes the public kernel bandwidth from its side value.
5. Global source weights: repeat a map over objects (per-source loss sums, exact fixed point)
   and a reduce by source, until the source qualities stop changing.
6. Synthesis: per object, local (Hampel IRWLS) weights, combined weights clipped to the public
   ratio cap, then Algorithm 1 with the randomized plausible-deniability test; the outcome
   (claims and one summary row per object) is staged as group files.
7. Validate the outcome on the engine's metrics, write the synthetic claims to staging from where
   they live (``write_by_key``: a layout set by the released rows alone), then publish data and
   manifest in one Iceberg commit — or quarantine and refund the budget.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.crowd.blocks import (
    BoundSide,
    GlobalPassSide,
    SynthesisSide,
    bound_block,
    object_weights,
)
from pipelines.crowd.engine_input import (
    CLAIMS,
    DUPLICATE,
    EVALUATION,
    EVALUATION_OBJECTS,
    FINGERPRINT,
    INPUT_PASS_PROBLEMS,
    LARGEST_OBJECT,
    METRIC,
    METRIC_NAMES,
    NO_ROW,
    OBJECTS,
    OUT_ATTEMPTS,
    OUT_CAPPED,
    OUT_FALLBACKS,
    OUT_OF_RANGE,
    OUT_RELEASED,
    OUT_RELEASED_CLAIMS,
    OUT_ROWS,
    OUT_SUPPRESSED,
    OUTPUT_METRIC_NAMES,
    PROBLEMS,
    REASON,
    RELEASABLE_OBJECTS,
    ROW_SKETCH,
    ROWS,
    SAMPLE,
    SAMPLE_OBJECTS,
    SMALL_OBJECT,
    STAGED,
    TEXT_OBJECT_IDS,
    TEXT_SOURCE_IDS,
    ClaimsReading,
    GroupSide,
    OutputSide,
    SynthesisFileSide,
    bucket_tasks,
    fine_bucket_count,
    fragment_sources,
    fragments_per_task,
    global_pass_file,
    raw_median_block,
    read_claims_fragment,
    read_first_losses,
    sample_key,
    stage_object_bucket,
    synthesize_group_file,
    task_claims,
)
from pipelines.crowd.input import private_columns
from pipelines.crowd.report_page import learned_density_samples
from pipelines.crowd.validation import validate_crowd_input_metrics, validate_crowd_output_metrics
from pipelines.engines.arrow import read_key_rows, table_to_frame
from pipelines.engines.base import Engine
from pipelines.platform.errors import InputError, PrivlakeError, ReleaseRefused
from pipelines.platform.fragment_tasks import NumberedFile
from pipelines.platform.input import csv_problem
from pipelines.platform.policy import LakePolicy
from pipelines.platform.release import (
    ReleaseContext,
    ReleaseKind,
    ReleaseResult,
)
from pipelines.platform.release_shards import (
    RELEASE_SHARD_SCHEMA,
    ShardSide,
    outcome_buckets,
    release_shard_tasks,
    write_release_shard,
    written_files,
)
from pipelines.platform.row_prints import RowPrinting
from pipelines.platform.selection import refuse_private_partitions, refuse_private_selection
from pipelines.platform.sources import (
    ROW_ID,
    SUFFIX_FORMATS,
    Fragment,
    input_fingerprint,
    list_fragments,
    row_error,
    row_location,
)
from schemas.base import LakeLocation
from schemas.crowd.config import CrowdConfig, CrowdInput
from schemas.crowd.tables import (
    claims_schema,
    crowd_group_summary_schema,
    crowd_input_summary_schema,
    crowd_medians_schema,
    crowd_output_summary_schema,
    crowd_sources_schema,
    source_loss_schema,
    synthetic_claims_schema,
)
from transforms.crowd.bandwidth import PUBLIC_BANDWIDTH_METHODS, public_bandwidth
from transforms.crowd.combined_weights import weight_bounds
from transforms.crowd.density_metrics import truth_mean_absolute_error
from transforms.crowd.global_weights import (
    MAX_OBJECTS_PER_SOURCE,
    PrivateSourceQuality,
    SourceQuality,
    iterate_source_quality,
)
from transforms.crowd.guarantee import CrowdMechanism, crowd_guarantee
from transforms.crowd.private_density import (
    DensityParameters,
    HistogramMechanism,
    LogDensityGrid,
    histogram_guarantee,
)
from transforms.crowd.release import WeightSettings
from transforms.crowd.synthesis import SynthesisParameters, largest_object_for
from transforms.crowd.value_grid import ValueGrid

CROWD_WORKER_MODULES = ("pipelines.crowd.blocks", "pipelines.crowd.engine_input")
def synthesis_parameters(config: CrowdConfig) -> SynthesisParameters:
    """The public synthesis parameters of a ``priscrowd`` config."""
    privacy, synthesis = config.privacy, config.synthesis
    low, high = privacy.value_range
    return SynthesisParameters(
        claims_per_object=synthesis.claims_per_object,
        k=privacy.k,
        gamma=privacy.gamma,
        epsilon0=privacy.epsilon0,
        grid=ValueGrid(low, high, synthesis.precision),
        fallback_probability=privacy.fallback_probability,
        max_attempts_per_claim=config.max_attempts_per_claim,
        batch_size=synthesis.effective_batch_size,
        minimum_claims=privacy.min_claims_per_object or 0,
    )


def density_parameters(config: CrowdConfig, guarantee: dict[str, Any]) -> DensityParameters:
    """The public parameters of a ``histogram`` config: its grid, ``m``, the suppression floor and
    each object's ``ε_0`` (the guarantee's per-object figure: ``ε`` for the claim unit)."""
    low, high = config.privacy.value_range
    grid = ValueGrid(low, high, config.synthesis.precision)
    return DensityParameters(grid=LogDensityGrid(grid) if config.synthesis.value_transform == "log" else grid,
                             claims_per_object=config.synthesis.claims_per_object,
                             epsilon=float(guarantee["per_object"]["epsilon"]),
                             minimum_claims=config.suppression_floor)


def is_histogram(config: CrowdConfig) -> bool:
    return config.synthesis.mechanism == "histogram"


def uses_global_weights(config: CrowdConfig) -> bool:
    return config.weights_method in ("combined", "global")


def mechanism_for(config: CrowdConfig) -> CrowdMechanism:
    """The public description of the release the guarantee is computed for, from the config alone
    (the smallest released object is the suppression floor, ``max(k, min_claims_per_object)``:
    claims are not read yet)."""
    privacy, weights = config.privacy, config.weights
    ratio_cap, influence = weight_bounds(config.weights_method, privacy.weight_ratio_cap, weights.local_weights.ratio_cap)
    iterations = weights.global_weights.iterations if uses_global_weights(config) else 0
    return CrowdMechanism(
        k=privacy.k,
        gamma=privacy.gamma,
        epsilon0=privacy.epsilon0,
        weight_ratio_cap=ratio_cap,
        local_influence=influence,
        fallback_probability=privacy.fallback_probability,
        claims_per_object=config.synthesis.claims_per_object,
        max_attempts_per_claim=config.max_attempts_per_claim,
        smallest_object=max(privacy.k, privacy.min_claims_per_object or 0),
        global_iterations=iterations,
        global_epsilon_per_iteration=weights.global_weights.epsilon / weights.global_weights.iterations if iterations else 0.0,
        objects_per_source=privacy.max_objects_per_source if privacy.unit == "source" else None,
    )


def guarantee_for(config: CrowdConfig) -> dict[str, Any]:
    """The whole-release guarantee of a config: ``transforms/crowd/private_density.py`` for
    ``histogram``, ``transforms/crowd/guarantee.py`` for ``priscrowd``."""
    privacy = config.privacy
    if is_histogram(config):
        try:
            return histogram_guarantee(HistogramMechanism(
                epsilon=float(privacy.epsilon), claims_per_object=config.synthesis.claims_per_object,
                minimum_claims=config.suppression_floor,
                objects_per_source=privacy.max_objects_per_source if privacy.unit == "source" else None),
                privacy.delta)
        except ValueError as error:
            raise PrivlakeError(f"privacy: {error}") from None
    if config.synthesis.bandwidth.method not in PUBLIC_BANDWIDTH_METHODS:
        raise ReleaseRefused(
            "synthesis.bandwidth.method 'silverman' fits each object's claims, which the guarantee does not "
            "cover: use 'fixed' or 'range' for a release (silverman is for evaluation in transforms only)"
        )
    try:
        return crowd_guarantee(mechanism_for(config), config.privacy.delta)
    except ValueError as error:
        raise PrivlakeError(f"privacy: {error}") from None


def reference_settings(config: CrowdConfig, largest_object: int) -> tuple[SynthesisParameters, float, WeightSettings]:
    """The in-memory reference's settings for a config (``transforms/crowd/release.py``): the same
    parameters, bandwidth and private source qualities as the engines' release (tests and benchmarks)."""
    weights, privacy = config.weights, config.privacy
    private = None
    if uses_global_weights(config):
        settings = weights.global_weights
        private = PrivateSourceQuality(
            iterations=settings.iterations, epsilon_per_iteration=settings.epsilon / settings.iterations,
            largest_object=largest_object, secret=b"", release_id="",
            objects_per_unit=privacy.max_objects_per_source if privacy.unit == "source" else 1,
        )
    return synthesis_parameters(config), release_bandwidth(config), WeightSettings(
        method=config.weights_method, ratio_cap=privacy.weight_ratio_cap, local_ratio_cap=weights.local_weights.ratio_cap,
        tolerance=weights.local_weights.tolerance, max_iterations=weights.local_weights.max_iterations,
        private_global=private,
    )


def release_bandwidth(config: CrowdConfig) -> float:
    settings, privacy = config.synthesis.bandwidth, config.privacy
    low, high = privacy.value_range
    return public_bandwidth(settings.method, low, high, config.synthesis.precision, settings.value, settings.fraction)


def source_codes(source_ids: pd.Series) -> np.ndarray:
    """Dense int64 codes of the source ids, in the sorted order of the ids.

    Sources are never released, so the engines work on these codes: integers shuffle, sort and
    cross the JVM/Python boundary far faster than text ids. The codes depend only on the set of
    source ids in the input, so every engine gets the same ones.
    """
    codes, _ = pd.factorize(source_ids, sort=True)
    return codes.astype(np.int64)


TRUTH_CHUNK_ROWS = 1_000_000
"""Rows of the truth file read at a time: the driver keeps only the evaluated objects' truths."""


def _truth_columns(config: CrowdConfig) -> tuple[Path, str, str] | None:
    """The truth file and its two columns, checked to exist (before the release reads any claim)."""
    evaluation = config.evaluation
    if evaluation.truth_path is None:
        return None
    path = evaluation.truth_path
    if not path.is_file():
        raise InputError(str(path), "truth file not found")
    try:
        header = pd.read_csv(path, nrows=0).columns
    except (ValueError, OSError) as error:
        raise csv_problem(path, error) from None
    id_column = evaluation.truth_columns.get("object_id", "object_id")
    truth_column = evaluation.truth_columns.get("truth", "truth")
    for column in (id_column, truth_column):
        if column not in header:
            raise InputError(str(path), "truth column is missing", column=column)
    return path, id_column, truth_column


def _read_truth(config: CrowdConfig, id_type: pa.DataType, wanted: set[Any]) -> pd.Series | None:
    """The truths of the objects in ``wanted`` (the evaluation's sample and the report's objects:
    about ``EVALUATION_OBJECTS`` at most), the file read in chunks of ``TRUTH_CHUNK_ROWS``."""
    located = _truth_columns(config)
    if located is None:
        return None
    path, id_column, truth_column = located
    kept: list[pd.Series] = []
    try:
        for chunk in pd.read_csv(path, usecols=[id_column, truth_column], chunksize=TRUTH_CHUNK_ROWS):
            ids = chunk[id_column]
            ids = ids.astype(np.int64) if pa.types.is_integer(id_type) else ids.astype(str)
            chosen = ids.isin(wanted).to_numpy()
            kept.append(pd.Series(pd.to_numeric(chunk[truth_column], errors="coerce").to_numpy()[chosen],
                                  index=ids.to_numpy()[chosen]))
    except (ValueError, OSError) as error:
        raise csv_problem(path, error) from None
    return pd.concat(kept).dropna() if kept else pd.Series(dtype=np.float64)


@dataclass(frozen=True)
class CrowdPlan:
    """What a crowd release decides from its configuration alone: the guarantee, the mechanism's
    public parameters (``parameters`` for priscrowd, ``density`` for histogram) and the public
    bandwidth (the report's densities; priscrowd's kernel)."""

    guarantee: dict[str, Any]
    parameters: SynthesisParameters | None
    bandwidth: float
    density: DensityParameters | None = None


def plan_release(context: ReleaseContext) -> CrowdPlan:
    """The whole-release guarantee from the config, reserved in the ledger before the claims are read."""
    config = context.config
    refuse_private_selection(config.input, private_columns(config.input), "crowd")
    guarantee = guarantee_for(config)
    context.reserve(guarantee)
    if is_histogram(config):
        return CrowdPlan(guarantee, None, release_bandwidth(config), density_parameters(config, guarantee))
    return CrowdPlan(guarantee, synthesis_parameters(config), release_bandwidth(config))


@dataclass(frozen=True)
class PreparedInput:
    """What the driver knows of the claims before the engine reads them: their fragments (file
    names, sizes, scan tasks — metadata, never a row), how error lines name the input, and the
    release's staging folder."""

    fragments: list[Fragment]
    name: str
    staging: Path


@dataclass(frozen=True)
class CheckedClaims:
    """The claims as the engine found them: canonical group files by object (source codes, clipped,
    duplicates resolved), the input gate's result on the engine's metrics, and operator figures."""

    object_files: list[Any]
    input_schema: pa.Schema
    validation: Any
    rows: int
    objects: int
    clipped: int
    largest_object: int
    sources: int
    fingerprint: str
    name: str
    """The input as its error lines name it."""
    first_losses: list[Any] | None = None
    """The first global-weights iteration's per-source sums, a file per group file, when pass 2
    computed them (``engine_input.GroupSide.first_losses``)."""


def prepare_input(context: ReleaseContext, plan: CrowdPlan) -> PreparedInput:
    """While the engine starts: list the input (metadata only). The claims are read by the engine."""
    config = context.config
    with context.timer.stage("list input"):
        spec = listing_spec(config.input)
        properties = config.lake.properties if isinstance(config.lake, LakeLocation) else None
        fragments = list_fragments(spec, properties=properties)
        refuse_private_partitions(fragments, private_columns(config.input), "crowd")
    return PreparedInput(fragments, spec.path if spec.path is not None else f"table {spec.table}", context.staging)


def listing_spec(settings: CrowdInput) -> CrowdInput:
    """The input as listed: a single file without a format and without a known suffix is CSV (a
    crowd input's format always defaulted to CSV)."""
    if settings.format is None and settings.path is not None and not any(
        character in settings.path for character in "*?["
    ) and os.path.isfile(settings.path) and os.path.splitext(settings.path)[1].lower() not in SUFFIX_FORMATS:
        return settings.model_copy(update={"format": "csv"})
    return settings


def input_fingerprint_key(lake: Any) -> bytes:
    """A 32-byte key for the crowd input's fingerprints, derived from the lake's fingerprint key
    (kept outside the lake): 32 bytes, so the engines treat it as key material."""
    return hmac.new(LakePolicy(lake).fingerprint_key(), b"privlake-crowd-input-fingerprint", hashlib.sha256).digest()


def _claims_fingerprint(input_print: str, settings: CrowdInput, key: bytes | None) -> str:
    digest = hmac.new(key, digestmod=hashlib.sha256) if key is not None else hashlib.sha256()
    digest.update(input_print.encode() + b"\0")
    digest.update(repr(sorted(settings.columns.model_dump().items())).encode())
    return ("hmac-sha256:" if key is not None else "sha256:") + digest.hexdigest()


def read_claims_on_engine(config: CrowdConfig, prepared: PreparedInput, engine: Engine,
                          fingerprint_key: bytes | None = None, fragment_key: bytes | None = None,
                          check_prints: Callable[[list[tuple[int, str]], list[str]], None] | None = None,
                          row_printing: RowPrinting | None = None) -> CheckedClaims:
    """Read, check, canonicalize and stage the claims on the engine (``pipelines/crowd/engine_input.py``):
    pass 1 per fragment, the input gate on its metrics, the distinct sources, pass 2 per object
    bucket, then the checks on whole objects. Raises the one-line error of the first failing row.

    Pass 1 fingerprints each fragment where it reads it, under ``fragment_key`` (the lake's key as
    ``ReleaseContext.fragment_key`` gives it; ``fingerprint_key`` when there is none), and
    ``check_prints`` (the policy's check, ``ReleaseContext.check_input_fingerprints``) gets those
    digests, and each fragment's sketch of its canonical claims (``row_printing``)
    (``platform/row_prints.py``), before the input gate; the input's fingerprint is the digests
    keyed by ``fingerprint_key``."""
    settings, fragments, name = config.input, prepared.fragments, prepared.name
    columns = settings.columns
    reading = ClaimsReading(
        object_column=columns.object_id, source_column=columns.source_id, value_column=columns.value,
        folder=prepared.staging / "input" / "claim-buckets",
        buckets=fine_bucket_count([fragment.size for fragment in fragments], engine.parallelism),
        fingerprint_key=fragment_key or fingerprint_key,
        row_printing=row_printing,
        value_grid=(*config.privacy.value_range, config.synthesis.precision),
    )
    # a few rows per fragment, collected: its fingerprint, its row sketch and its metrics
    entries = engine.collect(engine.map_fragments(
        fragments, read_claims_fragment, crowd_input_summary_schema(), reading,
        fragments_per_task=fragments_per_task(len(fragments), engine.parallelism, engine.tasks_in_driver)))
    prints = entries[entries["entry"] == FINGERPRINT]
    if check_prints is not None:
        sketches = entries[entries["entry"] == ROW_SKETCH]["fingerprint"].tolist()
        check_prints(list(zip(prints["code"].astype(int).tolist(), prints["fingerprint"].tolist(), strict=True)),
                     sketches)
    metric_rows = entries[entries["entry"] == METRIC]
    by_code = {int(code): int(count) for code, count in metric_rows.groupby("code")["count"].sum().items()}
    metrics = {METRIC_NAMES[code]: by_code.get(code, 0) for code in (ROWS, *PROBLEMS)}
    failing = [code for code in INPUT_PASS_PROBLEMS if by_code.get(code, 0)]
    if not by_code.get(ROWS, 0) or failing:
        validation = validate_crowd_input_metrics(metrics, file_name=name, duplicates_policy=settings.duplicates)
        raise _input_failure(metric_rows, validation, failing, by_code, fragments, settings, name)
    object_integers = by_code.get(TEXT_OBJECT_IDS, 0) == 0
    source_integers = by_code.get(TEXT_SOURCE_IDS, 0) == 0
    # the distinct sources from pass 1's source files, as many tasks as the engine runs at once
    source_files = [NumberedFile(reading.sources_for(fragment.ordinal), fragment.ordinal) for fragment in fragments]
    distinct = engine.sum_by_key(
        engine.map_fragments(source_files, fragment_sources,
                             crowd_sources_schema(pa.int64() if source_integers else pa.string()), side=source_integers,
                             fragments_per_task=one_task_per_partition(len(source_files), engine)),
        "source_id", ["count"])
    sources = np.sort(distinct["source_id"].to_numpy(np.int64 if source_integers else object))
    fingerprint = _claims_fingerprint(
        input_fingerprint(fragments, zip(prints["code"].astype(int), prints["fingerprint"], strict=True)),
        settings, fingerprint_key)
    k = config.suppression_floor
    side = GroupSide(
        files=tuple(reading.file_for(fragment.ordinal) for fragment in fragments),
        object_integers=object_integers, source_integers=source_integers, sources=sources,
        duplicates=settings.duplicates, value_range=tuple(config.privacy.value_range), k=k,
        folder=prepared.staging / "input" / "objects",
        # the first global-weights iteration (uniform qualities) on the claims as pass 2 stages
        # them, unless a contribution bound stages other claims first
        first_losses=(GlobalPassSide(SourceQuality.uniform(), release_bandwidth(config))
                      if uses_global_weights(config) and config.privacy.max_objects_per_source is None else None),
    )
    tasks = bucket_tasks(reading.buckets, by_code.get(ROWS, 0), engine.parallelism, task_claims(engine.tasks_in_driver))
    figures = engine.collect(engine.map_fragments(tasks, stage_object_bucket, crowd_group_summary_schema(), side))
    metric_rows = figures[figures["entry"] == METRIC]
    totals = metric_rows.groupby("code")["count"].sum()
    metrics[METRIC_NAMES[DUPLICATE]] = int(totals.get(DUPLICATE, 0))
    validation = validate_crowd_input_metrics(metrics, file_name=name, duplicates_policy=settings.duplicates)
    if not validation.success:
        raise _located(metric_rows, DUPLICATE, fragments, settings, int(totals.get(DUPLICATE, 0)))
    clipped = int(totals.get(OUT_OF_RANGE, 0))
    low, high = config.privacy.value_range
    if clipped and config.privacy.out_of_range == "reject":
        raise _located(metric_rows, OUT_OF_RANGE, fragments, settings, clipped,
                       f"a value lies outside privacy.value_range [{low}, {high}] ({clipped} claims do; "
                       "privacy.out_of_range is 'reject')")
    if settings.small_objects == "reject" and int(totals.get(SMALL_OBJECT, 0)):
        raise _located(metric_rows, SMALL_OBJECT, fragments, settings, 0,
                       "an object has {detail} claims, fewer than the minimum " + str(k) +
                       " (input.small_objects is 'reject')")
    largest = int(metric_rows.loc[metric_rows["code"] == LARGEST_OBJECT, "count"].max())
    if not is_histogram(config):  # priscrowd's seed weights bound the object size; histogram has none
        ratio_cap = weight_bounds(config.weights_method, config.privacy.weight_ratio_cap,
                                  config.weights.local_weights.ratio_cap)[0]
        if largest > (most := largest_object_for(ratio_cap)):
            raise InputError(name, f"an object has {largest} claims; with a seed-weight ratio cap of {ratio_cap:g} "
                             f"at most {most} are supported (lower privacy.weight_ratio_cap)")
    if int(totals.get(RELEASABLE_OBJECTS, 0)) == 0:
        raise InputError(name, f"no object has at least {k} claims (k or min_claims_per_object): nothing could be released")
    staged = figures[(figures["entry"] == STAGED) & (figures["count"] > 0)].sort_values("key")
    return CheckedClaims(
        object_files=[side.file_for(int(index)) for index in staged["key"]],
        first_losses=([side.first_losses_for(int(index)) for index in staged["key"]]
                      if side.first_losses is not None else None),
        input_schema=claims_schema(pa.int64() if object_integers else pa.string(), pa.int64()),
        validation=validation, rows=int(totals.get(CLAIMS, 0)), objects=int(totals.get(OBJECTS, 0)), clipped=clipped,
        largest_object=largest, sources=len(sources), fingerprint=fingerprint, name=name,
    )


def one_task_per_partition(files: int, engine: Engine) -> int:
    """Files per task of a job whose tasks only hand on per-key sums (pass 1's distinct sources,
    the global weights' iterations): as many tasks as the engine runs at once, not one per file,
    so that the rows handed on grow with the engine's slots x the keys, not with the files."""
    return -(-files // max(1, engine.parallelism))


def _problem_line(code: int, settings: CrowdInput, count: int) -> tuple[str, str]:
    canonical, message = PROBLEMS[code]
    if count > 1:
        message += f"; {count} rows in all"
    return message, getattr(settings.columns, canonical)


def _input_failure(metric_rows: pd.DataFrame, validation: Any, failing: list[int], by_code: dict[int, int],
                   fragments: list[Fragment], settings: CrowdInput, name: str) -> PrivlakeError:
    """The failing pass-1 gate's one line: the first failing check (in the suite's order) at its
    first failing row (the smallest of the first rows the fragments' tasks flagged, collected)."""
    if not failing:
        return InputError(name, "no rows (empty input)")
    code = failing[0]
    flagged = metric_rows.loc[(metric_rows["code"] == code) & (metric_rows[ROW_ID] != NO_ROW), ROW_ID]
    message, column = _problem_line(code, settings, by_code.get(code, 0))
    if flagged.empty:
        return InputError(name, message, column=column)
    return row_error(fragments, int(flagged.min()), message, column=column)


def _located(rows: pd.DataFrame, code: int, fragments: list[Fragment], settings: CrowdInput,
             count: int, message: str | None = None) -> PrivlakeError:
    """A pass-2 problem at its first row over every bucket (the buckets' rows are few: collected)."""
    chosen = rows[(rows["code"] == code) & rows[ROW_ID].notna()].sort_values(ROW_ID)
    first = chosen.iloc[0]
    row_id = int(first[ROW_ID])
    if code == DUPLICATE:
        text = PROBLEMS[DUPLICATE][1]
        earlier_file, earlier_row = row_location(fragments, int(first["detail"]))
        file, _ = row_location(fragments, row_id)
        where = f"row {earlier_row}" if earlier_file == file else f"{earlier_file}, row {earlier_row}"
        text += f"; the same {settings.columns.object_id} and {settings.columns.source_id} as {where}"
        if count > 1:
            text += f"; {count} duplicate claims in all"
        return row_error(fragments, row_id, text)
    assert message is not None
    column = settings.columns.value if code == OUT_OF_RANGE else settings.columns.object_id
    detail = int(first["detail"]) if pd.notna(first["detail"]) else 0
    return row_error(fragments, row_id, message.format(detail=detail), column=column)


@dataclass(frozen=True)
class StagedClaims:
    """The claims staged as group files (whole objects each: pass 2's in canonical order, the
    contribution bound's by object only) that every later job reads; ``bounded_rows`` counts the
    claims left by the contribution bound, if any."""

    files: list[Any]
    bounded_rows: int | None


def stage_claims(context: ReleaseContext, checked: CheckedClaims, engine: Engine) -> StagedClaims:
    """Step 4 of the module docstring: the group files the input pass staged, read by every later
    job; with the source-level unit, the contribution bound (by source) and the bounded claims
    staged again by object."""
    privacy, timer, staging = context.config.privacy, context.timer, context.staging
    input_schema = checked.input_schema
    files = list(checked.object_files)
    if privacy.max_objects_per_source is None:
        return StagedClaims(files, None)
    with timer.stage("bound contributions"):
        claims = engine.map_groups(
            engine.read_groups_streaming(files, "object_id", input_schema), "source_id", bound_block, input_schema,
            side=BoundSide(privacy.max_objects_per_source, context.secret, context.release_id),
        )
        claims = engine.persist(claims)
        bounded_rows = engine.count(claims)
        files = engine.write_groups(claims, "object_id", staging / "bounded", input_schema)
        engine.unpersist(claims)
    return StagedClaims(files, bounded_rows)


def global_source_quality(
    context: ReleaseContext, staged: StagedClaims, checked: CheckedClaims, engine: Engine
) -> tuple[SourceQuality, int]:
    """Step 5: the private source qualities ``g_s`` (uniform for the methods that do not use them)
    and the iterations run."""
    config = context.config
    if not uses_global_weights(config):
        return SourceQuality.uniform(), 0
    settings = config.weights.global_weights
    private = PrivateSourceQuality(
        iterations=settings.iterations,
        epsilon_per_iteration=settings.epsilon / settings.iterations,
        largest_object=checked.largest_object,
        secret=context.secret,
        release_id=context.release_id,
        objects_per_unit=config.privacy.max_objects_per_source if config.privacy.unit == "source" else 1,
    )
    loss_schema = source_loss_schema(checked.input_schema.field("source_id").type)

    computed = list(checked.first_losses or []) if staged.bounded_rows is None else []

    def source_loss_sums(current: SourceQuality) -> pd.DataFrame:
        # a task per engine slot, its per-source rows summed in it: the first iteration reads the
        # map half pass 2 wrote beside the group files, the later ones run it over the group files
        files, map_half, side = ((list(computed), read_first_losses, None) if computed else
                                 (staged.files, global_pass_file, GlobalPassSide(current, release_bandwidth(config))))
        computed.clear()
        tasks = [NumberedFile(where, index) for index, where in enumerate(files)]
        contributions = engine.map_fragments(tasks, map_half, loss_schema, side=side,
                                             fragments_per_task=one_task_per_partition(len(tasks), engine))
        sums = engine.sum_by_key(contributions, "source_id", ["loss_fixed", "objects"])
        # the first iteration's sums count each source's objects: the input check the fixed-point
        # sums need, before any noise is drawn on them
        if len(sums) and (busiest := int(sums["objects"].max())) > MAX_OBJECTS_PER_SOURCE:
            raise InputError(checked.name, f"a source answered {busiest} objects; the source qualities support "
                             f"at most {MAX_OBJECTS_PER_SOURCE} (use weights.method local or uniform)")
        return sums

    with context.timer.stage("global weights"):
        quality, iterations, _ = iterate_source_quality(
            source_loss_sums, 0.0, settings.iterations,
            on_iteration=lambda iteration: context.timer.report("global weights, iterations", iteration - 1,
                                                                settings.iterations),
            private=private,
        )
    return quality, iterations


def synthesis_side(context: ReleaseContext, plan: CrowdPlan, quality: SourceQuality) -> SynthesisSide:
    """What every synthesis worker needs: the source qualities, the weighting, the public
    synthesis parameters and the keyed streams' secret."""
    config = context.config
    weights = config.weights
    return SynthesisSide(
        source_quality=quality,
        weights_method=config.weights_method,
        local_tolerance=weights.local_weights.tolerance,
        local_max_iterations=weights.local_weights.max_iterations,
        weight_ratio_cap=config.privacy.weight_ratio_cap or 1.0,
        local_ratio_cap=weights.local_weights.ratio_cap,
        parameters=plan.parameters,
        secret=context.secret,
        release_id=context.release_id,
        bandwidth=plan.bandwidth,
        density=plan.density,
    )


@dataclass(frozen=True)
class CheckedOutput:
    """What the output pass reduced on the engine: the gate's metrics, suppression reasons, the
    report's sample objects and the evaluation's released medians (bounded)."""

    metrics: dict[str, int]
    totals: dict[int, int]
    reasons: dict[str, int]
    sample_ids: list[Any]
    released_medians: pd.Series


def checked_output(rows: pd.DataFrame) -> CheckedOutput:
    """The synthesis tasks' output rows (``engine_input.output_block``: a few per task) reduced:
    metric totals, suppression reasons, the report's sample objects, the evaluation's medians."""
    metric_rows = rows[rows["entry"] == METRIC]
    totals = {int(code): int(count) for code, count in metric_rows.groupby("code")["count"].sum().items()}
    reason_rows = rows[rows["entry"] == REASON]
    reasons = {str(reason): int(count) for reason, count in reason_rows.groupby("reason")["count"].sum().items()}
    metrics = {name: totals.get(code, 0) for code, name in OUTPUT_METRIC_NAMES.items()}
    sample_ids = sorted(pd.unique(rows.loc[rows["entry"] == SAMPLE, "object_id"]).tolist())[:SAMPLE_OBJECTS]
    medians = rows[rows["entry"] == EVALUATION]
    released_medians = pd.Series(medians["value"].to_numpy(np.float64), index=medians["object_id"].to_numpy()).sort_index()
    return CheckedOutput(metrics, totals, reasons, sample_ids, released_medians)


def evaluate_release(released_medians: pd.Series, raw_medians: pd.Series, truth: pd.Series | None,
                     objects: int = 0, sampled_objects: int | None = None) -> dict[str, Any]:
    """Utility figures for the operator record (computed on the raw data: internal, not DP), from
    per-object medians reduced on the engine over the evaluation's keyed sample of at most about
    ``EVALUATION_OBJECTS`` objects (all of them when there are fewer)."""
    report: dict[str, Any] = {"note": "computed from the raw input; internal utility report, not privacy-protected"}
    if truth is None:
        return report
    common = released_medians.index.intersection(truth.index)
    report["truth_objects"] = int(len(common))
    if sampled_objects is not None and sampled_objects < objects:
        report["sample"] = {"objects": int(objects), "cap": EVALUATION_OBJECTS,
                            "note": "a keyed sample of the objects (hash of the object id under the release id)"}
    if len(common):
        report["truth_mae_released_median"] = float(truth_mean_absolute_error(released_medians.loc[common], truth))
        report["truth_mae_raw_median_same_objects"] = float(truth_mean_absolute_error(raw_medians.loc[common], truth))
    return report


RELEASE_FILE_ROWS = 500_000
"""Released claims per file of the release: on average more than half this and at most twice it
(``release_shards.shard_count``; docs/PRIVACY.md, "The layout of a release")."""


def run_on_engine(context: ReleaseContext, plan: CrowdPlan, prepared: PreparedInput, engine: Engine) -> ReleaseResult:
    """Steps 2–7: read and stage the input, weights, synthesis, output validation, staged output,
    manifest."""
    config, timer = context.config, context.timer
    synthesis = config.synthesis
    with timer.stage("read and check input"):
        fragment_key = context.fragment_key()
        checked = read_claims_on_engine(
            config, prepared, engine, input_fingerprint_key(context.lake), fragment_key,
            lambda prints, sketches: context.check_input_fingerprints(
                engine, prepared.fragments, prints if fragment_key is not None else None, sketches),
            context.row_printing(prepared.fragments))
    object_type = checked.input_schema.field("object_id").type
    evaluated = _truth_columns(config) is not None
    staged = stage_claims(context, checked, engine)
    quality, iterations = global_source_quality(context, staged, checked, engine)
    output_schema = synthetic_claims_schema(object_type)
    fraction = min(1.0, EVALUATION_OBJECTS / max(1, checked.objects)) if evaluated else 0.0
    side = OutputSide(synthesis.claims_per_object, config.suppression_floor, fraction, sample_key(context.release_id))
    # the outcome files' buckets: enough for the largest release these objects could give (every
    # object released), so that each release file is a range of buckets (release_shards)
    synthesis_tasks = SynthesisFileSide(synthesis_side(context, plan, quality), side, object_type,
                                        prepared.staging / "outcome",
                                        outcome_buckets(checked.objects * synthesis.claims_per_object, RELEASE_FILE_ROWS))
    tasks = [NumberedFile(file, index) for index, file in enumerate(staged.files)]
    with timer.stage("synthesize"):
        # one job: each task synthesizes a group file, writes its released claims and returns the
        # output gate's rows for them (engine_input.synthesize_group_file)
        rows = engine.collect(engine.map_fragments(tasks, synthesize_group_file,
                                                   crowd_output_summary_schema(object_type), synthesis_tasks))
    outcome_files = [synthesis_tasks.file_for(task.ordinal) for task in tasks]
    with timer.stage("validate output"):
        output = checked_output(rows)
        output_validation = validate_crowd_output_metrics(output.metrics, claims_per_object=synthesis.claims_per_object,
                                                          k=config.suppression_floor)
    with timer.stage("write staging"):
        # The release's files: by a hash of the released object ids into a number of files set by
        # the released row count, both public (the outcome files follow the input's bytes), a task
        # each (release_shards).
        data = prepared.staging / "data"
        names = engine.collect(engine.map_fragments(
            release_shard_tasks(output.totals.get(OUT_ROWS, 0), RELEASE_FILE_ROWS), write_release_shard,
            RELEASE_SHARD_SCHEMA, ShardSide(tuple(outcome_files), synthesis_tasks.buckets, "object_id",
                                            ("claim_index",), data, output_schema)))
        files = written_files(data, names["path"])
    evaluation: dict[str, Any] = {}
    truth = _read_truth(config, object_type, {*output.released_medians.index, *output.sample_ids})
    if truth is not None:
        input_claims = engine.read_groups_streaming(checked.object_files, "object_id", checked.input_schema)
        raw = engine.collect(engine.map_groups(input_claims, "object_id", raw_median_block, crowd_medians_schema(object_type),
                                               side=side))
        raw_medians = pd.Series(raw["value"].to_numpy(np.float64), index=raw["object_id"].to_numpy()).sort_index()
        evaluation = evaluate_release(output.released_medians, raw_medians, truth, checked.objects,
                                      len(raw_medians))

    totals = output.totals
    attempts = totals.get(OUT_ATTEMPTS, 0)
    guarantee = plan.guarantee
    manifest: dict[str, Any] = {
        **context.manifest_identity(),
        "status": "published" if output_validation.success else "quarantined",
        "epsilon": guarantee["epsilon"],
        "delta": guarantee["delta"],
        "privacy_unit": guarantee["privacy_unit"],
        "guarantee": guarantee,
        "mechanism": synthesis.mechanism,
        "rows": totals.get(OUT_ROWS, 0),
        "objects_released": totals.get(OUT_RELEASED, 0),
        "objects_suppressed": totals.get(OUT_SUPPRESSED, 0),
        "claims_per_object": synthesis.claims_per_object,
        "bandwidth": plan.bandwidth,
        "engine": engine.name,
        "validation": {"output": output_validation.to_json()},
        **context.manifest_provenance(),
    }
    internal = {
        "note": "computed from the raw claims: operator figures outside the release's guarantee",
        "input_rows": checked.rows,
        "input_rows_after_contribution_bound": staged.bounded_rows,
        "clipped_to_value_range": checked.clipped,
        "largest_object": checked.largest_object,
        "suppressed_reasons": output.reasons,
        **({} if is_histogram(config) else {
            "candidate_attempts": attempts,
            "pass_rate": (float(totals.get(OUT_RELEASED_CLAIMS, 0)) / attempts) if attempts else None,
            "fallback_claims": totals.get(OUT_FALLBACKS, 0),
            "capped_claims": totals.get(OUT_CAPPED, 0)}),
        "global_weights": {"iterations": iterations, "sources": int(len(quality.source_ids))},
        "validation": {"input": checked.validation.to_json()},
        "input_fingerprint": checked.fingerprint,
        "evaluation": evaluation,
        # `privlake report`: a few released objects' learned densities (a curve each, never claims)
        "report": _density_samples(context, plan, quality, checked, files, output, truth),
    }
    return ReleaseResult(files, output_schema, manifest, output_validation.success, output_validation.first_line(),
                         internal)


def _density_samples(context: ReleaseContext, plan: CrowdPlan, quality: SourceQuality, checked: CheckedClaims,
                     release_files: list[Path], output: CheckedOutput, truth: pd.Series | None) -> dict[str, Any]:
    """The report's learned densities of the first ``SAMPLE_OBJECTS`` released objects: only those
    objects' claims and released claims come to the driver (each object at most the largest object's
    claims), read from the row groups that can hold them of the staged group files and of the release's
    files (both sorted by object), not by a job over every file."""
    ids = output.sample_ids
    claims = read_key_rows(checked.object_files, "object_id", ids, checked.input_schema)
    output_schema = synthetic_claims_schema(checked.input_schema.field("object_id").type)
    released = table_to_frame(read_key_rows(release_files, "object_id", ids, output_schema))
    return learned_density_samples(
        claims, released[["object_id", "claim_index", "value"]],
        lambda block: object_weights(block, np.full(block.number_of_objects, plan.bandwidth),
                                     synthesis_side(context, plan, quality)),
        plan.bandwidth, tuple(context.config.privacy.value_range), truth)


def summary_line(manifest: dict[str, Any]) -> str:
    return (
        f"published {manifest['rows']} synthetic claims for {manifest['objects_released']} objects "
        f"({manifest['objects_suppressed']} suppressed) on {manifest['engine']}; "
        f"epsilon={manifest['epsilon']:.4g}, delta={manifest['delta']:.3g} per {manifest['privacy_unit']}"
    )


KIND = ReleaseKind(
    name="crowd",
    config_model=CrowdConfig,
    worker_modules=CROWD_WORKER_MODULES,
    plan=plan_release,
    prepare=prepare_input,
    run_on_engine=run_on_engine,
    summary=summary_line,
    show_keys=("mechanism", "objects_released", "objects_suppressed"),
)


run_crowd_release = KIND.run
