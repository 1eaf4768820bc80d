"""The privacy ledger: how much of each dataset's privacy budget the releases have spent.

DESIGN.md, "Releases and the lake": the ledger is a lake table; a release that would exceed
its dataset's budget is refused *before* any computation touches the data, and a release
that ends in quarantine consumes no budget.

The table ``privlake.ledger`` is append-only. Each row is an event about one release of one
dataset: ``reserved`` (the budget is taken before the release runs) or ``refunded`` (the
release failed validation and was quarantined, so its budget is given back). The state of a
release is its latest event (largest ``sequence``).

Composition: basic (sequential) composition of (ε, δ)-DP (Dwork & Roth, *The Algorithmic
Foundations of Differential Privacy*, Theorem 3.16): a dataset's spent budget is the sum of
ε and the sum of δ over its releases whose latest event is ``reserved``. Basic composition is
valid for any mix of mechanisms and adaptively chosen releases; it is loose for many releases
(advanced composition would be tighter) but never optimistic.

Boundary: a reservation is accepted when ``spent + requested ≤ total · (1 + 1e-9)`` for ε and
for δ separately. The relative tolerance 1e-9 only absorbs floating-point rounding of sums
such as 0.1 + 0.2 (error ~1e-16 relative), so a budget split into exact parts can be used up,
while any real overdraft (≥ one part in a billion of the total) is refused.

Concurrency: pyiceberg's own commit retry is switched off for this table
(``commit.retry.num-retries = 0``), because a blind retry would re-append a reservation
without re-checking the budget. Instead every reservation reads the ledger at a snapshot,
checks the budget and appends on top of *that* snapshot; if another writer committed in
between, the catalog rejects the commit (optimistic concurrency), and the reservation is
re-read, re-checked and retried, at most ``MAX_COMMIT_ATTEMPTS`` times.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd
import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from pipelines.platform.lake import Lake

LEDGER_NAMESPACE = "privlake"
LEDGER_TABLE = "ledger"
RESERVED = "reserved"
REFUNDED = "refunded"
BUDGET_RELATIVE_TOLERANCE = 1e-9
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
    ]
)


class BudgetExceeded(Exception):
    """A reservation would take a dataset over its total (ε, δ) budget."""

    def __init__(
        self,
        dataset: str,
        spent: tuple[float, float],
        requested: tuple[float, float],
        total: tuple[float, float],
    ) -> None:
        self.dataset = dataset
        self.spent = spent
        self.requested = requested
        self.total = total
        super().__init__(
            f"privacy budget of dataset '{dataset}' exceeded: spent epsilon={spent[0]:.6g}, delta={spent[1]:.6g} "
            f"plus requested epsilon={requested[0]:.6g}, delta={requested[1]:.6g} "
            f"is more than the total epsilon={total[0]:.6g}, delta={total[1]:.6g}"
        )


class UnknownReservation(KeyError):
    """No reservation exists for this dataset and release."""

    def __init__(self, dataset: str, release_id: str) -> None:
        super().__init__(dataset, release_id)
        self.dataset = dataset
        self.release_id = release_id

    def __str__(self) -> str:
        return f"dataset '{self.dataset}' has no reservation for release '{self.release_id}'"


class LedgerContention(RuntimeError):
    """The ledger kept changing under this writer for ``MAX_COMMIT_ATTEMPTS`` attempts."""


@dataclass(frozen=True)
class _LedgerState:
    """The ledger at one snapshot: every row, and the latest event per (dataset, release)."""

    table: Table
    rows: pd.DataFrame
    latest: pd.DataFrame

    @property
    def next_sequence(self) -> int:
        return int(self.rows["sequence"].max()) + 1 if len(self.rows) else 1

    def latest_event(self, dataset: str, release_id: str) -> pd.Series | None:
        match = self.latest[(self.latest["dataset"] == dataset) & (self.latest["release_id"] == release_id)]
        return None if match.empty else match.iloc[0]

    def spent(self, dataset: str) -> tuple[float, float]:
        active = self.latest[(self.latest["dataset"] == dataset) & (self.latest["status"] == RESERVED)]
        return float(math.fsum(active["epsilon"])), float(math.fsum(active["delta"]))


def _check_amount(name: str, value: float, upper: float | None = None) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0 or (upper is not None and value >= upper):
        bound = f" and below {upper:g}" if upper is not None else ""
        raise ValueError(f"{name} must be a finite number at least 0{bound}, got {value!r}")
    return value


def within_budget(spent: float, requested: float, total: float) -> bool:
    """``spent + requested ≤ total`` up to the documented relative tolerance."""
    return spent + requested <= total * (1.0 + BUDGET_RELATIVE_TOLERANCE)


class PrivacyLedger:
    """Budget accounting per dataset in the lake table ``privlake.ledger``."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake
        self._table = lake.load_or_create_table(
            LEDGER_NAMESPACE,
            LEDGER_TABLE,
            LEDGER_SCHEMA,
            properties={"commit.retry.num-retries": "0"},
        )
        if self._table.properties.get("commit.retry.num-retries") != "0":
            with self._table.transaction() as transaction:
                transaction.set_properties({"commit.retry.num-retries": "0"})

    def _read(self) -> _LedgerState:
        table = self._table.refresh()
        rows = table.scan().to_pandas() if table.current_snapshot() is not None else _empty_rows()
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

    def spent(self, dataset: str) -> tuple[float, float]:
        """(ε, δ) spent by ``dataset``: sums over its releases currently ``reserved``."""
        return self._read().spent(dataset)

    def reserve(
        self,
        dataset: str,
        release_id: str,
        epsilon: float,
        delta: float,
        total_epsilon: float,
        total_delta: float,
        kind: str,
    ) -> None:
        """Take (ε, δ) of ``dataset``'s budget for ``release_id``, or raise :class:`BudgetExceeded`
        without writing anything. A release already holding a reservation is not charged again
        (a retried run of the same release id); asking it for different amounts is an error."""
        epsilon = _check_amount("epsilon", epsilon)
        delta = _check_amount("delta", delta, upper=1.0)
        total_epsilon = _check_amount("total epsilon", total_epsilon)
        total_delta = _check_amount("total delta", total_delta, upper=1.0)

        def attempt(state: _LedgerState) -> list[dict] | None:
            current = state.latest_event(dataset, release_id)
            if current is not None and current["status"] == RESERVED:
                if not (math.isclose(current["epsilon"], epsilon) and math.isclose(current["delta"], delta)):
                    raise ValueError(
                        f"release '{release_id}' of dataset '{dataset}' already reserved epsilon={current['epsilon']:g}, "
                        f"delta={current['delta']:g}, not epsilon={epsilon:g}, delta={delta:g}"
                    )
                return None
            spent_epsilon, spent_delta = state.spent(dataset)
            if not (
                within_budget(spent_epsilon, epsilon, total_epsilon) and within_budget(spent_delta, delta, total_delta)
            ):
                raise BudgetExceeded(
                    dataset, (spent_epsilon, spent_delta), (epsilon, delta), (total_epsilon, total_delta)
                )
            return [
                self._event(
                    state,
                    dataset=dataset,
                    release_id=release_id,
                    kind=kind,
                    status=RESERVED,
                    epsilon=epsilon,
                    delta=delta,
                    total_epsilon=total_epsilon,
                    total_delta=total_delta,
                )
            ]

        self._commit_with_retries(attempt)

    def refund(self, dataset: str, release_id: str) -> None:
        """Give back the budget of a reserved release (it was quarantined and released nothing).
        Refunding an already refunded release does nothing."""

        def attempt(state: _LedgerState) -> list[dict] | None:
            current = state.latest_event(dataset, release_id)
            if current is None:
                raise UnknownReservation(dataset, release_id)
            if current["status"] == REFUNDED:
                return None
            return [
                self._event(
                    state,
                    dataset=dataset,
                    release_id=release_id,
                    kind=str(current["kind"]),
                    status=REFUNDED,
                    epsilon=float(current["epsilon"]),
                    delta=float(current["delta"]),
                    total_epsilon=float(current["total_epsilon"]),
                    total_delta=float(current["total_delta"]),
                )
            ]

        self._commit_with_retries(attempt)

    def _commit_with_retries(self, attempt: Callable[[_LedgerState], list[dict] | None]) -> None:
        for attempt_number in range(MAX_COMMIT_ATTEMPTS):
            state = self._read()
            rows = attempt(state)
            if rows is None:
                return
            try:
                self._append_rows(state, rows)
                return
            except CommitFailedException:
                time.sleep(_RETRY_PAUSE_SECONDS * min(attempt_number + 1, 10))
        raise LedgerContention(
            f"the privacy ledger changed under this writer {MAX_COMMIT_ATTEMPTS} times in a row; try again"
        )

    def entries(self, dataset: str | None = None) -> pd.DataFrame:
        """Every ledger event (of one dataset, if given), oldest first."""
        rows = self._read().rows
        if dataset is not None:
            rows = rows[rows["dataset"] == dataset].reset_index(drop=True)
        return rows


def _empty_rows() -> pd.DataFrame:
    return LEDGER_SCHEMA.empty_table().to_pandas()
