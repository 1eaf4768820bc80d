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
  groups share its frame. With ``keeps_groups=True`` the caller promises that ``fn`` returns
  rows of the groups it was given, still sorted by ``key``; the result then stays clustered on
  ``key`` so the next ``map_groups`` on it needs no shuffle (a hint: an engine may ignore it).
* ``sum_by_key(c, key, columns)`` sums the integer ``columns`` per key value and returns the
  result on the driver as a pandas DataFrame sorted by key. Integer sums are exact, so the
  result does not depend on partitioning. Sums are int64 columns; a null value counts as
  zero; a total outside the int64 range raises ``EngineError``.
* Keys (``map_groups``, ``sum_by_key``, ``cluster_by_key``) are integer or string columns;
  "sorted by key" means ascending, strings by UTF-8 bytes, nulls first (Spark's order).
* Every engine converts between Arrow and pandas the same way: the frames ``fn`` receives and
  ``collect`` returns have plain NumPy dtypes (object for strings; an integer column holding
  nulls arrives as float64), and ``fn``'s result is cast safely to ``schema``. ``fn`` is
  never called with an empty frame, and at most ``rows_per_call`` rows (an engine setting)
  reach one call unless a single group is larger.
* ``cluster_by_key(c, key)`` co-locates each key's rows and keeps them so; later
  ``map_groups`` on the same key need no new shuffle. ``persist``/``unpersist`` cache.
* ``write_parquet(c, directory, schema)`` writes the rows as Parquet files into
  ``directory`` from where the rows live (executors on a cluster), with deterministic file
  names so a retried task overwrites rather than duplicates, and returns the file paths.
  One plain Parquet file per non-empty partition (``part-NNNNN.parquet``, written under a
  temporary name and renamed); ``directory`` must be reachable by the workers, and a
  directory should receive one ``write_parquet`` only.
* ``write_groups(c, key, directory, schema)`` writes the rows like ``write_parquet`` but so
  that every file holds whole groups of ``key``, sorted by ``key``; ``read_groups(paths, key,
  schema)`` reads such files back as a collection clustered on ``key``, one partition per
  file, read by the workers themselves where the engine can (Spark: each Python worker opens
  its file). Together they stage data that several later jobs
  map over by ``key`` (the iterations of an algorithm) without a shuffle or an engine cache.
  Spark reads the files in its Python workers for maps, ``write_parquet`` and ``sum_by_key``
  over a few files; its other primitives still scan them through the JVM.
* ``persist`` may compute the collection at once (Beam materializes to the engine's temp
  folder); ``unpersist`` drops the cached copy, after which the collection is recomputed.
* ``side`` is any picklable value; engines ship it once per worker (Spark broadcast, Beam
  side input) rather than once per batch.
* Key material never reaches a file or a pipeline graph: every ``bytes`` value of exactly
  ``KEY_BYTES`` (32) bytes inside a side value — the release secret, or a key derived from it —
  is taken out of the side before it is pickled (``split_key_material``) and travels by a route
  that is not written down: Spark puts it in the task's closure (held in memory, encrypted if it
  ever spills, like the rest of the task), Beam keeps the whole side in this process's memory
  (the in-process runner only). The rest of the side is shipped as before.

Protection (``Engine.protection``): an engine says how it keeps the release secret and the rows
off disk and off the wire in clear; a session or runner that cannot is refused
(``EngineRefused``) unless the configuration opts out (``allow_unencrypted``).
"""

from __future__ import annotations

import io
import pickle
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


class EngineUnreachable(EngineError):
    """The engine's cluster did not answer: a transient failure, a retry may succeed."""


class EngineRefused(EngineError):
    """The engine would run without the protection the release secret needs (a Spark cluster
    session without authentication and encryption, a Beam runner outside this process) and the
    configuration did not opt out: a refusal by policy, not a failure."""


KEY_BYTES = 32
"""The size of a release secret and of an HMAC-SHA256 key derived from it
(``transforms/core/keyed_randomness.py``): ``bytes`` of this size in a side value are key material."""


class _KeyMaterialPickler(pickle.Pickler):
    """Pickles a value with every ``KEY_BYTES``-long ``bytes`` object replaced by its index."""

    def __init__(self, file: io.BytesIO):
        super().__init__(file, protocol=5)
        self.keys: list[bytes] = []
        self._indices: dict[bytes, int] = {}

    def persistent_id(self, obj: Any) -> int | None:
        if type(obj) is bytes and len(obj) == KEY_BYTES:
            if obj not in self._indices:
                self._indices[obj] = len(self.keys)
                self.keys.append(obj)
            return self._indices[obj]
        return None


class _KeyMaterialUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, keys: Sequence[bytes]):
        super().__init__(file)
        self._keys = keys

    def persistent_load(self, pid: Any) -> bytes:
        return self._keys[int(pid)]


def split_key_material(value: Any) -> tuple[bytes, tuple[bytes, ...]]:
    """``value`` pickled without its key material, and the key material (every ``bytes`` of
    exactly ``KEY_BYTES`` bytes, in order of first appearance): the payload may be written or
    shipped anywhere, the keys only by a route that is never persisted."""
    buffer = io.BytesIO()
    pickler = _KeyMaterialPickler(buffer)
    pickler.dump(value)
    return buffer.getvalue(), tuple(pickler.keys)


def join_key_material(payload: bytes, keys: Sequence[bytes]) -> Any:
    """The value ``split_key_material`` took apart."""
    return _KeyMaterialUnpickler(io.BytesIO(payload), keys).load()


class Engine(ABC):
    name: ClassVar[str]
    parallelism: int
    """Partitions of a key shuffle (and files of ``write_groups``): the engine's unit of parallel work."""

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
        self,
        collection: Collection,
        key: str,
        fn: BatchFunction,
        schema: pa.Schema,
        side: Any = None,
        keeps_groups: bool = False,
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

    @abstractmethod
    def write_groups(self, collection: Collection, key: str, directory: Path, schema: pa.Schema) -> list[Path]:
        """Parquet files in ``directory``, each holding whole groups of ``key`` sorted by ``key``."""

    @abstractmethod
    def read_groups(self, paths: Sequence[Path], key: str, schema: pa.Schema) -> Collection:
        """The rows of files written by ``write_groups``, clustered on ``key``, a partition per file."""

    def warm_up(self, modules: Sequence[str]) -> None:  # noqa: B027 - optional hook
        """Pay start-up costs ahead of the first real job (worker processes, their imports of
        ``modules``, the JIT of shuffle and sort), e.g. while the driver validates the input.
        Changes no result; engines without such costs do nothing."""

    def drop_cached(self) -> None:  # noqa: B027 - optional hook
        """Drop the side values and cached collections of the jobs run so far, when one engine
        serves several releases; collections made before must not be used again."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release engine resources (a SparkSession the engine started, temp folders)."""

    def protection(self) -> dict[str, Any]:
        """How this engine keeps the release secret and the rows off disk and off the wire in
        clear, for the manifest: ``{"engine": name, ...}`` with the engine's own facts."""
        return {"engine": self.name}

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
