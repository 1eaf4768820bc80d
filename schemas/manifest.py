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
    "guarantee",
    "config",
    "validation",
    "code_version",
    "charged",
    "test_lake",
    "table",
)

KIND_MANIFEST_KEYS: dict[str, tuple[str, ...]] = {
    "crowd": ("objects_released", "objects_suppressed", "claims_per_object", "bandwidth"),
    "tabular": ("omega", "target_records", "network", "split"),
    "filter": ("model_artifact_id", "epsilon_rdp", "choices", "encoder"),
    "ldp": ("estimator", "n", "mechanism_mix", "epsilon_distribution", "iterations", "converged", "catalog"),
}

REQUIRED_MANIFEST_KEYS: tuple[str, ...] = COMMON_MANIFEST_KEYS + KIND_MANIFEST_KEYS["crowd"]


OPERATOR_ONLY_KEYS: tuple[str, ...] = (
    "input_fingerprint", "evaluation", "pass_rate", "candidate_attempts", "attempts", "fallback_claims",
    "capped_claims", "clipped_values", "clipped_to_value_range", "suppressed_reasons", "global_weights",
    "input_rows", "input_rows_after_contribution_bound", "objects_short", "shortfall_claims", "timings",
)
"""Figures computed from raw data: they belong in the operator-only record
(``pipelines/platform/internal.py``), never in a public manifest of any kind."""


def operator_keys_in(manifest: dict) -> list[str]:
    """The operator-only keys a public manifest carries (empty when clean), at any depth of its
    top level and of its ``validation`` section."""
    found = [key for key in OPERATOR_ONLY_KEYS if key in manifest]
    found += [f"validation.{key}" for key in ("input",) if key in manifest.get("validation", {})]
    return found


def missing_manifest_keys(manifest: dict) -> list[str]:
    """The required keys a manifest lacks (empty when complete): the common keys and those of
    its kind (crowd when the kind is absent or unknown)."""
    kind_keys = KIND_MANIFEST_KEYS.get(manifest.get("kind", "crowd"), KIND_MANIFEST_KEYS["crowd"])
    return [key for key in COMMON_MANIFEST_KEYS + kind_keys if key not in manifest]
