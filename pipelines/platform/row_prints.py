"""Row prints (issue 32): what a release reads, fingerprinted by its *content*, not its bytes.

The lake's policy refuses a release whose input is another dataset's input in disguise
(``pipelines/platform/policy.py``). A file's bytes change when its rows are shuffled, a column is
added, the columns are reordered or the claims are written as Parquet instead of CSV; the rows a
release reads do not. So every kind hashes, where its fragments are read, each **canonical row**
— the values the release uses, in the kind's own order of roles:

=========  ==================================================================
crowd      ``(object id, source id, value)``
tabular    the schema's attributes, ordered by name
ldp        ``(user id, mechanism, report)``
filter     the spec's features, the labels' columns and the choice column, by name
=========  ==================================================================

**Canonical values** (:func:`canonical_words`), the same whatever the file format or how a reader
typed the column: a null (or NaN) is ``NULL``; an integer — an integer column, a float that is a
whole number below 2⁶³, or text of at most 18 digits with an optional sign — is ``INTEGER`` with
its value; any other number (a float column, or text that parses as one) is ``REAL`` with its
IEEE-754 bits; any other text is ``TEXT`` with a 64-bit SipHash-2-4 of its UTF-8 bytes under a
fixed, public key, as pandas' ``hash_array`` computes it (SipHash, then a fixed bijective mix; a
compression only: what keeps the prints secret is the outer, keyed hash).

**Keyed row hashes** (:func:`keyed_row_hashes`): SipHash-2-4 (Aumasson and Bernstein, 2012: a
pseudorandom function of its 128-bit key) of the row's words — one word per eight columns holding
their type tags, then one word per column — under a 128-bit key derived from the lake's fingerprint
key (:func:`row_key`, kept outside the lake). Vectorized over a fragment's rows in numpy: about
0.2–0.3 µs a row of three columns. Someone who can read the policy tables cannot test guesses of a row against them
without the key.

**Sketches** (:class:`RowSketch`): a fragment keeps the :data:`SKETCH_SIZE` smallest *distinct*
row hashes with how often each occurs, and the count of rows it hashed — a bottom-k sketch
(Cohen and Kaplan, 2007; Broder's MinHash with one permutation). Sketches merge exactly
(:meth:`RowSketch.merge`: the bottom-k of a union is the bottom-k of its parts' bottom-k), so the
input's sketch does not depend on the row order, the file split or how fragments were spread over
tasks, and the driver holds at most ``SKETCH_SIZE`` hashes per fragment, never a row.

**Overlap** (:meth:`RowSketch.overlap`): a sketch holds *every* distinct hash of its input below
its threshold (its largest kept hash; the whole input when it has fewer distinct rows than
``SKETCH_SIZE``). Below the smaller threshold of two sketches both are therefore the same
coordinated sample of the two inputs' distinct rows, each row kept with the same probability τ: the
shared sampled hashes are rows the inputs share (a chance collision of 64-bit keyed hashes among a
few thousand has probability below 10⁻¹²), and their share of the new input's sampled rows,
weighted by how often each occurs, estimates the fraction of its rows the other input holds. A
shared part of ``r`` distinct rows is missed with probability ``(1 - τ)^r ≈ exp(-r · SKETCH_SIZE /
n)``, ``n`` the larger input's distinct rows: exact below ``SKETCH_SIZE`` distinct rows, and an
overlap of 0.1 % of the larger input is found with probability 98 % (docs/PRIVACY.md, "What the
copy check detects").
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

SKETCH_SIZE = 4096
"""Distinct row hashes a sketch keeps (16 bytes each with its count)."""
BLOCK_ROWS = 8192
"""Rows hashed at a time: a block's words and state take well under a megabyte."""
NULL, INTEGER, REAL, TEXT = 0, 1, 2, 3
"""A canonical value's type tag."""
ROW_KEY_LABEL = b"privlake-row-prints-v1"
_TEXT_KEY = "privlake-text-v1"  # public: 16 ASCII bytes, SipHash's key for compressing text to 64 bits
_INTEGER_TEXT = r"[+-]?\d{1,18}"
_NAN_TEXT = ("nan", "+nan", "-nan")
_SIP_CONSTANTS = (0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, 0x7465646279746573)
_TWO_63 = 2.0**63
_CHUNK = 1 << 15
_FORMAT = b"RS2"


def row_key(lake_key: bytes) -> bytes:
    """The 32-byte key of a lake's row prints, derived from its fingerprint key (HMAC-SHA256 under
    a label of its own: the row prints and the file fingerprints never share a key). 32 bytes, so
    the engines keep it out of pickled side values (``pipelines/engines/base.py``: key material)."""
    return hmac.new(lake_key, ROW_KEY_LABEL, hashlib.sha256).digest()


# ---- SipHash-2-4, vectorized ---------------------------------------------------------------------

def _rotate(value: np.ndarray, bits: int, spare: np.ndarray) -> None:
    """``value`` rotated left by ``bits``, in place (``spare``: a buffer of its size)."""
    np.left_shift(value, np.uint64(bits), out=spare)
    np.right_shift(value, np.uint64(64 - bits), out=value)
    value |= spare


def _sip_rounds(v0: np.ndarray, v1: np.ndarray, v2: np.ndarray, v3: np.ndarray, spare: np.ndarray,
                rounds: int) -> None:
    for _ in range(rounds):  # in place: numpy's uint64 arithmetic wraps modulo 2^64, as SipHash's does
        v0 += v1
        _rotate(v1, 13, spare)
        v1 ^= v0
        _rotate(v0, 32, spare)
        v2 += v3
        _rotate(v3, 16, spare)
        v3 ^= v2
        v0 += v3
        _rotate(v3, 21, spare)
        v3 ^= v0
        v2 += v1
        _rotate(v1, 17, spare)
        v1 ^= v2
        _rotate(v2, 32, spare)


def siphash24_words(words: np.ndarray, key: bytes) -> np.ndarray:
    """SipHash-2-4 under the 16-byte ``key`` of each row of ``words`` (``rows x w`` uint64): the
    message is the row's ``w`` words as little-endian bytes (``8w`` bytes), so the values are the
    reference function's on those bytes (``tests/platform/test_row_prints.py`` checks them against
    the reference vectors). Computed in blocks of :data:`_CHUNK` rows, whose state stays in cache."""
    if len(key) != 16:
        raise ValueError("SipHash takes a 16-byte key")
    rows, width = words.shape
    columns = np.ascontiguousarray(np.asarray(words, dtype=np.uint64).T)
    k0, k1 = struct.unpack("<QQ", key)
    out = np.empty(rows, dtype=np.uint64)
    final = np.uint64(((8 * width) & 0xFF) << 56)
    for start in range(0, rows, _CHUNK):
        size = min(_CHUNK, rows - start)
        v0 = np.full(size, k0 ^ _SIP_CONSTANTS[0], dtype=np.uint64)
        v1 = np.full(size, k1 ^ _SIP_CONSTANTS[1], dtype=np.uint64)
        v2 = np.full(size, k0 ^ _SIP_CONSTANTS[2], dtype=np.uint64)
        v3 = np.full(size, k1 ^ _SIP_CONSTANTS[3], dtype=np.uint64)
        spare = np.empty(size, dtype=np.uint64)
        for column in range(width):
            message = columns[column, start:start + size]
            v3 ^= message
            _sip_rounds(v0, v1, v2, v3, spare, 2)
            v0 ^= message
        v3 ^= final
        _sip_rounds(v0, v1, v2, v3, spare, 2)
        v0 ^= final
        v2 ^= np.uint64(0xFF)
        _sip_rounds(v0, v1, v2, v3, spare, 4)
        v0 ^= v1
        v0 ^= v2
        v0 ^= v3
        out[start:start + size] = v0
    return out


# ---- canonical values ----------------------------------------------------------------------------

def _rows(values: pa.Array | pa.ChunkedArray | pd.Series | np.ndarray, start: int, stop: int) -> object:
    """Rows ``start`` to ``stop`` of a column, without copying where the type allows."""
    if isinstance(values, pa.Array | pa.ChunkedArray):
        return values.slice(start, stop - start)
    if isinstance(values, pd.Series):
        return values.iloc[start:stop]
    return values[start:stop]


def _series(values: pa.Array | pa.ChunkedArray | pd.Series | np.ndarray) -> pd.Series:
    if isinstance(values, pd.Series):
        return values.reset_index(drop=True)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        return values.to_pandas()
    return pd.Series(values)


def _numbers(numbers: np.ndarray, tags: np.ndarray, words: np.ndarray, rows: np.ndarray) -> None:
    """Tags and words of float64 ``numbers`` at ``rows``: whole numbers below 2^63 as integers."""
    with np.errstate(invalid="ignore"):
        whole = np.isfinite(numbers) & (np.floor(numbers) == numbers) & (np.abs(numbers) < _TWO_63)
    nan = np.isnan(numbers)
    integral, real = rows[whole], rows[~whole & ~nan]
    tags[integral] = INTEGER
    words[integral] = numbers[whole].astype(np.int64).view(np.uint64)
    tags[real] = REAL
    words[real] = numbers[~whole & ~nan].view(np.uint64)
    tags[rows[nan]] = NULL
    words[rows[nan]] = 0


def canonical_words(values: pa.Array | pa.ChunkedArray | pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each value's type tag (uint8) and 64-bit word (uint64), as the module docstring says: the
    same for a value however the file or its reader typed it (``5``, ``5.0``, ``"5"`` and ``"+5"``
    are the integer 5; ``"2.50"`` and ``2.5`` the same real)."""
    series = _series(values)
    count = len(series)
    tags = np.full(count, NULL, dtype=np.uint8)
    words = np.zeros(count, dtype=np.uint64)
    every = np.arange(count)
    if pd.api.types.is_bool_dtype(series.dtype):
        present = series.notna().to_numpy()
        text = series[present].astype(str)
        tags[every[present]] = TEXT
        words[every[present]] = _text_words(text)
        return tags, words
    if pd.api.types.is_integer_dtype(series.dtype):
        present = series.notna().to_numpy()
        tags[every[present]] = INTEGER
        words[every[present]] = series[present].to_numpy(dtype=np.int64).view(np.uint64)
        return tags, words
    if pd.api.types.is_float_dtype(series.dtype):
        _numbers(series.to_numpy(dtype=np.float64, na_value=np.nan), tags, words, every)
        return tags, words
    # text: each distinct value canonicalized once (ids and categories repeat), then spread by code
    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    if not len(uniques):
        return tags, words
    unique_tags, unique_words = _canonical_texts(pd.Series(np.asarray(uniques, dtype=object), dtype=object))
    present = codes >= 0
    tags[present] = unique_tags[codes[present]]
    words[present] = unique_words[codes[present]]
    return tags, words


def _canonical_texts(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Tags and words of distinct, non-null values of a text (object) column."""
    count = len(values)
    tags = np.full(count, NULL, dtype=np.uint8)
    words = np.zeros(count, dtype=np.uint64)
    rows = np.arange(count)
    text = values.map(lambda value: value if isinstance(value, str) else str(value))
    integral = text.str.fullmatch(_INTEGER_TEXT).to_numpy(dtype=bool)
    tags[rows[integral]] = INTEGER
    words[rows[integral]] = text[integral].astype(np.int64).to_numpy().view(np.uint64)
    rest, rest_rows = text[~integral], rows[~integral]
    if len(rest):
        numbers = pd.to_numeric(rest, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        literal_nan = rest.str.strip().str.lower().isin(_NAN_TEXT).to_numpy()
        numeric = ~np.isnan(numbers) | literal_nan
        _numbers(numbers[numeric], tags, words, rest_rows[numeric])
        other = ~numeric
        if other.any():
            tags[rest_rows[other]] = TEXT
            words[rest_rows[other]] = _text_words(rest[other])
    return tags, words


def _text_words(text: pd.Series) -> np.ndarray:
    """A 64-bit word of each text: pandas' ``hash_array`` of its UTF-8 bytes under the public text
    key (SipHash-2-4 in C, then a fixed bijective mix; pinned by a test, since stored sketches
    compare only with sketches made the same way)."""
    return pd.util.hash_array(text.to_numpy(dtype=object), encoding="utf8", hash_key=_TEXT_KEY, categorize=True)


def keyed_row_hashes(columns: Sequence[pa.Array | pa.ChunkedArray | pd.Series | np.ndarray], key: bytes) -> np.ndarray:
    """Each row's keyed hash (uint64) over ``columns`` in the kind's canonical order, under the
    lake's row ``key`` (:func:`row_key`; 32 bytes, of which SipHash takes the first 16)."""
    if not columns:
        raise ValueError("a row print needs at least one column")
    encoded = [canonical_words(column) for column in columns]
    rows = len(encoded[0][0])
    tag_words = -(-len(columns) // 8)
    message = np.zeros((rows, tag_words + len(columns)), dtype=np.uint64)
    for position, (tags, words) in enumerate(encoded):
        if len(tags) != rows:
            raise ValueError("a row print's columns differ in length")
        message[:, position // 8] |= tags.astype(np.uint64) << np.uint64(8 * (position % 8))
        message[:, tag_words + position] = words
    return siphash24_words(message, key[:16])


# ---- bottom-k sketches ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Overlap:
    """What :meth:`RowSketch.overlap` estimates: the share of the new input's rows (weighted by
    multiplicity) that the other input holds, those rows' estimated count, and how many sampled
    distinct rows the two share (``shared`` 0: no evidence of any overlap)."""

    fraction: float
    rows: float
    shared: int
    sampled: int


@dataclass(frozen=True)
class RowSketch:
    """A bottom-k sketch of an input's keyed row hashes (module docstring): ``hashes`` the
    smallest distinct hashes, ascending, ``counts`` how often each occurs, ``rows`` the rows
    hashed, and ``capacity`` how many it keeps: a sketch with fewer hashes than its capacity holds
    every distinct hash of its input; a full one, every hash up to its largest."""

    rows: int
    hashes: np.ndarray
    counts: np.ndarray
    capacity: int = SKETCH_SIZE

    @classmethod
    def of_hashes(cls, hashes: np.ndarray, size: int = SKETCH_SIZE) -> RowSketch:
        """The sketch of ``hashes`` (one per row). The smallest ``size`` distinct values are found
        by partitioning, not sorting: the hashes at most the ``m``-th smallest hold at most ``m``
        distinct values, so ``m`` doubles from ``size`` until they hold ``size`` (or all)."""
        hashes = np.asarray(hashes, dtype=np.uint64)
        wanted = size
        while True:
            if wanted >= len(hashes):
                chosen = hashes
            else:
                chosen = hashes[hashes <= np.partition(hashes, wanted - 1)[wanted - 1]]
            distinct, counts = np.unique(chosen, return_counts=True)
            if len(distinct) >= size or len(chosen) == len(hashes):
                return cls(len(hashes), distinct[:size], counts[:size].astype(np.int64), size)
            wanted *= 2

    @classmethod
    def of_columns(cls, columns: Sequence[pa.Array | pa.ChunkedArray | pd.Series | np.ndarray], key: bytes,
                   size: int = SKETCH_SIZE) -> RowSketch:
        """The sketch of the rows ``columns`` hold (:func:`keyed_row_hashes`), hashed in blocks of
        :data:`BLOCK_ROWS` rows: the memory it takes does not grow with the fragment (on engines
        whose tasks run in the driver process, the driver's peak stays flat), and once the sketch
        is full only a block's hashes at most its threshold are merged in."""
        total = len(columns[0])
        sketch = cls.empty(size)
        for start in range(0, total, BLOCK_ROWS):
            stop = min(total, start + BLOCK_ROWS)
            hashes = keyed_row_hashes([_rows(column, start, stop) for column in columns], key)
            if len(sketch.hashes) >= size:
                hashes = hashes[hashes <= sketch.hashes[-1]]
            merged = cls.merge([sketch, cls.of_hashes(hashes, size)], size)
            sketch = cls(sketch.rows + (stop - start), merged.hashes, merged.counts, size)
        return sketch

    @classmethod
    def empty(cls, size: int = SKETCH_SIZE) -> RowSketch:
        return cls(0, np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64), size)

    @classmethod
    def merge(cls, sketches: Iterable[RowSketch], size: int = SKETCH_SIZE) -> RowSketch:
        """The sketch of the union of the sketched inputs, exact up to the smallest threshold of the
        parts: the at most ``size`` smallest distinct hashes of the union not above it (a part of
        smaller capacity — a fragment's share — may lower the merged capacity, never its
        correctness: below every part's threshold the union's hashes are all known)."""
        parts = list(sketches)
        if not parts:
            return cls.empty(size)
        rows = sum(part.rows for part in parts)
        hashes = np.concatenate([part.hashes for part in parts])
        counts = np.concatenate([part.counts for part in parts])
        distinct, inverse = np.unique(hashes, return_inverse=True)
        summed = np.bincount(inverse, weights=counts, minlength=len(distinct)).astype(np.int64)
        limit = min(part.threshold for part in parts)
        known = distinct <= np.uint64(limit)
        distinct, summed = distinct[known][:size], summed[known][:size]
        # every hash of the union up to ``limit`` is here: a sketch cut short by it is full at its length
        capacity = size if limit == 2**64 - 1 or len(distinct) == size else len(distinct)
        return cls(rows, distinct, summed, max(capacity, 1))

    @classmethod
    def merge_texts(cls, texts: Iterable[str], size: int = SKETCH_SIZE) -> RowSketch:
        """:meth:`merge` of sketches given as text (:meth:`to_text`), decoded and folded in a few
        at a time: the driver holds the merged sketch and at most about ``size`` more hashes,
        however many fragments there are."""
        merged, pending, held = cls.empty(size), [], 0
        for text in texts:
            part = cls.from_text(text)
            pending.append(part)
            held += len(part.hashes)
            if held >= size:
                merged, pending, held = cls.merge([merged, *pending], size), [], 0
        return cls.merge([merged, *pending], size) if pending else merged

    @property
    def full(self) -> bool:
        """Whether the sketch holds every distinct row of its input (fewer than its capacity)."""
        return len(self.hashes) < self.capacity

    @property
    def threshold(self) -> int:
        """Every distinct hash of the input at most this is in the sketch."""
        return 2**64 - 1 if self.full or not len(self.hashes) else int(self.hashes[-1])

    def overlap(self, other: RowSketch) -> Overlap:
        """How much of this input ``other``'s input holds (module docstring)."""
        threshold = np.uint64(min(self.threshold, other.threshold))
        mine = self.hashes <= threshold
        sampled = self.hashes[mine]
        if not len(sampled):
            return Overlap(0.0, 0.0, 0, 0)
        theirs = other.hashes[other.hashes <= threshold]
        shared = np.isin(sampled, theirs, assume_unique=True)
        weights = self.counts[mine]
        fraction = float(weights[shared].sum() / weights.sum())
        return Overlap(fraction, fraction * self.rows, int(shared.sum()), len(sampled))

    def encode(self) -> bytes:
        """The sketch as bytes: ``RS2``, the rows, the capacity, the hashes and the counts
        (little-endian)."""
        header = _FORMAT + struct.pack("<QII", self.rows, self.capacity, len(self.hashes))
        return header + self.hashes.astype("<u8").tobytes() + self.counts.astype("<u8").tobytes()

    @classmethod
    def decode(cls, data: bytes) -> RowSketch:
        if data[:3] != _FORMAT:
            raise ValueError("not a row sketch")
        rows, capacity, size = struct.unpack_from("<QII", data, 3)
        start = 3 + struct.calcsize("<QII")
        hashes = np.frombuffer(data, dtype="<u8", count=size, offset=start).astype(np.uint64)
        counts = np.frombuffer(data, dtype="<u8", count=size, offset=start + 8 * size).astype(np.int64)
        return cls(int(rows), hashes, counts, int(capacity))

    def to_text(self) -> str:
        """:meth:`encode` as base64 text (a fragment summary's string column carries it)."""
        return base64.b64encode(self.encode()).decode("ascii")

    @classmethod
    def from_text(cls, text: str) -> RowSketch:
        return cls.decode(base64.b64decode(text))


MIN_FRAGMENT_SKETCH = 64
OVERSAMPLE = 4


def fragment_sketch_size(fragment_bytes: int | None, input_bytes: int | None) -> int:
    """A fragment's sketch capacity: :data:`OVERSAMPLE` times its share of the input's bytes of
    :data:`SKETCH_SIZE`, at least :data:`MIN_FRAGMENT_SKETCH` (all of it when a size is unknown).
    The input's sketch needs from each fragment only the hashes among the input's smallest 4,096 —
    about its share of them when rows are spread evenly over bytes (a fragment needing more than
    four times its share is a Poisson tail below 10⁻¹⁷ at 16 expected) — so the driver gathers
    about ``4 x 4,096`` hashes plus 64 a fragment, not 4,096 a fragment. A fragment whose share
    was too small only lowers the merged sketch's capacity (:meth:`RowSketch.merge`)."""
    if not fragment_bytes or not input_bytes:
        return SKETCH_SIZE
    share = fragment_bytes / input_bytes
    return int(min(SKETCH_SIZE, max(MIN_FRAGMENT_SKETCH, math.ceil(OVERSAMPLE * SKETCH_SIZE * share))))


@dataclass(frozen=True)
class RowPrinting:
    """How a kind's input pass sketches its fragments' canonical rows: the lake's row ``key``
    (:func:`row_key`; 32 bytes, key material the engines keep out of pickled side values) and the
    input's listed bytes, which size each fragment's sketch (:func:`fragment_sketch_size`)."""

    key: bytes
    input_bytes: int | None = None

    @classmethod
    def of(cls, key: bytes, fragments: Iterable[object]) -> RowPrinting:
        sizes = [getattr(fragment, "size", None) for fragment in fragments]
        return cls(key, sum(sizes) if sizes and all(size for size in sizes) else None)  # type: ignore[misc]

    def sketch(self, columns: Sequence[pa.Array | pa.ChunkedArray | pd.Series | np.ndarray],
               fragment_bytes: int | None) -> RowSketch:
        return RowSketch.of_columns(columns, self.key, fragment_sketch_size(fragment_bytes, self.input_bytes))
