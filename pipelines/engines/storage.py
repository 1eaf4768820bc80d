"""Where staged files live: a local folder (``Path``) or an object-store prefix (:class:`Location`).

A release's staging (the Parquet files the engines write before the one catalog commit that
publishes them; docs/PRODUCTION.md, "Catalog and object storage") is a local folder on one host
or a folder the driver and executors share; on a cluster without a shared POSIX folder it is an
object-store prefix (``s3://bucket/staging``), which every executor reaches through pyarrow's
file systems. A :class:`Location` is such a prefix together with the FileIO properties that reach
it (endpoint, region, credentials: pyiceberg's property names, so one ``lake.properties`` serves
the catalog, the warehouse and staging); the file system is built from them by pyiceberg's
``PyArrowFileIO`` in whichever process needs it (a Spark executor's Python worker, a Beam
worker), so the properties travel with the location inside task closures and are never written
anywhere. A location's text (``str``) is its URI, without the properties.

The functions here take either form (:data:`Where`) so that engines and kinds write one code path:
a local ``Path`` keeps its exact behaviour (atomic renames, ``mkdir``). On an object store a
Parquet file is streamed to a per-attempt temporary object and moved to its name on commit
(:class:`ParquetSink`: closing a stream completes its upload, so a failed attempt must never have
written to the final name); a small file (a lease) is one request, visible whole or not at all.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlparse
from urllib.request import url2pathname

import pyarrow as pa
import pyarrow.parquet as pq


@dataclass(frozen=True)
class Location:
    """An object-store prefix or object (``s3://bucket/key``) and the FileIO properties that reach
    it. ``/`` joins a name, as for a ``Path``; equality and ``str`` ignore the properties."""

    uri: str
    properties: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        if "://" not in self.uri:
            raise ValueError(f"{self.uri}: an object-store location is a URI (scheme://bucket/key)")

    def __truediv__(self, name: str) -> Location:
        return Location(f"{self.uri.rstrip('/')}/{name}", self.properties)

    def __str__(self) -> str:
        return self.uri

    @property
    def name(self) -> str:
        return self.uri.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> Location:
        return Location(self.uri.rstrip("/").rsplit("/", 1)[0], self.properties)

    def filesystem(self) -> tuple[Any, str]:
        """The pyarrow file system that reaches this location and the path on it."""
        parsed = urlparse(self.uri)
        return _filesystem(parsed.scheme, parsed.netloc, self.properties), f"{parsed.netloc}{parsed.path}".rstrip("/")


Where = Path | Location
"""A staged file or folder: a local path or an object-store location."""


@functools.lru_cache(maxsize=16)
def _filesystem(scheme: str, netloc: str, properties: tuple[tuple[str, str], ...]) -> Any:
    # pyiceberg maps its property names (s3.endpoint, s3.access-key-id, ...) to pyarrow's options
    from pyiceberg.io.pyarrow import PyArrowFileIO

    return PyArrowFileIO(dict(properties)).fs_by_scheme(scheme, netloc)


def local_path(text: str) -> Path | None:
    """The local path of a plain path or ``file://`` URI; ``None`` for object storage."""
    parsed = urlparse(text)
    if parsed.scheme in ("", "file"):
        return Path(url2pathname(parsed.path))
    return None


def location(text: str, properties: dict[str, str] | None = None) -> Where:
    """``text`` as a ``Path`` (a plain path or ``file://`` URI) or a :class:`Location`."""
    path = local_path(text)
    return path if path is not None else Location(text, tuple(sorted((properties or {}).items())))


def is_local(where: Where) -> bool:
    return not isinstance(where, Location)


def make_folder(where: Where) -> None:
    """Create the folder (an object store has none: nothing to do there)."""
    if isinstance(where, Location):
        return
    Path(where).mkdir(parents=True, exist_ok=True)


def exists(where: Where) -> bool:
    if isinstance(where, Location):
        from pyarrow import fs as pafs

        filesystem, path = where.filesystem()
        return filesystem.get_file_info(path).type != pafs.FileType.NotFound
    return Path(where).exists()


def children(where: Where) -> list[Where]:
    """The files and folders directly inside ``where`` (empty when it does not exist), sorted."""
    if isinstance(where, Location):
        from pyarrow import fs as pafs

        filesystem, path = where.filesystem()
        infos = filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=False))
        return sorted((where / info.base_name for info in infos), key=str)
    folder = Path(where)
    return sorted(folder.iterdir()) if folder.is_dir() else []


def delete_tree(where: Where) -> None:
    """Delete a folder (or prefix) and everything in it; nothing if it does not exist."""
    if isinstance(where, Location):
        filesystem, path = where.filesystem()
        if exists(where):
            filesystem.delete_dir(path)
        return
    shutil.rmtree(where, ignore_errors=True)


def delete_file(where: Where) -> None:
    if isinstance(where, Location):
        from pyarrow import fs as pafs

        filesystem, path = where.filesystem()
        if filesystem.get_file_info(path).type != pafs.FileType.NotFound:
            filesystem.delete_file(path)
        return
    Path(where).unlink(missing_ok=True)


def delete(where: Where) -> None:
    """Delete a file or a folder (prefix) with everything in it; nothing if it does not exist."""
    if isinstance(where, Location):
        from pyarrow import fs as pafs

        filesystem, path = where.filesystem()
        kind = filesystem.get_file_info(path).type
        if kind == pafs.FileType.Directory:
            filesystem.delete_dir(path)
        elif kind == pafs.FileType.File:
            filesystem.delete_file(path)
        return
    path = Path(where)
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def open_input(where: Where) -> BinaryIO:
    if isinstance(where, Location):
        filesystem, path = where.filesystem()
        return filesystem.open_input_file(path)
    return open(where, "rb")  # noqa: SIM115 - returned to the caller's with-block


def parquet_file(where: Where) -> pq.ParquetFile:
    """A Parquet file opened for reading (its schema, its row groups) wherever it is."""
    if isinstance(where, Location):
        return pq.ParquetFile(open_input(where))
    return pq.ParquetFile(where)


def write_bytes(where: Where, data: bytes) -> None:
    """A small file written whole: locally under a temporary name then renamed, on an object store
    in one request (an object is replaced whole)."""
    if isinstance(where, Location):
        filesystem, path = where.filesystem()
        with filesystem.open_output_stream(path) as stream:
            stream.write(data)
        return
    target = Path(where)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    temporary.write_bytes(data)
    os.replace(temporary, target)


def read_bytes(where: Where) -> bytes:
    with open_input(where) as reader:
        return reader.read()


def read_files(files: list[Where]) -> pa.Table:
    """The rows of several Parquet files of one schema, in order, as one table."""
    return pa.concat_tables([parquet_file(file).read() for file in files])


def read_schema(where: Where) -> pa.Schema:
    return parquet_file(where).schema_arrow


def write_table(table: pa.Table, where: Where, **options: Any) -> Where:
    """``pq.write_table`` to a local file (written under a temporary name, then renamed) or an
    object (one upload); returns ``where``."""
    if isinstance(where, Location):
        row_group_size = options.pop("row_group_size", None)
        sink = ParquetSink(where, table.schema, "0", **options)
        try:
            sink.write(table, row_group_size)
        except BaseException:
            sink.abort()
            raise
        return sink.commit()
    target = Path(where)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, temporary, **options)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return where


class ParquetSink:
    """A streaming Parquet writer under a hidden per-attempt name, moved to its final name on
    :meth:`commit` (a rename locally, a server-side copy on an object store), so the final name only
    ever holds a whole file of a finished attempt: closing an object-store stream completes its
    upload, so an aborted attempt must never have written to the final name. :meth:`abort` removes
    the attempt's own temporary object or file (a leftover one is staging, deleted with it)."""

    def __init__(self, where: Where, schema: pa.Schema, attempt: str, **options: Any) -> None:
        self.where = where
        if isinstance(where, Location):
            self._temporary_object: Location | None = where.parent / f".{where.name}.{os.getpid()}-{attempt}.tmp"
            filesystem, path = self._temporary_object.filesystem()
            self._stream = filesystem.open_output_stream(path)
            self._writer = pq.ParquetWriter(self._stream, schema, **options)
            self._temporary: Path | None = None
        else:
            self._temporary_object = None
            target = Path(where)
            self._temporary = target.with_name(f".{target.name}.{os.getpid()}-{attempt}.tmp")
            self._stream = None
            self._writer = pq.ParquetWriter(self._temporary, schema, **options)

    def write(self, table: pa.Table, row_group_size: int | None = None) -> None:
        self._writer.write_table(table, row_group_size=row_group_size)

    def commit(self) -> Where:
        self._writer.close()
        if self._stream is not None:
            self._stream.close()
        if self._temporary is not None:
            os.replace(self._temporary, self.where)
        if self._temporary_object is not None:
            filesystem, source = self._temporary_object.filesystem()
            filesystem.move(source, self.where.filesystem()[1])
        return self.where

    def abort(self) -> None:
        try:
            self._writer.close()
            if self._stream is not None:
                self._stream.close()
        except Exception:  # noqa: BLE001, S110 - aborting: the original error is the one that matters
            pass
        finally:
            if self._temporary is not None:
                self._temporary.unlink(missing_ok=True)
            elif self._temporary_object is not None:
                with contextlib.suppress(OSError):
                    delete_file(self._temporary_object)


def copy_file(source: Where, write: Any) -> None:
    """Stream ``source``'s bytes into the writable ``write`` (8 MiB at a time)."""
    with open_input(source) as reader:
        shutil.copyfileobj(reader, write, length=8 * 1024 * 1024)


def walk_files(where: Where) -> Iterator[Where]:
    """Every file below ``where``, at any depth."""
    if isinstance(where, Location):
        from pyarrow import fs as pafs

        filesystem, path = where.filesystem()
        infos = filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=True))
        prefix = where.uri.rstrip("/")
        for info in infos:
            if info.type == pafs.FileType.File:
                yield Location(f"{prefix}/{info.path[len(path):].lstrip('/')}", where.properties)
        return
    folder = Path(where)
    if folder.is_dir():
        yield from (path for path in folder.rglob("*") if path.is_file())
