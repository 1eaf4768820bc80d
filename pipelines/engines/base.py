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

* ``map_fragments(fragments, fn, schema, side)`` calls ``fn(fragment, side)`` once per
  fragment (an opaque picklable description of a piece of the input, e.g. the platform's
  ``sources.Fragment``) where the engine runs its tasks, and concatenates the returned tables
  (an Arrow table or a pandas frame, cast safely to ``schema``). This is how an input is read,
  checked and canonicalized on the executors: the driver ships only the fragments and never
  holds a row. ``fragments_per_task`` consecutive fragments share a task; the rows do not
  depend on it. The result is an ordinary collection (no clustering).
* ``first_row(c, column)`` is the row with the smallest non-null value of the integer or string
  ``column`` (``None`` when there is none), found by a distributed minimum: each partition keeps
  its own smallest row and only those reach the driver. With a unique column (the platform's
  ``ROW_ID``) the result does not depend on partitioning; on a tie the row whose other columns
  sort first wins.
* ``column_metrics(c, columns)`` is, per column, the rows, nulls, NaNs (float columns) and the
  smallest and largest other value, reduced where the rows live (one partial row per partition
  to the driver): what an input gate needs, without a driver-side frame. ``sum_by_key`` cannot
  give a minimum or maximum, and a ``map_batches`` partial would see int64 values through pandas
  (float64 when a column has nulls), hence a primitive of its own. Exact on every engine.
* Errors raised on a worker by the engine's user functions (``fn`` of the maps, and reading or
  writing files) reach the driver as the same exception when its arguments and attributes are
  plain values (text, numbers, ``None``): an ``InputError`` raised while a fragment is read on a
  Spark executor is raised by the action (``count``, ``write_parquet``...) on the driver as that
  ``InputError``, one line and its exit code (``forward_errors`` on the worker,
  ``worker_errors`` on the driver). Other exceptions surface as the engine reports them. Which
  of several failing tasks is reported is up to the engine: a deterministic "first failing row"
  is found with ``first_row`` over flagged rows instead.

Protection (``Engine.protection``): an engine says how it keeps the release secret and the rows
off disk and off the wire in clear; a session or runner that cannot is refused
(``EngineRefused``) unless the configuration opts out (``allow_unencrypted``).
"""

from __future__ import annotations

import base64
import binascii
import importlib
import io
import json
import pickle
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pandas as pd
import pyarrow as pa

BatchFunction = Callable[[pd.DataFrame, Any], pd.DataFrame]
FragmentFunction = Callable[[Any, Any], "pa.Table | pa.RecordBatch | pd.DataFrame"]
"""``fn(fragment, side)`` of ``map_fragments``: the fragment's rows (typically read with
``sources.read_fragment``, checked and canonicalized), an Arrow table or a pandas frame."""
_T = TypeVar("_T")


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


@dataclass(frozen=True)
class ColumnMetrics:
    """One column's metrics over a whole collection (``Engine.column_metrics``): ``rows`` in the
    collection, ``nulls`` among them, ``nans`` (float columns; 0 otherwise), and the smallest and
    largest value that is neither null nor NaN (``None`` when there is none) as a Python value;
    strings compare by UTF-8 bytes, and ``-0.0`` and ``0.0`` are equal (either may be reported)."""

    rows: int
    nulls: int
    nans: int
    min: Any
    max: Any


# ---- errors raised on workers ------------------------------------------------------------------

WORKER_ERROR_MARK = "privlake-worker-error:"
"""Starts the encoded exception inside the text of a ``ForwardedError``."""
_FORWARDED = re.compile(re.escape(WORKER_ERROR_MARK) + r"([A-Za-z0-9_=-]+)")
_PLAIN_SCALARS = (str, int, float, bool, type(None))
_MAX_FORWARDED_CHARACTERS = 4_000
_FORWARDED_MODULES = ("pipelines.", "schemas.", "transforms.", "pyarrow.")
"""Where a forwarded exception's class may come from (with ``builtins``): the driver imports
nothing else by a name read from a worker's error text."""


class ForwardedError(RuntimeError):
    """What a worker raises in place of an exception the driver should see again: its text
    ends with the exception encoded (class, arguments, attributes; plain values only), which
    survives engines that hand the driver only a worker's traceback as text (a Spark
    ``PythonException``, a Beam runner's error)."""


def _plain(value: Any) -> bool:
    if isinstance(value, _PLAIN_SCALARS):
        return True
    if isinstance(value, tuple | list):
        return all(_plain(item) for item in value)
    return False


def _encoded(error: BaseException) -> str | None:
    """``error`` as text a driver can rebuild it from, or ``None`` when it cannot travel: a
    class that is not importable by name, or an argument or attribute that is not a plain value
    (bytes may be raw input, as in a ``UnicodeDecodeError``)."""
    cls = type(error)
    if isinstance(error, ForwardedError) or "<" in cls.__qualname__:
        return None
    if not (cls.__module__ == "builtins" or cls.__module__.startswith(_FORWARDED_MODULES)):
        return None
    try:
        reduced = error.__reduce__()
    except Exception:  # noqa: BLE001 - an exception that cannot be reduced does not travel
        return None
    if not isinstance(reduced, tuple) or len(reduced) < 2 or reduced[0] is not cls:
        return None
    arguments = reduced[1]
    state = reduced[2] if len(reduced) > 2 and reduced[2] is not None else {}
    if not isinstance(arguments, tuple) or not isinstance(state, dict) or not _plain(arguments):
        return None
    if not all(isinstance(name, str) and _plain(value) for name, value in state.items()):
        return None
    text = json.dumps([cls.__module__, cls.__qualname__, list(arguments), state])
    if len(text) > _MAX_FORWARDED_CHARACTERS:
        return None
    return base64.urlsafe_b64encode(text.encode()).decode()


def forwardable(error: BaseException) -> BaseException:
    """What a worker raises for ``error``: a ``ForwardedError`` carrying it, or ``error`` itself
    when it cannot travel (see ``_encoded``)."""
    encoded = _encoded(error)
    if encoded is None:
        return error
    first = " ".join(str(error).split())[:300]
    return ForwardedError(f"{type(error).__name__}: {first} {WORKER_ERROR_MARK}{encoded}")


def forward_errors(results: Iterable[_T]) -> Iterator[_T]:
    """``results`` (a worker's output stream) with any exception raised while producing them
    replaced by ``forwardable(exception)``: wrap every stream a worker computes user code in."""
    try:
        yield from results
    except Exception as error:
        carrier = forwardable(error)
        if carrier is error:
            raise
        raise carrier from None


def _rebuilt(encoded: str) -> BaseException | None:
    try:
        module, qualname, arguments, state = json.loads(base64.urlsafe_b64decode(encoded.encode()))
        if not (module == "builtins" or module.startswith(_FORWARDED_MODULES)):
            return None
        cls: Any = importlib.import_module(module)
        for name in qualname.split("."):
            cls = getattr(cls, name)
    except (ValueError, TypeError, binascii.Error, ImportError, AttributeError):
        return None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return None
    arguments = tuple(tuple(item) if isinstance(item, list) else item for item in arguments)
    try:
        error = cls(*arguments)
    except Exception:  # noqa: BLE001 - a constructor that does not take its own args (InputError)
        error = cls.__new__(cls, *arguments)
        error.args = arguments
    for name, value in state.items():
        try:
            setattr(error, name, value)
        except AttributeError:
            return None
    return error


def forwarded_error(error: BaseException) -> BaseException | None:
    """The exception a worker forwarded (``forward_errors``) that ``error`` — an engine's report
    of a failed job, or any exception it was raised from — carries in its text, or ``None``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        texts = [str(current)]
        java = getattr(current, "java_exception", None)
        if java is not None:
            try:
                texts.append(str(java.toString()))
            except Exception:  # noqa: BLE001 - a Py4J error whose JVM is gone
                pass
        for text in texts:
            for found in reversed(list(_FORWARDED.finditer(text))):
                rebuilt = _rebuilt(found.group(1))
                if rebuilt is not None:
                    return rebuilt
        current = current.__cause__ or current.__context__
    return None


@contextmanager
def worker_errors() -> Iterator[None]:
    """Around a driver-side action: an exception a worker forwarded is raised again as itself
    (its one line, its class and so its exit code), without the engine's traceback."""
    try:
        yield
    except Exception as error:
        forwarded = forwarded_error(error)
        if forwarded is None:
            raise
        raise forwarded from None


class Engine(ABC):
    name: ClassVar[str]
    parallelism: int
    """Partitions of a key shuffle (and files of ``write_groups``): the engine's unit of parallel work."""
    tasks_in_driver: bool = False
    """Whether tasks run in the driver process (the local engine, Beam's in-process runner): a kind
    then keeps its tasks small, since the driver's peak memory holds one; elsewhere each task pays a
    worker's start and tasks are sized large."""

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
    def write_by_key(self, collection: Collection, key: str, order: Sequence[str], shards: int, directory: Path,
                     schema: pa.Schema) -> list[Path]:
        """Parquet files in ``directory`` whose layout is a function of the rows and ``shards``
        alone, however the collection was partitioned or computed: a row goes to the shard of its
        ``key`` (the engine's fixed hash of the key modulo ``shards``); a shard's file, named by the
        shard's number, holds its rows sorted by ``key`` and then by ``order`` (columns that make the
        order total within a key); an empty shard writes no file. What a published table is written
        with: its files and row order must not carry how its rows were computed
        (docs/PRIVACY.md, "The layout of a release")."""

    @abstractmethod
    def read_groups(self, paths: Sequence[Path], key: str, schema: pa.Schema) -> Collection:
        """The rows of files written by ``write_groups``, clustered on ``key``, a partition per file."""

    def read_groups_streaming(self, paths: Sequence[Path], key: str, schema: pa.Schema) -> Collection:
        """``read_groups`` for a chain of jobs that must not hold the rows where the engine holds its
        collections: an engine whose tasks run in the driver process (the local engine) reads each
        file only when a job needs it and maps it file by file without keeping the results
        (recomputed per use: persist what is used twice). The others: ``read_groups``."""
        return self.read_groups(paths, key, schema)

    @abstractmethod
    def map_fragments(
        self,
        fragments: Sequence[Any],
        fn: FragmentFunction,
        schema: pa.Schema,
        side: Any = None,
        fragments_per_task: int = 1,
    ) -> Collection:
        """``fn(fragment, side)`` for every fragment, run where the engine runs its tasks
        (``fragments_per_task`` consecutive fragments per task), as one collection of ``schema``.
        The fragments travel to the tasks (keep them small: paths and scan tasks, never rows)."""

    @abstractmethod
    def first_row(self, collection: Collection, column: str = "ROW_ID") -> dict[str, Any] | None:
        """The row (column name -> Python value) with the smallest non-null ``column`` value,
        by a distributed minimum; ``None`` when no row has one."""

    @abstractmethod
    def column_metrics(self, collection: Collection, columns: Sequence[str] | None = None) -> dict[str, ColumnMetrics]:
        """``ColumnMetrics`` of ``columns`` (default: all), reduced where the rows live."""

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
