"""Lake policy: what an operator decides once and a release configuration cannot change.

* **Budgets** (``privlake budget set DATASET --epsilon E --delta D``): the total (ε, δ) a dataset
  may spend over all its releases, and what a release is charged for — its proven whole-release
  bound (``unit: release``, the default) or, only when an operator says so, the per-record figure
  of plausible deniability (``unit: record``). A release of a dataset without a budget is refused.
* **Where a dataset lives**: each dataset is bound to the locations of its inputs (the file or
  folder a config reads; given with the budget or registered by its first release). A config that
  reads a location bound to another dataset is refused: renaming ``dataset`` must not buy a fresh
  budget.
* **What a dataset's inputs hold** (issue 32): a copy of an input elsewhere — shuffled, with
  columns added or reordered, split into other files, written as Parquet or as an Iceberg table —
  must not either. Every release records a bottom-k sketch of the keyed hashes of the canonical
  rows it read (``pipelines/platform/row_prints.py``: computed where the fragments are read; only
  the sketch, at most 4,096 hashes a fragment, reaches the driver), and a release whose rows
  overlap another dataset's recorded rows by the lake's :class:`OverlapRule` (default: at least 100
  rows or 1 % of its rows) is refused, in one line naming that dataset. The keyed HMAC-SHA256 of
  each input file is still recorded and checked too (what lakes recorded before row prints).
* **Nothing is bound before the reservation**: :meth:`LakePolicy.admit` only checks; a release
  binds its location, records its sketch (checked again on top of the snapshot it appends to:
  two concurrent releases of one input as two datasets cannot both pass) and its files' digests
  (:meth:`LakePolicy.bind_input`) once it has checked its input *and* holds its reservation, so a
  release refused for its budget or its input changes no policy state.
* **Merged datasets** (``privlake budget merge DATASET --into OTHER``): an operator's statement
  that a dataset holds another's people. Its releases are then charged to the other's budget and
  ledger, and their inputs may overlap.
* **Keyed fingerprints**: both the row prints and the file digests are keyed by a per-lake key
  kept *outside* the lake (a key file or an environment variable the lake names; the row prints
  under a key derived from it), so someone who can read the lake cannot test guesses of the input
  against them. They live in operator-only tables. A release does not hash its input on the
  driver: the executors that read the input compute them as they read each fragment
  (:meth:`LakePolicy.executor_key` is the lake's key in the form the engines keep out of pickled
  side values; ``pipelines/platform/input_prints.py``). :meth:`LakePolicy.fingerprints` is the
  driver-side reference of the file digests.
* **Test lakes** (``privlake init-lake LAKE --test``): the only lakes that accept releases made
  with ``PRIVLAKE_TEST_SECRET``; every output of a test lake says it is one.

Tables (namespace ``privlake``, operator-only, append-only; the latest row per key wins):
``budgets`` (dataset, ε, δ, unit), ``locations`` (dataset, location), ``input_rows`` (dataset,
release, location, rows, sketch), ``input_fingerprints`` (dataset, release, location,
fingerprint) and ``merged_datasets`` (dataset, into). The lake's own settings (test lake, where its
key is, the overlap rule) are properties of the ``privlake`` namespace. Reading policy never writes
(a read-only lake works).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table

from pipelines.platform.errors import PrivlakeError, ReleaseRefused
from pipelines.platform.lake import Lake
from pipelines.platform.row_prints import Overlap, RowSketch, row_key

POLICY_NAMESPACE = "privlake"
BUDGETS_TABLE = "budgets"
LOCATIONS_TABLE = "locations"
FINGERPRINTS_TABLE = "input_fingerprints"
SKETCHES_TABLE = "input_rows"
MERGES_TABLE = "merged_datasets"
OVERLAP_ROWS_PROPERTY = "privlake.overlap-rows"
OVERLAP_FRACTION_PROPERTY = "privlake.overlap-fraction"
DEFAULT_OVERLAP_ROWS = 100
DEFAULT_OVERLAP_FRACTION = 0.01
MAX_COMMIT_ATTEMPTS = 50
LAKE_KIND_PROPERTY = "privlake.lake-kind"
KEY_PROPERTY = "privlake.fingerprint-key"
KEY_CHECK_PROPERTY = "privlake.fingerprint-key-check"
"""A keyed check value of the fingerprint key (``HMAC(key, "privlake-key-check")``, 16 bytes),
recorded at the key's first use: a replaced or mistyped key would make every recorded row print
stop matching, so a release refuses it instead (issue 32 review)."""
TEST_LAKE, PRODUCTION_LAKE = "test", "production"
RELEASE_UNIT, RECORD_UNIT = "release", "record"
KEY_DIRECTORY_VARIABLE = "PRIVLAKE_KEY_DIR"
"""Where ``init-lake`` puts a lake's fingerprint key by default (``~/.config/privlake/keys``)."""
_HASH_CHUNK = 1 << 20

BUDGETS_SCHEMA = pa.schema([
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("epsilon", pa.float64(), nullable=False),
    pa.field("delta", pa.float64(), nullable=False),
    pa.field("unit", pa.string(), nullable=False),
    pa.field("set_at", pa.timestamp("us", tz="UTC"), nullable=False),
])
LOCATIONS_SCHEMA = pa.schema([
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("location", pa.string(), nullable=False),
    pa.field("registered_at", pa.timestamp("us", tz="UTC"), nullable=False),
])
FINGERPRINTS_SCHEMA = pa.schema([
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("release_id", pa.string(), nullable=False),
    pa.field("location", pa.string(), nullable=False),
    pa.field("fingerprint", pa.string(), nullable=False),
    pa.field("recorded_at", pa.timestamp("us", tz="UTC"), nullable=False),
])
SKETCHES_SCHEMA = pa.schema([
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("release_id", pa.string(), nullable=False),
    pa.field("location", pa.string(), nullable=False),
    pa.field("rows", pa.int64(), nullable=False),
    pa.field("sketch", pa.binary(), nullable=False),
    pa.field("recorded_at", pa.timestamp("us", tz="UTC"), nullable=False),
])
SKETCHES_PROPERTIES = {"commit.retry.num-retries": "0"}
"""A blind retry would append a sketch without checking it against the one that won the race."""
MERGES_SCHEMA = pa.schema([
    pa.field("dataset", pa.string(), nullable=False),
    pa.field("into", pa.string(), nullable=False),
    pa.field("merged_at", pa.timestamp("us", tz="UTC"), nullable=False),
])


@dataclass(frozen=True)
class OverlapRule:
    """When a new input's rows are another dataset's: the two share sampled rows (evidence of a
    real overlap) and the estimated shared part is at least ``rows`` rows or ``fraction`` of the new
    input's rows (``privlake policy set --overlap-rows R --overlap-fraction F``)."""

    rows: int = DEFAULT_OVERLAP_ROWS
    fraction: float = DEFAULT_OVERLAP_FRACTION

    def check(self) -> None:
        if self.rows < 1:
            raise PrivlakeError(f"the overlap rule's rows must be at least 1, got {self.rows}")
        if not (math.isfinite(self.fraction) and 0 < self.fraction <= 1):
            raise PrivlakeError(f"the overlap rule's fraction must be in (0, 1], got {self.fraction}")

    def refuses(self, overlap: Overlap) -> bool:
        return overlap.shared > 0 and (overlap.rows >= self.rows or overlap.fraction >= self.fraction)


@dataclass(frozen=True)
class BudgetPolicy:
    """A dataset's budget: total ``epsilon`` at ``delta`` over all its releases, charged per ``unit``."""

    dataset: str
    epsilon: float
    delta: float
    unit: str
    set_at: datetime

    def to_json(self) -> dict:
        return {"dataset": self.dataset, "epsilon": self.epsilon, "delta": self.delta, "unit": self.unit,
                "set_at": self.set_at.isoformat()}


def check_budget(epsilon: float, delta: float, unit: str) -> None:
    """A budget an operator may set: finite ``ε > 0``, ``0 < δ < 1``, a known unit (one line each)."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise PrivlakeError(f"budget epsilon must be a finite number above 0, got {epsilon}")
    if not (math.isfinite(delta) and 0 < delta < 1):
        raise PrivlakeError(f"budget delta must be a number strictly between 0 and 1, got {delta}")
    if unit not in (RELEASE_UNIT, RECORD_UNIT):
        raise PrivlakeError(f"budget unit must be '{RELEASE_UNIT}' or '{RECORD_UNIT}', got {unit!r}")


def location_of(path: Path | str) -> str:
    """The canonical form of an input location: an absolute path with symbolic links resolved."""
    return str(Path(path).expanduser().resolve())


def source_location(source: object) -> Path | str:
    """The location a release's ``input`` section names, for binding and fingerprints: its
    ``path`` (a file, a folder or a glob), or for an Iceberg table input (``schemas/sources.py``)
    the table under its lake, ``<lake folder or warehouse>/<namespace.name>`` — a place no file
    input names, so a table binds to one dataset like a folder does."""
    table = getattr(source, "table", None)
    if table is None:
        return source.path  # type: ignore[attr-defined, no-any-return]
    lake = source.lake  # type: ignore[attr-defined]
    return f"{lake if isinstance(lake, Path) else lake.warehouse}/{table}"


KEYED_PREFIX = "hmac-sha256:"
"""How ``sources.fragment_fingerprint`` marks a keyed digest."""
EXECUTOR_KEY_BYTES = 32
"""The size the engines treat as key material (``pipelines/engines/base.py``: ``KEY_BYTES``)."""


def executor_key_of(key: bytes) -> bytes | None:
    """A key of exactly 32 bytes whose HMAC-SHA256 is ``key``'s for every message, or ``None``.

    HMAC pads a key shorter than SHA-256's 64-byte block with zeros and hashes a longer one first
    (RFC 2104), so ``key`` padded with zeros to 32 bytes (a key of at most 32 bytes: the 32 that
    ``init-lake`` makes) or ``SHA-256(key)`` (a key above 64 bytes) gives the same digests — the
    values the policy table has always held — while being exactly the size the engines keep out of
    pickled side values. A key of 33 to 64 bytes has no such form (``None``: the platform's own pass
    ships it as two 32-byte halves, ``input_prints.fingerprint_pass``)."""
    if len(key) > 64:
        return hashlib.sha256(key).digest()
    if len(key) <= EXECUTOR_KEY_BYTES:
        return key.ljust(EXECUTOR_KEY_BYTES, b"\0")
    return None


def _contains(outer: str, inner: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def input_files(location: str) -> list[Path]:
    """The data files of an input location: the file itself, every file under a folder, or every
    file a glob matches (sorted) — without the names an input's reader skips (hidden files and
    ``_`` names that are not ``key=value`` folders: ``_SUCCESS``, ``.crc``, ``_temporary/``), whose
    identical empty markers would otherwise make two datasets' folders look like copies."""
    path = Path(location)
    if path.is_dir():
        return sorted(file for file in path.rglob("*") if file.is_file()
                      and not any(_skipped(part) for part in file.relative_to(path).parts))
    if path.is_file():
        return [path]
    if any(character in location for character in "*?["):
        import glob

        root = Path(location.split("*")[0].split("?")[0].split("[")[0]).parent
        return sorted(Path(found) for found in glob.glob(location, recursive=True) if os.path.isfile(found)
                      and not any(_skipped(part) for part in Path(found).relative_to(root).parts))
    return []


def _skipped(name: str) -> bool:
    return name.startswith(".") or (name.startswith("_") and "=" not in name)


class LakePolicy:
    """The policy tables and settings of one lake (module docstring)."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake

    # ---- the lake's own settings -----------------------------------------------------------

    def _namespace_properties(self) -> dict[str, str]:
        try:
            return dict(self.lake.catalog.load_namespace_properties(POLICY_NAMESPACE))
        except NoSuchNamespaceError:
            return {}

    def lake_kind(self) -> str | None:
        """``test``, ``production``, or ``None`` for a lake nobody initialized (a production lake)."""
        return self._namespace_properties().get(LAKE_KIND_PROPERTY)

    def is_test_lake(self) -> bool:
        return self.lake_kind() == TEST_LAKE

    def initialize(self, *, test: bool, key_file: Path | None = None, key_variable: str | None = None) -> str:
        """Make this lake a test or production lake and name its fingerprint key (created as a
        0600 file outside the lake when neither is given). An initialized lake keeps its kind:
        a production lake cannot become a test lake, or back. Returns where the key is."""
        kind = TEST_LAKE if test else PRODUCTION_LAKE
        existing = self._namespace_properties()
        if existing.get(LAKE_KIND_PROPERTY) not in (None, kind):
            raise ReleaseRefused(
                f"{self.lake.description}: is already a {existing[LAKE_KIND_PROPERTY]} lake; a lake keeps its kind"
            )
        if key_variable:
            key_source = f"env:{key_variable}"
        elif existing.get(KEY_PROPERTY) and key_file is None:
            key_source = existing[KEY_PROPERTY]
        else:
            key_source = "file:" + str(self._create_key_file(key_file))
        self.lake.ensure_namespace(POLICY_NAMESPACE)
        updates = {LAKE_KIND_PROPERTY: kind, KEY_PROPERTY: key_source}
        if {k: existing.get(k) for k in updates} != updates:
            self.lake.catalog.update_namespace_properties(POLICY_NAMESPACE, updates=updates)
        return key_source

    def _create_key_file(self, key_file: Path | None) -> Path:
        if key_file is None:
            directory = Path(os.environ.get(KEY_DIRECTORY_VARIABLE) or Path.home() / ".config" / "privlake" / "keys")
            digest = hashlib.sha256(self.lake.description.encode()).hexdigest()[:16]
            key_file = directory / f"{digest}.key"
        key_file = Path(key_file).expanduser().resolve()
        if _contains(str(self.lake.root), str(key_file)):
            raise PrivlakeError(f"{key_file}: the fingerprint key must be kept outside the lake")
        if not key_file.exists():
            key_file.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(secrets.token_hex(32) + "\n")
        return key_file

    def fingerprint_key(self) -> bytes:
        """The lake's fingerprint key; a production lake nobody initialized gets one now."""
        source = self._namespace_properties().get(KEY_PROPERTY) or self.initialize(test=False)
        how, _, where = source.partition(":")
        if how == "env":
            text = os.environ.get(where, "")
            origin = f"the environment variable {where}"
        else:
            try:
                text = Path(where).read_text(encoding="utf-8")
            except OSError:
                text = ""
            origin = f"the key file {where}"
        try:
            key = bytes.fromhex(text.strip())
        except ValueError:
            key = b""
        if len(key) < 16:
            raise ReleaseRefused(f"the lake's fingerprint key ({origin}) is missing or not hex of 16+ bytes; "
                                 "an operator must provide it")
        check = hmac.new(key, b"privlake-key-check", hashlib.sha256).hexdigest()[:32]
        recorded = self._namespace_properties().get(KEY_CHECK_PROPERTY)
        if recorded is None:
            self.lake.catalog.update_namespace_properties(POLICY_NAMESPACE, updates={KEY_CHECK_PROPERTY: check})
        elif not hmac.compare_digest(recorded, check):
            raise ReleaseRefused(f"the lake's fingerprint key ({origin}) is not the key its input fingerprints were "
                                 "made with: restore that key (a new key would let copies of inputs buy fresh budgets)")
        return key

    # ---- tables ----------------------------------------------------------------------------

    def _read(self, name: str, schema: pa.Schema) -> pa.Table:
        try:
            table = self.lake.catalog.load_table((POLICY_NAMESPACE, name))
        except (NoSuchTableError, NoSuchNamespaceError):
            return schema.empty_table()
        if table.current_snapshot() is None:
            return schema.empty_table()
        return table.scan().to_arrow()

    def _append(self, name: str, schema: pa.Schema, rows: list[dict]) -> None:
        table = self.lake.load_or_create_table(POLICY_NAMESPACE, name, schema)
        table.append(pa.Table.from_pylist(rows, schema=schema))

    # ---- budgets ---------------------------------------------------------------------------

    def set_budget(self, dataset: str, epsilon: float, delta: float, unit: str = RELEASE_UNIT,
                   locations: Iterable[Path | str] = ()) -> BudgetPolicy:
        """Set (or change) ``dataset``'s budget, binding it to ``locations``."""
        check_budget(epsilon, delta, unit)
        if self.lake_kind() is None:
            self.initialize(test=False)
        for location in locations:
            self.bind(dataset, location_of(location))
        now = datetime.now(UTC)
        self._append(BUDGETS_TABLE, BUDGETS_SCHEMA,
                     [{"dataset": dataset, "epsilon": float(epsilon), "delta": float(delta), "unit": unit, "set_at": now}])
        return BudgetPolicy(dataset, float(epsilon), float(delta), unit, now)

    def budgets(self) -> list[BudgetPolicy]:
        """Every dataset's current budget, by dataset name."""
        latest: dict[str, BudgetPolicy] = {}
        for row in sorted(self._read(BUDGETS_TABLE, BUDGETS_SCHEMA).to_pylist(), key=lambda r: r["set_at"]):
            latest[row["dataset"]] = BudgetPolicy(row["dataset"], row["epsilon"], row["delta"], row["unit"], row["set_at"])
        return [latest[name] for name in sorted(latest)]

    def budget(self, dataset: str) -> BudgetPolicy | None:
        return next((budget for budget in self.budgets() if budget.dataset == dataset), None)

    def require_budget(self, dataset: str) -> BudgetPolicy:
        budget = self.budget(dataset)
        if budget is None:
            raise ReleaseRefused(
                f"dataset '{dataset}' has no privacy budget in this lake; an operator sets one with "
                f"`privlake budget set {dataset} --epsilon E --delta D --lake {self.lake.description}`"
            )
        return budget

    # ---- where datasets live ---------------------------------------------------------------

    def locations(self) -> dict[str, list[str]]:
        """Every dataset's bound locations."""
        bound: dict[str, list[str]] = {}
        for row in self._read(LOCATIONS_TABLE, LOCATIONS_SCHEMA).to_pylist():
            bound.setdefault(row["dataset"], [])
            if row["location"] not in bound[row["dataset"]]:
                bound[row["dataset"]].append(row["location"])
        return bound

    def owner_of(self, location: str) -> str | None:
        """The dataset whose bound location contains ``location`` or lies inside it."""
        for dataset, places in self.locations().items():
            if any(_contains(place, location) or _contains(location, place) for place in places):
                return dataset
        return None

    def bind(self, dataset: str, location: str) -> None:
        """Bind ``location`` to ``dataset`` unless it already is; refuse one bound elsewhere."""
        self.check_location(dataset, location)
        owner = self.owner_of(location)
        if owner is None or not any(_contains(place, location) for place in self.locations().get(dataset, [])):
            self._append(LOCATIONS_TABLE, LOCATIONS_SCHEMA,
                         [{"dataset": dataset, "location": location, "registered_at": datetime.now(UTC)}])

    def fingerprints(self, location: str) -> list[tuple[str, str]]:
        """``(file, keyed fingerprint)`` of every file of an input location, hashed here: the
        reference the executors' digests equal (a release never calls it: it would read the whole
        input on the driver)."""
        key = self.fingerprint_key()
        result = []
        for file in input_files(location):
            mac = hmac.new(key, digestmod=hashlib.sha256)
            with open(file, "rb") as handle:
                while chunk := handle.read(_HASH_CHUNK):
                    mac.update(chunk)
            result.append((str(file), mac.hexdigest()))
        return result

    def executor_key(self) -> bytes | None:
        """The lake's fingerprint key as the executors take it (``executor_key_of``)."""
        return executor_key_of(self.fingerprint_key())

    def admit(self, dataset: str, input_path: Path | str) -> BudgetPolicy:
        """Let a release of ``dataset`` read ``input_path``, or refuse (exit 4): it needs a budget,
        and its input's location must not belong to another dataset. Reads no data and changes
        nothing: the location is bound, and the input's prints recorded, only once the release has
        checked them and holds its reservation (:meth:`bind_input`)."""
        budget = self.require_budget(self.budget_dataset(dataset))
        self.check_location(dataset, location_of(input_path))
        return budget

    def check_location(self, dataset: str, location: str) -> None:
        """Refuse (exit 4) a location bound to another dataset (not one merged with ``dataset``)."""
        owner = self.owner_of(location)
        resolve = self._resolver()
        if owner is not None and resolve(owner) != resolve(dataset):
            raise ReleaseRefused(f"{location}: this input location belongs to dataset '{owner}', not '{dataset}'; "
                                 "a dataset's budget cannot be renewed by renaming it")

    def check_inputs(self, dataset: str, release_id: str, input_path: Path | str) -> None:
        """The driver-side reference of a release's file check: the files hashed here
        (:meth:`fingerprints`), checked (:meth:`check_files`) and, with the location, bound."""
        location = location_of(input_path)
        prints = self.fingerprints(location)
        self.check_location(dataset, location)
        self.check_files(dataset, prints)
        self.bind(dataset, location)
        self.record_files(dataset, release_id, prints)

    def check_files(self, dataset: str, prints: Iterable[tuple[str, str]]) -> None:
        """Refuse (exit 4) an input with a file another dataset used — ``prints`` are ``(file, keyed
        fingerprint)``, the HMAC-SHA256 of each file under the lake's key as hex (an
        ``hmac-sha256:`` prefix is dropped). Reads the table; writes nothing."""
        resolve = self._resolver()
        mine = resolve(dataset)
        used = {row["fingerprint"]: row["dataset"]
                for row in self._read(FINGERPRINTS_TABLE, FINGERPRINTS_SCHEMA).to_pylist()
                if resolve(row["dataset"]) != mine}
        for file, fingerprint in prints:
            if fingerprint.removeprefix(KEYED_PREFIX) in used:
                raise ReleaseRefused(f"{file}: this input is identical to one of dataset "
                                     f"'{used[fingerprint.removeprefix(KEYED_PREFIX)]}'; "
                                     "a dataset's budget cannot be renewed by copying its input")

    def record_files(self, dataset: str, release_id: str, prints: Iterable[tuple[str, str]]) -> None:
        """Record an input's file fingerprints (operator-only)."""
        prints = [(file, fingerprint.removeprefix(KEYED_PREFIX)) for file, fingerprint in prints]
        if prints:
            now = datetime.now(UTC)
            self._append(FINGERPRINTS_TABLE, FINGERPRINTS_SCHEMA, [
                {"dataset": dataset, "release_id": release_id, "location": file, "fingerprint": fingerprint,
                 "recorded_at": now}
                for file, fingerprint in prints
            ])

    # ---- row prints: the content a release reads (issue 32) --------------------------------

    def row_key(self) -> bytes:
        """The lake's row-print key (``row_prints.row_key``: derived from its fingerprint key)."""
        return row_key(self.fingerprint_key())

    def overlap_rule(self) -> OverlapRule:
        """When an input's rows count as another dataset's (:class:`OverlapRule`; the lake's
        settings, else the defaults)."""
        properties = self._namespace_properties()
        return OverlapRule(int(properties.get(OVERLAP_ROWS_PROPERTY, DEFAULT_OVERLAP_ROWS)),
                           float(properties.get(OVERLAP_FRACTION_PROPERTY, DEFAULT_OVERLAP_FRACTION)))

    def set_overlap_rule(self, rule: OverlapRule) -> None:
        rule.check()
        self.lake.ensure_namespace(POLICY_NAMESPACE)
        self.lake.catalog.update_namespace_properties(POLICY_NAMESPACE, updates={
            OVERLAP_ROWS_PROPERTY: str(rule.rows), OVERLAP_FRACTION_PROPERTY: repr(rule.fraction)})

    def _sketch_state(self, for_writing: bool = False) -> tuple[Table | None, list[dict]]:
        if for_writing:
            table = self.lake.load_or_create_table(POLICY_NAMESPACE, SKETCHES_TABLE, SKETCHES_SCHEMA,
                                                   properties=SKETCHES_PROPERTIES).refresh()
        else:
            try:
                table = self.lake.catalog.load_table((POLICY_NAMESPACE, SKETCHES_TABLE))
            except (NoSuchTableError, NoSuchNamespaceError):
                return None, []
        if table.current_snapshot() is None:
            return table, []
        return table, table.scan().to_arrow().to_pylist()

    def _overlapping(self, dataset: str, sketch: RowSketch, rows: list[dict]) -> tuple[str, Overlap] | None:
        """The first other dataset (by name) whose recorded input holds enough of ``sketch``'s rows."""
        rule, resolve = self.overlap_rule(), self._resolver()
        mine = resolve(dataset)
        seen: set[bytes] = set()
        found: list[tuple[str, Overlap]] = []
        for row in sorted(rows, key=lambda row: (row["dataset"], row["recorded_at"])):
            if resolve(row["dataset"]) == mine or row["sketch"] in seen:
                continue
            seen.add(row["sketch"])
            overlap = sketch.overlap(RowSketch.decode(row["sketch"]))
            if rule.refuses(overlap):
                found.append((row["dataset"], overlap))
        return found[0] if found else None

    def check_overlap(self, dataset: str, location: str, sketch: RowSketch) -> None:
        """Refuse (exit 4) an input whose rows another dataset's recorded input holds, by the lake's
        :class:`OverlapRule` (module ``row_prints``: the estimate and its limits). Writes nothing."""
        _, rows = self._sketch_state()
        self._refuse_overlap(dataset, location, sketch, self._overlapping(dataset, sketch, rows))

    def _refuse_overlap(self, dataset: str, location: str, sketch: RowSketch,
                        found: tuple[str, Overlap] | None) -> None:
        if found is None:
            return
        other, overlap = found
        raise ReleaseRefused(
            f"{location}: this input's rows are dataset '{other}'s (about {overlap.fraction:.0%} of its "
            f"{sketch.rows:,} rows are in that dataset's input); a dataset's budget cannot be renewed by copying "
            f"its input — release it as '{other}', or an operator merges the two: "
            f"`privlake budget merge {dataset} --into {other} --lake {self.lake.description}`"
        )

    def bind_input(self, dataset: str, release_id: str, location: str, prints: Sequence[tuple[str, str]],
                   sketch: RowSketch) -> None:
        """Bind a release's input to ``dataset`` once it holds its reservation: its row sketch
        recorded on top of the snapshot it was checked against again (optimistic concurrency, as the
        ledger's reservations: a concurrent release of another dataset that recorded the same rows
        in between makes this one refused, exit 4) unless this dataset recorded the very same sketch
        before, then its location and file fingerprints."""
        for attempt in range(MAX_COMMIT_ATTEMPTS):
            table, rows = self._sketch_state(for_writing=True)
            self._refuse_overlap(dataset, location, sketch, self._overlapping(dataset, sketch, rows))
            self.check_location(dataset, location)
            self.check_files(dataset, prints)
            encoded = sketch.encode()
            if any(row["dataset"] == dataset and row["sketch"] == encoded for row in rows):
                break  # the same rows recorded for this dataset already (a release of the same input)
            frame = pa.Table.from_pylist([{"dataset": dataset, "release_id": release_id, "location": location,
                                           "rows": sketch.rows, "sketch": encoded,
                                           "recorded_at": datetime.now(UTC)}], schema=SKETCHES_SCHEMA)
            try:
                with table.transaction() as transaction:  # type: ignore[union-attr]
                    transaction.append(frame)
            except CommitFailedException:
                time.sleep(0.02 * min(attempt + 1, 10))
                continue
            break
        else:
            raise ReleaseRefused("the lake's input records changed under this release too often; run it again")
        self.bind(dataset, location)
        self.record_files(dataset, release_id, prints)

    # ---- merged datasets -------------------------------------------------------------------

    def merges(self) -> dict[str, str]:
        """Each merged dataset and the dataset whose budget it shares (its latest merge wins)."""
        merged: dict[str, str] = {}
        for row in sorted(self._read(MERGES_TABLE, MERGES_SCHEMA).to_pylist(), key=lambda row: row["merged_at"]):
            merged[row["dataset"]] = row["into"]
        return merged

    def budget_dataset(self, dataset: str) -> str:
        """The dataset whose budget ``dataset``'s releases are charged to: itself, or the dataset it
        was merged into (followed to the end of a chain)."""
        return self._resolver()(dataset)

    def _resolver(self) -> Callable[[str], str]:
        """:meth:`budget_dataset` over the merges as read once (for checks over many rows)."""
        merged = self.merges()

        def resolve(dataset: str) -> str:
            seen = {dataset}
            while dataset in merged:
                dataset = merged[dataset]
                if dataset in seen:
                    break
                seen.add(dataset)
            return dataset

        return resolve

    def merge(self, dataset: str, into: str) -> None:
        """An operator's decision that ``dataset`` holds the people of ``into``: from now on its
        releases are charged to ``into``'s budget and ledger, and their inputs may overlap. A dataset
        that has spent anything, or a merge that would make a cycle, is refused."""
        from pipelines.platform.ledger import ACTIVE, PrivacyLedger  # the ledger imports this module

        if dataset == into:
            raise PrivlakeError("a dataset cannot be merged into itself")
        root = self.budget_dataset(into)
        if root == dataset:
            raise PrivlakeError(f"dataset '{into}' is already merged into '{dataset}'; a merge cannot make a cycle")
        target = self.require_budget(root)
        events = PrivacyLedger(self.lake).entries(dataset).drop_duplicates("release_id", keep="last")
        if events["status"].isin(ACTIVE).any():
            raise PrivlakeError(f"dataset '{dataset}' has spent budget (reserved or published releases); only a "
                                "dataset that never spent any can be merged (release its data as the other dataset "
                                "instead)")
        self._append(MERGES_TABLE, MERGES_SCHEMA, [{"dataset": dataset, "into": target.dataset,
                                                    "merged_at": datetime.now(UTC)}])

    def prepare_test_lake(self, datasets: Iterable[str], epsilon: float, delta: float,
                          unit: str = RELEASE_UNIT) -> None:
        """Make this lake a test lake with a budget for each of ``datasets`` not budgeted yet (what
        tests and benchmarks, which use the fixed test secret, need; never a production lake)."""
        self.initialize(test=True)
        known = {budget.dataset for budget in self.budgets()}
        for dataset in datasets:
            if dataset not in known:
                self.set_budget(dataset, epsilon, delta, unit)
