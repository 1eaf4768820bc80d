"""What every release kind's run shares: ids, the secret, the code version, stage timings, and
starting the engine in the background while the driver reads and validates the input."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipelines.engines import make_engine
from pipelines.engines.base import Engine, EngineError
from pipelines.platform.errors import PrivlakeError, ReleaseQuarantined, ReleaseRefused
from pipelines.platform.lake import Lake, ReleaseAlreadyPublished
from pipelines.platform.ledger import BudgetExceeded, PrivacyLedger
from schemas.base import Budget, EngineSettings
from transforms.core.keyed_randomness import new_release_secret, secret_from_hex

TEST_SECRET_VARIABLE = "PRIVLAKE_TEST_SECRET"
RELEASE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


@dataclass(frozen=True)
class ReleaseOutcome:
    release_id: str
    status: str
    manifest: dict[str, Any]
    already_published: bool = False


def release_secret() -> tuple[bytes, str]:
    """The release secret and where it came from (never the secret itself in any output)."""
    fixed = os.environ.get(TEST_SECRET_VARIABLE)
    if fixed:
        try:
            return secret_from_hex(fixed), f"{TEST_SECRET_VARIABLE} (fixed: tests and audits only)"
        except ValueError as error:
            raise PrivlakeError(f"{TEST_SECRET_VARIABLE}: {error}") from None
    return new_release_secret(), "operating system (fresh per release)"


def new_release_id(dataset: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{dataset}-{stamp}-{os.urandom(3).hex()}"


def code_version() -> str:
    """The git commit of the code when run from a checkout, else the package version."""
    root = Path(__file__).resolve().parent.parent
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
    """Wall time per stage, for the manifest, with an optional progress line per stage."""

    def __init__(self, progress: Callable[[str], None] | None):
        self.timings: dict[str, float] = {}
        self._progress = progress

    def report(self, text: str) -> None:
        if self._progress:
            self._progress(text)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if self._progress:
            self._progress(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = round(time.perf_counter() - start, 4)


def check_release_id(release_id: str) -> str:
    if not RELEASE_ID_PATTERN.match(release_id):
        raise PrivlakeError(f"release id {release_id!r}: use letters, digits, '.', '_' and '-' (at most 128)")
    return release_id


def engine_request(
    settings: EngineSettings, engine_name: str | None, master: str | None
) -> tuple[str, dict[str, Any]]:
    """The engine to start and its options: the config's, overridden by the command line."""
    chosen = engine_name or settings.name
    options: dict[str, Any] = {"parallelism": settings.parallelism}
    if chosen == "spark":
        options.update(master=master or settings.spark.master, spark_conf=dict(settings.spark.conf))
    elif chosen == "beam":
        options.update(beam_options=list(settings.beam.options))
    return chosen, options


def start_engine(chosen: str, options: dict[str, Any], worker_modules: Sequence[str]) -> Engine:
    """Start the engine and warm its workers up with the release kind's worker-module imports."""
    try:
        engine = make_engine(chosen, **options)
    except EngineError as error:
        raise PrivlakeError(str(error)) from None
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
    validates the input; yields a function that waits for it. An engine passed in is used as
    is and left open, with the release's side values and caches dropped on exit (it may serve
    more releases); one started here is closed on exit."""
    if engine is not None:
        given = engine
        try:
            yield lambda: given
        finally:
            given.drop_cached()
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="privlake-engine-start")
    pending: Future[Engine] = pool.submit(
        start_engine, *engine_request(settings, engine_name, master), worker_modules
    )
    pool.shutdown(wait=False)
    try:
        yield pending.result
    finally:
        try:
            pending.result().close()
        except Exception:  # noqa: BLE001 - a failed start was already reported, or the run's error wins
            pass


def published_outcome(lake: Lake, release_id: str) -> ReleaseOutcome | None:
    """The outcome of an already published release id (re-running it is a no-op), else ``None``."""
    if lake.is_published(release_id):
        return ReleaseOutcome(release_id, "published", lake.manifest(release_id), already_published=True)
    return None


def reserve_budget(ledger: PrivacyLedger, dataset: str, release_id: str, epsilon: float, delta: float,
                   budget: Budget | None, kind: str) -> None:
    """Reserve the release's (ε, δ) in the ledger before any data is read; refuse when it would
    exceed the dataset's budget. No budget configured: nothing is charged."""
    if budget is None:
        return
    try:
        ledger.reserve(dataset, release_id, epsilon, delta, budget.epsilon, budget.delta, kind)
    except BudgetExceeded as error:
        raise ReleaseRefused(str(error)) from None


def guarded_release(lake: Lake, release_id: str, refund: Callable[[], None] | None,
                    run: Callable[[], ReleaseOutcome]) -> ReleaseOutcome:
    """Run a reserved release: a concurrent publish of the same id is a no-op; a quarantined release
    keeps its reservation (its manifest says why, and the pipeline refunds it); any other failure
    refunds the reservation; staging is discarded in every failure."""
    try:
        return run()
    except ReleaseAlreadyPublished:
        return ReleaseOutcome(release_id, "published", lake.manifest(release_id), already_published=True)
    except ReleaseQuarantined:
        lake.discard_staging(release_id)
        raise
    except BaseException:
        if refund is not None:
            refund()
        lake.discard_staging(release_id)
        raise


@dataclass(frozen=True)
class ReleaseStart:
    """The opening of every release: its clock and stage timer, the lake, the checked release id
    (generated when none is given), and the outcome when that id is already published."""

    started: datetime
    timer: StageTimer
    lake: Lake
    release_id: str
    published: ReleaseOutcome | None


def start_release(lake_path: Path, dataset: str, release_id: str | None,
                  progress: Callable[[str], None] | None) -> ReleaseStart:
    started = datetime.now(UTC)
    lake = Lake(lake_path)
    checked = check_release_id(release_id or new_release_id(dataset))
    return ReleaseStart(started, StageTimer(progress), lake, checked, published_outcome(lake, checked))


def finish_release(lake: Lake, release_id: str, kind: str, files: list[Path], schema: Any, manifest: dict[str, Any],
                   output_valid: bool, first_issue: str | None, timer: StageTimer,
                   refund: Callable[[], None] | None) -> ReleaseOutcome:
    """The end of every release: publish data and manifest in one commit, or, when the output
    failed validation, quarantine them, give the budget back (``refund``) and raise
    ``ReleaseQuarantined`` naming the first issue. Staging is discarded after publishing."""
    if not output_valid:
        manifest["timings"] = dict(timer.timings)
        lake.quarantine(release_id, files, manifest)
        if refund is not None:
            refund()
        raise ReleaseQuarantined(
            f"release {release_id} failed output validation and was quarantined: {first_issue or 'see manifest'}"
        )
    with timer.stage("publish"):
        manifest["timings"] = dict(timer.timings)
        lake.publish(release_id, kind, files, schema, manifest)
    manifest["timings"] = dict(timer.timings)
    lake.discard_staging(release_id)
    return ReleaseOutcome(release_id, "published", manifest)
