"""The privacy ledger: basic composition, the budget boundary, refunds, idempotence, races."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from pipelines.platform.lake import Lake
from pipelines.platform.ledger import BudgetExceeded, PrivacyLedger, UnknownReservation

TOTAL_DELTA = 1e-5


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    with Lake(tmp_path / "lake") as opened:
        yield opened


@pytest.fixture
def ledger(lake: Lake) -> PrivacyLedger:
    return PrivacyLedger(lake)


def reserve(ledger: PrivacyLedger, release_id: str, epsilon: float, delta: float = 1e-7, total: float = 1.0) -> None:
    ledger.reserve("claims", release_id, epsilon, delta, total, TOTAL_DELTA, "crowd")


def test_spent_is_the_sum_of_reservations(ledger: PrivacyLedger) -> None:
    assert ledger.spent("claims") == (0.0, 0.0)
    reserve(ledger, "a", 0.25, 1e-7)
    reserve(ledger, "b", 0.5, 3e-7)
    ledger.reserve("other", "c", 0.125, 1e-6, 1.0, TOTAL_DELTA, "crowd")

    epsilon, delta = ledger.spent("claims")
    assert epsilon == 0.75
    assert delta == pytest.approx(4e-7, rel=1e-12)
    assert ledger.spent("other") == (0.125, 1e-6)
    entries = ledger.entries("claims")
    assert list(entries["release_id"]) == ["a", "b"]
    assert set(entries["status"]) == {"reserved"}
    assert list(ledger.entries()["sequence"]) == [1, 2, 3]


def test_the_budget_can_be_used_up_exactly_but_not_exceeded(ledger: PrivacyLedger) -> None:
    reserve(ledger, "first", 0.1, total=0.3)
    assert 0.1 + 0.2 > 0.3, "the floating-point sum overshoots the boundary by an ulp"

    reserve(ledger, "second", 0.2, total=0.3)
    assert ledger.spent("claims")[0] == pytest.approx(0.3, abs=1e-15)
    rows_before = len(ledger.entries())

    with pytest.raises(BudgetExceeded) as refused:
        reserve(ledger, "one-more", 1e-6, total=0.3)
    assert len(ledger.entries()) == rows_before, "a refused reservation writes nothing"
    message = str(refused.value)
    for fragment in ("'claims'", "spent epsilon=0.3", "requested epsilon=1e-06", "total epsilon=0.3"):
        assert fragment in message


def test_overdraft_beyond_the_tolerance_is_refused(ledger: PrivacyLedger) -> None:
    reserve(ledger, "half", 0.5)
    with pytest.raises(BudgetExceeded):
        reserve(ledger, "rest-and-a-bit", 0.5 + 2e-9)
    reserve(ledger, "rest", 0.5)


def test_delta_is_budgeted_too(ledger: PrivacyLedger) -> None:
    reserve(ledger, "a", 0.1, delta=6e-6)
    with pytest.raises(BudgetExceeded, match="requested epsilon=0.1, delta=5e-06"):
        reserve(ledger, "b", 0.1, delta=5e-6)
    reserve(ledger, "c", 0.1, delta=4e-6)
    assert ledger.spent("claims")[1] == pytest.approx(1e-5, rel=1e-12)


def test_refund_gives_the_budget_back(ledger: PrivacyLedger) -> None:
    reserve(ledger, "quarantined", 0.6)
    with pytest.raises(BudgetExceeded):
        reserve(ledger, "big", 0.6)
    ledger.refund("claims", "quarantined")
    assert ledger.spent("claims") == (0.0, 0.0)
    ledger.refund("claims", "quarantined")
    assert list(ledger.entries()["status"]) == ["reserved", "refunded"]

    reserve(ledger, "big", 0.6)
    assert ledger.spent("claims")[0] == 0.6
    with pytest.raises(UnknownReservation, match="no reservation for release 'never'"):
        ledger.refund("claims", "never")


def test_reserving_the_same_release_twice_spends_once(ledger: PrivacyLedger) -> None:
    reserve(ledger, "retried", 0.4)
    reserve(ledger, "retried", 0.4)
    assert ledger.spent("claims")[0] == 0.4
    assert len(ledger.entries()) == 1
    with pytest.raises(ValueError, match="already reserved epsilon=0.4"):
        reserve(ledger, "retried", 0.5)


def test_a_refunded_release_can_reserve_again(ledger: PrivacyLedger) -> None:
    reserve(ledger, "rerun", 0.3)
    ledger.refund("claims", "rerun")
    reserve(ledger, "rerun", 0.3)
    assert ledger.spent("claims")[0] == 0.3
    assert list(ledger.entries()["status"]) == ["reserved", "refunded", "reserved"]


@pytest.mark.parametrize(
    ("epsilon", "delta", "total"),
    [(-0.1, 0.0, 1.0), (math.nan, 0.0, 1.0), (0.1, 1.0, 1.0), (0.1, 0.0, math.inf)],
)
def test_invalid_amounts_are_rejected(ledger: PrivacyLedger, epsilon: float, delta: float, total: float) -> None:
    with pytest.raises(ValueError, match="must be a finite number"):
        ledger.reserve("claims", "bad", epsilon, delta, total, TOTAL_DELTA, "crowd")
    assert ledger.entries().empty


def test_a_race_between_two_lakes_accepts_only_what_fits(lake: Lake, tmp_path: Path) -> None:
    ledger_a = PrivacyLedger(lake)
    ledger_b = PrivacyLedger(Lake(lake.root))
    original_append = ledger_a._append_rows
    calls: list[int] = []

    def append_after_the_other_writer(state: object, rows: list[dict]) -> None:
        calls.append(len(rows))
        if len(calls) == 1:
            reserve(ledger_b, "from-b", 0.6)
        original_append(state, rows)

    ledger_a._append_rows = append_after_the_other_writer
    with pytest.raises(BudgetExceeded, match="spent epsilon=0.6"):
        reserve(ledger_a, "from-a", 0.6)
    assert len(calls) == 1, "A's commit on the stale snapshot failed; the re-check refused before appending"
    assert list(ledger_a.entries()["release_id"]) == ["from-b"]

    calls.clear()
    ledger_b_release = "from-b-2"

    def append_after_a_small_one(state: object, rows: list[dict]) -> None:
        calls.append(len(rows))
        if len(calls) == 1:
            reserve(ledger_b, ledger_b_release, 0.1)
        original_append(state, rows)

    ledger_a._append_rows = append_after_a_small_one
    reserve(ledger_a, "from-a-small", 0.3)
    assert len(calls) == 2, "the first commit failed, the retry fitted and committed"
    entries = ledger_b.entries()
    assert list(entries["release_id"]) == ["from-b", "from-b-2", "from-a-small"]
    assert list(entries["sequence"]) == [1, 2, 3]
    assert ledger_b.spent("claims")[0] == pytest.approx(1.0, abs=1e-15)


def test_concurrent_threads_on_separate_lakes_never_overspend(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    PrivacyLedger(Lake(root))
    ledgers = [PrivacyLedger(Lake(root)) for _ in range(5)]
    outcomes: list[str] = [""] * len(ledgers)
    barrier = threading.Barrier(len(ledgers))

    def run(index: int) -> None:
        barrier.wait()
        try:
            ledgers[index].reserve("claims", f"thread-{index}", 0.3, 0.0, 1.0, TOTAL_DELTA, "crowd")
            outcomes[index] = "accepted"
        except BudgetExceeded:
            outcomes[index] = "refused"

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(ledgers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes.count("accepted") == 3 and outcomes.count("refused") == 2
    assert ledgers[0].spent("claims")[0] == pytest.approx(0.9, abs=1e-12)
    assert len(ledgers[0].entries()) == 3
