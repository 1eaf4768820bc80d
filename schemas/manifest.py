"""The release manifest contract: the keys every manifest carries (``privlake show --json``),
common to all release kinds plus each kind's own."""

from __future__ import annotations

COMMON_MANIFEST_KEYS: tuple[str, ...] = (
    "release_id",
    "kind",
    "dataset",
    "status",
    "epsilon",
    "delta",
    "privacy_unit",
    "rows",
    "engine",
    "input_fingerprint",
    "config",
    "validation",
    "timings",
    "code_version",
)

KIND_MANIFEST_KEYS: dict[str, tuple[str, ...]] = {
    "crowd": ("objects_released", "objects_suppressed"),
    "tabular": ("composition", "pass_rate", "candidate_attempts", "target_records", "network", "evaluation"),
    "filter": ("model_artifact_id", "epsilon_rdp", "choices", "encoder", "guarantee", "evaluation"),
    "ldp": ("estimator", "n", "mechanism_mix", "epsilon_distribution", "iterations", "converged", "catalog"),
}

REQUIRED_MANIFEST_KEYS: tuple[str, ...] = COMMON_MANIFEST_KEYS + KIND_MANIFEST_KEYS["crowd"]


def missing_manifest_keys(manifest: dict) -> list[str]:
    """The required keys a manifest lacks (empty when complete): the common keys and those of
    its kind (crowd when the kind is absent or unknown)."""
    kind_keys = KIND_MANIFEST_KEYS.get(manifest.get("kind", "crowd"), KIND_MANIFEST_KEYS["crowd"])
    return [key for key in COMMON_MANIFEST_KEYS + kind_keys if key not in manifest]
