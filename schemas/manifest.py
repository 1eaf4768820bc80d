"""The release manifest contract: the keys every manifest carries (``privlake show --json``)."""

from __future__ import annotations

REQUIRED_MANIFEST_KEYS: tuple[str, ...] = (
    "release_id",
    "kind",
    "dataset",
    "status",
    "epsilon",
    "delta",
    "privacy_unit",
    "rows",
    "objects_released",
    "objects_suppressed",
    "engine",
    "input_fingerprint",
    "config",
    "validation",
    "timings",
    "code_version",
)


def missing_manifest_keys(manifest: dict) -> list[str]:
    """The required keys a manifest lacks (empty when complete)."""
    return [key for key in REQUIRED_MANIFEST_KEYS if key not in manifest]
