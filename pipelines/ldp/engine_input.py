"""Worker side of the ldp input (issue 15): each input fragment read, checked, canonicalized and
counted where the engine runs its tasks; only a fragment's summary leaves the task.

:func:`read_report_fragment` is the ``map_fragments`` function. For one fragment (a file, or one
data file of an Iceberg scan; ``pipelines/platform/sources.py``) it

* reads the mapped columns with the platform's ``ROW_ID`` (``fragment_tasks.read_mapped_columns``:
  a missing column is one line naming the file and the column);
* flags every bad row, by problem (:data:`PROBLEMS`, in the order a row's problems are reported):
  a missing user id, mechanism or report, a mechanism not in the catalog, a report of the wrong
  type (a boolean, a non-integer, a bit vector of the wrong length or with other characters) or
  outside its mechanism's output alphabet;
* canonicalizes the good rows — mechanism name to its code (position in the sorted catalog),
  report to an integer or a RAPPOR bit-vector text — and counts them with the release's blocks
  (``pipelines/ldp/blocks.py``: users per (mechanism, report), or RAPPOR bit sums, or users per
  bit vector);
* writes its user ids, bucketed, for the duplicate check (``pipelines/platform/repeated_keys.py``);
* sketches its canonical reports (``platform/row_prints.py``: keyed hashes of user, mechanism and
  report as read);
* fingerprints its file (``sources.fragment_fingerprint``, keyed: an HMAC under a key derived from
  the lake's fingerprint key, so the operator record that keeps it cannot be used to test guesses
  of the input).

It returns rows of ``schemas.ldp.tables.ldp_input_summary_schema``: ``entry`` says what a row is — a partial count
(:data:`COUNT`: ``key``, ``users``), a metric (:data:`METRIC`: ``code``, the value in ``users``,
and for a problem its first row's ``ROW_ID`` and ``detail``) or the fragment's fingerprint
(:data:`FINGERPRINT`). The driver sums counts and metrics per key (``sum_by_key``), finds the
first bad row with ``first_row`` (ties broken by ``code``: the earlier problem wins), and never
sees a report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.ldp.blocks import (
    BitSumSide,
    ReportKeySide,
    bit_vector_count_rows,
    rappor_bit_sum_rows,
    report_count_rows,
)
from pipelines.platform.fragment_tasks import (
    any_problem,
    code_counts,
    decoded,
    entry_rows,
    fingerprints,
    located_problems,
    read_mapped_columns,
)
from pipelines.platform.repeated_keys import KeyBuckets, canonical_keys, write_key_buckets
from pipelines.platform.row_prints import RowPrinting
from pipelines.platform.sources import ROW_ID, Fragment, fragment_fingerprint
from schemas.ldp.tables import LDP_MECHANISM_CODE, ldp_input_summary_schema

COUNT, METRIC, FINGERPRINT, ROW_SKETCH = 0, 1, 2, 3
"""What a summary row is (its ``entry``)."""

ROWS = 0
USER_MISSING, MECHANISM_MISSING, REPORT_MISSING, UNKNOWN_MECHANISM, REPEATED_USER = 1, 2, 3, 4, 5
REPORT_BOOLEAN, REPORT_NOT_INTEGER, BIT_VECTOR_LENGTH, NOT_A_BIT_VECTOR, OUTSIDE_ALPHABET = 6, 7, 8, 9, 10
INTEGER_USER_IDS, TEXT_USER_IDS = 11, 12
"""Metric codes: rows read; the problems (1 to 10, in the order a row's problems are reported;
``REPEATED_USER`` is found by the duplicate check, after the fragments); fragments whose user ids
were integers, or text."""

PROBLEMS = {
    USER_MISSING: ("user_id", "user id is missing"),
    MECHANISM_MISSING: ("mechanism", "mechanism is missing"),
    REPORT_MISSING: ("report", "report is missing"),
    UNKNOWN_MECHANISM: ("mechanism", "unknown mechanism: not in the mechanism catalog"),
    REPEATED_USER: ("user_id", "a user sent more than one report (one report per user)"),
    REPORT_BOOLEAN: ("report", "reports must be integers or bit-vector text, not booleans"),
    REPORT_NOT_INTEGER: ("report", "report is not an integer"),
    BIT_VECTOR_LENGTH: ("report", "bit vector of the wrong length"),
    NOT_A_BIT_VECTOR: ("report", "report is not a bit vector of 0s and 1s"),
    OUTSIDE_ALPHABET: ("report", "report is outside its mechanism's output alphabet"),
}
"""Each problem's canonical column and message (the driver words the located line)."""
METRIC_NAMES = {
    ROWS: "rows", USER_MISSING: "user_id_nulls", MECHANISM_MISSING: "mechanism_nulls", REPORT_MISSING: "report_nulls",
    UNKNOWN_MECHANISM: "unknown_mechanisms", REPEATED_USER: "repeated_users", REPORT_BOOLEAN: "boolean_reports",
    REPORT_NOT_INTEGER: "non_integer_reports", BIT_VECTOR_LENGTH: "wrong_length_bit_vectors",
    NOT_A_BIT_VECTOR: "non_bit_vectors", OUTSIDE_ALPHABET: "reports_outside_alphabet",
    INTEGER_USER_IDS: "fragments_with_integer_user_ids", TEXT_USER_IDS: "fragments_with_text_user_ids",
}
"""The metrics' names in the frame the input gate validates (``schemas/ldp/expectations.py``)."""
_INTEGER_TEXT = r"^\s*[+-]?\d{1,18}\s*$"


@dataclass(frozen=True)
class ReportReading:
    """The side value of :func:`read_report_fragment`: the file's columns for user id, mechanism and
    report; the catalog's names (sorted: a name's position is its code) and output sizes; how the
    good rows are counted (``counting``: ``reports``, ``bit_sums`` or ``bit_vectors``); where the
    user ids go for the duplicate check; the key of the files' fingerprints."""

    user_column: str
    mechanism_column: str
    report_column: str
    mechanism_names: tuple[str, ...]
    output_sizes: tuple[int, ...]
    counting: str
    bits: int
    output_stride: int
    keys: KeyBuckets
    fingerprint_key: bytes | None = None
    """32 bytes: key material, kept out of pickled side values by the engines."""
    row_printing: RowPrinting | None = None
    """How each fragment sketches its canonical reports ``(user, mechanism, report)``
    (``platform/row_prints.py``; the lake's row key, key material); ``None``: no sketch."""

    @property
    def bit_vectors(self) -> bool:
        return self.counting != "reports"

    @property
    def roles(self) -> dict[str, str]:
        return {self.user_column: "user_id", self.mechanism_column: "mechanism", self.report_column: "report"}


def _as_text(array: pa.ChunkedArray) -> pa.Array:
    combined = decoded(array)
    if pa.types.is_string(combined.type):
        return combined
    return combined.cast(pa.string())


def _nulls(array: pa.ChunkedArray) -> np.ndarray:
    return array.is_null().to_numpy(zero_copy_only=False)


def _integer_reports(reports: pa.ChunkedArray, check: np.ndarray, problems: dict[int, np.ndarray]) -> np.ndarray:
    """Integer reports (0 where a row is not checked or not an integer), flagging booleans and
    non-integers."""
    combined = decoded(reports)
    values = np.zeros(len(combined), dtype=np.int64)
    if pa.types.is_boolean(combined.type):
        problems[REPORT_BOOLEAN] = check.copy()
        return values
    if pa.types.is_integer(combined.type):
        # unchecked: an unsigned value beyond int64 wraps negative, and is then outside every alphabet
        values[check] = combined.filter(pa.array(check)).cast(pa.int64(), safe=False).to_numpy()
        return values
    if pa.types.is_floating(combined.type):
        numbers = combined.cast(pa.float64()).to_numpy(zero_copy_only=False)
        with np.errstate(invalid="ignore"):
            integral = np.isfinite(numbers) & (numbers == np.floor(numbers)) & (np.abs(numbers) < 2.0**62)
        problems[REPORT_NOT_INTEGER] = check & ~integral
        good = check & integral
        values[good] = numbers[good].astype(np.int64)
        return values
    text = combined if pa.types.is_string(combined.type) else combined.cast(pa.string())
    integral = pc.fill_null(pc.match_substring_regex(text, _INTEGER_TEXT), False).to_numpy(zero_copy_only=False)
    problems[REPORT_NOT_INTEGER] = check & ~integral
    good = check & integral
    if good.any():
        values[good] = np.asarray(text.filter(pa.array(good)).to_numpy(zero_copy_only=False), dtype=object
                                  ).astype(np.int64)
    return values


def read_report_fragment(fragment: Fragment, side: ReportReading) -> pa.Table:
    """One fragment's summary (module docstring)."""
    table, row_ids = read_mapped_columns(fragment, side.roles)
    users, mechanisms, reports = (table.column(name) for name in
                                  (side.user_column, side.mechanism_column, side.report_column))
    user_missing, mechanism_missing, report_missing = _nulls(users), _nulls(mechanisms), _nulls(reports)
    codes = pc.index_in(_as_text(mechanisms), value_set=pa.array(side.mechanism_names, pa.string()))
    code_values = codes.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    known = code_values >= 0
    problems: dict[int, np.ndarray] = {
        USER_MISSING: user_missing,
        MECHANISM_MISSING: mechanism_missing,
        REPORT_MISSING: report_missing,
        UNKNOWN_MECHANISM: ~mechanism_missing & ~known,
    }
    details: dict[int, np.ndarray] = {}
    check = known & ~report_missing
    if side.bit_vectors:
        text = _as_text(reports)
        lengths = pc.fill_null(pc.utf8_length(text), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        wrong_length = check & (lengths != side.bits)
        bits_only = pc.fill_null(pc.match_substring_regex(text, "^[01]*$"), False).to_numpy(zero_copy_only=False)
        problems[BIT_VECTOR_LENGTH] = wrong_length
        problems[NOT_A_BIT_VECTOR] = check & ~wrong_length & ~bits_only
        details[BIT_VECTOR_LENGTH] = lengths
        values: Any = text
    else:
        values = _integer_reports(reports, check, problems)
        typed = check.copy()
        for code in (REPORT_BOOLEAN, REPORT_NOT_INTEGER):
            if code in problems:
                typed &= ~problems[code]
        limits = np.asarray(side.output_sizes, dtype=np.int64)[np.where(known, code_values, 0)]
        problems[OUTSIDE_ALPHABET] = typed & ((values < 0) | (values >= limits))
        details[OUTSIDE_ALPHABET] = code_values
    good = ~any_problem(problems, len(row_ids))
    rows: list[dict[str, Any]] = [{"entry": METRIC, "code": ROWS, "users": len(row_ids)}]
    for code, first, row_id, count in located_problems(problems, row_ids):
        detail = details.get(code)
        rows.append({"entry": METRIC, "code": code, ROW_ID: row_id, "users": count,
                     "detail": None if detail is None else int(detail[first])})
    present = ~user_missing
    if present.any():
        keys, kind = canonical_keys(users.filter(pa.array(present)))
        rows.append({"entry": METRIC, "code": INTEGER_USER_IDS if kind == 1 else TEXT_USER_IDS, "users": 1})
    else:
        keys = pa.array([], pa.int64())
    write_key_buckets(keys, row_ids[present], side.keys, fragment.ordinal)
    rows.append({"entry": FINGERPRINT, "code": fragment.ordinal, "users": 0,
                 "fingerprint": fragment_fingerprint(fragment, side.fingerprint_key)})
    if side.row_printing is not None and len(row_ids):
        sketch = side.row_printing.sketch([users, mechanisms, reports], fragment.size)
        rows.append({"entry": ROW_SKETCH, "code": fragment.ordinal, "users": sketch.rows,
                     "fingerprint": sketch.to_text()})
    schema = ldp_input_summary_schema(side.counting == "bit_vectors")
    summary = pa.Table.from_pylist(rows, schema=schema)
    if not good.any():
        return summary
    if side.bit_vectors:
        report_column = np.asarray(values.filter(pa.array(good)).to_numpy(zero_copy_only=False), dtype=object)
    else:
        report_column = values[good]
    canonical = pd.DataFrame({LDP_MECHANISM_CODE: code_values[good].astype(np.int32), "report": report_column})
    if side.counting == "bit_sums":
        counts = rappor_bit_sum_rows(canonical, BitSumSide(side.bits)).rename(columns={"bit_key": "key"})
    elif side.counting == "bit_vectors":
        counts = bit_vector_count_rows(canonical, None).rename(columns={"report_key": "key"})
    else:
        counts = report_count_rows(canonical, ReportKeySide(side.output_stride)).rename(columns={"report_key": "key"})
    count_rows = entry_rows(schema, COUNT, len(counts), key=counts["key"].to_numpy(),
                            users=counts["users"].to_numpy(np.int64))
    return pa.concat_tables([summary, count_rows])


# ---- driver-side helpers over the summaries (batch functions, shipped like the blocks) ----------

def count_entries(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
    chosen = frame[frame["entry"] == COUNT]
    return pd.DataFrame({"key": chosen["key"].to_numpy(), "users": chosen["users"].to_numpy(np.int64)})


def metric_entries(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
    return code_counts(frame, METRIC, "users")


def fingerprint_entries(frame: pd.DataFrame, side: Any) -> pd.DataFrame:
    return fingerprints(frame, FINGERPRINT)
