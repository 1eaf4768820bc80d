"""The policy's input check with the executors' fingerprints (issue 15: nothing proportional to the
input on the driver).

A release may not read a file another dataset used (``pipelines/platform/policy.py``: the keyed
fingerprint of every input file, HMAC-SHA256 under the lake's key). The digest is computed where
the file is read: a kind's engine input pass fingerprints each fragment as it reads it
(``sources.fragment_fingerprint``) with the key :meth:`ReleaseContext.fragment_key` gives — the
lake's key in the 32-byte form the engines keep out of pickled side values
(``policy.executor_key_of``), so the digests are the very values lakes have always recorded — and
hands them to :meth:`ReleaseContext.check_input_fingerprints` before its input gate can fail.
Only ``(file, digest)`` per fragment reaches the driver.

:func:`fingerprint_pass` is the platform's own pass when the lake's key has no 32-byte form (33 to
64 bytes: it travels as two 32-byte halves, each key material): one ``map_fragments`` task per
fragment hashes the file where the engine runs its tasks. The row sketches that go with the file
digests (issue 32, ``pipelines/platform/row_prints.py``) are always the kind's own: their key is
derived, 32 bytes, whatever the lake's key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from pipelines.platform.sources import Fragment, fragment_fingerprint

FRAGMENT_PRINTS_SCHEMA = pa.schema([
    pa.field("ordinal", pa.int64(), nullable=False),
    pa.field("fingerprint", pa.string(), nullable=False),
])
HALF = 32


def key_halves(key: bytes) -> tuple[bytes, bytes]:
    """``key`` as two 32-byte halves (zero-padded: HMAC pads a short key with zeros, so the halves
    joined give the same digests); a key above 64 bytes is hashed first, as HMAC does."""
    if len(key) > 2 * HALF:
        key = hashlib.sha256(key).digest()
    padded = key.ljust(2 * HALF, b"\0")
    return padded[:HALF], padded[HALF:]


def fingerprint_fragment(fragment: Fragment, side: tuple[bytes, bytes]) -> pa.Table:
    """One fragment's keyed fingerprint (``map_fragments`` function of :func:`fingerprint_pass`)."""
    print_ = fragment_fingerprint(fragment, side[0] + side[1])
    return pa.table({"ordinal": [fragment.ordinal], "fingerprint": [print_]}, schema=FRAGMENT_PRINTS_SCHEMA)


def fingerprint_pass(engine: Any, fragments: Sequence[Fragment], key: bytes) -> list[tuple[int, str]]:
    """``(ordinal, keyed fingerprint)`` of every fragment, hashed on the engine under ``key`` (the
    lake's fingerprint key)."""
    if not fragments:
        return []
    found = engine.collect(engine.map_fragments(list(fragments), fingerprint_fragment, FRAGMENT_PRINTS_SCHEMA,
                                                key_halves(key)))
    return list(zip(found["ordinal"].astype(int).tolist(), found["fingerprint"].tolist(), strict=True))


def named_prints(fragments: Sequence[Fragment], prints: Iterable[tuple[int, str]]) -> list[tuple[str, str]]:
    """``(file, fingerprint)`` in the input's order from ``(ordinal, fingerprint)`` gathered in any
    order; every fragment must have exactly one."""
    by_ordinal = dict(prints)
    missing = [fragment.name for fragment in fragments if fragment.ordinal not in by_ordinal]
    if missing or len(by_ordinal) != len(fragments):
        raise RuntimeError(f"input fingerprints for {len(by_ordinal)} fragments where the input has {len(fragments)}")
    return [(fragment.name, by_ordinal[fragment.ordinal])
            for fragment in sorted(fragments, key=lambda fragment: fragment.ordinal)]

