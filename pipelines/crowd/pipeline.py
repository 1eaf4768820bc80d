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

from pipelines.crowd.blocks import (
    BoundSide,
    GlobalPassSide,
    SynthesisSide,
    bound_block,
    global_pass_block,
    object_weights,
    prepare_block,
    prepared_schema,
    released_rows,
    summary_rows,
    synthesis_block,
)
from pipelines.crowd.input import apply_duplicates_policy, arrow_id_type, read_crowd_claims
from pipelines.crowd.report_page import learned_density_samples
from pipelines.crowd.validation import validate_crowd_input, validate_crowd_output
from pipelines.engines import storage
from pipelines.engines.arrow import write_group_files
from pipelines.engines.base import Collection, Engine
from pipelines.platform.errors import InputError, PrivlakeError, ReleaseRefused
from pipelines.platform.input import csv_problem
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
from transforms.crowd.bandwidth import PUBLIC_BANDWIDTH_METHODS, public_bandwidth
from transforms.crowd.combined_weights import weight_bounds
from transforms.crowd.density_metrics import per_object_truth_estimate, truth_mean_absolute_error
from transforms.crowd.global_weights import (
    MAX_OBJECTS_PER_SOURCE,
    PrivateSourceQuality,
    SourceQuality,
    iterate_source_quality,
)
from transforms.crowd.guarantee import CrowdMechanism, crowd_guarantee
from transforms.crowd.release import WeightSettings
from transforms.crowd.synthesis import SynthesisParameters, largest_object_for
from transforms.crowd.value_grid import ValueGrid

CROWD_WORKER_MODULES = ("pipelines.crowd.blocks",)
STAGED_ROW_GROUP_ROWS = 1 << 18
"""Row groups of the staged input: small enough that an engine splits a large input over
several readers (Spark assigns byte ranges to tasks by row group)."""


def synthesis_parameters(config: CrowdConfig) -> SynthesisParameters:
    """The public synthesis parameters of a config."""
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


def uses_global_weights(config: CrowdConfig) -> bool:
    return config.weights.method in ("combined", "global")


def mechanism_for(config: CrowdConfig) -> CrowdMechanism:
    """The public description of the release the guarantee is computed for, from the config alone
    (the smallest released object is the suppression floor, ``max(k, min_claims_per_object)``:
    claims are not read yet)."""
    privacy, weights = config.privacy, config.weights
    ratio_cap, influence = weight_bounds(weights.method, privacy.weight_ratio_cap, weights.local_weights.ratio_cap)
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
    """The whole-release guarantee of a config (``transforms/crowd/guarantee.py``)."""
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
        method=weights.method, ratio_cap=privacy.weight_ratio_cap, local_ratio_cap=weights.local_weights.ratio_cap,
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


def _stage_single_file(claims: pa.Table, directory: storage.Where) -> storage.Where:
    return storage.write_table(claims, directory / "claims.parquet", row_group_size=STAGED_ROW_GROUP_ROWS)


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
        raise csv_problem(path, error) from None
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
    """What a crowd release decides from its configuration alone: the guarantee, the synthesis
    parameters and the public bandwidth."""

    guarantee: dict[str, Any]
    parameters: SynthesisParameters
    bandwidth: float


def plan_release(context: ReleaseContext) -> CrowdPlan:
    """The whole-release guarantee from the config, reserved in the ledger before the claims are read."""
    config = context.config
    guarantee = guarantee_for(config)
    context.reserve(guarantee)
    return CrowdPlan(guarantee, synthesis_parameters(config), release_bandwidth(config))


@dataclass(frozen=True)
class PreparedInput:
    """The validated input (canonical columns and types) and the release's staging folder."""

    claims: pa.Table
    staging: Path
    input_schema: pa.Schema
    validation: Any
    rows: int
    truth: pd.Series | None
    raw_for_evaluation: pd.DataFrame | None
    clipped: int
    largest_object: int


def prepare_input(context: ReleaseContext, plan: CrowdPlan) -> PreparedInput:
    """Read, validate and canonicalize the claims on the driver while the engine starts."""
    config, timer = context.config, context.timer
    settings = config.input
    with timer.stage("read input"):
        claims = read_crowd_claims(settings)
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
        claims, clipped = clip_to_public_range(claims, config)
    object_type = arrow_id_type(claims["object_id"])
    truth = _read_truth(config, object_type)
    claims["source_id"] = source_codes(claims["source_id"])
    input_schema = claims_schema(object_type, pa.int64())
    k = max(config.privacy.k, config.privacy.min_claims_per_object or 0)
    claims_per_object = claims.groupby("object_id", sort=False).size()
    if settings.small_objects == "reject" and (claims_per_object < k).any():
        small = claims_per_object[claims_per_object < k].index[0]
        first_row = int(claims.loc[claims["object_id"] == small, ROW_NUMBER].iloc[0])
        raise InputError(
            str(settings.path),
            f"an object has {int(claims_per_object[small])} claims, fewer than the minimum {k} "
            "(input.small_objects is 'reject')",
            row=first_row,
            column=settings.columns.object_id,
        )
    ratio_cap = weight_bounds(config.weights.method, config.privacy.weight_ratio_cap,
                              config.weights.local_weights.ratio_cap)[0]
    if int(claims_per_object.max()) > (most := largest_object_for(ratio_cap)):
        raise InputError(str(settings.path), f"an object has {int(claims_per_object.max())} claims; with a seed-weight "
                         f"ratio cap of {ratio_cap:g} at most {most} are supported (lower privacy.weight_ratio_cap)")
    busiest = int(claims.groupby("source_id", sort=False)["object_id"].nunique().max())
    if config.weights.method in ("combined", "global") and busiest > MAX_OBJECTS_PER_SOURCE:
        raise InputError(str(settings.path), f"a source answered {busiest} objects; the source qualities support "
                         f"at most {MAX_OBJECTS_PER_SOURCE} (use weights.method local or uniform)")
    if int((claims_per_object >= k).sum()) == 0:
        raise InputError(str(settings.path), f"no object has at least {k} claims (k or min_claims_per_object): nothing could be released")
    return PreparedInput(
        claims=pa.Table.from_pandas(claims[list(input_schema.names)], schema=input_schema, preserve_index=False),
        staging=context.staging,
        input_schema=input_schema,
        validation=input_validation,
        rows=len(claims),
        truth=truth,
        raw_for_evaluation=claims[["object_id", "value"]] if truth is not None else None,
        clipped=clipped,
        largest_object=int(claims_per_object.max()),
    )


def clip_to_public_range(claims: pd.DataFrame, config: CrowdConfig) -> tuple[pd.DataFrame, int]:
    """Claims clipped into ``privacy.value_range`` (and how many were outside), or, with
    ``out_of_range: reject``, an error naming the first one's row and column (not its value)."""
    low, high = config.privacy.value_range
    outside = (claims["value"] < low) | (claims["value"] > high)
    count = int(outside.sum())
    if count and config.privacy.out_of_range == "reject":
        row = int(claims.loc[outside, ROW_NUMBER].iloc[0]) if ROW_NUMBER in claims.columns else None
        raise InputError(str(config.input.path), f"a value lies outside privacy.value_range [{low}, {high}] "
                         f"({count} claims do; privacy.out_of_range is 'reject')", row=row,
                         column=config.input.columns.value)
    return claims.assign(value=claims["value"].clip(low, high)), count


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
        schema = prepared_schema(input_schema)
        prepared_claims = engine.map_groups(
            claims, "object_id", prepare_block, schema, side=release_bandwidth(context.config), keeps_groups=True
        )
        prepared_files = engine.write_groups(prepared_claims, "object_id", staging / "prepared", schema)
        if bounded_rows is not None:
            engine.unpersist(claims)
        claims = engine.read_groups(prepared_files, "object_id", schema)
    return StagedClaims(claims, bounded_rows)


def global_source_quality(
    context: ReleaseContext, staged: StagedClaims, prepared: PreparedInput, engine: Engine
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
        largest_object=prepared.largest_object,
        secret=context.secret,
        release_id=context.release_id,
        objects_per_unit=config.privacy.max_objects_per_source if config.privacy.unit == "source" else 1,
    )
    loss_schema = source_loss_schema(prepared.input_schema.field("source_id").type)

    def source_loss_sums(current: SourceQuality) -> pd.DataFrame:
        contributions = engine.map_groups(
            staged.claims, "object_id", global_pass_block, loss_schema, side=GlobalPassSide(current)
        )
        return engine.sum_by_key(contributions, "source_id", ["loss_fixed", "objects"])

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
        weights_method=weights.method,
        local_tolerance=weights.local_weights.tolerance,
        local_max_iterations=weights.local_weights.max_iterations,
        weight_ratio_cap=config.privacy.weight_ratio_cap,
        local_ratio_cap=weights.local_weights.ratio_cap,
        parameters=plan.parameters,
        secret=context.secret,
        release_id=context.release_id,
    )


def run_on_engine(context: ReleaseContext, plan: CrowdPlan, prepared: PreparedInput, engine: Engine) -> ReleaseResult:
    """Steps 3–7: stage, weights, synthesis, staged output, output validation, manifest."""
    config, timer = context.config, context.timer
    synthesis = config.synthesis
    object_type = prepared.input_schema.field("object_id").type
    staged = stage_claims(context, prepared, engine)
    quality, iterations = global_source_quality(context, staged, prepared, engine)
    output_schema = synthetic_claims_schema(object_type)
    outcome_schema = synthesis_outcome_schema(object_type)
    with timer.stage("synthesize"):
        outcome = engine.map_groups(staged.claims, "object_id", synthesis_block, outcome_schema,
                                    side=synthesis_side(context, plan, quality), keeps_groups=True)
        outcome_files = engine.write_groups(outcome, "object_id", prepared.staging / "outcome", outcome_schema)
        outcome = engine.read_groups(outcome_files, "object_id", outcome_schema)
        summary = engine.collect(engine.map_batches(outcome, summary_rows, outcome_schema))
    with timer.stage("write staging"):
        released = engine.map_batches(outcome, released_rows, output_schema)
        files = engine.write_parquet(released, prepared.staging / "data", output_schema)

    with timer.stage("validate output"):
        released_frame = (
            storage.read_files(files).to_pandas()
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
    attempts = int(released_objects["attempts"].sum())
    guarantee = plan.guarantee
    manifest: dict[str, Any] = {
        **context.manifest_identity(),
        "status": "published" if output_validation.success else "quarantined",
        "epsilon": guarantee["epsilon"],
        "delta": guarantee["delta"],
        "privacy_unit": guarantee["privacy_unit"],
        "guarantee": guarantee,
        "rows": int(len(released_frame)),
        "objects_released": int(len(released_objects)),
        "objects_suppressed": int(len(suppressed)),
        "claims_per_object": synthesis.claims_per_object,
        "bandwidth": plan.bandwidth,
        "engine": engine.name,
        "validation": {"output": output_validation.to_json()},
        **context.manifest_provenance(),
    }
    internal = {
        "note": "computed from the raw claims: operator figures outside the release's guarantee",
        "input_rows": prepared.rows,
        "input_rows_after_contribution_bound": staged.bounded_rows,
        "clipped_to_value_range": prepared.clipped,
        "largest_object": prepared.largest_object,
        "suppressed_reasons": {str(k): int(v) for k, v in suppressed["reason"].value_counts().items()},
        "candidate_attempts": attempts,
        "pass_rate": (float(released_objects["released"].sum()) / attempts) if attempts else None,
        "fallback_claims": int(released_objects["fallbacks"].sum()),
        "capped_claims": int(released_objects["capped"].sum()),
        "global_weights": {"iterations": iterations, "sources": int(len(quality.source_ids))},
        "validation": {"input": prepared.validation.to_json()},
        "evaluation": evaluation,
        # `privlake report`: a few released objects' learned densities (a curve each, never claims)
        "report": learned_density_samples(
            prepared.claims, released_frame,
            lambda block: object_weights(block, np.full(block.number_of_objects, plan.bandwidth),
                                         synthesis_side(context, plan, quality)),
            plan.bandwidth, tuple(config.privacy.value_range), prepared.truth),
    }
    return ReleaseResult(files, output_schema, manifest, output_validation.success, output_validation.first_line(),
                         internal)


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
