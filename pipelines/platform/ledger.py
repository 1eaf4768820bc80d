"""The privacy ledger: what each dataset's releases have spent, composed the way they compose.

DESIGN.md, "Releases and the lake": the ledger is a lake table; a release that would exceed its
dataset's budget is refused *before* any computation touches the data; a release that ends before
its commit (failure, quarantine) consumes no budget; a published release's charge is final.

The table ``privlake.ledger`` is append-only. Each row is an event about one release of one
dataset: ``reserved`` (taken before the release runs), ``published`` (the release committed: final,
never refunded) or ``refunded`` (it failed before committing; its budget is given back). The state of
a release is its latest event (largest ``sequence``). Each row carries what the release ran — its
*privacy steps* (``transforms/core/accounting.py``: mechanism, (ε, δ), count) — for the unit its
dataset's budget charges (``pipelines/platform/policy.py``: the whole release by default).

Composition: a dataset's spending is the composition of the steps of every release that is
reserved or published, at the budget's δ: the smaller ε of basic composition (Dwork and Roth,
Theorem 3.16; valid for any adaptive mix) and of privacy-loss distributions
(``transforms/core/privacy_loss.py``: each step's dominating pair, pessimistic discretization) —
never looser than summing. A reservation is accepted when that ε, with the new release's steps
added, is at most the budget's ε (a relative 1e-12 absorbs the rounding of float sums such as
0.1 + 0.2, a relative 1e-16; any real overdraft is refused).

Concurrency: pyiceberg's own commit retry is switched off for this table
(``commit.retry.num-retries = 0``), because a blind retry would re-append a reservation without
re-checking the budget. Every reservation reads the ledger at a snapshot, checks the budget and
appends on top of *that* snapshot; if another writer committed in between, the catalog rejects the
commit (optimistic concurrency) and the reservation is re-read, re-checked and retried, at most
``MAX_COMMIT_ATTEMPTS`` times. Reading the ledger never writes: a missing table reads as empty.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pandas as pd
import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table
from pyiceberg.types import StringType

from pipelines.platform.lake import Lake
from pipelines.platform.policy import BudgetPolicy
from transforms.core.accounting import APPROXIMATE_DP, PURE_DP, Composition, PrivacyStep, compose

LEDGER_NAMESPACE = "privlake"
LEDGER_TABLE = "ledger"
RESERVED = "reserved"
PUBLISHED = "published"
REFUNDED = "refunded"
ACTIVE = (RESERVED, PUBLISHED)
BUDGET_RELATIVE_TOLERANCE = 1e-12
MAX_COMMIT_ATTEMPTS = 50
_RETRY_PAUSE_SECONDS = 0.02

LEDGER_SCHEMA = pa.schema(
    [
        pa.field("sequence", pa.int64(), nullable=False),
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("release_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("epsilon", pa.float64(), nullable=False),
        pa.field("delta", pa.float64(), nullable=False),
        pa.field("total_epsilon", pa.float64(), nullable=False),
        pa.field("total_delta", pa.float64(), nullable=False),
        pa.field("recorded_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("unit", pa.string(), nullable=True),
        pa.field("steps", pa.string(), nullable=True),
        pa.field("privacy_unit", pa.string(), nullable=True),
    ]
)
LEDGER_PROPERTIES = {
    "commit.retry.num-retries": "0",
    # every event is a commit: keep the last metadata files only (the current snapshot holds every
    # row of an append-only table; older snapshots are expired after each write)
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": str(20),
}
SNAPSHOTS_KEPT_SECONDS = 24 * 3600
"""Ledger snapshots older than this are expired by the next write (reads never write)."""
_ADDED_COLUMNS = ("unit", "steps", "privacy_unit")
"""Columns added after the first lakes were made: added to an old table on its next write."""


@dataclass(frozen=True)
class Charge:
    """What one release is charged: its headline (ε, δ) as its manifest states it, the steps the
    accountant composes, what the dataset's budget charges (``unit``: the whole ``release`` or one
    ``record``) and the neighbouring relation the numbers are for (``privacy_unit``, in words)."""

    epsilon: float
    delta: float
    steps: tuple[PrivacyStep, ...] = field(default=())
    unit: str = "release"
    privacy_unit: str = ""

    def __post_init__(self) -> None:
        _check_amount("epsilon", self.epsilon)
        _check_amount("delta", self.delta, upper=1.0)

    @classmethod
    def of(cls, epsilon: float, delta: float, steps: Iterable[PrivacyStep | dict] = (), unit: str = "release",
           privacy_unit: str = "") -> Charge:
        """A charge from a guarantee's headline and steps (dicts as manifests hold them). Without
        steps, the headline itself is the one step."""
        parsed = tuple(step if isinstance(step, PrivacyStep) else PrivacyStep.from_json(step) for step in steps)
        if not parsed and (epsilon > 0 or delta > 0):
            parsed = (_headline_step(float(epsilon), float(delta)),)
        return cls(float(epsilon), float(delta), parsed, unit, privacy_unit)

    def steps_json(self) -> str:
        return json.dumps([step.to_json() for step in self.steps], sort_keys=True)

    def to_json(self) -> dict:
        return {"unit": self.unit, "privacy_unit": self.privacy_unit, "epsilon": self.epsilon, "delta": self.delta,
                "steps": [step.to_json() for step in self.steps]}


def _headline_step(epsilon: float, delta: float) -> PrivacyStep:
    return PrivacyStep(PURE_DP if delta == 0 else APPROXIMATE_DP, epsilon, delta, 1, what="a whole release")


class BudgetExceeded(Exception):
    """A reservation would take a dataset over its budget (composed ε at the budget's δ)."""

    def __init__(self, dataset: str, spent: Composition, requested: Charge, budget: BudgetPolicy,
                 after: Composition) -> None:
        self.dataset = dataset
        self.spent = spent
        self.requested = requested
        self.budget = budget
        self.after = after
        super().__init__(
            f"privacy budget of dataset '{dataset}' exceeded: spent epsilon={spent.epsilon:.6g} and this release's "
            f"epsilon={requested.epsilon:.6g}, delta={requested.delta:.6g} compose to epsilon={after.epsilon:.6g} "
            f"at delta={budget.delta:.6g}, more than the budget epsilon={budget.epsilon:.6g}"
        )


class MixedPrivacyUnits(Exception):
    """A dataset's releases must share one neighbouring relation: a total composed over releases
    that protect different units (one claim, one source's claims, one record) would hold only for
    the finest of them and be read as covering the coarsest."""

    def __init__(self, dataset: str, existing: set[str], requested: str) -> None:
        super().__init__(
            f"dataset '{dataset}' is charged for releases protecting {sorted(existing)[0]!r}; this release protects "
            f"{requested!r}: one dataset, one privacy unit (use another dataset name with its own budget and input)"
        )


class UnknownReservation(KeyError):
    """No reservation exists for this dataset and release."""

    def __init__(self, dataset: str, release_id: str) -> None:
        super().__init__(dataset, release_id)
        self.dataset = dataset
        self.release_id = release_id

    def __str__(self) -> str:
        return f"dataset '{self.dataset}' has no reservation for release '{self.release_id}'"


class ChargeFinal(RuntimeError):
    """A published release's charge cannot be refunded."""


class LedgerContention(RuntimeError):
    """The ledger kept changing under this writer for ``MAX_COMMIT_ATTEMPTS`` attempts."""


def row_steps(row: pd.Series | dict) -> list[PrivacyStep]:
    """The steps a ledger row recorded (a row written before steps were recorded: its headline)."""
    text = row.get("steps") if hasattr(row, "get") else None
    if isinstance(text, str) and text:
        return [PrivacyStep.from_json(step) for step in json.loads(text)]
    epsilon, delta = float(row["epsilon"]), float(row["delta"])
    return [_headline_step(epsilon, delta)] if (epsilon > 0 or delta > 0) else []


@dataclass(frozen=True)
class _LedgerState:
    """The ledger at one snapshot: every row, and the latest event per (dataset, release)."""

    table: Table | None
    rows: pd.DataFrame
    latest: pd.DataFrame

    @property
    def next_sequence(self) -> int:
        return int(self.rows["sequence"].max()) + 1 if len(self.rows) else 1

    def latest_event(self, dataset: str, release_id: str) -> pd.Series | None:
        match = self.latest[(self.latest["dataset"] == dataset) & (self.latest["release_id"] == release_id)]
        return None if match.empty else match.iloc[0]

    def active_steps(self, dataset: str) -> list[PrivacyStep]:
        active = self.latest[(self.latest["dataset"] == dataset) & (self.latest["status"].isin(ACTIVE))]
        return [step for _, row in active.iterrows() for step in row_steps(row)]

    def spent(self, dataset: str, delta: float) -> Composition:
        return compose(self.active_steps(dataset), delta)

    def active_privacy_units(self, dataset: str) -> set[str]:
        """The privacy units of the dataset's reserved and published releases (rows of lakes
        older than the column have none)."""
        active = self.latest[(self.latest["dataset"] == dataset) & (self.latest["status"].isin(ACTIVE))]
        return {str(unit) for unit in active["privacy_unit"] if isinstance(unit, str) and unit}


def _check_amount(name: str, value: float, upper: float | None = None) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0 or (upper is not None and value >= upper):
        bound = f" and below {upper:g}" if upper is not None else ""
        raise ValueError(f"{name} must be a finite number at least 0{bound}, got {value!r}")
    return value


def within_budget(spent: float, total: float) -> bool:
    """``spent ≤ total`` up to the documented relative tolerance."""
    return spent <= total * (1.0 + BUDGET_RELATIVE_TOLERANCE)


class PrivacyLedger:
    """Budget accounting per dataset in the lake table ``privlake.ledger``."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self._table: Table | None = None

    def _writable_table(self) -> Table:
        """The ledger table, created on the first write (and brought to the current schema)."""
        if self._table is None:
            table = self.lake.load_or_create_table(LEDGER_NAMESPACE, LEDGER_TABLE, LEDGER_SCHEMA,
                                                   properties=LEDGER_PROPERTIES)
            if any(table.properties.get(key) != value for key, value in LEDGER_PROPERTIES.items()):
                with table.transaction() as transaction:
                    transaction.set_properties(LEDGER_PROPERTIES)
            missing = [name for name in _ADDED_COLUMNS if name not in table.schema().column_names]
            if missing:
                with table.update_schema() as update:
                    for name in missing:
                        update.add_column(name, StringType())
            self._table = table
        return self._table

    def _existing_table(self) -> Table | None:
        if self._table is not None:
            return self._table.refresh()
        try:
            return self.lake.catalog.load_table((LEDGER_NAMESPACE, LEDGER_TABLE))
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def _read(self, for_writing: bool = False) -> _LedgerState:
        table = self._writable_table().refresh() if for_writing else self._existing_table()
        if table is None or table.current_snapshot() is None:
            rows = _empty_rows()
        else:
            rows = table.scan().to_pandas()
            for name in _ADDED_COLUMNS:
                if name not in rows.columns:
                    rows[name] = None
        rows = rows.sort_values("sequence", kind="stable").reset_index(drop=True)
        latest = rows.drop_duplicates(["dataset", "release_id"], keep="last")
        return _LedgerState(table=table, rows=rows, latest=latest)

    def _append_rows(self, state: _LedgerState, rows: list[dict]) -> None:
        """Append on top of the snapshot ``state`` was read at; ``CommitFailedException`` if
        another writer committed since."""
        frame = pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA)
        with state.table.transaction() as transaction:
            transaction.append(frame)

    def _event(self, state: _LedgerState, **values: object) -> dict:
        return {"sequence": state.next_sequence, "recorded_at": datetime.now(UTC), **values}

    def spent(self, dataset: str, delta: float) -> Composition:
        """What ``dataset`` has spent at ``delta``: its reserved and published releases composed."""
        return self._read().spent(dataset, delta)

    def reserve(self, dataset: str, release_id: str, kind: str, charge: Charge, budget: BudgetPolicy) -> Composition:
        """Take ``charge`` from ``dataset``'s ``budget`` for ``release_id`` and return the dataset's
        composed spending with it, or raise :class:`BudgetExceeded` without writing anything. A
        release already holding a reservation is not charged again (a retried run of the same
        release id); asking it for a different charge is an error."""
        outcome: list[Composition] = []

        def attempt(state: _LedgerState) -> list[dict] | None:
            current = state.latest_event(dataset, release_id)
            if current is not None and current["status"] in ACTIVE:
                if not (math.isclose(current["epsilon"], charge.epsilon) and math.isclose(current["delta"], charge.delta)):
                    raise ValueError(
                        f"release '{release_id}' of dataset '{dataset}' already reserved epsilon={current['epsilon']:g}, "
                        f"delta={current['delta']:g}, not epsilon={charge.epsilon:g}, delta={charge.delta:g}"
                    )
                outcome.append(state.spent(dataset, budget.delta))
                return None
            units = state.active_privacy_units(dataset)
            if charge.privacy_unit and units and units != {charge.privacy_unit}:
                raise MixedPrivacyUnits(dataset, units, charge.privacy_unit)
            before = state.active_steps(dataset)
            after = compose([*before, *charge.steps], budget.delta)
            if not within_budget(after.epsilon, budget.epsilon):
                raise BudgetExceeded(dataset, compose(before, budget.delta), charge, budget, after)
            outcome.append(after)
            return [self._row(state, dataset, release_id, kind, RESERVED, charge, budget)]

        self._commit_with_retries(attempt)
        return outcome[-1]

    def _row(self, state: _LedgerState, dataset: str, release_id: str, kind: str, status: str, charge: Charge,
             budget: BudgetPolicy | tuple[float, float]) -> dict:
        total = (budget.epsilon, budget.delta) if isinstance(budget, BudgetPolicy) else budget
        return self._event(state, dataset=dataset, release_id=release_id, kind=kind, status=status,
                           epsilon=charge.epsilon, delta=charge.delta, total_epsilon=float(total[0]),
                           total_delta=float(total[1]), unit=charge.unit, steps=charge.steps_json(),
                           privacy_unit=charge.privacy_unit)

    def _follow_up(self, dataset: str, release_id: str, status: str) -> None:
        """Append ``status`` for a reserved release, carrying its charge."""

        def attempt(state: _LedgerState) -> list[dict] | None:
            current = state.latest_event(dataset, release_id)
            if current is None:
                raise UnknownReservation(dataset, release_id)
            if current["status"] == status:
                return None
            if current["status"] == PUBLISHED:
                raise ChargeFinal(f"release '{release_id}' of dataset '{dataset}' is published: its charge is final")
            if current["status"] == REFUNDED:
                raise UnknownReservation(dataset, release_id)
            charge = Charge(float(current["epsilon"]), float(current["delta"]), tuple(row_steps(current)),
                            str(current["unit"] or "release"), str(current["privacy_unit"] or ""))
            return [self._row(state, dataset, release_id, str(current["kind"]), status, charge,
                              (current["total_epsilon"], current["total_delta"]))]

        self._commit_with_retries(attempt)

    def published(self, dataset: str, release_id: str) -> None:
        """Mark a reserved release published: its charge is final."""
        self._follow_up(dataset, release_id, PUBLISHED)

    def refund(self, dataset: str, release_id: str) -> None:
        """Give back the budget of a reserved release that committed nothing. Refunding an already
        refunded release does nothing; refunding a published one raises :class:`ChargeFinal`."""
        self._follow_up(dataset, release_id, REFUNDED)

    def _commit_with_retries(self, attempt: Callable[[_LedgerState], list[dict] | None]) -> None:
        for attempt_number in range(MAX_COMMIT_ATTEMPTS):
            state = self._read(for_writing=True)
            rows = attempt(state)
            if rows is None:
                return
            try:
                self._append_rows(state, rows)
            except CommitFailedException:
                time.sleep(_RETRY_PAUSE_SECONDS * min(attempt_number + 1, 10))
                continue
            self._expire_old_snapshots()
            return
        raise LedgerContention(
            f"the privacy ledger changed under this writer {MAX_COMMIT_ATTEMPTS} times in a row; try again"
        )

    def latest_event(self, dataset: str, release_id: str) -> pd.Series | None:
        """The latest event of one release (``None`` if it never reserved)."""
        return self._read().latest_event(dataset, release_id)

    def _expire_old_snapshots(self) -> None:
        """Drop snapshots older than :data:`SNAPSHOTS_KEPT_SECONDS` (never the current one): the
        ledger is append-only, so the current snapshot has every event. Housekeeping only: a
        failure (a concurrent writer) is left to the next write."""
        table = self._writable_table().refresh()
        cutoff_ms = (time.time() - SNAPSHOTS_KEPT_SECONDS) * 1000
        current = table.current_snapshot()
        old = [snapshot.snapshot_id for snapshot in table.snapshots()
               if snapshot.timestamp_ms < cutoff_ms and (current is None or snapshot.snapshot_id != current.snapshot_id)]
        if old:
            try:
                table.maintenance.expire_snapshots().by_ids(old).commit()
            except Exception:  # noqa: BLE001 - housekeeping; the event itself is committed
                pass

    def open_reservations(self) -> list[tuple[str, str]]:
        """``(dataset, release id)`` of every release whose latest event is ``reserved``: running,
        or left by a release that crashed (``pipelines/platform/recovery.py`` settles those)."""
        latest = self._read().latest
        open_ = latest[latest["status"] == RESERVED]
        return [(str(row["dataset"]), str(row["release_id"])) for _, row in open_.iterrows()]

    def entries(self, dataset: str | None = None) -> pd.DataFrame:
        """Every ledger event (of one dataset, if given), oldest first."""
        rows = self._read().rows
        if dataset is not None:
            rows = rows[rows["dataset"] == dataset].reset_index(drop=True)
        return rows


def _empty_rows() -> pd.DataFrame:
    return LEDGER_SCHEMA.empty_table().to_pandas()
