"""The ldp release (free-will local privacy), written once over the engine interface.

ElSalamouny & Palamidessi, "Reconstruction of the distribution of sensitive data under
free-will privacy": every user privatized their secret on the device with a mechanism and ε of
their own choosing; the release is the estimated distribution of the secrets.

Stages:

1. Read the mechanism catalog and check the estimator can take its mix (INV_M and IBU_M need
   one output alphabet, RAP_M needs RAPPOR); a published release id is a no-op.
2. While the engine starts: read the reports, run the validation gate (Great Expectations:
   columns, nulls, one report per user, known mechanisms), check every report lies in its
   mechanism's output alphabet, and stage canonical Parquet ``(mechanism_code, report)``.
3. One pass on the engine computes the sufficient statistics: users per (mechanism, report);
   for RAPPOR, bit sums per mechanism (RAP_M) or users per distinct bit vector (GIBU).
4. The driver runs the estimator, validates the estimate and publishes it with its manifest in
   one Iceberg commit (or quarantines it).

Privacy: the reports are already ε_i-LDP; estimating is post-processing, so the release spends
no further budget and draws no randomness. The manifest states each mechanism's worst-case
local ε and the headline ε is the largest among the users (the weakest user's guarantee).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pipelines.engines import storage
from pipelines.engines.base import Engine
from pipelines.ldp.blocks import (
    BitSumSide,
    ReportKeySide,
    bit_matrix,
    bit_vector_count_rows,
    rappor_bit_sum_rows,
    report_count_rows,
)
from pipelines.ldp.input import (
    MechanismCatalog,
    canonical_reports,
    check_estimator_fits,
    read_ldp_reports,
    read_mechanism_catalog,
    reports_fingerprint,
)
from pipelines.ldp.report_page import truth_summary
from pipelines.ldp.validation import validate_ldp_input, validate_ldp_output
from pipelines.platform.errors import InputError, PrivlakeError
from pipelines.platform.lake import Lake
from pipelines.platform.release import (
    ReleaseContext,
    ReleaseKind,
    ReleaseResult,
    StageTimer,
)
from schemas.ldp.config import LdpConfig, SecretLayout
from schemas.ldp.tables import (
    ldp_bit_sums_schema,
    ldp_estimate_schema,
    ldp_report_counts_schema,
    ldp_reports_schema,
)
from transforms.ldp.distribution_metrics import (
    earth_movers_distance_grid,
    earth_movers_distance_line,
    l1_distance,
    l2_distance,
)
from transforms.ldp.release_estimate import (
    ReleaseEstimate,
    estimate_from_bit_sums,
    estimate_from_bit_vector_groups,
    estimate_from_report_counts,
    worst_case_ldp_epsilon,
)

LDP_WORKER_MODULES = ("pipelines.ldp.blocks",)
PRIVACY_UNIT = "one user's report (local DP, each user at their own epsilon; headline = the largest)"


CENTRAL_CHARGE: dict[str, Any] = {
    "epsilon": 0.0, "delta": 0.0, "steps": [],
    "per_record": {"epsilon": 0.0, "delta": 0.0, "steps": []},
    "why": "the estimate is post-processing of reports the users privatized themselves: no central budget is spent",
}
"""What the ledger charges an ldp release: nothing (each user's local ε is the users' own choice; the
manifest states them)."""


@dataclass(frozen=True)
class LdpPlan:
    """The mechanism catalog, read and checked against the estimator before any report is read."""

    catalog: MechanismCatalog


def plan_release(context: ReleaseContext) -> LdpPlan:
    config = context.config
    with context.timer.stage("read catalog"):
        catalog = read_mechanism_catalog(config.input.catalog, config.secrets)
        check_estimator_fits(catalog, config.estimator.method, config.input.catalog)
    context.reserve({**CENTRAL_CHARGE, "privacy_unit": PRIVACY_UNIT})
    return LdpPlan(catalog)


@dataclass(frozen=True)
class PreparedReports:
    """The reports staged for the engine: one Parquet file of ``(mechanism_code, report)``."""

    staged: Path
    fingerprint: str
    validation: Any
    n: int


def prepare_reports(context: ReleaseContext, plan: LdpPlan) -> PreparedReports:
    return PreparedReports(*_prepare_reports(context.config, plan.catalog, context.lake, context.release_id,
                                             context.timer))


def run_on_engine(context: ReleaseContext, plan: LdpPlan, prepared: PreparedReports, engine: Engine) -> ReleaseResult:
    with context.timer.stage("count reports and estimate"):
        estimate, users = _estimate_on_engine(context.config, plan.catalog, engine, prepared.staged)
    return _publish(context, plan.catalog, prepared, estimate, users, engine.name)


def _prepare_reports(
    config: LdpConfig, catalog: MechanismCatalog, lake: Lake, release_id: str, timer: StageTimer
) -> tuple[Path, str, Any, int]:
    settings = config.input
    with timer.stage("read input"):
        reports = read_ldp_reports(settings)
        fingerprint = reports_fingerprint(settings)
    with timer.stage("validate input"):
        validation = validate_ldp_input(
            reports, file_name=str(settings.path), mechanism_names=list(catalog.names),
            column_names=settings.columns.model_dump(),
        )
        if not validation.success:
            raise PrivlakeError(validation.issues[0].line())
        canonical = canonical_reports(reports, catalog, settings)
    with timer.stage("stage input"):
        schema = ldp_reports_schema(catalog.bit_vectors)
        staged = storage.write_table(pa.Table.from_pandas(canonical, schema=schema, preserve_index=False),
                                     lake.staging_directory(release_id) / "input" / "reports.parquet",
                                     row_group_size=1 << 20)
    return staged, fingerprint, validation, len(canonical)


def _estimate_on_engine(
    config: LdpConfig, catalog: MechanismCatalog, engine: Engine, staged: Path
) -> tuple[ReleaseEstimate, np.ndarray]:
    """One pass over the reports for the estimator's sufficient statistics, then the estimator;
    also the users of each mechanism (from the same statistics)."""
    settings = config.estimator
    reports = engine.read_parquet([staged], ldp_reports_schema(catalog.bit_vectors))
    k = catalog.input_size
    if catalog.bit_vectors and settings.method == "rap_m":
        partial = engine.map_batches(reports, rappor_bit_sum_rows, ldp_bit_sums_schema(), side=BitSumSide(k))
        sums = engine.sum_by_key(partial, "bit_key", ["users"])
        table = np.zeros((len(catalog.names), k + 1), dtype=np.int64)
        keys = sums["bit_key"].to_numpy(np.int64)
        table[keys // (k + 1), keys % (k + 1)] = sums["users"].to_numpy(np.int64)
        users = table[:, k]
        return estimate_from_bit_sums(catalog.mechanisms, table[:, :k], users, settings.post_processing), users
    if catalog.bit_vectors:
        partial = engine.map_batches(reports, bit_vector_count_rows, ldp_report_counts_schema(True))
        groups = engine.sum_by_key(partial, "report_key", ["users"])
        split = groups["report_key"].astype(str).str.split(":", n=1, expand=True)
        codes = split[0].astype(np.int64).to_numpy()
        bits = bit_matrix(split[1].tolist(), k)
        group_users = groups["users"].to_numpy(np.int64)
        users = np.bincount(codes, weights=group_users, minlength=len(catalog.names)).astype(np.int64)
        return estimate_from_bit_vector_groups(
            catalog.mechanisms, codes, bits, group_users, settings.tolerance, settings.max_iterations,
            settings.acceleration,
        ), users
    stride = int(catalog.output_sizes.max())
    partial = engine.map_batches(reports, report_count_rows, ldp_report_counts_schema(False), side=ReportKeySide(stride))
    counts = engine.sum_by_key(partial, "report_key", ["users"])
    table = np.zeros((len(catalog.names), stride), dtype=np.int64)
    keys = counts["report_key"].to_numpy(np.int64)
    table[keys // stride, keys % stride] = counts["users"].to_numpy(np.int64)
    report_counts = [table[code, : int(size)] for code, size in enumerate(catalog.output_sizes)]
    return estimate_from_report_counts(
        catalog.mechanisms, report_counts, settings.method, settings.post_processing,
        settings.tolerance, settings.max_iterations, settings.acceleration,
    ), table.sum(axis=1)


def estimate_frame(estimate: np.ndarray, secrets: SecretLayout) -> pd.DataFrame:
    """The estimate labelled by the secrets' layout: ``value`` on a line, ``row``/``col`` on a grid."""
    index = np.arange(len(estimate))
    if secrets.layout == "grid":
        assert secrets.columns is not None
        rows, columns = np.divmod(index, secrets.columns)
        return pd.DataFrame({"row": rows.astype(np.int32), "col": columns.astype(np.int32), "probability": estimate})
    return pd.DataFrame({"value": (secrets.first_value + index).astype(np.int64), "probability": estimate})


def read_distribution(path: Path, secrets: SecretLayout, size: int) -> np.ndarray:
    """A distribution file in the release's own layout (``value``/``row``,``col`` and
    ``probability``; Parquet or CSV) as a vector over the secrets' indices."""
    if not path.is_file():
        raise InputError(str(path), "truth file not found")
    frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    labels = ["row", "col"] if secrets.layout == "grid" else ["value"]
    for column in [*labels, "probability"]:
        if column not in frame.columns:
            raise InputError(str(path), "truth column is missing", column=column)
    if secrets.layout == "grid":
        assert secrets.columns is not None
        index = frame["row"].to_numpy(np.int64) * secrets.columns + frame["col"].to_numpy(np.int64)
    else:
        index = frame["value"].to_numpy(np.int64) - secrets.first_value
    if np.any((index < 0) | (index >= size)):
        raise InputError(str(path), "a truth row lies outside the secrets' alphabet")
    truth = np.zeros(size)
    np.add.at(truth, index, frame["probability"].to_numpy(np.float64))
    return truth


def evaluate_estimate(estimate: np.ndarray, truth: np.ndarray, secrets: SecretLayout) -> dict[str, Any]:
    """EMD, L1 and L2 of the estimate against a known true distribution (an internal report)."""
    if secrets.layout == "grid":
        assert secrets.rows is not None and secrets.columns is not None
        emd = earth_movers_distance_grid(estimate, truth, secrets.rows, secrets.columns, secrets.cell_side)
    else:
        emd = earth_movers_distance_line(estimate, truth)
    return {
        "note": "against the true distribution given in evaluation.truth_path; internal report",
        "emd": emd,
        "l1": l1_distance(estimate, truth),
        "l2": l2_distance(estimate, truth),
    }


def mechanism_mix(catalog: MechanismCatalog, users: np.ndarray) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "type": spec["type"],
            "epsilon_parameter": spec.get("epsilon"),
            "worst_case_ldp_epsilon": worst_case_ldp_epsilon(mechanism),
            "users": int(count),
        }
        for name, spec, mechanism, count in zip(catalog.names, catalog.specs, catalog.mechanisms, users, strict=True)
    ]


def epsilon_distribution(mix: list[dict[str, Any]]) -> dict[str, Any]:
    """Quantiles of the users' worst-case local ε (each user counted once)."""
    epsilons = np.array([entry["worst_case_ldp_epsilon"] for entry in mix], dtype=np.float64)
    users = np.array([entry["users"] for entry in mix], dtype=np.int64)
    present = users > 0
    epsilons, users = epsilons[present], users[present]
    order = np.argsort(epsilons)
    epsilons, cumulative = epsilons[order], np.cumsum(users[order])
    total = int(cumulative[-1])

    def quantile(share: float) -> float:
        return float(epsilons[int(np.searchsorted(cumulative, share * total, side="left"))])

    return {
        "min": float(epsilons[0]),
        "p25": quantile(0.25),
        "median": quantile(0.5),
        "p75": quantile(0.75),
        "max": float(epsilons[-1]),
        "mean": float(np.dot(epsilons, users[order]) / total) if np.all(np.isfinite(epsilons)) else float("inf"),
        "users_with_unbounded_epsilon": int(users[order][~np.isfinite(epsilons)].sum()),
    }


def _publish(
    context: ReleaseContext,
    catalog: MechanismCatalog,
    prepared: PreparedReports,
    result: ReleaseEstimate,
    users: np.ndarray,
    engine_label: str,
) -> ReleaseResult:
    config, timer, n = context.config, context.timer, prepared.n
    secrets = config.secrets
    size = catalog.input_size
    estimate = estimate_frame(result.estimate, secrets)
    schema = ldp_estimate_schema(secrets.layout)
    with timer.stage("validate output"):
        output_validation = validate_ldp_output(estimate, layout=secrets.layout, secrets=size)
    evaluation: dict[str, Any] = {}
    truth = None
    if config.evaluation.truth_path is not None:
        truth = read_distribution(config.evaluation.truth_path, secrets, size)
        evaluation = evaluate_estimate(result.estimate, truth, secrets)
    mix = mechanism_mix(catalog, users)
    distribution = epsilon_distribution(mix)
    manifest: dict[str, Any] = {
        **context.manifest_identity(),
        "status": "published" if output_validation.success else "quarantined",
        "epsilon": distribution["max"],
        "delta": 0.0,
        "privacy_unit": PRIVACY_UNIT,
        "guarantee": {
            "model": "local differential privacy chosen per user (free-will privacy)",
            "release_cost": "none: the estimate is post-processing of the users' reports; no central budget "
            "is spent and no randomness is drawn",
            "worst_case_ldp_epsilon_per_mechanism": {entry["name"]: entry["worst_case_ldp_epsilon"] for entry in mix},
        },
        "rows": int(len(estimate)),
        "estimator": result.estimator,
        "post_processing": config.estimator.post_processing if config.estimator.method in ("inv_m", "rap_m") else None,
        "n": int(n),
        "secrets": int(size),
        "mechanism_mix": mix,
        "epsilon_distribution": distribution,
        "iterations": int(result.iterations),
        "converged": bool(result.converged),
        "final_change": result.final_change,
        "tolerance": config.estimator.tolerance,
        "max_iterations": config.estimator.max_iterations,
        "acceleration": config.estimator.acceleration,
        "catalog": catalog.to_json(),
        "engine": engine_label,
        "validation": {"output": output_validation.to_json()},
        **context.manifest_provenance(),
        "secret_source": "none: the ldp release draws no randomness",
    }
    data_file = storage.write_table(pa.Table.from_pandas(estimate, schema=schema, preserve_index=False),
                                    context.staging / "data" / "part-00000.parquet")
    internal = {
        "note": "operator figures: the evaluation reads the raw secrets (evaluation.truth_path)",
        "validation": {"input": prepared.validation.to_json()},
        "evaluation": evaluation,
        "report": truth_summary(truth),  # `privlake report`: the truth beside the estimate
    }
    return ReleaseResult([data_file], schema, manifest, output_validation.success, output_validation.first_line(),
                         internal)


def summary_line(manifest: dict[str, Any]) -> str:
    convergence = "converged" if manifest["converged"] else "NOT converged (iteration cap reached)"
    return (
        f"published the estimated distribution over {manifest['rows']} secrets from {manifest['n']} reports "
        f"of {len(manifest['mechanism_mix'])} mechanisms on {manifest['engine']}; estimator "
        f"{manifest['estimator']}, {manifest['iterations']} iterations, {convergence}"
    )


KIND = ReleaseKind(
    name="ldp",
    config_model=LdpConfig,
    worker_modules=LDP_WORKER_MODULES,
    plan=plan_release,
    prepare=prepare_reports,
    run_on_engine=run_on_engine,
    summary=summary_line,
    show_keys=("estimator", "n", "iterations", "converged"),
    draws_randomness=False,
)


run_ldp_release = KIND.run
