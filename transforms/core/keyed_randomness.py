"""Keyed random streams: every random draw of a release comes from a generator keyed by
``(secret, release_id, purpose, key)``.

Why: a retried Spark task, a re-executed Beam bundle, a different partitioning or a different
engine must redraw exactly the same values, so that output is reproducible from the secret
and a retry cannot be used for an averaging attack (DESIGN.md, "Randomness and noise").

Construction: HMAC-SHA256 of the release secret over the length-prefixed fields
``release_id``, ``purpose`` and the canonical bytes of ``key``; the 256-bit digest keys a
Philox4x64 counter-based generator (128-bit key, 128 more bits as the starting counter).
Philox is a counter-based generator (Salmon et al., SC'11); the HMAC makes the key
unpredictable without the secret.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from typing import Any

import numpy as np

from schemas.keys import canonical_key, length_prefixed

SECRET_BYTES = 32
_HEX_SECRET = re.compile(r"^[0-9a-fA-F]{64}$")


def new_release_secret() -> bytes:
    """A fresh 256-bit release secret from the operating system's CSPRNG."""
    return os.urandom(SECRET_BYTES)


def secret_from_hex(text: str) -> bytes:
    """Parse a 64-hex-digit secret (tests and audits only: ``PRIVLAKE_TEST_SECRET``)."""
    if not _HEX_SECRET.match(text.strip()):
        raise ValueError("a release secret must be exactly 64 hexadecimal digits (256 bits)")
    return bytes.fromhex(text.strip())


def stream_digest(secret: bytes, release_id: str, purpose: str, key: Any) -> bytes:
    """HMAC-SHA256(secret, release_id ‖ purpose ‖ key), each field length-prefixed."""
    if len(secret) != SECRET_BYTES:
        raise ValueError("the release secret must be 32 bytes")
    message = (
        length_prefixed(release_id.encode("utf-8"))
        + length_prefixed(purpose.encode("utf-8"))
        + length_prefixed(canonical_key(key))
    )
    return hmac.new(secret, message, hashlib.sha256).digest()


def keyed_generator(secret: bytes, release_id: str, purpose: str, key: Any) -> np.random.Generator:
    """The generator for one ``(release, purpose, key)`` stream.

    The same arguments always give the same sequence of draws; changing any of them gives an
    independent-looking stream.
    """
    digest = stream_digest(secret, release_id, purpose, key)
    philox_key = int.from_bytes(digest[:16], "little")
    philox_counter = int.from_bytes(digest[16:], "little")
    bit_generator = np.random.Philox(key=philox_key, counter=philox_counter)
    return np.random.Generator(bit_generator)


def keyed_uniform(secret: bytes, release_id: str, purpose: str, key: Any) -> float:
    """One uniform draw in [0, 1) for a key, from 53 bits of the stream digest.

    Used for per-row priorities (e.g. the contribution-bound sampling of a source's objects)
    where building a generator per row would be wasteful.
    """
    digest = stream_digest(secret, release_id, purpose, key)
    return (int.from_bytes(digest[:8], "little") >> 11) / float(1 << 53)
