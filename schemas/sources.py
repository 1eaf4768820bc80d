"""Where a release's input lives: files (one file, a folder of them, or a glob) or an Iceberg table.

:class:`SourceSpec` is the configuration contract of the platform's input layer
(``pipelines/platform/sources.py``, issue 15): a kind's ``input`` section names its input with it,
and the platform turns it into *fragments* (one data file each) that executors read where the data
lives. Only the shape of the setting is checked here; whether the files or the table exist is
found out when they are listed (``list_fragments``), since that needs the file system or catalog.

* ``path``: a file, a folder (every data file under it, at any depth; hidden and ``_``-prefixed
  names such as ``_SUCCESS`` are skipped as Spark and Hive skip them) or a glob
  (``data/day=*/part-*.parquet``; ``*`` and ``?`` stay within one folder name, ``**`` spans
  folders). A local path or a URI (``file:///``, ``s3://bucket/prefix/``): text, not a ``Path``,
  so a URI keeps its ``//``. Hive-style folder names (``day=2026-12-01/``) between the input's
  root and a file become string columns, or the ``partition_columns`` named here.
* ``format``: ``csv`` or ``parquet``; by default inferred from the files' suffixes (``.csv``;
  ``.parquet``, ``.parq``, ``.pq``), and an input holding both is refused.
* ``table``: an Iceberg table identifier (``db.claims``, namespace and name) in the lake ``lake``
  (a folder, a YAML file holding a ``lake:`` mapping, or the mapping itself: what ``--lake``
  takes), read at ``snapshot_id`` (default: the table's current snapshot when the input is
  listed) with an optional ``row_filter`` in pyiceberg's expression syntax
  (``day >= '2026-12-01' and region = 'eu'``).

Exactly one of ``path`` and ``table``. Errors are one line naming the key (the config loader adds
the file).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from schemas.base import LakeSetting, StrictModel

MAX_PARTITION_COLUMNS = 32
"""The most partition folder levels an input may name (a deeper tree is almost certainly a mistake)."""
MAX_ROW_FILTER_CHARACTERS = 10_000
"""A row filter is a short expression; a longer one is refused before it is parsed."""

_TABLE_IDENTIFIER = re.compile(r"^[^.\s/]+(\.[^.\s/]+)+$")
_COLUMN_NAME = re.compile(r"^[^/=\\\s][^/=\\]*$")


class SourceSpec(StrictModel):
    """An input: files at ``path`` or the Iceberg ``table`` of ``lake`` (module docstring)."""

    path: str | None = Field(
        None, min_length=1, max_length=4096,
        description="a file, a folder or a glob; a local path or a URI (s3://bucket/prefix/)",
    )
    format: Literal["csv", "parquet"] | None = Field(
        None, description="csv or parquet; default: inferred from the files' suffixes (mixed suffixes are refused)"
    )
    partition_columns: list[str] | None = Field(
        None, max_length=MAX_PARTITION_COLUMNS,
        description="the partition folder levels below the input's root, in order (key=value or bare value "
        "folders); default: every key=value folder name becomes a column; [] takes none",
    )
    table: str | None = Field(
        None, min_length=3, max_length=1024, description="an Iceberg table identifier: namespace.name"
    )
    lake: LakeSetting | None = Field(None, description="the lake holding table: a folder, a lake YAML file or a lake mapping")
    snapshot_id: int | None = Field(
        None, ge=-(2**63), lt=2**63, description="the table snapshot to read; default: the current one when listed"
    )
    row_filter: str | None = Field(
        None, min_length=1, max_length=MAX_ROW_FILTER_CHARACTERS,
        description="a pyiceberg row filter expression over the table's columns",
    )

    @field_validator("path", mode="before")
    @classmethod
    def _path_text(cls, value: object) -> object:
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, str) and not value.strip():
            raise ValueError("path must name a file, a folder or a glob")
        return value

    @field_validator("table")
    @classmethod
    def _table_identifier(cls, value: str | None) -> str | None:
        if value is not None and not _TABLE_IDENTIFIER.match(value):
            raise ValueError("table must be an Iceberg table identifier, namespace.name (e.g. db.claims)")
        return value

    @field_validator("partition_columns")
    @classmethod
    def _partition_names(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        for name in value:
            if not _COLUMN_NAME.match(name):
                raise ValueError("partition_columns: each is a column name, without '/', '=' or surrounding spaces")
        if len(set(value)) != len(value):
            raise ValueError("partition_columns: a column is named twice")
        return value

    @field_validator("row_filter")
    @classmethod
    def _row_filter_parses(cls, value: str | None) -> str | None:
        if value is None:
            return value
        # imported only for a config that has a row filter: a plain release starts without pyiceberg's parser
        from pyiceberg.expressions.parser import parse

        try:
            parse(value)
        except Exception as error:  # noqa: BLE001 - pyparsing's and pyiceberg's errors: one line, no echo
            where = getattr(error, "col", None)
            at = f" (at character {where})" if isinstance(where, int) else ""
            raise ValueError(f"row_filter is not a valid pyiceberg row filter expression{at}") from None
        return value

    @model_validator(mode="after")
    def _one_source(self) -> SourceSpec:
        if (self.path is None) == (self.table is None):
            raise ValueError("give exactly one of path (files: a file, a folder or a glob) and table (an Iceberg table)")
        if self.table is not None:
            if self.lake is None:
                raise ValueError("table needs lake: the lake holding the table (a folder, a lake YAML file or a mapping)")
            if self.format is not None or self.partition_columns is not None:
                raise ValueError("format and partition_columns are for path inputs; a table knows its own")
        else:
            present = [name for name in ("lake", "snapshot_id", "row_filter") if getattr(self, name) is not None]
            if present:
                raise ValueError(f"{', '.join(present)}: only with table (an Iceberg table input), not with path")
        return self

    @property
    def kind(self) -> Literal["files", "table"]:
        """``files`` (``path``) or ``table`` (an Iceberg table)."""
        return "table" if self.table is not None else "files"
