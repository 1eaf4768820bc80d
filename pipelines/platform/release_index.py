"""The ``releases._index`` table: one row per published release, public fields only.

Consumers are given the ``releases`` namespace and nothing else (docs/PRIVACY.md, "Who may read
which table"); this table lets them (and a query engine: ``SELECT * FROM releases._index``)
find every release — its table, kind, dataset, publication time and guarantee — in one scan
instead of loading every release table's properties. It holds only what the release tables'
public manifests already say: no timings, no reservation times (which, with the publication
time, would give a release's duration), nothing from ``privlake.internal``.

It is derived, never the truth: a release is published by its own table's commit
(``pipelines/platform/lake.py``); the index row is appended after that commit (a catalog has no
transaction over two tables). A crash between the two leaves a published release without its
row; ``privlake recover`` (and so the start of every ``run``) adds the missing rows
(:meth:`ReleaseIndex.reconcile`). A row is added only when absent, so a retry never doubles it.
Its name starts with ``_``, which no release table name can (``release_table_name``), so no
release id can collide with it.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, NoSuchNamespaceError, NoSuchTableError

from pipelines.platform.lake import RELEASES_NAMESPACE, Lake, PublishedRelease

INDEX_TABLE = "_index"
COMMIT_ATTEMPTS = 8
"""Appends that lose an optimistic-concurrency race (another publisher's append landed first)
are retried on the refreshed table this many times."""
INDEX_PROPERTIES = {"commit.retry.num-retries": "0"}
"""pyiceberg's own commit retries would replay an append on the refreshed table without our
check for the row: a concurrent add of the same release would land twice. The retry is ours."""

INDEX_SCHEMA = pa.schema(
    [
        pa.field("release_id", pa.string(), nullable=False),
        pa.field("table", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("published_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("epsilon", pa.float64()),
        pa.field("delta", pa.float64()),
        pa.field("headline_scope", pa.string()),
        pa.field("privacy_unit", pa.string()),
        pa.field("rows", pa.int64(), nullable=False),
    ]
)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def index_row(release: PublishedRelease) -> dict[str, Any]:
    """The public index row of a published release (from its public manifest only)."""
    manifest = release.manifest
    unit = manifest.get("privacy_unit")
    return {
        "release_id": release.release_id,
        "table": release.table,
        "kind": release.kind,
        "dataset": str(manifest.get("dataset", "")),
        "published_at": release.published_at,
        "epsilon": _number(manifest.get("epsilon")),
        "delta": _number(manifest.get("delta")),
        "headline_scope": manifest.get("headline_scope"),
        "privacy_unit": unit if isinstance(unit, str) or unit is None else json.dumps(unit, sort_keys=True),
        "rows": int(release.rows),
    }


class ReleaseIndex:
    """The lake's ``releases._index`` table (module docstring)."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake

    def _table(self, create: bool):
        if create:
            table = self.lake.load_or_create_table(RELEASES_NAMESPACE, INDEX_TABLE, INDEX_SCHEMA, INDEX_PROPERTIES)
            if any(table.properties.get(key) != value for key, value in INDEX_PROPERTIES.items()):
                with table.transaction() as transaction:
                    transaction.set_properties(INDEX_PROPERTIES)
                table = self.lake.catalog.load_table((RELEASES_NAMESPACE, INDEX_TABLE))
            return table
        try:
            return self.lake.catalog.load_table((RELEASES_NAMESPACE, INDEX_TABLE))
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def entries(self) -> pa.Table:
        """Every row (empty when the lake has no index yet), newest publication first; a release
        listed twice (an index written by an older version's racing appends) is listed once."""
        table = self._table(create=False)
        rows = table.scan().to_arrow() if table is not None else INDEX_SCHEMA.empty_table()
        rows = rows.sort_by([("published_at", "descending"), ("release_id", "ascending")])
        ids = rows.column("release_id").to_pylist()
        first = [index for index, release_id in enumerate(ids) if release_id not in ids[:index]]
        return rows.take(first) if len(first) < len(ids) else rows

    def release_ids(self) -> set[str]:
        return set(self.entries().column("release_id").to_pylist())

    def add(self, releases: list[PublishedRelease]) -> int:
        """Append the rows of those ``releases`` the index lacks; returns how many were added."""
        if not releases:
            return 0
        table = self._table(create=True)
        for attempt in range(COMMIT_ATTEMPTS):
            present = set(table.scan(selected_fields=("release_id",)).to_arrow().column("release_id").to_pylist())
            missing = [index_row(release) for release in releases if release.release_id not in present]
            if not missing:
                return 0
            try:
                table.append(pa.Table.from_pylist(missing, schema=INDEX_SCHEMA))
                return len(missing)
            except CommitFailedException:
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise
                table = self._table(create=True)
        return 0

    def reconcile(self) -> int:
        """Add the rows of published releases the index lacks (after a crash between a release's
        commit and its index append); returns how many were added."""
        indexed = set(self.entries().column("table").to_pylist())
        missing = []
        for identifier in self.lake.release_tables():  # one listing; only unindexed tables are loaded
            if ".".join(identifier) in indexed:
                continue
            release = self.lake.published_release_at(identifier)
            if release is not None and release.problem is None:
                missing.append(release)
        return self.add(missing)
