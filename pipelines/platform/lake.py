"""The lake: released data as Apache Iceberg tables, committed atomically with their manifests.

DESIGN.md, "Releases and the lake": executors write Parquet files to a staging folder; the
driver validates them and then makes the whole release visible in *one* Iceberg commit, or
sends it to quarantine. A release is either wholly visible or not at all, and publishing the
same release id twice does not publish twice.

Layout of an embedded lake (``Lake(root)``)::

    root/catalog.db       SQLite ``SqlCatalog`` (pyiceberg) holding the table pointers
    root/warehouse/       Iceberg tables: ``releases.<table>`` (one per release) and the
                          ``privlake.ledger`` table of :mod:`pipelines.platform.ledger`
    root/staging/<id>/    Parquet written by the engines for a release still in flight
    root/quarantine/      (emptied: a release that failed validation is deleted; why, in
                          the operator-only ``privlake.internal`` table)

On a cluster the catalog is any pyiceberg catalog (REST, Hive, Glue, SQL on PostgreSQL) and the
warehouse any file system pyiceberg's FileIO reaches (``s3://``, ``gs://``, ``file://``), given by
a config's ``lake:`` mapping (:class:`schemas.base.LakeLocation`, :meth:`Lake.from_location`;
:func:`open_lake` takes either form). ``root`` is then a local state folder (this host's leases),
and staging (``lake.staging``) an object-store prefix or a folder the executors and the driver
share, reached through ``pipelines/engines/storage.py``; the publish copies staged files into
the table's folder through its FileIO.

How a release becomes visible (:meth:`Lake.publish`):

1. The release's table ``releases.<name>`` is opened with a *create-table transaction*
   (``Catalog.create_table_transaction``): nothing exists in the catalog until it commits.
2. The staged files are moved (a rename on one local file system, a copy through the table's
   ``FileIO`` otherwise) into ``<table location>/data/<attempt>/`` so the staging folder can be
   removed, and an Iceberg table owns every file it references.
3. In that same transaction, ``add_files`` registers the files (schema checked against the
   release schema first, so a bad file gives one clear line), and the table properties carry
   the manifest (JSON), release id, kind and publication time; the snapshot summary carries
   the release id and kind as well.
4. ``commit_transaction`` creates the table together with its first snapshot: one catalog
   commit (``AssertCreate``). Two concurrent publishers of the same id cannot both win; the
   loser gets :class:`ReleaseAlreadyPublished`. If anything fails before the commit lands, the
   moved files go back to staging and nothing is visible.

A table under ``releases`` without the manifest property is an *orphan* (left by a tool or a
crash that created the table outside this protocol); publishing its release id replaces it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.io import load_file_io
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from pipelines.engines import storage
from pipelines.engines.storage import Location, Where
from pipelines.platform.errors import ConfigError
from pipelines.platform.failpoints import failpoint
from pipelines.platform.ids import check_release_id
from schemas.base import LakeLocation, LakeSetting, redacted_properties, redacted_text

RELEASES_NAMESPACE = "releases"
MANIFEST_PROPERTY = "privlake.manifest"
RELEASE_ID_PROPERTY = "privlake.release-id"
KIND_PROPERTY = "privlake.kind"
PUBLISHED_AT_PROPERTY = "privlake.published-at"
ATTEMPT_PROPERTY = "privlake.publish-attempt"
EMBEDDED_CATALOG_NAME = "privlake"
_UNSAFE_TABLE_CHARACTERS = re.compile(r"[^a-z0-9_]")


class LakeError(RuntimeError):
    """The lake refused or could not complete an operation (message: one line)."""


class ReleaseAlreadyPublished(LakeError):
    """The release id is already visible in the lake; publishing it again is refused."""

    def __init__(self, release_id: str) -> None:
        super().__init__(f"release '{release_id}' is already published")
        self.release_id = release_id


class ReleaseFilesInvalid(LakeError):
    """A staged file is missing or does not match the release schema."""


class UnknownRelease(KeyError):
    """No published release has this id."""

    def __init__(self, release_id: str) -> None:
        super().__init__(release_id)
        self.release_id = release_id

    def __str__(self) -> str:
        return f"no published release has id '{self.release_id}'"


@dataclass(frozen=True)
class PublishedRelease:
    """What the catalog knows about one published release."""

    release_id: str
    kind: str
    table: str
    published_at: datetime
    rows: int
    manifest: dict[str, Any]
    location: str = ""
    attempt: str = ""
    problem: str | None = None
    """Why the stored manifest could not be read (``None`` when it is fine): listing a lake
    reports such a release instead of failing for every release."""


def release_table_name(release_id: str) -> str:
    """The Iceberg table name of a release: the id itself when it is already a safe lower-case
    identifier (``[a-z0-9_]``, not starting with a digit); otherwise the id with unsafe
    characters replaced by ``_`` plus 10 hex digits of its SHA-256, so that ids differing only
    in punctuation or case (which catalogs such as Glue and Hive fold) never share a table."""
    check_release_id(release_id)
    cleaned = _UNSAFE_TABLE_CHARACTERS.sub("_", release_id.lower())
    if cleaned == release_id and not cleaned[0].isdigit():
        return cleaned
    if cleaned[0].isdigit():
        cleaned = "r_" + cleaned
    digest = hashlib.sha256(release_id.encode("utf-8")).hexdigest()[:10]
    return f"{cleaned[:100]}_{digest}"


def default_state_folder(location: LakeLocation) -> Path:
    """This host's state folder for a catalog lake: one per catalog and warehouse (a digest of
    their redacted properties), under ``$XDG_STATE_HOME`` or ``~/.local/state``."""
    identity = json.dumps([redacted_properties(location.catalog), location.warehouse], sort_keys=True)
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "privlake" / "lakes" / hashlib.sha256(identity.encode()).hexdigest()[:16]


def _location_description(name: str, location: LakeLocation) -> str:
    """E.g. ``catalog privlake (sql), warehouse s3://bucket/lake``: no host, user or credential."""
    kind = location.catalog.get("type") or urlparse(location.catalog.get("uri", "")).scheme.split("+")[0]
    return f"catalog {name} ({kind or 'catalog'}), warehouse {redacted_text(location.warehouse)}"


def _check_staging_apart(location: LakeLocation, staging: Where, state: Path) -> None:
    """Refuse a staging location that is, holds or lies in the warehouse or the state folder, or is
    a bucket's root: recovery deletes what it finds in staging."""
    def text(where: str | Path) -> str:
        return str(where).rstrip("/") + "/"

    staged = text(staging if isinstance(staging, Location) else staging.resolve())
    warehouse_folder = storage.local_path(location.warehouse)
    others = [text(warehouse_folder.resolve()) if warehouse_folder is not None else text(location.warehouse),
              text(state)]
    if any(staged.startswith(other) or other.startswith(staged) for other in others):
        raise ConfigError(f"lake.staging: {staging} overlaps the warehouse or the state folder: staging must be a "
                          "place of its own (recovery deletes what it finds there)")
    if isinstance(staging, Location) and not urlparse(staging.uri).path.strip("/"):
        raise ConfigError(f"lake.staging: {staging} is a bucket's root: give a prefix of its own (s3://bucket/staging)")


def open_lake(setting: LakeSetting | str, write: bool = True) -> Lake:
    """The lake a config's ``lake`` (or ``--lake``) names: a folder (the embedded lake; read-only
    opening when ``write`` is false: nothing created) or a :class:`LakeLocation` mapping."""
    if isinstance(setting, LakeLocation):
        return Lake.from_location(setting, create_folders=write)
    return Lake(setting) if write else Lake.for_reading(setting)


def _manifest_json(manifest: Mapping[str, Any]) -> str:
    try:
        return json.dumps(manifest, sort_keys=True)
    except (TypeError, ValueError) as error:
        raise ValueError(f"the release manifest is not JSON-serializable: {error}") from error


class Lake:
    """An Iceberg lake of releases (see the module docstring for the layout and protocol)."""

    def __init__(self, root: Path | str) -> None:
        root_path = Path(root).expanduser().resolve()
        warehouse = root_path / "warehouse"
        warehouse.mkdir(parents=True, exist_ok=True)
        catalog = SqlCatalog(
            EMBEDDED_CATALOG_NAME,
            uri=f"sqlite:///{root_path / 'catalog.db'}?timeout=60",
            warehouse=warehouse.as_uri(),
        )
        self._setup(root_path, catalog)

    @classmethod
    def for_reading(cls, root: Path | str) -> Lake:
        """The lake at ``root`` opened to read only: no folder is created and the SQLite catalog is
        opened read-only (``mode=ro``), so reading works on a read-only lake and never writes; a
        folder without a catalog reads as an empty lake (an in-memory catalog)."""
        root_path = Path(root).expanduser().resolve()
        database = root_path / "catalog.db"
        uri = f"sqlite:///file:{database}?mode=ro&uri=true" if database.is_file() else "sqlite:///:memory:"
        catalog = SqlCatalog(EMBEDDED_CATALOG_NAME, uri=uri, warehouse=(root_path / "warehouse").as_uri())
        lake = cls.__new__(cls)
        lake._setup(root_path, catalog, create_folders=False)
        return lake

    @classmethod
    def from_catalog_properties(cls, name: str, properties: Mapping[str, str], root: Path | str) -> Lake:
        """A lake over any pyiceberg catalog (``type``: rest, glue, hive, sql, ... and its
        properties, exactly as ``pyiceberg.catalog.load_catalog`` takes them). ``root`` holds
        staging and quarantine and must be shared by the driver and the executors."""
        lake = cls.__new__(cls)
        lake._setup(Path(root).expanduser().resolve(), load_catalog(name, **dict(properties)))
        return lake

    @classmethod
    def from_location(cls, location: LakeLocation, create_folders: bool = True) -> Lake:
        """The lake a config's ``lake:`` mapping names: its catalog loaded with the catalog
        properties, the warehouse and the FileIO properties (credentials included: pyiceberg hands
        them to every FileIO it opens); staging where ``location.staging`` says, else under the
        state folder. Unreachable catalogs fail here (the caller maps that to a transient exit)."""
        properties = {key: value for key, value in location.catalog.items() if key != "name"}
        properties = {**location.properties, **properties, "warehouse": location.warehouse}
        name = location.catalog.get("name", EMBEDDED_CATALOG_NAME)
        state = Path(location.state or default_state_folder(location)).expanduser().resolve()
        staging = None
        if location.staging is not None:
            staging = storage.location(location.staging, location.properties)
            _check_staging_apart(location, staging, state)
        catalog = load_catalog(name, **properties)
        lake = cls.__new__(cls)
        lake._setup(state, catalog, create_folders, staging=staging,
                    warehouse_folder=storage.local_path(location.warehouse),
                    description=_location_description(name, location))
        return lake

    def _setup(self, root: Path, catalog: Catalog, create_folders: bool = True, *, staging: Where | None = None,
               warehouse_folder: Path | None = None, description: str | None = None) -> None:
        self.root = root
        self.catalog = catalog
        self.staging_root: Where = staging if isinstance(staging, Location) else (staging or root / "staging").resolve()
        """Where the engines write a release before its commit: a local (shared) folder or an
        object-store prefix (``pipelines/engines/storage.py``)."""
        self.quarantine_root = root / "quarantine"
        self.warehouse_folder = warehouse_folder if description is not None else root / "warehouse"
        """The warehouse as a local folder (``None`` on object storage): recovery's orphan sweep."""
        self.description = description or str(root)
        """How messages name this lake: its folder, or its catalog and warehouse (no credentials)."""
        self.leases_root: Where = root / "leases" if description is None else self.staging_root / "_leases"
        """Where running releases keep their leases (``pipelines/platform/recovery.py``): the lake
        folder of an embedded lake; beside staging on a catalog lake, so that every host whose
        releases share the staging location sees the others' leases."""
        if create_folders:
            for folder in (self.root, self.quarantine_root):
                folder.mkdir(parents=True, exist_ok=True)
            if isinstance(self.staging_root, Path):
                self.staging_root.mkdir(parents=True, exist_ok=True)
                # staging holds raw input (canonical claims, coded records) while a release runs:
                # the lake's owner only, whatever the lake's other readers may see (an object
                # store's prefix: its bucket policy, docs/PRODUCTION.md)
                self.staging_root.chmod(0o700)

    def close(self) -> None:
        """Release the catalog's connections (SQLite engine)."""
        close = getattr(self.catalog, "close", None)
        if callable(close):
            close()

    def __enter__(self) -> Lake:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- tables ---------------------------------------------------------------------------

    def ensure_namespace(self, namespace: str) -> None:
        """Create ``namespace`` unless it exists (another process may create it concurrently;
        the SQL catalog then reports a unique-constraint error rather than "already exists")."""
        try:
            self.catalog.create_namespace_if_not_exists(namespace)
        except Exception:
            if not self.catalog.namespace_exists(namespace):
                raise

    def load_or_create_table(
        self, namespace: str, name: str, schema: pa.Schema, properties: Mapping[str, str] | None = None
    ) -> Table:
        """The table ``namespace.name``, created (with its namespace) if it does not exist."""
        self.ensure_namespace(namespace)
        return self.catalog.create_table_if_not_exists(
            (namespace, name), schema=schema, properties=dict(properties or {})
        )

    def release_identifier(self, release_id: str) -> tuple[str, str]:
        """``("releases", table name)`` of a release, e.g. for Spark SQL users of the catalog."""
        return (RELEASES_NAMESPACE, release_table_name(release_id))

    def _release_table(self, release_id: str) -> Table | None:
        """The release's table if it is published (has our manifest and id), else ``None``."""
        try:
            table = self.catalog.load_table(self.release_identifier(release_id))
        except (NoSuchTableError, NoSuchNamespaceError):
            return None
        stored_id = table.properties.get(RELEASE_ID_PROPERTY)
        if stored_id is not None and stored_id != release_id:
            raise LakeError(
                f"release ids '{release_id}' and '{stored_id}' map to the same table "
                f"{'.'.join(self.release_identifier(release_id))}"
            )
        if MANIFEST_PROPERTY not in table.properties:
            return None
        return table

    def is_published(self, release_id: str) -> bool:
        return self._release_table(release_id) is not None

    # ---- staging --------------------------------------------------------------------------

    def staging_directory(self, release_id: str) -> Where:
        """An empty folder (or object-store prefix) for the engines to write the release's Parquet
        files into (left-overs of an earlier, interrupted attempt at the same release id are
        removed)."""
        folder = self.staging_root / check_release_id(release_id)
        storage.delete_tree(folder)
        storage.make_folder(folder)
        return folder

    def discard_staging(self, release_id: str) -> None:
        storage.delete_tree(self.staging_root / check_release_id(release_id))

    # ---- publish --------------------------------------------------------------------------

    def publish(
        self,
        release_id: str,
        kind: str,
        files: list[Where],
        arrow_schema: pa.Schema,
        manifest: dict[str, Any],
    ) -> None:
        """Make the release visible in one Iceberg commit: its table, its files and its manifest.

        Raises :class:`ReleaseAlreadyPublished` if the id is already published (nothing is
        changed), :class:`ReleaseFilesInvalid` for a missing file or one whose columns or types
        differ from ``arrow_schema`` (nothing is moved), and re-raises any other failure after
        returning the files to where they were; in every failure case nothing is visible.
        """
        check_release_id(release_id)
        manifest_text = _manifest_json(manifest)
        sources: list[Where] = [file if isinstance(file, Location) else Path(file) for file in files]
        if len({str(path.resolve() if isinstance(path, Path) else path) for path in sources}) != len(sources):
            raise ReleaseFilesInvalid(f"release '{release_id}': the same file is listed twice")
        identifier = self.release_identifier(release_id)
        self.ensure_namespace(RELEASES_NAMESPACE)
        self._drop_orphan_or_refuse(release_id)

        attempt = uuid.uuid4().hex
        properties = {
            MANIFEST_PROPERTY: manifest_text,
            RELEASE_ID_PROPERTY: release_id,
            KIND_PROPERTY: kind,
            PUBLISHED_AT_PROPERTY: datetime.now(UTC).isoformat(),
            ATTEMPT_PROPERTY: attempt,
        }
        transaction = self.catalog.create_table_transaction(identifier, schema=arrow_schema, properties=properties)
        release_schema = transaction.table_metadata.schema()
        for path in sources:
            _check_file_schema(path, release_schema)
        data_location = f"{transaction.table_metadata.location.rstrip('/')}/data/{attempt}"
        with self._files_moved_into(sources, data_location, release_id, attempt) as table_paths:
            try:
                transaction.add_files(
                    table_paths,
                    snapshot_properties={RELEASE_ID_PROPERTY: release_id, KIND_PROPERTY: kind},
                )
                transaction.commit_transaction()
            except (CommitFailedException, TableAlreadyExistsError) as error:
                if self.is_published(release_id):
                    raise ReleaseAlreadyPublished(release_id) from error
                raise

    def _drop_orphan_or_refuse(self, release_id: str) -> None:
        identifier = self.release_identifier(release_id)
        if self.is_published(release_id):
            raise ReleaseAlreadyPublished(release_id)
        if self.catalog.table_exists(identifier):
            self.catalog.drop_table(identifier)

    def _landed(self, release_id: str, attempt: str) -> bool | None:
        """Whether *this* attempt's commit is the one in the catalog (a commit whose outcome
        was unknown, e.g. a lost response from a REST catalog, may have landed); ``None`` when the
        catalog cannot tell now (it does not answer)."""
        try:
            table = self._release_table(release_id)
        except Exception:
            return None
        return table is not None and table.properties.get(ATTEMPT_PROPERTY) == attempt

    @contextlib.contextmanager
    def _files_moved_into(
        self, sources: list[Where], data_location: str, release_id: str, attempt: str
    ) -> Iterator[list[str]]:
        """Move (local staging into a local warehouse) or copy through the table's FileIO
        (object storage on either side) the staged files into the table's data folder; on failure
        before the commit landed, put moved files back and delete copies."""
        local_folder = storage.local_path(data_location)
        file_io = load_file_io(properties=self.catalog.properties, location=data_location)
        moved: list[tuple[Where, str, bool]] = []  # (source, target URI, moved rather than copied)
        try:
            if local_folder is not None:
                local_folder.mkdir(parents=True, exist_ok=True)
            for index, source in enumerate(sources):
                target_name = f"{index:05d}-{source.name}"
                if local_folder is not None and isinstance(source, Path):
                    target = local_folder / target_name
                    shutil.move(source, target)
                    moved.append((source, target.as_uri(), True))
                else:
                    target_uri = f"{data_location}/{target_name}"
                    with file_io.new_output(target_uri).create(overwrite=True) as writer:
                        storage.copy_file(source, writer)
                    moved.append((source, target_uri, False))
            failpoint("publish:files-moved")
            yield [target for _, target, _ in moved]
        except BaseException:
            landed = self._landed(release_id, attempt)
            if landed:
                return
            if landed is None:
                raise  # the commit may have landed: its files stay (a rerun or recovery settles it)
            for source, target, was_moved in reversed(moved):
                with contextlib.suppress(OSError):
                    if was_moved:
                        shutil.move(storage.local_path(target), source)
                    else:
                        file_io.delete(target)
            if local_folder is not None:
                with contextlib.suppress(OSError):
                    local_folder.rmdir()
            raise

    # ---- quarantine -----------------------------------------------------------------------

    def quarantine(self, release_id: str, files: list[Where]) -> None:
        """Delete the output of a release that failed validation: its budget is given back, so
        none of it may stay (nor the output of an earlier attempt at the same id). Why it failed
        goes to the operator-only record (``pipelines/platform/internal.py``), not to the lake's
        files. Nothing becomes visible under ``releases``."""
        check_release_id(release_id)
        if self.is_published(release_id):
            raise ReleaseAlreadyPublished(release_id)
        for source in files:
            storage.delete_file(source)
        for earlier in [self.quarantine_root / release_id, *self.quarantine_root.glob(f"{release_id}.superseded-*")]:
            shutil.rmtree(earlier, ignore_errors=True)  # left by lakes of earlier versions
        self.discard_staging(release_id)

    # ---- reading --------------------------------------------------------------------------

    def release_tables(self) -> list[tuple[str, ...]]:
        """The identifiers of every release table in the ``releases`` namespace, published or not
        (not the namespace's own tables, whose names start with ``_``, as no release's can)."""
        try:
            listed = self.catalog.list_tables(RELEASES_NAMESPACE)
        except NoSuchNamespaceError:
            return []
        return [tuple(identifier) for identifier in listed if not identifier[-1].startswith("_")]

    def published_release_at(self, identifier: tuple[str, ...]) -> PublishedRelease | None:
        """The published release in table ``identifier``; ``None`` if the table is gone or holds no
        manifest (not published by this protocol)."""
        try:
            table = self.catalog.load_table(identifier)
        except NoSuchTableError:
            return None
        if MANIFEST_PROPERTY not in table.properties:
            return None
        return _published_release(table, ".".join(identifier))

    def published_releases(self) -> list[PublishedRelease]:
        """Every published release, newest first (ties broken by release id). A release whose
        stored manifest cannot be read is listed with its ``problem`` named, never skipped."""
        releases = []
        for identifier in self.release_tables():
            release = self.published_release_at(identifier)
            if release is not None:
                releases.append(release)
        releases.sort(key=lambda release: release.release_id)
        releases.sort(key=lambda release: release.published_at, reverse=True)
        return releases

    def list_releases(self) -> list[dict[str, Any]]:
        """The manifests of the published releases, newest first."""
        return [release.manifest for release in self.published_releases()]

    def release(self, release_id: str) -> PublishedRelease:
        table = self._release_table(check_release_id(release_id))
        if table is None:
            raise UnknownRelease(release_id)
        return _published_release(table, ".".join(self.release_identifier(release_id)))

    def manifest(self, release_id: str) -> dict[str, Any]:
        """The manifest committed with the release (raises :class:`UnknownRelease`)."""
        return self.release(release_id).manifest

    def read_release(self, release_id: str) -> pa.Table:
        """The released rows, read through an Iceberg scan of the release's table."""
        table = self._release_table(check_release_id(release_id))
        if table is None:
            raise UnknownRelease(release_id)
        return table.scan().to_arrow()


def _published_release(table: Table, name: str) -> PublishedRelease:
    properties = table.properties
    snapshot = table.current_snapshot()
    rows = 0
    if snapshot is not None and snapshot.summary is not None:
        rows = int(snapshot.summary["total-records"] or 0)
    release_id = properties.get(RELEASE_ID_PROPERTY, name)
    problem = None
    try:
        manifest = json.loads(properties[MANIFEST_PROPERTY])
        if not isinstance(manifest, dict):
            raise ValueError("not an object")
    except ValueError:
        problem = "its stored manifest is not a JSON object"
        manifest = {"release_id": release_id, "kind": properties.get(KIND_PROPERTY, ""), "status": "unreadable",
                    "problem": problem}
    try:
        published_at = datetime.fromisoformat(properties[PUBLISHED_AT_PROPERTY])
    except (KeyError, ValueError):
        problem = problem or "its publication time is missing or malformed"
        published_at = datetime.min.replace(tzinfo=UTC)
    return PublishedRelease(
        release_id=release_id,
        kind=properties.get(KIND_PROPERTY, ""),
        table=name,
        published_at=published_at,
        rows=rows,
        manifest=manifest,
        location=table.location(),
        attempt=properties.get(ATTEMPT_PROPERTY, ""),
        problem=problem,
    )


def _check_file_schema(path: Where, schema: Schema) -> None:
    """One-line refusal when a staged Parquet file is missing or its columns or types differ
    from the release schema (pyiceberg's own check prints a table to stdout instead)."""
    if not (path.is_file() if isinstance(path, Path) else storage.exists(path)):
        raise ReleaseFilesInvalid(f"{path}: staged file does not exist")
    try:
        file_arrow_schema = storage.read_schema(path)
    except (OSError, pa.ArrowException) as error:
        raise ReleaseFilesInvalid(f"{path}: not a readable Parquet file ({error})") from error
    expected = {field.name: field for field in schema.fields}
    extra = [name for name in file_arrow_schema.names if name not in expected]
    if extra:
        raise ReleaseFilesInvalid(f"{path}: column(s) {', '.join(map(repr, extra))} are not in the release schema")
    file_schema = pyarrow_to_schema(file_arrow_schema, name_mapping=schema.name_mapping)
    for name, field in expected.items():
        if name not in file_arrow_schema.names:
            raise ReleaseFilesInvalid(f"{path}: column '{name}' of the release schema is missing")
        found = file_schema.find_field(field.field_id)
        if found.field_type != field.field_type:
            raise ReleaseFilesInvalid(
                f"{path}: column '{name}' has type {found.field_type}, the release schema says {field.field_type}"
            )
        if field.required and not found.required:
            raise ReleaseFilesInvalid(f"{path}: column '{name}' is nullable, the release schema requires it")
