"""The release skeleton: what every release kind's run does, written once.

``run_release(kind, config, request)`` is the whole life of one release:

1. open it: the lake, the checked release id (generated when none is given) and, when that id is
   already published, the published outcome (re-running an id is a no-op);
2. admit it under the lake's policy (``pipelines/platform/policy.py``): a test secret only in a
   test lake, a budget set by an operator for the dataset, an input location that belongs to no
   other dataset — else refused (exit 4) before anything runs; the input's files are checked
   against other datasets' (keyed fingerprints) with the digests the executors compute as they
   read them (``pipelines/platform/input_prints.py``), before the input gate and before anything
   is published (a refusal there gives the reservation back, as any failure does);
3. the kind's ``plan``: what it decides from the configuration before touching the data (its
   guarantee, reserved in the ledger for the budget's unit; a catalog or an encoder to resolve);
4. the release secret (kinds that draw randomness), then the engine started in the background
   (a JVM for Spark) while the kind's ``prepare`` reads, validates and stages the input;
5. the kind's ``run_on_engine``: the jobs, the output validation and the manifest;
6. publish data and manifest in one commit — the last step: the charge is then final — or, when
   the output failed validation, delete it (quarantine keeps only why, in the operator-only
   record) and give the budget back, as on any failure before the commit.

A kind supplies only its stages (:class:`ReleaseKind`); they share one :class:`ReleaseContext`
instead of long parameter lists. The registry of kinds is ``pipelines/kinds.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipelines.engines import make_engine
from pipelines.engines.base import Engine, EngineError, EngineUnreachable
from pipelines.platform import log
from pipelines.platform.errors import (
    NothingToRelease,
    PrivlakeError,
    ReleaseQuarantined,
    ReleaseRefused,
    TransientFailure,
)
from pipelines.platform.failpoints import failpoint
from pipelines.platform.ids import check_release_id, new_release_id
from pipelines.platform.input_prints import fingerprint_pass, named_prints
from pipelines.platform.internal import OperatorRecords
from pipelines.platform.lake import Lake, ReleaseAlreadyPublished, open_lake
from pipelines.platform.ledger import BudgetExceeded, Charge, MixedPrivacyUnits, PrivacyLedger
from pipelines.platform.policy import RECORD_UNIT, BudgetPolicy, LakePolicy, location_of, source_location
from pipelines.platform.recovery import Lease, recover
from pipelines.platform.release_index import ReleaseIndex
from pipelines.platform.row_prints import RowPrinting, RowSketch
from schemas.base import EngineSettings
from transforms.core.keyed_randomness import new_release_secret, secret_from_hex

TEST_SECRET_VARIABLE = "PRIVLAKE_TEST_SECRET"


@dataclass(frozen=True)
class ReleaseOutcome:
    """A release's id, status and public manifest; ``internal`` is its operator-only record (stage
    timings and the figures computed from raw data), for the caller, never published."""

    release_id: str
    status: str
    manifest: dict[str, Any]
    already_published: bool = False
    internal: dict[str, Any] = field(default_factory=dict)
    summary: str = ""


def release_secret() -> tuple[bytes, str]:
    """The release secret and where it came from (never the secret itself in any output)."""
    fixed = os.environ.get(TEST_SECRET_VARIABLE)
    if fixed:
        try:
            return secret_from_hex(fixed), f"{TEST_SECRET_VARIABLE} (fixed: tests and audits only)"
        except ValueError as error:
            raise PrivlakeError(f"{TEST_SECRET_VARIABLE}: {error}") from None
    return new_release_secret(), "operating system (fresh per release)"


def code_version() -> str:
    """The git commit of the code when run from a checkout, else the package version."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        return f"git:{commit}{'+dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return f"privlake {version('privlake')}"
        except PackageNotFoundError:
            return "unknown"


class StageTimer:
    """Wall time per stage, for the operator record, with an optional progress line per stage and
    per step inside one (counts, and an estimate of the time left when the steps are known)."""

    def __init__(self, progress: Callable[[str], None] | None):
        self.timings: dict[str, float] = {}
        self._progress = progress
        self._stage_start = time.perf_counter()

    def report(self, text: str, done: int | None = None, total: int | None = None) -> None:
        """A progress line inside the current stage: ``text``, then ``done of total`` with the
        time left estimated from the stage's pace so far when both are given (``done`` finished
        steps; the first step gives no estimate)."""
        if not self._progress:
            return
        if done is not None and total:
            text = f"{text}: {done:,} of {total:,}"
            if 0 < done < total:
                left = (time.perf_counter() - self._stage_start) / done * (total - done)
                text += f", about {left:.0f} s left" if left >= 1 else ", under 1 s left"
        self._progress(text)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        failpoint(f"stage:{name}")
        if self._progress:
            self._progress(name)
        start = self._stage_start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = round(time.perf_counter() - start, 4)


def engine_request(
    settings: EngineSettings, engine_name: str | None, master: str | None
) -> tuple[str, dict[str, Any]]:
    """The engine to start and its options: the config's, overridden by the command line."""
    chosen = engine_name or settings.name
    options: dict[str, Any] = {"parallelism": settings.parallelism}
    if chosen == "spark":
        options.update(master=master or settings.spark.master, spark_conf=dict(settings.spark.conf))
        # the config's explicit opt-out and the cluster secret's file reach the engine (issue 12)
        if settings.spark.allow_unencrypted:
            options["allow_unencrypted"] = True
        if settings.spark.auth_secret_file is not None:
            options["auth_secret_file"] = str(settings.spark.auth_secret_file)
    elif chosen == "beam":
        options.update(beam_options=list(settings.beam.options))
        if settings.beam.allow_unencrypted:
            options["allow_unencrypted"] = True
    return chosen, options


def start_engine(chosen: str, options: dict[str, Any], worker_modules: Sequence[str],
                 driver_busy: Callable[[], bool] = lambda: True) -> Engine:
    """Start the engine and, while ``driver_busy()`` says the driver still has work of its own,
    warm its workers up with the release kind's worker-module imports.

    A warm-up that runs beside the driver's work hides the workers' first-job costs (worker
    processes, imports, the JVM's first code paths). One the release would wait behind only adds a
    job: the release's first job pays those costs anyway (issue 15, measured on the crowd kind,
    whose driver only lists the input: 1-2 s on ``local[2]``, 3-6 s on the standalone cluster)."""
    try:
        engine = make_engine(chosen, **options)
    except EngineUnreachable as error:
        raise TransientFailure(str(error)) from None
    except EngineError as error:
        raise PrivlakeError(str(error)) from None
    if not driver_busy():
        return engine
    try:
        engine.warm_up(list(worker_modules))
    except BaseException:
        engine.close()
        raise
    return engine


@contextmanager
def engine_in_background(
    engine: Engine | None,
    settings: EngineSettings,
    engine_name: str | None,
    master: str | None,
    worker_modules: Sequence[str],
) -> Iterator[Callable[[], Engine]]:
    """Start the engine (a JVM for Spark) in a background thread while the caller reads and
    validates the input, warming its workers up only while the caller is still at that work
    (:func:`start_engine`); yields a function that waits for it. An engine passed in is used as
    is and left open, with the release's side values and caches dropped on exit (it may serve
    more releases); one started here is closed on exit."""
    if engine is not None:
        given = engine
        try:
            yield lambda: given
        finally:
            given.drop_cached()
        return
    driver_busy = threading.Event()
    driver_busy.set()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="privlake-engine-start")
    pending: Future[Engine] = pool.submit(
        start_engine, *engine_request(settings, engine_name, master), worker_modules, driver_busy.is_set
    )
    pool.shutdown(wait=False)

    def wait_for_engine() -> Engine:
        driver_busy.clear()  # from here a warm-up not yet begun would only delay the release
        return pending.result()

    try:
        yield wait_for_engine
    finally:
        driver_busy.clear()  # a release that failed before waiting needs no warm-up either
        try:
            pending.result().close()
        except Exception:  # noqa: BLE001 - a failed start was already reported, or the run's error wins
            pass


@dataclass(frozen=True)
class ReleaseRequest:
    """How a release was asked for: the command line's engine and master overrides, a release id
    (default: a fresh one), an engine already running (it is left open), a progress callback."""

    engine_name: str | None = None
    master: str | None = None
    release_id: str | None = None
    engine: Engine | None = None
    progress: Callable[[str], None] | None = None


@dataclass
class ReleaseContext:
    """One release in progress, as every stage of every kind sees it: its configuration, lake,
    ledger, id, clock and stage timer, the secret (once drawn) and the budget reservation made
    for it (so that any failure before the commit gives it back, and only it)."""

    kind: str
    config: Any
    lake: Lake
    release_id: str
    started: datetime
    timer: StageTimer
    secret: bytes = b""
    secret_source: str = ""
    reserved: bool = False
    published: bool = False
    test_lake: bool = False
    budget: BudgetPolicy | None = None
    charge: Charge | None = None
    spent_after: Any = None
    lease: Lease | None = None
    inputs_checked: bool = False
    charged_dataset: str = ""
    """The dataset whose budget and ledger this release is charged to: its own, or the one an
    operator merged it into (``policy.LakePolicy.budget_dataset``)."""
    input_bound: bool = False
    _checked_input: tuple[list[tuple[str, str]], RowSketch] | None = field(default=None, repr=False)
    _ledger: PrivacyLedger | None = field(default=None, repr=False)
    _staging: Path | None = field(default=None, repr=False)

    @property
    def ledger(self) -> PrivacyLedger:
        if self._ledger is None:
            self._ledger = PrivacyLedger(self.lake)
        return self._ledger

    @property
    def staging(self) -> Path:
        """This release's staging folder: emptied of an interrupted attempt's left-overs on first
        use, then the same folder for every stage."""
        if self._staging is None:
            self._staging = self.lake.staging_directory(self.release_id)
        return self._staging

    def admit(self) -> None:
        """The lake's policy, before anything runs: a test secret only in a test lake; a budget for
        the dataset; an input that belongs to no other dataset (``ReleaseRefused``, exit 4)."""
        policy = LakePolicy(self.lake)
        self.test_lake = policy.is_test_lake()
        if os.environ.get(TEST_SECRET_VARIABLE) and not self.test_lake:
            raise ReleaseRefused(
                f"{TEST_SECRET_VARIABLE} is set, but {self.lake.description} is not a test lake: releases made with the "
                "fixed test secret go only into lakes made by `privlake init-lake LAKE --test`"
            )
        self.charged_dataset = policy.budget_dataset(self.config.dataset)
        self.budget = policy.admit(self.config.dataset, source_location(self.config.input))
        if self.budget.dataset != self.config.dataset:
            log.info(f"dataset '{self.config.dataset}' is merged into '{self.budget.dataset}': charged to its budget")
        failpoint("admitted")

    def fragment_key(self) -> bytes | None:
        """The key a kind's engine input pass fingerprints its fragments with
        (``sources.fragment_fingerprint``) so that :meth:`check_input_fingerprints` can use those
        digests: the lake's fingerprint key as 32 bytes of key material with the same HMAC
        (``policy.executor_key_of``); ``None`` when the lake's key has no such form (the kind then
        keys its own digests and the platform hashes the fragments in a pass of its own)."""
        return LakePolicy(self.lake).executor_key()

    def row_printing(self, fragments: Sequence[Any]) -> RowPrinting:
        """How a kind's engine input pass sketches its fragments' canonical rows
        (``row_prints.RowPrinting``): under the lake's row key (32 bytes, derived from its
        fingerprint key), each fragment's sketch sized by its share of the listed input."""
        return RowPrinting.of(LakePolicy(self.lake).row_key(), fragments)

    def check_input_fingerprints(self, engine: Engine, fragments: Sequence[Any],
                                 prints: Iterable[tuple[int, str]] | None, sketches: Iterable[str]) -> None:
        """The input must not be another dataset's (exit 4): no file another dataset used
        (``policy.check_files``), checked with ``prints`` — ``(ordinal, fingerprint)`` of every
        fragment as the executors computed them under :meth:`fragment_key`, or, when ``None``,
        hashed on the engine by the platform's own pass (``input_prints.fingerprint_pass``) — and
        no sizeable part of its rows in another dataset's recorded rows (``policy.check_overlap``),
        checked with ``sketches``: each fragment's row sketch as text
        (``row_prints.RowSketch.to_text``, made as :meth:`row_printing` says). Only digests and sketches reach
        the driver. Nothing is recorded here: the input is bound once the release also holds its
        reservation (:meth:`_bind_input`). Called before the input gate can fail and before
        anything is published."""
        policy = LakePolicy(self.lake)
        if prints is None or policy.executor_key() is None:
            prints = fingerprint_pass(engine, fragments, policy.fingerprint_key())
        named = named_prints(fragments, prints)
        sketch = RowSketch.merge_texts(sketches)
        policy.check_files(self.config.dataset, named)
        policy.check_overlap(self.config.dataset, location_of(source_location(self.config.input)), sketch)
        self._checked_input = (named, sketch)
        self.inputs_checked = True
        failpoint("inputs checked")
        self._bind_input()

    def _bind_input(self) -> None:
        """Bind the input to the dataset (``policy.bind_input``) once it is checked and the release
        holds its reservation, whichever comes last: a refused release binds nothing."""
        if self.input_bound or not self.reserved or self._checked_input is None:
            return
        prints, sketch = self._checked_input
        LakePolicy(self.lake).bind_input(self.config.dataset, self.release_id,
                                         location_of(source_location(self.config.input)), prints, sketch)
        self.input_bound = True

    def reserve(self, guarantee: dict[str, Any]) -> None:
        """Reserve the release's charge before the data it covers is read: the guarantee's
        whole-release (ε, δ) and steps — or, when the dataset's budget is per record, its
        ``per_record`` part. Refuse (``ReleaseRefused``) when the dataset's composed spending would
        exceed its budget."""
        if self.budget is None:
            raise RuntimeError("reserve before admit")
        if self.budget.unit == RECORD_UNIT:
            part = guarantee.get("per_record")
            if part is None:
                raise ReleaseRefused(f"dataset '{self.config.dataset}' is budgeted per record, but a {self.kind} "
                                     "release has no per-record figure; budget it per release")
        else:
            part = guarantee
        if part.get("epsilon") is None or part.get("delta") is None:
            advice = guarantee.get("advice") or "no finite (epsilon, delta) for this configuration"
            raise ReleaseRefused(f"the {self.kind} release states no finite guarantee per {self.budget.unit}: {advice}")
        charge = Charge.of(part["epsilon"], part["delta"], part.get("steps", ()), self.budget.unit,
                           str(guarantee.get("privacy_unit", "")))
        try:
            self.spent_after = self.ledger.reserve(self.budget.dataset, self.release_id, self.kind, charge,
                                                   self.budget)
        except (BudgetExceeded, MixedPrivacyUnits) as error:
            raise ReleaseRefused(str(error)) from None
        self.charge = charge
        self.reserved = True
        failpoint("reserved")
        self._bind_input()

    def refund(self) -> None:
        """Give back this release's reservation, if it made one and has not published (at most
        once): a published release's charge is final."""
        if self.reserved and not self.published:
            self.reserved = False
            self.ledger.refund(self.charged_dataset or self.config.dataset, self.release_id)

    def manifest_charge(self) -> dict[str, Any]:
        """The manifest keys that say what the ledger charged and where the release was made."""
        charge = self.charge.to_json() if self.charge is not None else None
        return {"charged": charge, "budget_unit": self.budget.unit if self.budget else None,
                "test_lake": self.test_lake}

    def headline(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """A published manifest always states a finite guarantee first: the whole-release bound,
        or — only when the dataset is budgeted per record and no whole-release bound exists — the
        per-record figure it was charged, named as such in ``headline_scope``."""
        if manifest.get("epsilon") is not None and manifest.get("delta") is not None:
            return {"headline_scope": "whole release"}
        if self.charge is None or self.charge.unit != RECORD_UNIT:
            raise RuntimeError("a release without a finite whole-release guarantee was not refused")
        return {"epsilon": self.charge.epsilon, "delta": self.charge.delta,
                "headline_scope": "per record (the dataset is budgeted per record; this release has no finite "
                                  "whole-release bound)"}

    def manifest_identity(self) -> dict[str, Any]:
        """The manifest keys every kind writes first."""
        return {"release_id": self.release_id, "kind": self.kind, "dataset": self.config.dataset}

    def manifest_provenance(self) -> dict[str, Any]:
        """The manifest keys every kind writes last: the config as run, the code version, where the
        secret came from and with which Python. When the release started, and its stage timings,
        go to the operator-only record: with the publication time they would give its duration,
        which depends on the data."""
        return {
            "config": self.config.model_dump(mode="json", by_alias=True),
            "code_version": code_version(),
            "secret_source": self.secret_source,
            "python": sys.version.split()[0],
        }


@dataclass(frozen=True)
class ReleaseResult:
    """What a kind's ``run_on_engine`` hands back: the staged data files and their schema, the
    public manifest, the output validation's verdict (with its first issue when it failed), and the
    operator-only record (``pipelines/platform/internal.py``: figures computed from raw data)."""

    files: list[Path]
    schema: pa.Schema
    manifest: dict[str, Any]
    output_valid: bool
    first_issue: str | None
    internal: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReleaseKind:
    """A release kind, as the platform runs it.

    ``plan(context)`` decides from the configuration alone, before the engine starts or the data
    is read (may ``context.reserve``); ``prepare(context, plan)`` is the driver's work while the
    engine starts (read, validate, stage; may reserve once a guarantee is known); and
    ``run_on_engine(context, plan, prepared, engine)`` runs the jobs and returns the
    :class:`ReleaseResult`. ``summary(manifest)`` is the one line ``privlake run`` prints.
    ``worker_modules`` are imported by the engine's workers at start-up; ``show_keys`` are the
    kind's own manifest keys ``privlake show`` lists; ``draws_randomness`` says whether the
    release needs a secret."""

    name: str
    config_model: type
    worker_modules: tuple[str, ...]
    plan: Callable[[ReleaseContext], Any]
    prepare: Callable[[ReleaseContext, Any], Any]
    run_on_engine: Callable[[ReleaseContext, Any, Any, Engine], ReleaseResult]
    summary: Callable[[dict[str, Any]], str]
    show_keys: tuple[str, ...] = ()
    draws_randomness: bool = True
    reserves_on_engine: bool = False
    """The kind reserves its charge in ``run_on_engine``, once the engine has counted what its
    guarantee needs (the tabular kind's public record count), before anything private is computed
    from the rows; the platform then checks the reservation after ``run_on_engine``."""

    def run(self, config: Any, **request: Any) -> ReleaseOutcome:
        """One release of this kind end to end: its id, status and manifest. ``request`` takes the
        fields of :class:`ReleaseRequest` (``release_id``, ``engine``, ``engine_name``, …)."""
        return run_release(self, config, ReleaseRequest(**request))


def open_release(kind: str, config: Any, request: ReleaseRequest) -> ReleaseContext | ReleaseOutcome:
    """The context of a new release, or the outcome of its id when that is already published."""
    lake = open_lake(config.lake)
    release_id = check_release_id(request.release_id or new_release_id(config.dataset))
    if lake.is_published(release_id):
        return ReleaseOutcome(release_id, "published", lake.manifest(release_id), already_published=True)
    context = ReleaseContext(kind, config, lake, release_id, datetime.now(UTC), StageTimer(request.progress))
    context.charged_dataset = LakePolicy(lake).budget_dataset(config.dataset)
    return context


def run_release(kind: ReleaseKind, config: Any, request: ReleaseRequest) -> ReleaseOutcome:
    """One release of ``kind`` end to end (module docstring): its id, status and manifest."""
    opened = open_release(kind.name, config, request)
    if isinstance(opened, ReleaseOutcome):
        return opened
    context = opened
    token = log.current_release.set(context.release_id)
    try:
        report_recovery(recover(context.lake))
        with Lease(context.lake, context.release_id, context.charged_dataset, kind.name) as lease:
            context.lease = lease
            return _run_leased(kind, config, request, context)
    finally:
        log.current_release.reset(token)


def report_recovery(recovery: Any) -> None:
    """What the recovery at the start of a run did, one line each on stderr (nothing if nothing)."""
    if recovery.did_anything:
        for line in recovery.lines():
            if not line.startswith("left alone"):
                log.info(f"recover: {line}")


def _run_leased(kind: ReleaseKind, config: Any, request: ReleaseRequest, context: ReleaseContext) -> ReleaseOutcome:
    """The release's stages under its lease (``run_release``)."""
    try:
        context.admit()
        plan = kind.plan(context)
        if kind.draws_randomness:
            context.secret, context.secret_source = release_secret()
        with engine_in_background(request.engine, config.engine, request.engine_name, request.master,
                                  kind.worker_modules) as wait_for_engine:
            prepared = kind.prepare(context, plan)
            with context.timer.stage("wait for engine"):
                engine = wait_for_engine()
            if not context.reserved and not kind.reserves_on_engine:
                raise RuntimeError(f"the {kind.name} release reserved no charge before running")
            result = kind.run_on_engine(context, plan, prepared, engine)
            if not context.reserved:
                raise RuntimeError(f"the {kind.name} release reserved no charge")
            if not context.inputs_checked:
                raise RuntimeError(f"the {kind.name} release did not check its input's fingerprints")
            if not context.input_bound:
                raise RuntimeError(f"the {kind.name} release did not bind its input")
        return finish_release(context, result, kind.summary)
    except ReleaseAlreadyPublished:
        return ReleaseOutcome(context.release_id, "published", context.lake.manifest(context.release_id),
                              already_published=True)
    except ReleaseQuarantined:
        context.lake.discard_staging(context.release_id)
        raise
    except BaseException:
        context.refund()
        context.lake.discard_staging(context.release_id)
        raise


def finish_release(context: ReleaseContext, result: ReleaseResult,
                   summary: Callable[[dict[str, Any]], str] | None = None) -> ReleaseOutcome:
    """The end of every release: publish data and manifest in one commit — the last step that can
    fail the release: once it lands the charge is final — or, when the output failed validation,
    delete the output (quarantine keeps only why, in the operator-only record), give the budget
    back and raise ``ReleaseQuarantined`` naming the first issue. Staging is discarded after
    publishing. The summary line is formatted before the commit, so that it cannot fail after it."""
    lake, release_id, timer = context.lake, context.release_id, context.timer
    manifest = {**result.manifest, **context.manifest_charge(),
                "table": ".".join(lake.release_identifier(release_id))}
    manifest.update(context.headline(manifest))
    manifest.pop("timings", None)
    line = summary(manifest) if summary is not None and result.output_valid else ""
    records = OperatorRecords(lake)
    if not result.output_valid:
        lake.quarantine(release_id, result.files)
        context.refund()
        records.record(release_id, context.config.dataset, context.kind, "quarantined",
                       {**result.internal, "manifest": manifest, "first_issue": result.first_issue,
                        "timings": dict(timer.timings)})
        raise ReleaseQuarantined(
            f"release {release_id} failed output validation and was quarantined (output deleted; "
            f"`privlake show {release_id} --internal` says why): {result.first_issue or 'see the internal record'}"
        )
    if manifest.get("rows") == 0:
        lake.quarantine(release_id, result.files)
        context.refund()
        records.record(release_id, context.config.dataset, context.kind, "nothing to release",
                       {**result.internal, "manifest": manifest, "timings": dict(timer.timings)})
        raise NothingToRelease(
            f"release {release_id}: nothing to release — no {context.kind} output row passed the privacy mechanism "
            "(nothing published; the reservation is given back)"
        )
    with timer.stage("publish"):
        if context.lease is not None and not context.lease.confirm(context.ledger):
            context.reserved = False  # given back already, by a recovery that judged this run dead
            raise ReleaseRefused(
                f"release {release_id}: its budget reservation was refunded by `privlake recover` while it ran "
                "(its lease expired: the driver stalled longer than PRIVLAKE_LEASE_SECONDS); nothing was published, "
                "run it again"
            )
        lake.publish(release_id, context.kind, result.files, result.schema, manifest)
    context.published = True
    failpoint("published")
    internal = {**result.internal, "started_at": context.started.isoformat(), "timings": dict(timer.timings)}
    _after_publish(context, lambda: context.ledger.published(context.charged_dataset, release_id))
    _after_publish(context, lambda: records.record(release_id, context.config.dataset, context.kind, "published",
                                                   internal))
    _after_publish(context, lambda: ReleaseIndex(lake).add([lake.release(release_id)]))
    _after_publish(context, lambda: lake.discard_staging(release_id))
    return ReleaseOutcome(release_id, "published", manifest, internal=internal, summary=line)


def _after_publish(context: ReleaseContext, step: Callable[[], None]) -> None:
    """Book-keeping after the commit must not fail a published release: the release is public and
    charged whatever happens here (a reservation that stays ``reserved`` is charged just the same;
    ``privlake recover`` completes it)."""
    try:
        step()
    except Exception as error:  # noqa: BLE001 - the release is published; report, do not fail it
        log.warning(f"release {context.release_id} is published, but book-keeping after the commit failed: "
                    f"{type(error).__name__}")
