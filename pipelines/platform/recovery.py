"""Leases and recovery: a crashed release leaves no charge, no raw data and no orphan file behind.

A release in flight holds a *lease* in its lake, ``<leases>/<release id>.json`` (``<root>/leases``
of an embedded lake; ``<staging>/_leases`` of a catalog lake, so every host whose releases share
the staging location — which a cluster's executors need anyway — sees every lease): who runs it
(host, process id), its dataset and kind, and until when it is alive (``expires_at``). A thread of
the running release renews it every third of :data:`LEASE_SECONDS`; the lease is written before
the release reserves any budget and removed after its ledger is settled (published or refunded).
A driver killed with ``kill -9``, a lost Airflow worker or a host that went away stops renewing,
and its lease expires. A process id cannot be checked from another host, so the lease, kept in the
lake every host shares, is the one sign of life that works for every deployment.

:func:`recover` (``privlake recover --lake LAKE``, and the start of every ``privlake run`` on that
lake) then settles what such a release left:

- a ledger reservation whose release is published is marked published (the commit landed, the
  book-keeping after it did not): its charge is final;
- a reservation whose release is not published and whose lease has expired (or is missing) is
  refunded: nothing was released;
- the staging folder of every release without a live lease is deleted: it holds raw input
  (canonical claims, coded records) or unpublished output;
- data files under the lake's release tables that no published snapshot references and that are
  older than :data:`LEASE_SECONDS` are deleted (a kill between moving the files into the table's
  folder and the commit leaves them there), and so are expired lease files.

Afterwards the ledger's active charge is exactly the published releases plus the live
reservations. A release that was only slow (its lease expired while it still ran) finds its
reservation refunded when it is about to publish and stops (``ReleaseRefused``, exit 4) instead of
publishing uncharged (:meth:`Lease.confirm`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.engines import storage
from pipelines.platform import log
from pipelines.platform.ids import RELEASE_ID_PATTERN, check_release_id
from pipelines.platform.lake import (
    ATTEMPT_PROPERTY,
    MANIFEST_PROPERTY,
    RELEASES_NAMESPACE,
    Lake,
    release_table_name,
)
from pipelines.platform.ledger import PrivacyLedger
from pipelines.platform.release_index import ReleaseIndex

LEASE_SECONDS_VARIABLE = "PRIVLAKE_LEASE_SECONDS"
DEFAULT_LEASE_SECONDS = 300.0
"""How long a release stays alive without renewing its lease (renewed every third of it). Five
minutes outlasts any pause of a healthy driver; recovery of a crashed one waits that long."""


def lease_seconds() -> float:
    """The lease duration: ``PRIVLAKE_LEASE_SECONDS`` if set (a positive number), else the default."""
    text = os.environ.get(LEASE_SECONDS_VARIABLE)
    if not text:
        return DEFAULT_LEASE_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0 < value < 1e7):
        raise ValueError(f"{LEASE_SECONDS_VARIABLE} must be a positive number of seconds")
    return value


def leases_folder(lake: Lake) -> storage.Where:
    """The lake's leases: its folder's ``leases/`` (embedded), or beside staging (a catalog lake:
    shared by every host whose releases share the staging location)."""
    return lake.leases_root


@dataclass
class Lease:
    """The lease of one release in flight (module docstring); a context manager that writes it,
    renews it in a daemon thread and removes it on exit."""

    lake: Lake
    release_id: str
    dataset: str
    kind: str
    seconds: float = field(default_factory=lease_seconds)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def path(self) -> storage.Where:
        return leases_folder(self.lake) / f"{check_release_id(self.release_id)}.json"

    def renew(self) -> None:
        now = time.time()
        record = {"release_id": self.release_id, "dataset": self.dataset, "kind": self.kind,
                  "host": socket.gethostname(), "pid": os.getpid(), "renewed_at": now,
                  "expires_at": now + self.seconds}
        storage.write_bytes(self.path, json.dumps(record).encode())

    def _keep_alive(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                self.renew()
            except OSError as error:  # a full disk: the release goes on; recovery may refund it
                log.warning(f"could not renew the lease of release {self.release_id}: {type(error).__name__}")

    def __enter__(self) -> Lease:
        self.renew()
        self._thread = threading.Thread(target=self._keep_alive, name=f"privlake-lease-{self.release_id}",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        storage.delete_file(self.path)

    def confirm(self, ledger: PrivacyLedger) -> bool:
        """Just before the commit: renew the lease and check the reservation is still held (a
        recovery that judged this release dead may have refunded it). ``False`` if it was."""
        self.renew()
        event = ledger.latest_event(self.dataset, self.release_id)
        return event is not None and event["status"] in ("reserved", "published")


def read_lease(path: storage.Where) -> dict[str, Any] | None:
    """A lease file's record, or ``None`` if it is unreadable (a torn or foreign file)."""
    try:
        record = json.loads(storage.read_bytes(path))
        float(record["expires_at"])
        return record
    except (OSError, ValueError, KeyError, TypeError):
        return None


def live_leases(lake: Lake, now: float | None = None) -> dict[str, dict[str, Any]]:
    """The release ids whose lease has not expired, with their records."""
    now = time.time() if now is None else now
    live = {}
    for path in storage.children(leases_folder(lake)):
        if not path.name.endswith(".json") or path.name.startswith("."):
            continue
        record = read_lease(path)
        if record is not None and float(record["expires_at"]) > now:
            live[path.name.removesuffix(".json")] = record
    return live


@dataclass
class Recovery:
    """What :func:`recover` did (and, with ``dry_run``, would do)."""

    completed: list[tuple[str, str]] = field(default_factory=list)
    refunded: list[tuple[str, str]] = field(default_factory=list)
    live: list[str] = field(default_factory=list)
    staging_removed: list[str] = field(default_factory=list)
    orphan_files_removed: int = 0
    leases_removed: int = 0
    index_rows_added: int = 0

    @property
    def did_anything(self) -> bool:
        return bool(self.completed or self.refunded or self.staging_removed or self.orphan_files_removed
                    or self.leases_removed or self.index_rows_added)

    def lines(self) -> list[str]:
        """One line per action, for the operator (release ids and datasets only; no data)."""
        out = [f"completed: release {release} of dataset '{dataset}' is published; its charge is final"
               for dataset, release in self.completed]
        out += [f"refunded: release {release} of dataset '{dataset}' never published; its reservation is given back"
                for dataset, release in self.refunded]
        out += [f"removed staging of release {release}" for release in self.staging_removed]
        if self.orphan_files_removed:
            out.append(f"removed {self.orphan_files_removed} orphan file(s) under the release tables")
        if self.leases_removed:
            out.append(f"removed {self.leases_removed} expired lease(s)")
        if self.index_rows_added:
            out.append(f"added {self.index_rows_added} published release(s) missing from releases._index")
        out += [f"left alone: release {release} is running (live lease)" for release in self.live]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"completed": [{"dataset": d, "release_id": r} for d, r in self.completed],
                "refunded": [{"dataset": d, "release_id": r} for d, r in self.refunded],
                "running": self.live, "staging_removed": self.staging_removed,
                "orphan_files_removed": self.orphan_files_removed, "leases_removed": self.leases_removed,
                "index_rows_added": self.index_rows_added}


def recover(lake: Lake, now: float | None = None) -> Recovery:
    """Settle what crashed releases left in ``lake`` (module docstring) and say what was done."""
    now = time.time() if now is None else now
    grace = lease_seconds()
    live = live_leases(lake, now)
    done = Recovery(live=sorted(live))
    ledger = PrivacyLedger(lake)
    for dataset, release_id in ledger.open_reservations():
        if release_id in live:
            continue
        if lake.is_published(release_id):
            ledger.published(dataset, release_id)
            done.completed.append((dataset, release_id))
        else:
            ledger.refund(dataset, release_id)
            done.refunded.append((dataset, release_id))
    live.update(live_leases(lake, now))  # releases that started while this recovery ran keep their staging
    for folder in storage.children(lake.staging_root):
        # only what a release writes: a release id's folder (never the leases, never a stranger's)
        if folder.name not in live and RELEASE_ID_PATTERN.fullmatch(folder.name):
            storage.delete(folder)
            done.staging_removed.append(folder.name)
    done.orphan_files_removed = _remove_orphan_files(lake, now - grace, {release_table_name(r) for r in live})
    done.index_rows_added = ReleaseIndex(lake).reconcile()
    for path in storage.children(leases_folder(lake)):
        name = path.name
        if name.removesuffix(".json") in live:
            continue
        record = read_lease(path) if name.endswith(".json") and not name.startswith(".") else None
        if record is None and isinstance(path, Path) and path.exists() and path.stat().st_mtime > now - grace:
            continue  # a lease being written right now (its temporary file)
        storage.delete(path)
        done.leases_removed += 1
    return done


def _remove_orphan_files(lake: Lake, older_than: float, running_tables: set[str]) -> int:
    """Delete what no published release owns under the embedded warehouse's ``releases`` folder,
    when older than ``older_than`` (a publish in flight is younger than a lease): a table folder
    without a published table (a kill before the create-table commit), a ``data/<attempt>``
    folder of a published table other than the attempt that landed, and a catalog table left
    without a manifest (outside the publish protocol). Cheap on a lake of many releases: one
    catalog listing, and a table is loaded only when its ``data`` folder holds more than one
    attempt. Object-store warehouses are left to the catalog's own orphan-file maintenance. The
    tables of running releases (``running_tables``) are never touched: a publish moves staged files,
    whose times are those of the staging write, into the table's folder before its commit."""
    if lake.warehouse_folder is None:
        return 0
    releases_folder = lake.warehouse_folder / RELEASES_NAMESPACE
    tables = {identifier[-1]: identifier for identifier in lake.release_tables()}
    published: dict[str, str] = {}  # table name -> the attempt that landed, for tables we load

    def landed_attempt(name: str) -> str | None:
        if name not in published:
            table = lake.catalog.load_table(tables[name])
            if MANIFEST_PROPERTY not in table.properties:
                with contextlib.suppress(Exception):
                    lake.catalog.drop_table(tables[name])
                published[name] = ""
            else:
                published[name] = table.properties.get(ATTEMPT_PROPERTY, "")
        return published[name] or None

    if not releases_folder.is_dir():
        return 0
    removed = 0
    for table_folder in releases_folder.iterdir():
        if not table_folder.is_dir() or table_folder.name in running_tables or table_folder.name.startswith("_"):
            continue
        data = table_folder / "data"
        children = sorted(data.iterdir()) if data.is_dir() else []
        if table_folder.name in tables and len(children) <= 1 and (children or not data.exists()):
            continue  # a published table with its one attempt (the common case: nothing loaded)
        attempt = landed_attempt(table_folder.name) if table_folder.name in tables else None
        candidates = [table_folder] if attempt is None else [child for child in children if child.name != attempt]
        for candidate in candidates:
            files = [candidate] if candidate.is_file() else [p for p in candidate.rglob("*") if p.is_file()]
            if any(path.stat().st_mtime > older_than for path in files):
                continue
            removed += len(files)
            with contextlib.suppress(OSError):
                shutil.rmtree(candidate) if candidate.is_dir() else candidate.unlink()
    return removed
