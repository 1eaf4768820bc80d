"""The filter release (one shared VAE, one linear latent filter per choice), written once over the
engine interface; and ``train-encoder``, its phase 1.

Chen, Navidi, Rajagopal, "Generating private data with user customization"; the mathematics is in
``transforms/filter`` (``privatization.py`` is the per-record computation every engine runs).

``train_encoder``: read the collector's training records, encode their features over the public
spec, train the VAE with keyed randomness and store it in the lake (``model_store.py``).

``run_filter_release``:

1. Before any record is read: the feature spec, the encoder artifact (``latest`` or an id), and,
   when every choice caps its label sensitivity, the guarantee from the caps alone, reserved in
   the ledger.
2. While the engine starts: train each choice's filter on the training records (frozen encoder,
   keyed draws); without caps the guarantee comes from the trained filters and is reserved now,
   still before the records to release are read; then read those records (one line naming file,
   row and column for a bad value, an unknown choice, a choice with no records) and stage them.
3. Privatize on the engine: ``map_batches`` over the staged records (files of contiguous
   records, read by the workers themselves: ``read_groups`` on ``record``), the VAE and the
   filters in the side value; the workers write the release's Parquet in the same pass.
4. Validate (GX), evaluate on a keyed sample (retrained adversaries, raw vs privatized vs the
   Gaussian baseline at equal distortion), publish data and manifest in one Iceberg commit.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.engines.base import Engine
from pipelines.filter.blocks import (
    PrivatizationSide,
    contiguous_bounds,
    expand_features,
    output_schema,
    release_file_pieces,
    staged_schema,
)
from pipelines.filter.engine_input import (
    COUNTS,
    FINGERPRINT,
    OUTPUT_METRICS_SCHEMA,
    PRIVATIZED_FILES_SCHEMA,
    PROBLEM,
    ROW_SKETCH,
    SUMMARY_SCHEMA,
    FilterOutputCheck,
    FilterReading,
    PositionedPrivatization,
    PrivatizeFiles,
    PrivatizeRange,
    ReleasedFile,
    SampleTask,
    count_rows,
    output_metric_names,
    privatize_range,
    problem_rows,
    read_filter_fragment,
    released_filter_summary,
    sampled_released,
    sampled_staged,
    staged_files,
)
from pipelines.filter.filter_set import FilterSet, StoredChoice, choices_fingerprint
from pipelines.filter.input import (
    FilterRecords,
    check_label_columns,
    private_columns,
    read_feature_spec,
)
from pipelines.filter.report import ChoiceSample, sample_ranks
from pipelines.filter.training_input import read_training_input
from pipelines.filter.validation import validate_filter_input_metrics, validate_filter_output_metrics
from pipelines.platform.errors import ConfigError, InputError, PrivlakeError
from pipelines.platform.lake import open_lake
from pipelines.platform.model_store import (
    MODEL_KIND_FILTER_SET,
    MODEL_KIND_FILTER_VAE,
    ModelStore,
    StoredModel,
)
from pipelines.platform.policy import LakePolicy
from pipelines.platform.release import (
    ReleaseContext,
    ReleaseKind,
    ReleaseResult,
    StageTimer,
    code_version,
    release_secret,
)
from pipelines.platform.repeated_keys import KeyBuckets, bucket_count, find_repeated_keys
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
from schemas.base import LakeLocation
from schemas.filter.config import FilterConfig, FilterInput
from schemas.filter.expectations import FILTER_RECORD_COLUMN
from schemas.filter.features import FeatureSpec
from transforms.core.accounting import GAUSSIAN, PrivacyStep
from transforms.core.keyed_randomness import keyed_generator
from transforms.filter.accounting import filter_privacy_summary, sensitivity_privacy_summary
from transforms.filter.features import (
    encode_features,
    feature_fingerprint,
    feature_layout,
    feature_spec_sha256,
)
from transforms.filter.inference import (
    ParsedArtifact,
    VaeArchitecture,
    VaeWeights,
    encode_latents,
    parse_artifact,
)
from transforms.filter.latent_filter import LinearLatentFilter

FILTER_WORKER_MODULES = ("pipelines.filter.blocks", "pipelines.filter.engine_input")
PROBLEM_SCHEMA = pa.schema([pa.field(ROW_ID, pa.int64()), pa.field("column", pa.string()), pa.field("text", pa.string())])
COUNT_ROWS_SCHEMA = pa.schema([pa.field("entry", pa.int32(), nullable=False), pa.field("ordinal", pa.int64(), nullable=False),
                               pa.field("rows", pa.int64(), nullable=False), pa.field("text", pa.string())])
PURPOSE_VAE_TRAINING = "filter-vae-training"
PURPOSE_FILTER_TRAINING = "filter-training"
PURPOSE_FILTER_SAMPLE = "filter-training-sample"
PRIVACY_UNIT = (
    "the private label of one record, given the record's latent code: the filter's use of the label "
    "(Renyi DP of the Gaussian label shift); what the features themselves say about the label is not covered"
)
NOT_COVERED = [
    "what a record's features (through its latent code z) already reveal about its private label: the "
    "Renyi bound holds z fixed; the adversarial training and the evaluation measure this association",
    "the features themselves: they are released after a VAE round trip, not under differential privacy",
    "the training records: the VAE and the filters are fitted to them without differential privacy "
    "(a release whose input is the training file is not covered for those records' labels either)",
    "the evaluation figures in the manifest (computed from raw labels: an internal report)",
]


# ---- phase 1: the shared encoder ----------------------------------------------------------------


PURPOSE_TRAINING_RECORDS = "filter-training-records"


def training_sample_generator(secret: bytes, config: FilterConfig) -> np.random.Generator:
    """The keyed stream of the training records' sample (``training.max_records``)."""
    return keyed_generator(secret, config.dataset, PURPOSE_TRAINING_RECORDS, 0)


def _training_labels(config: FilterConfig) -> dict[str, Any]:
    used = {label for choice in config.choices for label in (choice.private, choice.utility)}
    return {name: config.labels[name] for name in sorted(used)}


def _read_spec(config: FilterConfig) -> FeatureSpec:
    spec = read_feature_spec(config.feature_spec)
    check_label_columns(config, spec)
    clashes = sorted(set(config.labels) & set(spec.names))
    if clashes:
        raise ConfigError(f"labels: {clashes[0]!r} is also a feature's name; release columns must differ")
    return spec


def train_encoder(config: FilterConfig, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train the shared VAE on the training records' features and store it in the lake; returns the
    stored model's summary (its ``artifact_id`` is what configs and manifests name)."""
    from transforms.filter.vae import (  # torch: only training needs it
        VaeArtifact,
        VaeTrainingConfig,
        configure_deterministic_torch,
        train_vae,
        training_summary,
    )

    timer = StageTimer(progress)
    spec = _read_spec(config)
    with timer.stage("read training records"):
        secret, secret_source = release_secret()
        records, file_print = read_training_input(config.training, spec, {}, training_sample_generator(secret, config),
                                                  config.lake)
    settings = config.encoder
    architecture = VaeArchitecture(feature_layout(spec), settings.latent_dimension, tuple(settings.hidden_widths),
                                   settings.numeric_noise_scale)
    training = VaeTrainingConfig(**settings.training.model_dump())
    fingerprint = {**feature_fingerprint(records.features, spec), **file_print}
    configure_deterministic_torch(1)
    with timer.stage("train the VAE"):
        trained = train_vae(records.features, architecture,
                            keyed_generator(secret, config.dataset, PURPOSE_VAE_TRAINING, fingerprint["features_sha256"]),
                            training)
    artifact = VaeArtifact(trained.model, spec, fingerprint, training_summary(training, trained))
    data = artifact.to_bytes()
    artifact_id = artifact.artifact_id
    description = {
        "data_fingerprint": fingerprint,
        "training": artifact.training,
        "architecture": architecture.to_dict() | {"layout": None},
        "secret_source": secret_source,
        "code_version": code_version(),
        "timings": dict(timer.timings),
    }
    with open_lake(config.lake) as lake:
        store = ModelStore(lake)
        store.store(artifact_id, data, MODEL_KIND_FILTER_VAE, config.dataset, feature_spec_sha256(spec), description)
        return store.model(artifact_id).summary()


# ---- the release --------------------------------------------------------------------------------


def _best_epsilon(summary: dict[str, Any]) -> float:
    """The smaller of two valid ``ε`` at the same ``δ``: the RDP conversion and the exact (analytic)
    Gaussian one (``filter_accounting``); ``∞`` when neither is finite."""
    values = [value for value in (summary["epsilon"], summary["epsilon_exact_gaussian"]) if value is not None]
    return min(values) if values else math.inf


def _headline(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The release's guarantee: the weakest choice's (records of different choices are disjoint,
    and each record is filtered once, so the choices compose in parallel); ``epsilon_rdp`` per
    order is the largest over the choices."""
    worst = max(_best_epsilon(summary) for summary in summaries)
    epsilon_rdp = {}
    for order in summaries[0]["epsilon_rdp"]:
        values = [summary["epsilon_rdp"][order] for summary in summaries]
        epsilon_rdp[order] = None if any(value is None for value in values) else max(values)
    sensitivities = [summary["sensitivity"] for summary in summaries]
    largest = None if any(value is None for value in sensitivities) else max(sensitivities)
    return {"epsilon": None if math.isinf(worst) else worst, "delta": summaries[0]["delta"],
            "epsilon_rdp": epsilon_rdp, "sensitivity": largest}


def charge_of(guarantee: dict[str, Any]) -> dict[str, Any]:
    """What the ledger charges: one Gaussian label shift of the largest Mahalanobis sensitivity
    (each record is filtered once, so the release is one step for a record's label), the same
    per record and per release."""
    steps = []
    if guarantee["epsilon"] is not None and guarantee["sensitivity"] is not None:
        steps = [PrivacyStep(GAUSSIAN, guarantee["epsilon"], guarantee["delta"], 1,
                             sensitivity_over_sigma=float(guarantee["sensitivity"]),
                             what="the Gaussian label shift of one record's filter").to_json()]
    part = {"epsilon": guarantee["epsilon"], "delta": guarantee["delta"], "steps": steps}
    return {**part, "per_record": part, "privacy_unit": PRIVACY_UNIT, "not_covered": NOT_COVERED}


def capped_guarantee(config: FilterConfig) -> dict[str, Any] | None:
    """The guarantee from the choices' sensitivity caps alone (``None`` if a choice has no cap)."""
    caps = [choice.max_sensitivity for choice in config.choices]
    if any(cap is None for cap in caps):
        return None
    privacy = config.privacy
    return _headline([sensitivity_privacy_summary(float(cap), privacy.delta, privacy.orders, privacy.conversion)
                      for cap in caps])  # type: ignore[arg-type]


@dataclass(frozen=True)
class TrainedChoice:
    """A choice's filter and what its training reported (``seconds``: its training time, in this
    release or when the stored set was trained)."""

    stored: StoredChoice
    seconds: float

    @property
    def latent_filter(self) -> LinearLatentFilter:
        return self.stored.latent_filter


def _train_filters(config: FilterConfig, mean: np.ndarray, log_variance: np.ndarray, training: FilterRecords,
                   secret: bytes, stream: str, timer: StageTimer) -> list[TrainedChoice]:
    """Each choice's filter on the training records' posterior ``(mean, log_variance)``, its draws
    keyed by ``stream`` (the release id, or a stored set's own stream) and the choice's name."""
    from transforms.filter.filter_training import FilterTrainingConfig, train_latent_filter
    from transforms.filter.vae import configure_deterministic_torch

    configure_deterministic_torch(1)
    rows = mean.shape[0]
    settings = config.filter_training
    trained = []
    for choice in config.choices:
        stage = f"train filter {choice.name}"
        with timer.stage(stage):
            keep = np.arange(rows)
            if settings.max_records is not None and rows > settings.max_records:
                sample = keyed_generator(secret, stream, PURPOSE_FILTER_SAMPLE, choice.name)
                keep = np.sort(sample.choice(rows, size=settings.max_records, replace=False))
            private = training.labels[choice.private][keep]
            utility = training.labels[choice.utility][keep]
            result = train_latent_filter(
                mean[keep], log_variance[keep], private, utility,
                len(config.labels[choice.private].classes), len(config.labels[choice.utility].classes),
                FilterTrainingConfig(
                    budget=choice.budget, utility_weight=choice.utility_weight,
                    privacy_objective=settings.privacy_objective, epochs=settings.epochs,
                    batch_size=settings.batch_size, refit_every=settings.refit_every,
                    max_sensitivity=choice.max_sensitivity,
                ),
                keyed_generator(secret, stream, PURPOSE_FILTER_TRAINING, choice.name),
            )
        final = dict(result.history[-1]) if result.history else {}
        trained.append(TrainedChoice(StoredChoice(choice.name, result.latent_filter, result.distortion,
                                                  int(keep.size), final), timer.timings[stage]))
    return trained


def _encoder_weights(store: ModelStore, encoder: StoredModel) -> tuple[bytes, ParsedArtifact]:
    data = store.load(encoder.artifact_id)
    return data, parse_artifact(data)


def train_filters(config: FilterConfig, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Train each choice's filter against the config's encoder on the training records and store
    the set in the lake (``filter_set.py``); returns the stored set's summary (``stored_now``: false
    when the identical set was stored before). The draws are keyed by the dataset, the encoder and
    the training records' fingerprint, so the same inputs give the same set (same id) again."""
    timer = StageTimer(progress)
    spec = _read_spec(config)
    secret, secret_source = release_secret()
    with open_lake(config.lake) as lake:
        store = ModelStore(lake)
        encoder = store.resolve(config.encoder.artifact, MODEL_KIND_FILTER_VAE, config.dataset,
                                feature_spec_sha256(spec))
        with timer.stage("load encoder"):
            _, parsed = _encoder_weights(store, encoder)
        with timer.stage("read training records"):
            training, file_print = read_training_input(config.training, spec, _training_labels(config),
                                                       training_sample_generator(secret, config), config.lake)
        fingerprint = {**feature_fingerprint(training.features, spec), **file_print}
        with timer.stage("encode training records"):
            mean, log_variance = encode_latents(parsed.weights(), training.features)
        stream = f"filter-set/{config.dataset}/{encoder.artifact_id}/{fingerprint['features_sha256']}"
        trained = _train_filters(config, mean, log_variance, training, secret, stream, timer)
        choices_sha256 = choices_fingerprint(config, encoder.artifact_id)
        filter_set = FilterSet(encoder.artifact_id, choices_sha256, tuple(choice.stored for choice in trained))
        privacy = config.privacy
        description = {
            "encoder_artifact_id": encoder.artifact_id,
            "choices_sha256": choices_sha256,
            "choices": [{"name": choice.stored.name, "training_records": choice.stored.training_records,
                         "distortion_on_training_records": choice.stored.distortion,
                         "training_seconds": choice.seconds,
                         "privacy": filter_privacy_summary(choice.latent_filter, privacy.delta, privacy.orders,
                                                           privacy.conversion)}
                        for choice in trained],
            "data_fingerprint": fingerprint,
            "secret_source": secret_source,
            "code_version": code_version(),
            "timings": dict(timer.timings),
        }
        artifact_id = filter_set.artifact_id
        stored_now = store.store(artifact_id, filter_set.to_bytes(), MODEL_KIND_FILTER_SET, config.dataset,
                                 feature_spec_sha256(spec), description)
        # an identical set stored before keeps its first training time, so `latest` may name a newer one
        return {**store.model(artifact_id).summary(), "stored_now": stored_now}


def resolve_filter_set(store: ModelStore, config: FilterConfig, encoder: StoredModel) -> tuple[StoredModel, FilterSet]:
    """The stored set ``filters.artifact`` names, checked to be trained against ``encoder`` for
    exactly this config's choices (``filter_set.choices_fingerprint``)."""
    reference = config.filters.artifact
    wanted = choices_fingerprint(config, encoder.artifact_id)
    candidates = store.models(MODEL_KIND_FILTER_SET)
    if reference != "latest":
        found = [model for model in candidates if model.artifact_id == reference]
        if not found:
            raise ConfigError(f"filters.artifact {reference[:12]}… is not a filter set in the lake {store.lake.description}")
        model = found[0]
        if model.dataset != config.dataset:
            raise ConfigError(f"filters.artifact {reference[:12]}…: it was trained for dataset {model.dataset!r}, "
                              f"not {config.dataset!r}")
        if model.description.get("encoder_artifact_id") != encoder.artifact_id:
            raise ConfigError(f"filters.artifact {reference[:12]}…: it was trained against another encoder "
                              f"({str(model.description.get('encoder_artifact_id'))[:12]}…, not {encoder.artifact_id[:12]}…)")
        if model.description.get("choices_sha256") != wanted:
            raise ConfigError(f"filters.artifact {reference[:12]}…: it was trained for other choices, labels or "
                              "filter_training settings than this config's: run `privlake train-filters CONFIG`")
    else:
        matching = [model for model in candidates
                    if model.dataset == config.dataset and model.description.get("encoder_artifact_id") == encoder.artifact_id
                    and model.description.get("choices_sha256") == wanted]
        if not matching:
            raise ConfigError(
                f"no filter set in the lake {store.lake.description} for dataset {config.dataset!r}, encoder "
                f"{encoder.artifact_id[:12]}… and these choices: run `privlake train-filters CONFIG` first"
            )
        model = matching[0]
    data = store.load(model.artifact_id)
    try:
        filter_set = FilterSet.from_bytes(data)
    except ValueError as error:
        raise ConfigError(f"filters.artifact {model.artifact_id[:12]}…: {error}") from None
    # the bytes themselves, not only the table's description, must say what the set is for
    if (hashlib.sha256(data).hexdigest() != model.artifact_id or filter_set.encoder_artifact_id != encoder.artifact_id
            or filter_set.choices_sha256 != wanted):
        raise ConfigError(f"filters.artifact {model.artifact_id[:12]}…: its bytes do not match its id, this encoder "
                          "or these choices (a damaged or altered set): run `privlake train-filters CONFIG`")
    if [choice.name for choice in filter_set.choices] != config.choice_names:
        raise ConfigError(f"filters.artifact {model.artifact_id[:12]}…: its choices are not this config's")
    return model, filter_set


@dataclass(frozen=True)
class FilterPlan:
    """What a filter release decides before reading records: the feature spec, the stored encoder
    it uses, the stored filters (``None``: the release trains its own) and the guarantee when it is
    known already — from the choices' caps, or from the stored filters (``None`` otherwise: it
    comes from the filters the release trains)."""

    spec: FeatureSpec
    store: ModelStore
    encoder: StoredModel
    encoder_bytes: bytes
    encoder_artifact: ParsedArtifact
    guarantee: dict[str, Any] | None
    filter_set: StoredModel | None
    stored: list[TrainedChoice] | None


def _summaries(config: FilterConfig, trained: list[TrainedChoice]) -> list[dict[str, Any]]:
    privacy = config.privacy
    return [filter_privacy_summary(choice.latent_filter, privacy.delta, privacy.orders, privacy.conversion)
            for choice in trained]


def _stored_choices(config: FilterConfig, model: StoredModel, filter_set: FilterSet,
                    latent_dimension: int) -> list[TrainedChoice]:
    """The stored filters as the release uses them. A filter whose shape does not fit the encoder's
    latent dimension and its private label's classes, or above its choice's cap (a set not written
    by ``train-filters``), is refused rather than trusted."""
    from transforms.filter.latent_filter import label_sensitivity

    seconds = {entry.get("name"): entry.get("training_seconds", 0.0) for entry in model.description.get("choices", [])}
    stored = []
    for choice, entry in zip(config.choices, filter_set.choices, strict=True):
        latent_filter = entry.latent_filter
        classes = len(config.labels[choice.private].classes)
        if (latent_filter.latent_dimension, latent_filter.private_classes) != (latent_dimension, classes) \
                or latent_filter.noise_dimension < 1:
            raise ConfigError(f"filters.artifact {model.artifact_id[:12]}…: choice {choice.name!r}'s stored filter is "
                              f"{latent_filter.latent_dimension} × {latent_filter.noise_dimension} noise, "
                              f"{latent_filter.private_classes} label shifts; the encoder has {latent_dimension} "
                              f"latent dimensions and {choice.private!r} {classes} classes")
        if choice.max_sensitivity is not None and not label_sensitivity(latent_filter) <= choice.max_sensitivity:
            raise ConfigError(f"filters.artifact {model.artifact_id[:12]}…: choice {choice.name!r}'s stored filter "
                              f"exceeds its max_sensitivity {choice.max_sensitivity:g}")
        stored.append(TrainedChoice(entry, float(seconds.get(choice.name) or 0.0)))
    return stored


def plan_release(context: ReleaseContext) -> FilterPlan:
    """Check the spec, resolve and load the encoder, resolve the stored filters, and reserve the
    guarantee when the caps or the stored filters give it."""
    config = context.config
    refuse_private_selection(config.input, private_columns(config), "filter")
    spec = _read_spec(config)
    store = ModelStore(context.lake)
    encoder = store.resolve(config.encoder.artifact, MODEL_KIND_FILTER_VAE, config.dataset, feature_spec_sha256(spec))
    with context.timer.stage("load encoder"):
        artifact_bytes, parsed = _encoder_weights(store, encoder)
    filter_model, stored = None, None
    if config.filters.artifact != "train":
        filter_model, filter_set = resolve_filter_set(store, config, encoder)
        stored = _stored_choices(config, filter_model, filter_set, parsed.architecture.latent_dimension)
    guarantee = capped_guarantee(config)
    if guarantee is None and stored is not None:
        guarantee = _finite(_headline(_summaries(config, stored)), "a stored")
    if guarantee is not None:
        context.reserve(charge_of(guarantee))
    return FilterPlan(spec, store, encoder, artifact_bytes, parsed, guarantee, filter_model, stored)


def _finite(guarantee: dict[str, Any], which: str = "a trained") -> dict[str, Any]:
    if guarantee["epsilon"] is None:
        raise PrivlakeError(
            f"{which} filter's label sensitivity is infinite (its noise does not cover the label "
            "shift): set max_sensitivity on the choices"
        )
    return guarantee


@dataclass(frozen=True)
class PreparedFilters:
    """The driver's work before the engine runs: the encoder loaded, each choice's filter (stored,
    or trained now) with its privacy summary, the guarantee, the input records, the workers' side
    value, and the training records' posterior log-variances when the evaluation needs them."""

    encoder: ParsedArtifact
    weights: VaeWeights
    trained: list[TrainedChoice]
    summaries: list[dict[str, Any]]
    guarantee: dict[str, Any]
    input: PreparedInput
    side: PrivatizationSide
    training_log_variance: np.ndarray | None


def prepare_filters(context: ReleaseContext, plan: FilterPlan) -> PreparedFilters:
    """Without stored filters train each choice's filter on the training records
    (keyed) and reserve the guarantee now if the caps did not give it; then read the records to
    privatize."""
    config, timer, secret, release_id = context.config, context.timer, context.secret, context.release_id
    artifact_bytes, parsed = plan.encoder_bytes, plan.encoder_artifact
    weights = parsed.weights()
    training_log_variance = None
    if plan.stored is None or config.evaluation.enabled:
        with timer.stage("read training records"):
            training, _ = read_training_input(config.training, plan.spec, _training_labels(config),
                                              training_sample_generator(secret, config), config.lake,
                                              fingerprint=False)
        training_mean, training_log_variance = encode_latents(weights, training.features)
    trained = plan.stored
    if trained is None:
        trained = _train_filters(config, training_mean, training_log_variance, training, secret, release_id, timer)
    summaries = _summaries(config, trained)
    guarantee = plan.guarantee
    if guarantee is None:
        guarantee = _finite(_headline(summaries))
        context.reserve(charge_of(guarantee))
    prepared = _list_input(context)
    side = PrivatizationSide(
        artifact_bytes, plan.encoder.artifact_id, tuple(choice.latent_filter for choice in trained),
        tuple(config.choice_names), tuple(choice.utility for choice in config.choices),
        {label: config.labels[label].classes for label in _utility_labels(config)},
        secret, release_id,
    )
    return PreparedFilters(parsed, weights, trained, summaries, guarantee, prepared, side, training_log_variance)


def _utility_labels(config: FilterConfig) -> list[str]:
    return list(dict.fromkeys(choice.utility for choice in config.choices))


STAGED_ROWS_PER_FILE = 262_144
STAGED_FILES_FROM_ROWS = 8_192


def staged_file_count(rows: int, parallelism: int) -> int:
    """Files of contiguous records for the engine to read in parallel: at least one per core once
    there is work for several, and none larger than ``STAGED_ROWS_PER_FILE`` rows (an engine reads a
    file as at most a few splits, so one small file would keep one core busy and the others idle)."""
    wanted = max(parallelism if rows >= STAGED_FILES_FROM_ROWS else 1, -(-rows // STAGED_ROWS_PER_FILE))
    return max(1, min(wanted, rows))


@dataclass(frozen=True)
class PreparedInput:
    """What the driver knows of the records before the engine reads them: their fragments (file
    names, sizes, scan tasks — metadata, never a row) and how error lines name the input."""

    fragments: list[Fragment]
    name: str
    staging_folder: Path


@dataclass(frozen=True)
class CheckedInput:
    """The records as the engine found and staged them: their count, each fragment's first
    position, the staged files, the records per choice, the values clipped per feature and the
    input's keyed fingerprint."""

    rows: int
    offsets: tuple[int, ...]
    staged: list[Any]
    choice_counts: np.ndarray
    clipped: dict[str, int]
    fingerprint: str
    fragment_choice_counts: dict[int, list[int]]
    files_per_fragment: int
    validation: Any = None


def listing_spec(settings: FilterInput) -> FilterInput:
    """The input as listed: a single file without a format and without a known suffix is CSV."""
    if settings.format is None and settings.path is not None and not any(
        character in settings.path for character in "*?["
    ) and os.path.isfile(settings.path) and os.path.splitext(settings.path)[1].lower() not in SUFFIX_FORMATS:
        return settings.model_copy(update={"format": "csv"})
    return settings


def _list_input(context: ReleaseContext) -> PreparedInput:
    config = context.config
    with context.timer.stage("list input"):
        spec = listing_spec(config.input)
        properties = config.lake.properties if isinstance(config.lake, LakeLocation) else None
        fragments = list_fragments(spec, properties=properties)
        refuse_private_partitions(fragments, private_columns(config), "filter")
    return PreparedInput(fragments, spec.path if spec.path is not None else f"table {spec.table}",
                         context.staging / "input")


def input_fingerprint_key(lake: Any) -> bytes:
    """A 32-byte key for the filter input's fingerprints, derived from the lake's fingerprint key."""
    return hmac.new(LakePolicy(lake).fingerprint_key(), b"privlake-filter-input-fingerprint", hashlib.sha256).digest()


def read_input_on_engine(context: ReleaseContext, spec: FeatureSpec, prepared: PreparedInput,
                         engine: Engine) -> CheckedInput:
    """Read, check, encode and stage the records on the engine (``pipelines/filter/engine_input.py``);
    a bad value is one line at the first fragment's first bad value, as a read of that file names it.
    The fragments are fingerprinted where they are read, under the lake's key
    (``context.fragment_key()``), and the policy checks those digests
    (``context.check_input_fingerprints``), with each fragment's sketch of its canonical records
    (``context.row_printing``), before the input gate."""
    config = context.config
    settings = config.input
    fragments = prepared.fragments
    names = tuple(settings.columns or ())
    key = input_fingerprint_key(context.lake)
    fragment_key = context.fragment_key()
    per_fragment = max(1, -(-max(engine.parallelism, 1) // max(len(fragments), 1)))
    side = FilterReading(
        spec, TextReading.of(settings.header, names, settings.recode), tuple(_training_labels(config).items()),
        settings.choice_column, tuple(config.choice_names), config.default_choice, config.fallback_choice,
        tuple((choice.private, choice.utility) for choice in config.choices), prepared.staging_folder,
        per_fragment, fragment_key or key, context.row_printing(fragments),
    )
    summary = engine.persist(engine.map_fragments(fragments, read_filter_fragment, SUMMARY_SCHEMA, side))
    try:
        listed = engine.collect(engine.map_batches(summary, count_rows, COUNT_ROWS_SCHEMA))
        prints = listed[listed["entry"] == FINGERPRINT]
        fragment_prints = list(zip(prints["ordinal"].astype(int).tolist(), prints["text"].tolist(), strict=True))
        sketches = listed[listed["entry"] == ROW_SKETCH]["text"].tolist()
        context.check_input_fingerprints(engine, fragments, fragment_prints if fragment_key is not None else None,
                                         sketches)
        counted = listed[listed["entry"] == COUNTS].sort_values("ordinal")
        rows_of = dict(zip(counted["ordinal"].astype(int), counted["rows"].astype(int), strict=True))
        total = sum(rows_of.values())
        metrics = {"rows": total, "fragments_with_a_bad_value": int((listed["entry"] == PROBLEM).sum())}
        validation = validate_filter_input_metrics(metrics, prepared.name)
        if not validation.success:
            first = engine.first_row(engine.map_batches(summary, problem_rows, PROBLEM_SCHEMA), ROW_ID)
            if first is not None:
                raise row_error(fragments, int(first[ROW_ID]), first["text"], column=first["column"])
            raise InputError(prepared.name, validation.issues[0].message)
    finally:
        engine.unpersist(summary)
    offsets, position = [], 0
    for fragment in fragments:
        offsets.append(position)
        position += rows_of[fragment.ordinal]
    choice_counts = np.zeros(len(config.choices), dtype=np.int64)
    clipped: dict[str, int] = {}
    fragment_choice_counts: dict[int, list[int]] = {}
    for ordinal, text in zip(counted["ordinal"].astype(int), counted["text"], strict=True):
        figures = json.loads(text)
        fragment_choice_counts[ordinal] = figures.get("choices", [0] * len(config.choices))
        if figures:
            choice_counts += np.asarray(figures["choices"], dtype=np.int64)
            for name, count in figures["clipped"].items():
                clipped[name] = clipped.get(name, 0) + int(count)
    for choice, count in zip(config.choices, choice_counts, strict=True):
        if count == 0:
            raise InputError(prepared.name, f"choice {choice.name!r} has no records (an empty group): "
                             "remove it from the config's choices")
    staged = [where for fragment in fragments if rows_of[fragment.ordinal]
              for where in staged_files(prepared.staging_folder, fragment.ordinal, per_fragment)]
    fingerprint = input_fingerprint(fragments, fragment_prints)
    digest = hmac.new(key, digestmod=hashlib.sha256)
    digest.update(fingerprint.encode() + b"\0")
    digest.update(repr((settings.header, names, settings.choice_column,
                        sorted((column, sorted(mapping.items())) for column, mapping in settings.recode.items()))
                       ).encode())
    return CheckedInput(total, tuple(offsets), staged, choice_counts, clipped, "hmac-sha256:" + digest.hexdigest(),
                        fragment_choice_counts, per_fragment, validation)


def evaluation_samples(engine: Engine, context: ReleaseContext, prepared: PreparedInput, checked: CheckedInput,
                       files: list[Any], spec: FeatureSpec) -> tuple[list[Any], list[ChoiceSample]]:
    """The evaluation's records, read on the engine: per choice, the keyed sample's ranks
    (``report.sample_ranks``: at most ``evaluation.max_records`` a choice), then the staged records
    and the privatized ones at those positions. The driver holds the samples only."""
    config = context.config
    draws = sample_ranks(config, checked.choice_counts, context.secret, context.release_id)
    ranks = tuple(ranks for _, ranks in draws)
    tasks, before = [], np.zeros(len(config.choices), dtype=np.int64)
    for fragment, start in zip(prepared.fragments, checked.offsets, strict=True):
        counts = np.asarray(checked.fragment_choice_counts[fragment.ordinal], dtype=np.int64)
        if counts.sum():
            tasks.append(SampleTask(tuple(staged_files(prepared.staging_folder, fragment.ordinal,
                                                       checked.files_per_fragment)), start, tuple(int(c) for c in before)))
        before += counts
    staged = engine.collect(engine.map_fragments(tasks, sampled_staged, staged_schema(spec), ranks))
    staged = staged.sort_values(FILTER_RECORD_COLUMN, kind="stable").reset_index(drop=True)
    positions = staged[FILTER_RECORD_COLUMN].to_numpy(np.int64)
    out_schema = output_schema(spec, _utility_labels(config))
    released = engine.collect(engine.map_fragments([ReleasedFile(where, number) for number, where in enumerate(files)],
                                                   sampled_released, out_schema, positions))
    released = released.sort_values(FILTER_RECORD_COLUMN, kind="stable").reset_index(drop=True)
    if not np.array_equal(released[FILTER_RECORD_COLUMN].to_numpy(np.int64), positions):
        raise PrivlakeError("the evaluation's sample of released records does not match its input records")
    features = expand_features(staged, spec)
    released_features = encode_features(released, spec).matrix
    choices = staged["choice"].to_numpy(np.int64)
    samples = []
    for code in range(len(config.choices)):
        members = np.flatnonzero(choices == code)
        samples.append(ChoiceSample(positions[members], features[members], released_features[members],
                                    staged["private"].to_numpy(np.int32)[members],
                                    staged["utility"].to_numpy(np.int32)[members]))
    return draws, samples


def release_file_tasks(checked: CheckedInput, folder: Path, parallelism: int) -> list[PrivatizeRange]:
    """The release's files as ranges of record positions (issue 15 review, F1): their number is
    ``staged_file_count(n, parallelism)`` and their bounds ``contiguous_bounds(n, that number)`` —
    functions of the public ``n`` and the engine's configured parallelism only, never of how the
    input was split into fragments (a partitioned folder and one file of the same ``n`` records give
    the same files); each file takes its records from the staged files that hold them."""
    staged_rows: list[int] = []
    for start, stop in zip(checked.offsets, (*checked.offsets[1:], checked.rows), strict=True):
        if stop > start:  # a fragment's staged files, cut as the input pass cut them
            staged_rows += np.diff(contiguous_bounds(stop - start, checked.files_per_fragment)).tolist()
    if len(staged_rows) != len(checked.staged):
        raise PrivlakeError("the staged files do not match the input's record counts")
    pieces = release_file_pieces(staged_rows, staged_file_count(checked.rows, parallelism))
    return [PrivatizeRange(tuple((checked.staged[index], staged_rows[index], first, stop)
                                 for index, first, stop in file_pieces),
                           folder / f"part-{number:05d}.parquet", number)
            for number, file_pieces in enumerate(pieces)]


def _withheld(config: FilterConfig) -> dict[str, list[str]]:
    utility_labels = set(_utility_labels(config))
    return {choice.name: [choice.private] for choice in config.choices if choice.private in utility_labels}


def check_output_on_engine(context: ReleaseContext, engine: Engine, files: list[Any], spec: FeatureSpec,
                           side: PrivatizationSide, rows: int) -> tuple[int, Any]:
    """The privatized files read where they were written, one task each
    (``engine_input.released_filter_summary``), their record numbers checked for repeats by the
    bucketed reduce (``pipelines/platform/repeated_keys.py``); the output gate (GX) on the summed
    metrics. The driver never reads the privatized rows."""
    config = context.config
    check = FilterOutputCheck(
        features=tuple(spec.names),
        categories=tuple((f.name, tuple(f.categories)) for f in spec.features if f.type == "categorical"),
        bounds=tuple((f.name, tuple(map(float, f.bounds)) if f.bounds is not None else None)
                     for f in spec.features if f.type == "numeric"),
        integer_columns=tuple(f.name for f in spec.features if f.type == "numeric" and f.integer),
        utility_classes=tuple((label, tuple(classes)) for label, classes in side.utility_classes.items()),
        kept=tuple((choice.name, choice.utility) for choice in config.choices),
        withheld=tuple((choice, tuple(columns)) for choice, columns in _withheld(config).items()),
        keys=KeyBuckets(context.staging / "output-records",  # sized as 16 bytes a record (number and row id)
                        bucket_count([16 * rows], engine.parallelism)),
    )
    released = [ReleasedFile(where, number) for number, where in enumerate(files)]
    sums = engine.sum_by_key(engine.map_fragments(released, released_filter_summary, OUTPUT_METRICS_SCHEMA, check),
                             "metric", ["count"])
    metrics = dict.fromkeys(output_metric_names(check), 0)
    metrics.update(zip(sums["metric"].astype(str), sums["count"].astype(int), strict=True))
    metrics["record: repeats"] = find_repeated_keys(engine, check.keys, [file.ordinal for file in released]).repeats
    names = output_metric_names(check)
    return int(metrics["rows"]), validate_filter_output_metrics({name: metrics[name] for name in names}, names, spec,
                                                                rows)


def run_on_engine(context: ReleaseContext, plan: FilterPlan, filters: PreparedFilters, engine: Engine) -> ReleaseResult:
    """Stage the records, privatize them where they live, validate, evaluate, describe."""
    config, timer, secret, release_id = context.config, context.timer, context.secret, context.release_id
    spec, encoder, weights, trained = plan.spec, plan.encoder, filters.weights, filters.trained
    summaries, guarantee, prepared, side = filters.summaries, filters.guarantee, filters.input, filters.side
    out_schema = output_schema(spec, _utility_labels(config))
    with timer.stage("read input"):
        checked = read_input_on_engine(context, spec, prepared, engine)
    rows = checked.rows
    with timer.stage("privatize"):
        tasks = release_file_tasks(checked, context.staging / "data", engine.parallelism)
        written = engine.collect(engine.map_fragments(
            tasks, privatize_range, PRIVATIZED_FILES_SCHEMA,
            PrivatizeFiles(PositionedPrivatization(side, checked.offsets), out_schema)))
        nonempty = set(written.loc[written["rows"] > 0, "ordinal"].astype(int))
        files = [task.output for task in tasks if task.ordinal in nonempty]
    with timer.stage("validate output"):
        released_count, output_validation = check_output_on_engine(context, engine, files, spec, side, rows)
    evaluation: dict[str, Any] = {}
    if config.evaluation.enabled and output_validation.success:
        with timer.stage("evaluate"):
            from pipelines.filter.report import evaluation_report_of_samples

            draws, samples = evaluation_samples(engine, context, prepared, checked, files, spec)
            evaluation = evaluation_report_of_samples(config, spec, weights,
                                                      [choice.latent_filter for choice in trained], draws, samples,
                                                      filters.training_log_variance, secret, release_id)
    choices_report, choices_internal = [], []
    counts = checked.choice_counts
    for choice, result, summary, count in zip(config.choices, trained, summaries, counts, strict=True):
        choices_report.append({
            "name": choice.name,
            "private": choice.private,
            "utility": choice.utility,
            "budget": choice.budget,
            "utility_weight": choice.utility_weight,
            "max_sensitivity": choice.max_sensitivity,
        })
        choices_internal.append({
            "name": choice.name,
            "records": int(count),
            "distortion_on_training_records": result.stored.distortion,
            "training_records": result.stored.training_records,
            "training_seconds": result.seconds,
            "final_training_epoch": result.stored.final_epoch,
            "privacy": summary,
            "filter": result.latent_filter.to_dict(),
        })
    manifest: dict[str, Any] = {
        **context.manifest_identity(),
        "status": "published" if output_validation.success else "quarantined",
        "epsilon": guarantee["epsilon"],
        "delta": guarantee["delta"],
        "epsilon_rdp": guarantee["epsilon_rdp"],
        "privacy_unit": PRIVACY_UNIT,
        "guarantee": {
            "epsilon": guarantee["epsilon"],
            "delta": guarantee["delta"],
            "epsilon_rdp": guarantee["epsilon_rdp"],
            "basis": "the choices' sensitivity caps (known before any record is read)"
            if all(choice.max_sensitivity is not None for choice in config.choices)
            else "the stored filters (known before any record is read)" if plan.stored is not None
            else "the trained filters (known after training, before the released records are read)",
            "composition": "parallel over choices (each record is filtered once, by its owner's choice): "
                           "the release's guarantee is the weakest choice's",
            "conversion": config.privacy.conversion,
            "not_covered": NOT_COVERED,
        },
        "rows": int(released_count),
        "model_artifact_id": side.artifact_id,
        "encoder": {"artifact_id": side.artifact_id, "trained_at": encoder.trained_at.isoformat(),
                    "architecture": {key: value for key, value in weights.architecture.to_dict().items()
                                     if key != "layout"}},
        "choices": choices_report,
        "filters": {"source": "trained by this release" if plan.filter_set is None else "stored",
                    "artifact_id": None if plan.filter_set is None else plan.filter_set.artifact_id},
        "engine": engine.name,
        "validation": {"output": output_validation.to_json()},
        **context.manifest_provenance(),
    }
    internal = {
        "note": "computed from the raw and training records: operator figures outside the release's guarantee",
        "input_rows": rows,
        "choices": choices_internal,
        "encoder": {"data_fingerprint": filters.encoder.header["data_fingerprint"],
                    "training": filters.encoder.header["training"]},
        "filters": None if plan.filter_set is None else {
            "artifact_id": plan.filter_set.artifact_id, "dataset": plan.filter_set.dataset,
            "trained_at": plan.filter_set.trained_at.isoformat(),
            "data_fingerprint": plan.filter_set.description.get("data_fingerprint")},
        "clipped_values": checked.clipped,
        "input_fingerprint": checked.fingerprint,
        "validation": {
            "input": {
                "success": True,
                "checks": [
                    "every feature of the spec present, no missing value, categories in their lists, numbers "
                    "finite and inside their bounds (or clipped as the spec allows)",
                    "every label used by a choice inside its public domain",
                    "every record's choice is a configured choice; every configured choice has records",
                    "no private label is read from a feature column",
                ],
                "note": "checked on the engine while encoding (Great Expectations on the engine's metrics); any "
                        "failure stops the release with one line naming file, row and column",
                "metrics": checked.validation.to_json() if checked.validation is not None else None,
            },
        },
        "evaluation": evaluation,
    }
    return ReleaseResult(files, out_schema, manifest, output_validation.success, output_validation.first_line(),
                         internal)


def summary_line(manifest: dict[str, Any]) -> str:
    choices = ", ".join(choice["name"] for choice in manifest["choices"])
    return (
        f"published {manifest['rows']} privatized records on {manifest['engine']} with encoder "
        f"{manifest['model_artifact_id'][:12]} and choices {choices}; "
        f"epsilon={manifest['epsilon']:.4g}, delta={manifest['delta']:.3g} per record's private label"
    )


KIND = ReleaseKind(
    name="filter",
    config_model=FilterConfig,
    worker_modules=FILTER_WORKER_MODULES,
    plan=plan_release,
    prepare=prepare_filters,
    run_on_engine=run_on_engine,
    summary=summary_line,
    show_keys=("model_artifact_id",),
)


run_filter_release = KIND.run
