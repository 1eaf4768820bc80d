"""Lake policy: what an operator decides once and a release configuration cannot change.

* **Budgets** (``privlake budget set DATASET --epsilon E --delta D``): the total (ε, δ) a dataset
  may spend over all its releases, and what a release is charged for — its proven whole-release
  bound (``unit: release``, the default) or, only when an operator says so, the per-record figure
  of plausible deniability (``unit: record``). A release of a dataset without a budget is refused.
* **Where a dataset lives**: each dataset is bound to the locations of its inputs (the file or
  folder a config reads; given with the budget or registered on first use). A config that reads a
  location bound to another dataset — or a file whose keyed fingerprint another dataset already
  used — is refused: renaming ``dataset`` must not buy a fresh budget.
* **Keyed input fingerprints**: HMAC-SHA256 of each input file under a per-lake key kept *outside*
  the lake (a key file or an environment variable the lake names), so someone who can read the lake
  cannot test guesses of the input against them. They live in an operator-only table. A release
  does not hash its input on the driver: the executors that read the input compute these digests
  as they read each file (:meth:`LakePolicy.executor_key` is the lake's key in the form the
  engines keep out of pickled side values; ``pipelines/platform/input_prints.py``), and
  :meth:`LakePolicy.check_fingerprints` compares and records them. :meth:`LakePolicy.fingerprints`
  is the driver-side reference they equal (the values lakes have always recorded).
* **Test lakes** (``privlake init-lake LAKE --test``): the only lakes that accept releases made
  with ``PRIVLAKE_TEST_SECRET``; every output of a test lake says it is one.

Tables (namespace ``privlake``, operator-only, append-only; the latest row per key wins):
``budgets`` (dataset, ε, δ, unit), ``locations`` (dataset, location) and ``input_fingerprints``
(dataset, release, location, fingerprint). The lake's own settings (test lake, where its key is)
are properties of the ``privlake`` namespace. Reading policy never writes (a read-only lake works).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from pipelines.platform.errors import PrivlakeError, ReleaseRefused
from pipelines.platform.lake import Lake

POLICY_NAMESPACE = "privlake"
BUDGETS_TABLE = "budgets"
LOCATIONS_TABLE = "locations"
FINGERPRINTS_TABLE = "input_fingerprints"
LAKE_KIND_PROPERTY = "privlake.lake-kind"
KEY_PROPERTY = "privlake.fingerprint-key"
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
        owner = self.owner_of(location)
        if owner is not None and owner != dataset:
            raise ReleaseRefused(f"{location}: this input location belongs to dataset '{owner}', not '{dataset}'; "
                                 "a dataset's budget cannot be renewed by renaming it")
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
        and its input's location must not belong to another dataset (the location is bound to it).
        Reads no data: the files are checked by :meth:`check_fingerprints` with the digests the
        executors compute as they read them."""
        budget = self.require_budget(dataset)
        self.bind(dataset, location_of(input_path))
        return budget

    def check_inputs(self, dataset: str, release_id: str, input_path: Path | str) -> None:
        """:meth:`check_fingerprints` with the files hashed here (:meth:`fingerprints`): the driver-side
        reference of the check a release makes with its executors' digests."""
        self.check_fingerprints(dataset, release_id, self.fingerprints(location_of(input_path)))

    def check_fingerprints(self, dataset: str, release_id: str, prints: Iterable[tuple[str, str]]) -> None:
        """Refuse (exit 4) an input with a file another dataset used — ``prints`` are ``(file, keyed
        fingerprint)``, the HMAC-SHA256 of each file under the lake's key as hex (an
        ``hmac-sha256:`` prefix is dropped) — else record them (operator-only)."""
        prints = [(file, fingerprint.removeprefix(KEYED_PREFIX)) for file, fingerprint in prints]
        used = {row["fingerprint"]: row["dataset"]
                for row in self._read(FINGERPRINTS_TABLE, FINGERPRINTS_SCHEMA).to_pylist() if row["dataset"] != dataset}
        for file, fingerprint in prints:
            if fingerprint in used:
                raise ReleaseRefused(f"{file}: this input is identical to one of dataset '{used[fingerprint]}'; "
                                     "a dataset's budget cannot be renewed by copying its input")
        if prints:
            now = datetime.now(UTC)
            self._append(FINGERPRINTS_TABLE, FINGERPRINTS_SCHEMA, [
                {"dataset": dataset, "release_id": release_id, "location": file, "fingerprint": fingerprint,
                 "recorded_at": now}
                for file, fingerprint in prints
            ])

    def prepare_test_lake(self, datasets: Iterable[str], epsilon: float, delta: float,
                          unit: str = RELEASE_UNIT) -> None:
        """Make this lake a test lake with a budget for each of ``datasets`` not budgeted yet (what
        tests and benchmarks, which use the fixed test secret, need; never a production lake)."""
        self.initialize(test=True)
        known = {budget.dataset for budget in self.budgets()}
        for dataset in datasets:
            if dataset not in known:
                self.set_budget(dataset, epsilon, delta, unit)
