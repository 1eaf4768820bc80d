"""The canonical bytes of a key: how a group key (an object id, a source id, a record number, a
tuple of them) is written as bytes, the same on every engine.

A contract shared by two layers: the keyed random streams (``transforms/core/keyed_randomness.py``)
key their generators by these bytes, and the engines partition by their CRC-32
(``pipelines/engines/arrow.py``), so a stream and a partition of a key never depend on the engine
or on how the key's column is typed in a batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def canonical_key(key: Any) -> bytes:
    """Bytes that identify ``key`` the same way on every engine.

    Integers (Python or NumPy) are written in decimal, strings as UTF-8, tuples as their
    length-prefixed parts; anything else is refused so that an engine-specific type (a
    float id, a NumPy scalar of another kind) cannot silently change a stream.
    """
    if isinstance(key, bool):
        raise TypeError("a boolean is not a random-stream key")
    if isinstance(key, (int, np.integer)):
        return b"i" + str(int(key)).encode()
    if isinstance(key, str):
        return b"s" + key.encode("utf-8")
    if isinstance(key, bytes):
        return b"b" + key
    if isinstance(key, tuple):
        return b"t" + b"".join(length_prefixed(canonical_key(part)) for part in key)
    raise TypeError(f"unsupported random-stream key type {type(key).__name__}")


def length_prefixed(data: bytes) -> bytes:
    """``data`` behind its 8-byte big-endian length, so concatenated fields cannot run together."""
    return len(data).to_bytes(8, "big") + data
