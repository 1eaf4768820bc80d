"""The engine interface: the few primitives every release kind is written against.

Learned from PipelineDP's ``pipeline_backend``: a release kind is one pipeline definition over
these primitives, and each engine (local, Spark, Beam) implements them. The unit of work is a
pandas DataFrame batch with a declared Arrow schema, so the mathematics in ``transforms/``
runs vectorized on blocks while the engine decides where the blocks live.

Contract (the conformance suite in ``tests/engines`` is its executable form):

* A ``Collection`` is an engine-specific handle to an unordered bag of rows with a known
  Arrow schema. Row order is never part of a result.
* ``map_batches(c, fn, schema, side)`` calls ``fn(frame, side)`` on disjoint batches of rows
  and concatenates the returned frames (which must match ``schema``).
* ``map_groups(c, key, fn, schema, side)`` calls ``fn(frame, side)`` on frames that each hold
  one or more *whole* groups of ``key`` (every row of a key value lands in exactly one call),
  sorted by ``key``. ``fn`` must give per-group results that do not depend on which other
  groups share its frame.
* ``sum_by_key(c, key, columns)`` sums the integer ``columns`` per key value and returns the
  result on the driver as a pandas DataFrame sorted by key. Integer sums are exact, so the
  result does not depend on partitioning.
* ``cluster_by_key(c, key)`` co-locates each key's rows and keeps them so; later
  ``map_groups`` on the same key need no new shuffle. ``persist``/``unpersist`` cache.
* ``write_parquet(c, directory, schema)`` writes the rows as Parquet files into
  ``directory`` from where the rows live (executors on a cluster), with deterministic file
  names so a retried task overwrites rather than duplicates, and returns the file paths.
* ``side`` is any picklable value; engines ship it once per worker (Spark broadcast, Beam
  side input) rather than once per batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import pyarrow as pa

BatchFunction = Callable[[pd.DataFrame, Any], pd.DataFrame]


class Collection:
    """Marker base class for an engine's handle to a bag of rows."""

    schema: pa.Schema


class EngineError(RuntimeError):
    """An engine could not start or run (e.g. an unreachable Spark master)."""


class Engine(ABC):
    name: ClassVar[str]

    @abstractmethod
    def read_parquet(self, paths: Sequence[Path], schema: pa.Schema) -> Collection:
        """Rows of Parquet files (already canonical: columns and types as ``schema``)."""

    @abstractmethod
    def from_pandas(self, frame: pd.DataFrame, schema: pa.Schema) -> Collection:
        """A small driver-side frame as a collection (tests, side tables)."""

    @abstractmethod
    def map_batches(
        self, collection: Collection, fn: BatchFunction, schema: pa.Schema, side: Any = None
    ) -> Collection: ...

    @abstractmethod
    def map_groups(
        self, collection: Collection, key: str, fn: BatchFunction, schema: pa.Schema, side: Any = None
    ) -> Collection: ...

    @abstractmethod
    def sum_by_key(self, collection: Collection, key: str, columns: Sequence[str]) -> pd.DataFrame: ...

    @abstractmethod
    def cluster_by_key(self, collection: Collection, key: str) -> Collection: ...

    @abstractmethod
    def persist(self, collection: Collection) -> Collection: ...

    @abstractmethod
    def unpersist(self, collection: Collection) -> None: ...

    @abstractmethod
    def count(self, collection: Collection) -> int: ...

    @abstractmethod
    def collect(self, collection: Collection) -> pd.DataFrame:
        """All rows on the driver (order unspecified)."""

    @abstractmethod
    def write_parquet(self, collection: Collection, directory: Path, schema: pa.Schema) -> list[Path]: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release engine resources (a SparkSession the engine started, temp folders)."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
