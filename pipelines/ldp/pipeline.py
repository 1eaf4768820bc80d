"""The ldp release (free-will local privacy), written once over the engine interface.

ElSalamouny & Palamidessi, "Reconstruction of the distribution of sensitive data under
free-will privacy": every user privatized their secret on the device with a mechanism and ε of
their own choosing; the release is the estimated distribution of the secrets.

Stages:

1. Read the mechanism catalog and check the estimator can take its mix (INV_M and IBU_M need
   one output alphabet, RAP_M needs RAPPOR); a published release id is a no-op.
2. While the engine starts: list the reports (``sources.list_fragments``: a file, a folder with
   hive partitions, a glob or an Iceberg snapshot, as fragments; metadata only, never a row).
3. On the engine (``pipelines/ldp/engine_input.py``), one task per fragment: read, flag bad rows,
   canonicalize and count the good ones (users per (mechanism, report); for RAPPOR, bit sums per
   mechanism (RAP_M) or users per distinct bit vector (GIBU)), bucket the user ids; then the
   duplicate check over the buckets (``pipelines/platform/repeated_keys.py``). The validation gate
   (Great Expectations) runs on the engine's metrics; a failing input is one line at its first
   failing row (``first_row``). The partial counts are summed on the engine (``sum_by_key``).
4. The driver runs the estimator, validates the estimate and publishes it with its manifest in
   one Iceberg commit (or quarantines it).

Privacy: the reports are already ε_i-LDP; estimating is post-processing, so the release spends
no further budget and draws no randomness. The manifest states each mechanism's worst-case
local ε and the headline ε is the largest among the users (the weakest user's guarantee).
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

from pipelines.engines import storage
from pipelines.engines.base import Engine
from pipelines.ldp.blocks import bit_matrix
from pipelines.ldp.engine_input import (
    BIT_VECTOR_LENGTH,
    INTEGER_USER_IDS,
    METRIC_NAMES,
    OUTSIDE_ALPHABET,
    PROBLEMS,
    REPEATED_USER,
    ROW_SKETCH,
    ROWS,
    TEXT_USER_IDS,
    ReportReading,
    count_entries,
    fingerprint_entries,
    metric_entries,
    read_report_fragment,
)
from pipelines.ldp.input import (
    MechanismCatalog,
    check_estimator_fits,
    private_columns,
    read_mechanism_catalog,
)
from pipelines.ldp.report_page import truth_summary
from pipelines.ldp.validation import validate_ldp_metrics, validate_ldp_output
from pipelines.platform.errors import ConfigError, InputError, PrivlakeError
from pipelines.platform.fragment_tasks import ROW_SKETCHES_SCHEMA, row_sketch_entries
from pipelines.platform.policy import LakePolicy
from pipelines.platform.release import (
    ReleaseContext,
    ReleaseKind,
    ReleaseResult,
)
from pipelines.platform.repeated_keys import KeyBuckets, RepeatedKeys, bucket_count, find_repeated_keys
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
from schemas.ldp.config import LdpConfig, LdpInput, SecretLayout
from schemas.ldp.tables import (
    LDP_FINGERPRINTS_SCHEMA,
    LDP_METRICS_SCHEMA,
    ldp_counts_schema,
    ldp_estimate_schema,
    ldp_input_summary_schema,
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

LDP_WORKER_MODULES = ("pipelines.ldp.blocks", "pipelines.ldp.engine_input")
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
    refuse_private_selection(config.input, private_columns(config.input.columns), "ldp")
    with context.timer.stage("read catalog"):
        catalog = read_mechanism_catalog(config.input.catalog, config.secrets)
        check_estimator_fits(catalog, config.estimator.method, config.input.catalog)
    context.reserve({**CENTRAL_CHARGE, "privacy_unit": PRIVACY_UNIT})
    return LdpPlan(catalog)


@dataclass(frozen=True)
class PreparedReports:
    """What the driver knows of the reports before the engine reads them: their fragments (file
    names, sizes, scan tasks — metadata, never a row) and how error lines name the input."""

    fragments: list[Fragment]
    name: str


@dataclass(frozen=True)
class CheckedReports:
    """The reports as the engine found them: the sufficient statistics' partial sums (summed on
    the engine), the input gate's result on the engine's metrics, the reports' count and the
    input's fingerprint."""

    counts: pd.DataFrame
    validation: Any
    n: int
    fingerprint: str


def prepare_reports(context: ReleaseContext, plan: LdpPlan) -> PreparedReports:
    """While the engine starts: list the input (metadata only). The reports are read by the engine."""
    config = context.config
    with context.timer.stage("list input"):
        spec = listing_spec(config.input)
        properties = config.lake.properties if isinstance(config.lake, LakeLocation) else None
        fragments = list_fragments(spec, properties=properties)
        refuse_private_partitions(fragments, private_columns(config.input.columns), "ldp")
    return PreparedReports(fragments, spec.path if spec.path is not None else f"table {spec.table}")


def run_on_engine(context: ReleaseContext, plan: LdpPlan, prepared: PreparedReports, engine: Engine) -> ReleaseResult:
    with context.timer.stage("read and check input"):
        fragment_key = context.fragment_key()
        checked = read_reports_on_engine(
            context.config, plan.catalog, prepared, engine, context.staging / "input" / "user-keys",
            input_fingerprint_key(context.lake), fragment_key, lambda prints, sketches: context.check_input_fingerprints(
                engine, prepared.fragments, prints if fragment_key is not None else None, sketches),
            context.row_printing(prepared.fragments))
    with context.timer.stage("estimate"):
        estimate, users = _estimate(context.config, plan.catalog, checked.counts)
    return _publish(context, plan.catalog, checked, estimate, users, engine.name)


def listing_spec(settings: LdpInput) -> LdpInput:
    """The input as listed: a single file without a format and without a known suffix is Parquet
    (an ldp input's format always defaulted to Parquet)."""
    if settings.format is None and settings.path is not None and not any(
        character in settings.path for character in "*?["
    ) and os.path.isfile(settings.path) and os.path.splitext(settings.path)[1].lower() not in SUFFIX_FORMATS:
        return settings.model_copy(update={"format": "parquet"})
    return settings


def _counting(catalog: MechanismCatalog, method: str) -> str:
    if not catalog.bit_vectors:
        return "reports"
    return "bit_sums" if method == "rap_m" else "bit_vectors"


def read_reports_on_engine(config: LdpConfig, catalog: MechanismCatalog, prepared: PreparedReports, engine: Engine,
                           keys_folder: Any, fingerprint_key: bytes | None = None, fragment_key: bytes | None = None,
                           check_prints: Callable[[list[tuple[int, str]], list[str]], None] | None = None,
                           row_printing: RowPrinting | None = None) -> CheckedReports:
    """Read, check, canonicalize and count the reports on the engine (``pipelines/ldp/engine_input.py``);
    then the duplicate check (``pipelines/platform/repeated_keys.py``) and the input gate on the
    metrics. Raises the one-line error of the first failing row. ``fingerprint_key`` (32 bytes)
    keys the input's fingerprint (an unkeyed SHA-256 without it). The fragments are fingerprinted
    where they are read under ``fragment_key`` (the lake's key, ``ReleaseContext.fragment_key``;
    ``fingerprint_key`` when there is none) and ``check_prints`` (the policy's check) gets them,
    with each fragment's sketch of its canonical reports (``row_printing``), before the input gate."""
    settings = config.input
    fragments = prepared.fragments
    columns = settings.columns
    counting = _counting(catalog, config.estimator.method)
    buckets = KeyBuckets(keys_folder, bucket_count([fragment.size for fragment in fragments], engine.parallelism))
    side = ReportReading(
        user_column=columns.user_id, mechanism_column=columns.mechanism, report_column=columns.report,
        mechanism_names=catalog.names, output_sizes=tuple(int(size) for size in catalog.output_sizes),
        counting=counting, bits=catalog.input_size, output_stride=int(catalog.output_sizes.max()), keys=buckets,
        fingerprint_key=fragment_key or fingerprint_key, row_printing=row_printing,
    )
    text_keys = counting == "bit_vectors"
    summary = engine.persist(engine.map_fragments(fragments, read_report_fragment, ldp_input_summary_schema(text_keys), side))
    try:
        prints = engine.collect(engine.map_batches(summary, fingerprint_entries, LDP_FINGERPRINTS_SCHEMA))
        fragment_prints = list(zip(prints["code"].astype(int).tolist(), prints["fingerprint"].tolist(), strict=True))
        if check_prints is not None:
            sketches = engine.collect(engine.map_batches(summary, row_sketch_entries, ROW_SKETCHES_SCHEMA,
                                                         side=(ROW_SKETCH, "fingerprint")))
            check_prints(fragment_prints, sketches["sketch"].tolist())
        metric_sums = engine.sum_by_key(engine.map_batches(summary, metric_entries, LDP_METRICS_SCHEMA), "code", ["users"])
        by_code = dict(zip(metric_sums["code"].astype(int), metric_sums["users"].astype(int), strict=True))
        first_problem = engine.first_row(summary, ROW_ID)
        user_id_types = int(by_code.get(INTEGER_USER_IDS, 0) > 0) + int(by_code.get(TEXT_USER_IDS, 0) > 0)
        repeats = RepeatedKeys(0, None, None)
        if user_id_types <= 1:
            repeats = find_repeated_keys(engine, buckets, [fragment.ordinal for fragment in fragments])
        metrics = {METRIC_NAMES[code]: by_code.get(code, 0) for code in (ROWS, *PROBLEMS)}
        metrics[METRIC_NAMES[REPEATED_USER]] = repeats.repeats
        metrics["user_id_types"] = user_id_types
        validation = validate_ldp_metrics(metrics, prepared.name)
        if not validation.success:
            raise _first_failure(validation, first_problem, repeats, fragments, catalog, settings, prepared.name)
        if text_keys:
            check_vector_groups(config, catalog, metrics["rows"])
        counts = engine.sum_by_key(engine.map_batches(summary, count_entries, ldp_counts_schema(text_keys)), "key",
                                   ["users"])
    finally:
        engine.unpersist(summary)
    fingerprint = input_fingerprint(fragments, fragment_prints)
    return CheckedReports(counts, validation, metrics["rows"], _reports_fingerprint(fingerprint, settings,
                                                                                         fingerprint_key))


def check_vector_groups(config: LdpConfig, catalog: MechanismCatalog, reports: int) -> None:
    """GIBU on RAPPOR reports runs on the driver over the distinct (mechanism, bit vector) groups
    and their users (``estimate_from_bit_vector_groups``): there are at most ``min(reports,
    mechanisms · 2^k)`` of them — with a realistic k nearly one per report, since every bit is
    randomized. Issue 15 bounds the driver by design: when that bound times k exceeds
    ``estimator.max_vector_cells``, the release is refused before the groups are collected
    (``ConfigError``, exit 2); RAP_M's sufficient statistics are k sums per mechanism, summed on
    the engine, whatever the reports."""
    k = catalog.input_size
    groups = min(reports, len(catalog.names) * 2 ** k)
    cap = config.estimator.max_vector_cells
    if groups * k > cap:
        raise ConfigError(
            f"estimator: GIBU on RAPPOR reports holds their distinct bit vectors on the driver, here up to "
            f"{groups:,} of {k} bits ({groups * k:,} cells), above estimator.max_vector_cells ({cap:,}); "
            "set estimator.method: rap_m (per-bit sums, counted on the engine) or raise max_vector_cells"
        )


def _reports_fingerprint(input_print: str, settings: LdpInput, key: bytes | None) -> str:
    """The input's fingerprint (``sources.input_fingerprint`` over the per-fragment digests computed
    on the engine) with the catalog file and the column mapping; an HMAC under ``key`` when given."""
    digest = hmac.new(key, digestmod=hashlib.sha256) if key is not None else hashlib.sha256()
    digest.update(input_print.encode() + b"\0")
    digest.update(settings.catalog.read_bytes() + b"\0")
    digest.update(repr(sorted(settings.columns.model_dump().items())).encode())
    return ("hmac-sha256:" if key is not None else "sha256:") + digest.hexdigest()


def input_fingerprint_key(lake: Any) -> bytes:
    """A 32-byte key for the ldp input's fingerprints, derived from the lake's fingerprint key (kept
    outside the lake): 32 bytes, so the engines treat it as key material."""
    return hmac.new(LakePolicy(lake).fingerprint_key(), b"privlake-ldp-input-fingerprint", hashlib.sha256).digest()


def _first_failure(validation: Any, first_problem: dict[str, Any] | None, repeats: RepeatedKeys,
                   fragments: list[Fragment], catalog: MechanismCatalog, settings: LdpInput, name: str) -> PrivlakeError:
    """The failing gate's one line: at the first failing row the engine found (its earliest
    problem), else the gate's first issue (no row: an empty input, user ids of two kinds)."""
    candidates = []
    if first_problem is not None:
        candidates.append((int(first_problem[ROW_ID]), int(first_problem["code"]), first_problem["detail"]))
    if repeats.first_row_id is not None:
        candidates.append((repeats.first_row_id, REPEATED_USER, repeats.earlier_row_id))
    if not candidates:
        issue = validation.issues[0]
        column = settings.columns.user_id if issue.column == "user_id_types" else None
        return InputError(name, issue.message, column=column)
    row_id, code, detail = min(candidates, key=lambda item: (item[0], item[1]))
    canonical, message = PROBLEMS[code]
    if code == REPEATED_USER:
        earlier_file, earlier_row = row_location(fragments, int(detail))
        file, _ = row_location(fragments, row_id)
        where = f"row {earlier_row}" if earlier_file == file else f"{earlier_file}, row {earlier_row}"
        message = f"{message}; the same {settings.columns.user_id} as {where}"
        if repeats.repeats > 1:
            message += f"; {repeats.repeats} repeated reports in all"
    elif code == BIT_VECTOR_LENGTH:
        message = f"bit vector of length {detail}; the catalog's RAPPOR mechanisms report {catalog.input_size} bits"
    elif code == OUTSIDE_ALPHABET:
        size = int(catalog.output_sizes[int(detail)])
        message = f"report is outside mechanism {catalog.names[int(detail)]!r}'s output alphabet 0..{size - 1}"
    return row_error(fragments, row_id, message, column=getattr(settings.columns, canonical))


def _estimate(config: LdpConfig, catalog: MechanismCatalog, counts: pd.DataFrame) -> tuple[ReleaseEstimate, np.ndarray]:
    """The estimator on the sufficient statistics the engine summed (``key``, ``users``); also the
    users of each mechanism (from the same statistics)."""
    settings = config.estimator
    k = catalog.input_size
    if catalog.bit_vectors and settings.method == "rap_m":
        table = np.zeros((len(catalog.names), k + 1), dtype=np.int64)
        keys = counts["key"].to_numpy(np.int64)
        table[keys // (k + 1), keys % (k + 1)] = counts["users"].to_numpy(np.int64)
        users = table[:, k]
        return estimate_from_bit_sums(catalog.mechanisms, table[:, :k], users, settings.post_processing), users
    if catalog.bit_vectors:
        split = counts["key"].astype(str).str.split(":", n=1, expand=True)
        codes = split[0].astype(np.int64).to_numpy()
        bits = bit_matrix(split[1].tolist(), k)
        group_users = counts["users"].to_numpy(np.int64)
        users = np.bincount(codes, weights=group_users, minlength=len(catalog.names)).astype(np.int64)
        return estimate_from_bit_vector_groups(
            catalog.mechanisms, codes, bits, group_users, settings.tolerance, settings.max_iterations,
            settings.acceleration,
        ), users
    stride = int(catalog.output_sizes.max())
    table = np.zeros((len(catalog.names), stride), dtype=np.int64)
    keys = counts["key"].to_numpy(np.int64)
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
    checked: CheckedReports,
    result: ReleaseEstimate,
    users: np.ndarray,
    engine_label: str,
) -> ReleaseResult:
    config, timer, n = context.config, context.timer, checked.n
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
        "validation": {"input": checked.validation.to_json()},
        "input_fingerprint": checked.fingerprint,
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
