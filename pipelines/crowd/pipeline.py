"""The crowd release (PrisCrowd), written once over the engine interface.

Stages (each a job on the chosen engine; ``transforms/`` does the mathematics):

1. Refuse early: a published release id is a no-op; the ledger reserves the budget before the
   claims are read and refuses a release that would exceed it.
2. Read and validate the input on the driver (Great Expectations gate) while the engine
   starts; resolve duplicates. The input itself is never modified.
3. Stage the claims for the engine: hash-partitioned by object into one Parquet file per
   unit of parallelism, each holding whole objects (the driver has the rows, so no engine
   shuffle is needed). With the source-level unit, the contribution bound (at most L objects
   per source) is a map by source first, and the engine then shuffles by object.
4. Prepare each object once (canonical order, kernel bandwidth) and stage the result as
   group files (``write_groups``): every later job maps over them by object without a
   shuffle or an engine cache, its workers reading the files themselves (``read_groups``).
5. Global source weights: repeat a map over objects (per-source loss sums, exact fixed point)
   and a reduce by source, until the source qualities stop changing.
6. Synthesis: per object, local (Hampel IRWLS) weights, combined weights clipped to the public
   ratio cap, then Algorithm 1 with the randomized plausible-deniability test; the outcome
   (claims and one summary row per object) is staged as group files.
7. Write the synthetic claims to staging from where they live, validate, then publish data
   and manifest in one Iceberg commit — or quarantine and refund the budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.crowd.blocks import (
    BoundSide,
    GlobalPassSide,
    SynthesisSide,
    bound_block,
    global_pass_block,
    prepare_block,
    prepared_schema,
    released_rows,
    summary_rows,
    synthesis_block,
)
from pipelines.crowd.input import apply_duplicates_policy, arrow_id_type, input_fingerprint, read_crowd_claims
from pipelines.crowd.validation import validate_crowd_input, validate_crowd_output
from pipelines.engines.arrow import write_group_files
from pipelines.engines.base import Collection, Engine
from pipelines.platform.errors import InputError, PrivlakeError
from pipelines.platform.release import (
    ReleaseContext,
    ReleaseKind,
    ReleaseResult,
)
from schemas.crowd.config import CrowdConfig
from schemas.crowd.tables import (
    claims_schema,
    source_loss_schema,
    synthesis_outcome_schema,
    synthetic_claims_schema,
)
from schemas.tables import ROW_NUMBER
from transforms.crowd.density_metrics import per_object_truth_estimate, truth_mean_absolute_error
from transforms.crowd.global_weights import SourceQuality, iterate_source_quality
from transforms.crowd.guarantee import crowd_guarantee
from transforms.crowd.synthesis import SynthesisParameters

CROWD_WORKER_MODULES = ("pipelines.crowd.blocks",)
STAGED_ROW_GROUP_ROWS = 1 << 18
"""Row groups of the staged input: small enough that an engine splits a large input over
several readers (Spark assigns byte ranges to tasks by row group)."""


def guarantee_for(config: CrowdConfig) -> dict[str, Any]:
    privacy = config.privacy
    synthesis = config.synthesis
    try:
        return crowd_guarantee(
            k=privacy.k,
            gamma=privacy.gamma,
            epsilon0=privacy.epsilon0,
            weight_ratio_cap=privacy.weight_ratio_cap,
            delta_target=privacy.delta,
            t=privacy.t,
            claims_per_object=synthesis.claims_per_object,
            max_attempts_per_object=synthesis.effective_max_attempts,
            max_objects_per_source=privacy.max_objects_per_source,
        )
    except ValueError as error:
        raise PrivlakeError(f"privacy: {error}") from None


def headline_guarantee(guarantee: dict[str, Any], unit: str) -> tuple[float, float, str]:
    """(epsilon, delta, unit text) shown at the top of the manifest and charged to the ledger."""
    if unit == "source":
        per_source = guarantee["composition"]["per_source_per_test"]
        bound = guarantee["composition"]["per_source_per_test"]["invocations"]
        return per_source["epsilon"], per_source["delta"], f"one source (all its claims, at most {bound} objects)"
    return guarantee["epsilon"], guarantee["delta"], guarantee["privacy_unit"]


def source_codes(source_ids: pd.Series) -> np.ndarray:
    """Dense int64 codes of the source ids, in the sorted order of the ids.

    Sources are never released, so the engines work on these codes: integers shuffle, sort and
    cross the JVM/Python boundary far faster than text ids. The codes depend only on the set of
    source ids in the input, so every engine gets the same ones.
    """
    codes, _ = pd.factorize(source_ids, sort=True)
    return codes.astype(np.int64)


def _stage_single_file(claims: pa.Table, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "claims.parquet"
    pq.write_table(claims, path, row_group_size=STAGED_ROW_GROUP_ROWS)
    return path


def _read_truth(config: CrowdConfig, id_type: pa.DataType) -> pd.Series | None:
    evaluation = config.evaluation
    if evaluation.truth_path is None:
        return None
    path = evaluation.truth_path
    if not path.is_file():
        raise InputError(str(path), "truth file not found")
    try:
        frame = pd.read_csv(path)
    except (ValueError, OSError) as error:
        raise InputError(str(path), f"cannot be read as CSV: {error}") from None
    id_column = evaluation.truth_columns.get("object_id", "object_id")
    truth_column = evaluation.truth_columns.get("truth", "truth")
    for column in (id_column, truth_column):
        if column not in frame.columns:
            raise InputError(str(path), "truth column is missing", column=column)
    ids = frame[id_column]
    ids = ids.astype(np.int64) if pa.types.is_integer(id_type) else ids.astype(str)
    return pd.Series(pd.to_numeric(frame[truth_column], errors="coerce").to_numpy(), index=ids.to_numpy()).dropna()


def evaluate_release(released: pd.DataFrame, raw_claims: pd.DataFrame, truth: pd.Series | None) -> dict[str, Any]:
    """Utility figures for the manifest (computed on the raw data: an internal report, not DP)."""
    report: dict[str, Any] = {"note": "computed from the raw input; internal utility report, not privacy-protected"}
    if truth is None:
        return report
    released_estimate = per_object_truth_estimate(released, method="median")
    raw_estimate = per_object_truth_estimate(raw_claims, method="median")
    common = released_estimate.index.intersection(truth.index)
    report["truth_objects"] = int(len(common))
    if len(common):
        report["truth_mae_released_median"] = float(truth_mean_absolute_error(released_estimate, truth))
        report["truth_mae_raw_median_same_objects"] = float(truth_mean_absolute_error(raw_estimate.loc[common], truth))
    return report


@dataclass(frozen=True)
class CrowdPlan:
    """What a crowd release decides from its configuration alone: the guarantee and its headline."""

    guarantee: dict[str, Any]
    epsilon: float
    delta: float
    privacy_unit: str


def plan_release(context: ReleaseContext) -> CrowdPlan:
    """The guarantee from the config, reserved in the ledger before the claims are read."""
    config = context.config
    guarantee = guarantee_for(config)
    epsilon, delta, privacy_unit = headline_guarantee(guarantee, config.privacy.unit)
    context.reserve(epsilon, delta, config.privacy.budget)
    return CrowdPlan(guarantee, epsilon, delta, privacy_unit)


@dataclass(frozen=True)
class PreparedInput:
    """The validated input (canonical columns and types) and the release's staging folder."""

    claims: pa.Table
    staging: Path
    input_schema: pa.Schema
    fingerprint: str
    validation: Any
    rows: int
    truth: pd.Series | None
    raw_for_evaluation: pd.DataFrame | None


def prepare_input(context: ReleaseContext, plan: CrowdPlan) -> PreparedInput:
    """Read, validate and canonicalize the claims on the driver while the engine starts."""
    config, timer = context.config, context.timer
    settings = config.input
    with timer.stage("read input"):
        claims = read_crowd_claims(settings)
        fingerprint = input_fingerprint(settings.path, settings.columns.model_dump())
    with timer.stage("validate input"):
        input_validation = validate_crowd_input(
            claims,
            file_name=str(settings.path),
            duplicates_policy=settings.duplicates,
            column_names=settings.columns.model_dump(),
        )
        if not input_validation.success:
            raise PrivlakeError(input_validation.issues[0].line())
        claims = apply_duplicates_policy(claims, settings.duplicates)
    object_type = arrow_id_type(claims["object_id"])
    truth = _read_truth(config, object_type)
    claims["source_id"] = source_codes(claims["source_id"])
    input_schema = claims_schema(object_type, pa.int64())
    k = config.privacy.k
    claims_per_object = claims.groupby("object_id", sort=False).size()
    if settings.small_objects == "reject" and (claims_per_object < k).any():
        small = claims_per_object[claims_per_object < k].index[0]
        first_row = int(claims.loc[claims["object_id"] == small, ROW_NUMBER].iloc[0])
        raise InputError(
            str(settings.path),
            f"object {small!r} has {int(claims_per_object[small])} claims, fewer than k={k} "
            "(input.small_objects is 'reject')",
            row=first_row,
            column=settings.columns.object_id,
        )
    if int((claims_per_object >= k).sum()) == 0:
        raise InputError(str(settings.path), f"no object has at least k={k} claims: nothing could be released")
    return PreparedInput(
        claims=pa.Table.from_pandas(claims[list(input_schema.names)], schema=input_schema, preserve_index=False),
        staging=context.staging,
        input_schema=input_schema,
        fingerprint=fingerprint,
        validation=input_validation,
        rows=len(claims),
        truth=truth,
        raw_for_evaluation=claims[["object_id", "value"]] if truth is not None else None,
    )


@dataclass(frozen=True)
class StagedClaims:
    """The claims on the engine, clustered by object, each object prepared once (canonical order,
    bandwidth); ``bounded_rows`` counts the claims left by the contribution bound, if any."""

    claims: Collection
    bounded_rows: int | None


def stage_claims(context: ReleaseContext, prepared: PreparedInput, engine: Engine) -> StagedClaims:
    """Steps 3 and 4 of the module docstring: stage the claims by object (after the contribution
    bound, with the source-level unit), prepare each object once and stage that as group files."""
    privacy, timer = context.config.privacy, context.timer
    input_schema, staging = prepared.input_schema, prepared.staging
    bounded_rows = None
    if privacy.max_objects_per_source is not None:
        with timer.stage("stage input"):
            claims = engine.read_parquet([_stage_single_file(prepared.claims, staging / "input")], input_schema)
        with timer.stage("bound contributions"):
            claims = engine.map_groups(
                claims, "source_id", bound_block, input_schema,
                side=BoundSide(privacy.max_objects_per_source, context.secret, context.release_id),
            )
            claims = engine.persist(claims)
            bounded_rows = engine.count(claims)
    else:
        with timer.stage("stage input"):
            object_files = write_group_files(prepared.claims, "object_id", staging / "input", engine.parallelism)
            claims = engine.read_groups(object_files, "object_id", input_schema)
    with timer.stage("prepare objects"):
        floor = context.config.synthesis.effective_bandwidth_floor
        schema = prepared_schema(input_schema)
        prepared_claims = engine.map_groups(claims, "object_id", prepare_block, schema, side=floor, keeps_groups=True)
        prepared_files = engine.write_groups(prepared_claims, "object_id", staging / "prepared", schema)
        if bounded_rows is not None:
            engine.unpersist(claims)
        claims = engine.read_groups(prepared_files, "object_id", schema)
    return StagedClaims(claims, bounded_rows)


def global_source_quality(
    context: ReleaseContext, staged: StagedClaims, source_type: pa.DataType, engine: Engine
) -> tuple[SourceQuality, int, bool]:
    """Step 5: the global source qualities ``g_s`` (uniform for the methods that do not use them),
    the iterations run and whether they converged."""
    weights_config = context.config.weights
    if weights_config.method not in ("combined", "global"):
        return SourceQuality.uniform(), 0, True
    control = weights_config.global_weights
    loss_schema = source_loss_schema(source_type)

    def source_loss_sums(current: SourceQuality) -> pd.DataFrame:
        contributions = engine.map_groups(
            staged.claims, "object_id", global_pass_block, loss_schema, side=GlobalPassSide(current)
        )
        return engine.sum_by_key(contributions, "source_id", ["loss_fixed", "objects"])

    with context.timer.stage("global weights"):
        return iterate_source_quality(
            source_loss_sums,
            control.tolerance,
            control.max_iterations,
            on_iteration=lambda iteration: context.timer.report(f"global weights, iteration {iteration}"),
        )


def synthesis_side(context: ReleaseContext, quality: SourceQuality) -> SynthesisSide:
    """What every synthesis worker needs: the source qualities, the weighting, the public
    synthesis parameters and the keyed streams' secret."""
    config = context.config
    privacy, synthesis, weights_config = config.privacy, config.synthesis, config.weights
    parameters = SynthesisParameters(
        claims_per_object=synthesis.claims_per_object,
        k=privacy.k,
        gamma=privacy.gamma,
        epsilon0=privacy.epsilon0,
        precision=synthesis.precision,
        max_attempts_per_object=synthesis.effective_max_attempts,
        batch_size=synthesis.effective_batch_size,
    )
    return SynthesisSide(
        source_quality=quality,
        weights_method=weights_config.method,
        local_tolerance=weights_config.local_weights.tolerance,
        local_max_iterations=weights_config.local_weights.max_iterations,
        weight_ratio_cap=privacy.weight_ratio_cap,
        parameters=parameters,
        secret=context.secret,
        release_id=context.release_id,
    )


def run_on_engine(context: ReleaseContext, plan: CrowdPlan, prepared: PreparedInput, engine: Engine) -> ReleaseResult:
    """Steps 3–7: stage, weights, synthesis, staged output, output validation, manifest."""
    config, timer = context.config, context.timer
    synthesis = config.synthesis
    object_type = prepared.input_schema.field("object_id").type
    source_type = prepared.input_schema.field("source_id").type
    staged = stage_claims(context, prepared, engine)
    quality, iterations, converged = global_source_quality(context, staged, source_type, engine)
    output_schema = synthetic_claims_schema(object_type)
    outcome_schema = synthesis_outcome_schema(object_type)
    with timer.stage("synthesize"):
        outcome = engine.map_groups(staged.claims, "object_id", synthesis_block, outcome_schema,
                                    side=synthesis_side(context, quality), keeps_groups=True)
        outcome_files = engine.write_groups(outcome, "object_id", prepared.staging / "outcome", outcome_schema)
        outcome = engine.read_groups(outcome_files, "object_id", outcome_schema)
        summary = engine.collect(engine.map_batches(outcome, summary_rows, outcome_schema))
    with timer.stage("write staging"):
        released = engine.map_batches(outcome, released_rows, output_schema)
        files = engine.write_parquet(released, prepared.staging / "data", output_schema)

    with timer.stage("validate output"):
        released_frame = (
            pq.ParquetDataset([str(f) for f in files]).read().to_pandas()
            if files
            else output_schema.empty_table().to_pandas()
        )
        objects_table = pd.DataFrame(
            {
                "object_id": summary["object_id"],
                "claims": summary["claims"].astype(np.int64),
                "released": (summary["released"] > 0).to_numpy(),
                "suppressed": summary["suppressed"].astype(bool).to_numpy(),
            }
        )
        output_validation = validate_crowd_output(
            released_frame, objects_table, claims_per_object=synthesis.claims_per_object, k=config.privacy.k
        )
    evaluation = (
        evaluate_release(released_frame, prepared.raw_for_evaluation, prepared.truth)
        if prepared.truth is not None
        else {}
    )

    suppressed = summary[summary["suppressed"]]
    released_objects = summary[~summary["suppressed"]]
    shortfall = released_objects[released_objects["released"] < synthesis.claims_per_object]
    attempts = int(released_objects["attempts"].sum())
    manifest: dict[str, Any] = {
        **context.manifest_identity(),
        "status": "published" if output_validation.success else "quarantined",
        "epsilon": plan.epsilon,
        "delta": plan.delta,
        "privacy_unit": plan.privacy_unit,
        "guarantee": plan.guarantee,
        "rows": int(len(released_frame)),
        "objects_released": int((released_objects["released"] > 0).sum()),
        "objects_suppressed": int(len(suppressed)),
        "suppressed_reasons": {str(k): int(v) for k, v in suppressed["reason"].value_counts().items()},
        "objects_short": int(len(shortfall)),
        "shortfall_claims": int((synthesis.claims_per_object - shortfall["released"]).sum()),
        "candidate_attempts": attempts,
        "pass_rate": (float(released_objects["released"].sum()) / attempts) if attempts else None,
        "global_weights": {"iterations": iterations, "converged": bool(converged), "sources": int(len(quality.source_ids))},
        "engine": engine.name,
        "input_fingerprint": prepared.fingerprint,
        "input_rows": prepared.rows,
        "input_rows_after_contribution_bound": staged.bounded_rows,
        "validation": {"input": prepared.validation.to_json(), "output": output_validation.to_json()},
        "evaluation": evaluation,
        **context.manifest_provenance(),
    }
    return ReleaseResult(files, output_schema, manifest, output_validation.success, output_validation.first_line())


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
    show_keys=("objects_released", "objects_suppressed"),
)


run_crowd_release = KIND.run
