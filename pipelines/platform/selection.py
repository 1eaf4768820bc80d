"""Input selection must not look at what a release protects (issue 15 review, F1 and F2).

Every kind's neighbouring relation is stated over the rows the release reads: crowd changes one
claim's value (the claim counts and the source-object incidence are public), tabular substitutes
one record (``n`` public), filter changes one record's private label (its features fixed), ldp
takes each user's report as an independent ε_i-LDP report. A selection that looks at a protected
column turns these into something else: with ``row_filter: "value >= 50"`` one claim's value
decides whether the claim is read at all (so its object's count, its suppression and the
manifest's counts), a tabular ``n`` becomes the exact count of a predicate on private attributes,
and a filter record whose private label comes from its folder (``group=a/``) moves to another
place in the input's order when that label changes (``record`` and the release files follow it).

So a release is refused (:class:`ConfigError`, exit 2, one line naming the key and the column)
when

* its ``input.row_filter`` names a column the kind treats as private (the filter is parsed with
  pyiceberg's expression parser and every column reference of the unbound expression is
  collected: before the table is opened, before anything is reserved);
* its ``input.path`` picks files by a private column: a ``key=value`` segment of the path or the
  glob (``claims/value=60/``, ``records/group=*/``) or a declared ``partition_columns`` level
  whose key is private (checked from the configuration, before anything is reserved);
* a listed fragment's file lies under a ``key=value`` folder whose key is a private column —
  whether or not the folders become columns (``partition_columns: []`` keeps the column in the
  files but not their order: files are read in path order) — or comes from an Iceberg table
  whose partition spec or sort order (any transform) uses a private column, or whose data files
  lie under such ``key=value`` folders below the table's location (``add_files`` registers a hive
  folder's files where they lie; checked on the listing, metadata only, before any row is read):
  the input's order (``ROW_ID``) would follow the protected value. A glob's wildcards in a folder
  key (``[g]roup=a``) are matched against the private columns' names;
* an Iceberg ``row_filter`` reads a private column's field under another name: a rename is
  metadata only, the scan binds the filter to the table's current schema while the release reads
  the snapshot's, so ``score >= 50`` after renaming ``value`` to ``score`` reads the protected
  field. The filter's references are resolved to field ids in every schema the table has had and
  refused when one of those fields is (under any of its names) private; partition specs and sort
  orders are resolved by source id through every schema the same way (checked on the listing).

Each kind declares its private columns in its own room (``private_columns`` in
``pipelines/<kind>/input.py``), as a mapping from column name to what the column is, for the
error line. Names are compared case-insensitively (a refusal too many is cheaper than a leak),
and a dotted reference (``a.b``) is also checked by its first component.

What cannot be detected here — a partition key or a filter column that is a private attribute the
release does not name (a column correlated with the value, a folder split by the label under
another name), or an input file already selected upstream — is the operator's responsibility
(docs/PRIVACY.md, "Input selection"). This module imports no engine and no kind, and pyiceberg
only when a row filter is present.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import unquote

from pipelines.engines import storage
from pipelines.platform.errors import ConfigError
from pipelines.platform.sources import table_metadata
from schemas.sources import SourceSpec

GUIDE = 'select rows by public columns only (docs/PRIVACY.md, "Input selection")'
"""The advice every refusal line ends with."""


def row_filter_columns(text: str) -> list[str]:
    """The column names a pyiceberg row filter references, in order of first appearance.

    Walks the unbound expression (``And``, ``Or``, ``Not``, predicates over a ``Reference``); a
    node of any other shape is refused rather than skipped, so a future pyiceberg expression type
    cannot hide a column."""
    from pyiceberg.expressions import AlwaysFalse, AlwaysTrue, And, Not, Or, Reference, UnboundPredicate
    from pyiceberg.expressions.parser import parse

    names: list[str] = []
    stack: list[Any] = [parse(text)]
    while stack:
        node = stack.pop()
        if isinstance(node, (And, Or)):
            stack.extend((node.right, node.left))
        elif isinstance(node, Not):
            stack.append(node.child)
        elif isinstance(node, UnboundPredicate):
            term = node.term
            if not isinstance(term, Reference):
                raise ConfigError(f"input.row_filter: cannot tell which column a {type(term).__name__} term reads; "
                                  f"{GUIDE}")
            if term.name not in names:
                names.append(term.name)
        elif not isinstance(node, (AlwaysTrue, AlwaysFalse)):
            raise ConfigError(f"input.row_filter: cannot tell which columns a {type(node).__name__} expression "
                              f"reads; {GUIDE}")
    return names


def path_partition_keys(path: str) -> list[str]:
    """The keys of the ``key=value`` segments of an input path or glob (URL-unquoted), in order."""
    text = path.split("://", 1)[-1]
    keys = []
    for segment in text.split("/"):
        key, equals, _ = segment.partition("=")
        if equals and key and unquote(key) not in keys:
            keys.append(unquote(key))
    return keys


GLOB_CHARACTERS = frozenset("*?[")


def _private(name: str, private: Mapping[str, str]) -> str | None:
    """What ``name`` is when it is a private column (case-insensitive; ``a.b`` also as ``a``; a
    name with glob wildcards when it matches one)."""
    folded = {column.casefold(): what for column, what in private.items()}
    for candidate in (name, name.split(".", 1)[0]):
        if candidate.casefold() in folded:
            return folded[candidate.casefold()]
    if GLOB_CHARACTERS & set(name):
        for column, what in folded.items():
            if fnmatchcase(column, name.casefold()):
                return what
    return None


def refuse_private_selection(spec: SourceSpec, private: Mapping[str, str], kind: str) -> None:
    """From the configuration alone (before anything is reserved or read): refuse a row filter,
    a path or glob segment ``key=value`` or a declared partition level over a private column."""
    if spec.row_filter is not None:
        for name in row_filter_columns(spec.row_filter):
            what = _private(name, private)
            if what is not None:
                raise ConfigError(f"input.row_filter: names column '{name}', which {kind} releases treat as "
                                  f"private ({what}); {GUIDE}")
    if spec.path is not None:
        for key in path_partition_keys(spec.path):
            what = _private(key, private)
            if what is not None:
                raise ConfigError(f"input.path: picks files by the folder key '{key}=', a column {kind} releases "
                                  f"treat as private ({what}); {GUIDE}")
    for key in spec.partition_columns or ():
        what = _private(key, private)
        if what is not None:
            raise ConfigError(f"input.partition_columns: names '{key}', a column {kind} releases treat as "
                              f"private ({what}); a private column may not come from a folder name; {GUIDE}")


def refuse_private_partitions(fragments: Sequence[Any], private: Mapping[str, str], kind: str) -> None:
    """On the listing (metadata only, before any row is read): refuse fragments whose files lie
    under ``key=value`` folders of a private column (partition columns or not: the files are read
    in path order; for an Iceberg table, its data files' paths below the table's location) or come
    from an Iceberg table laid out by one (partition spec or sort order), and an Iceberg row filter
    that reads a private column's field under another name (a renamed column: the filter is bound
    to the table's current schema, the release reads the snapshot's) — the input's order or its
    rows would follow the protected value."""
    for key in _folder_keys(fragments):
        what = _private(key, private)
        if what is not None:
            raise ConfigError(f"input.path: partition folders '{key}=...' are cut by column '{key}', which {kind} "
                              f"releases treat as private ({what}); the input's order may not follow a private "
                              f"column; {GUIDE}")
    for column in _layout_columns(fragments):
        what = _private(column, private)
        if what is not None:
            raise ConfigError(f"input.table: the table is partitioned or sorted by column '{column}', which {kind} "
                              f"releases treat as private ({what}); the input's order may not follow a private "
                              f"column; {GUIDE}")
    for scan in _table_scans(fragments):
        metadata, _ = table_metadata(scan.metadata_location, scan.properties)
        for key in _data_file_keys(metadata, [fragment.name for fragment in fragments
                                              if getattr(fragment, "iceberg", None) is not None]):
            what = _private(key, private)
            if what is not None:
                raise ConfigError(f"input.table: the table's data files lie under folders '{key}=...' of column "
                                  f"'{key}', which {kind} releases treat as private ({what}); the input's order (data "
                                  f"files are read in path order) may not follow a private column; {GUIDE}")
        if scan.row_filter is None:
            continue
        for name, column in _row_filter_fields(metadata, scan.row_filter):
            what = _private(column, private)
            if what is not None:
                raise ConfigError(f"input.row_filter: names column '{name}', which is (in one of the table's schemas) "
                                  f"column '{column}', which {kind} releases treat as private ({what}); a renamed "
                                  f"column is the same field; {GUIDE}")


def _folder_keys(fragments: Iterable[Any]) -> list[str]:
    """Every ``key=value`` folder key of the fragments' partitions and (files and folders) paths;
    an Iceberg data file's path is checked below its table's location (:func:`_data_file_keys`)."""
    keys: list[str] = []
    for fragment in fragments:
        found = [key for key, _ in fragment.partition]
        if getattr(fragment, "iceberg", None) is None:
            found += path_partition_keys(fragment.name)
        for key in found:
            if key not in keys:
                keys.append(key)
    return keys


def _layout_columns(fragments: Iterable[Any]) -> list[str]:
    columns: list[str] = []
    for fragment in fragments:
        scan = getattr(fragment, "iceberg", None)
        for column in scan.layout_columns if scan is not None else ():
            if column not in columns:
                columns.append(column)
    return columns


def _table_scans(fragments: Iterable[Any]) -> list[Any]:
    """One Iceberg scan per table metadata file and row filter among the fragments."""
    scans: dict[tuple[str, str | None], Any] = {}
    for fragment in fragments:
        scan = getattr(fragment, "iceberg", None)
        if scan is not None:
            scans.setdefault((scan.metadata_location, scan.row_filter), scan)
    return list(scans.values())


def _local_text(text: str) -> str:
    """A plain path or ``file://`` URI as a plain path; any other URI as it is."""
    local = storage.local_path(text)
    return text if local is None else str(local)


def _data_file_keys(metadata: Any, files: Iterable[str]) -> list[str]:
    """The ``key=value`` folder keys of the data files' paths below the table's location (or its
    ``write.data.path``), so that a ``key=`` in the warehouse's own prefix is not one; a file
    elsewhere (``add_files`` registers files where they lie) is checked along its whole path."""
    properties = getattr(metadata, "properties", None) or {}
    bases = [_local_text(text).rstrip("/") + "/"
             for text in (metadata.location, properties.get("write.data.path"),
                          properties.get("write.object-storage.path"), properties.get("write.folder-storage.path"))
             if text]
    keys: list[str] = []
    for file in files:
        path = _local_text(file)
        base = max((base for base in bases if path.startswith(base)), key=len, default="")
        for key in path_partition_keys(path[len(base):]):
            if key not in keys:
                keys.append(key)
    return keys


def _row_filter_fields(metadata: Any, row_filter: str) -> list[tuple[str, str]]:
    """``(reference, name)`` for every name, in any of the table's schemas, of a field a row
    filter's reference resolves to in any of them (the current schema the scan binds the filter
    to, the snapshot's the release reads): a filter on a renamed private column is found by field
    id. Looked up case-insensitively, a dotted name also by its first part (a refusal too many)."""
    schemas = list(metadata.schemas)
    found: list[tuple[str, str]] = []
    for name in row_filter_columns(row_filter):
        ids: set[int] = set()
        for schema in schemas:
            for candidate in (name, name.split(".", 1)[0]):
                try:
                    ids.add(schema.find_field(candidate, case_sensitive=False).field_id)
                except ValueError:
                    continue
        for field_id in sorted(ids):
            for schema in schemas:
                try:
                    column = schema.find_column_name(field_id)
                except ValueError:
                    continue
                if column is not None and (name, column) not in found:
                    found.append((name, column))
    return found
