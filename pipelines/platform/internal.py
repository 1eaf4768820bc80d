"""The operator-only record of each release: what was computed from raw data and so is not covered
by the release's guarantee (``docs/PRIVACY.md``, "Who may read which table").

A release publishes its data and a *public* manifest (what the guarantee covers, or what is public
by construction). Everything else — input validation details, pass rates and attempts, clip and
fallback counts, timings, the evaluation against ground truth, input fingerprints — goes to the
append-only Iceberg table ``privlake.internal``: one row per release and event, the record as
JSON. Grant it to operators only; ``privlake show ID --internal`` reads it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import EqualTo

from pipelines.platform.lake import Lake

INTERNAL_NAMESPACE = "privlake"
INTERNAL_TABLE = "internal"
INTERNAL_SCHEMA = pa.schema(
    [
        pa.field("release_id", pa.string(), nullable=False),
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("recorded_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("record", pa.string(), nullable=False),
    ]
)


class OperatorRecords:
    """The ``privlake.internal`` table of a lake."""

    def __init__(self, lake: Lake) -> None:
        self.lake = lake

    def _table(self, create: bool):
        if create:
            return self.lake.load_or_create_table(INTERNAL_NAMESPACE, INTERNAL_TABLE, INTERNAL_SCHEMA)
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return self.lake.catalog.load_table((INTERNAL_NAMESPACE, INTERNAL_TABLE))
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def record(self, release_id: str, dataset: str, kind: str, status: str, record: dict[str, Any]) -> None:
        row = {
            "release_id": [release_id], "dataset": [dataset], "kind": [kind], "status": [status],
            "recorded_at": [datetime.now(UTC)], "record": [json.dumps(record, default=str)],  # in run order (stages, timings)
        }
        self._table(create=True).append(pa.Table.from_pydict(row, schema=INTERNAL_SCHEMA))

    def read(self, release_id: str) -> list[dict[str, Any]]:
        """Every record of ``release_id``, oldest first (a release that was quarantined and re-run
        has several)."""
        table = self._table(create=False)
        if table is None:
            return []
        rows = table.scan(row_filter=EqualTo("release_id", release_id)).to_arrow().sort_by("recorded_at").to_pylist()
        return [{**{k: v for k, v in row.items() if k != "record"}, "record": json.loads(row["record"])} for row in rows]
