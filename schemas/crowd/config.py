"""The configuration contract of a crowd release (``kind: crowd``), validated on load.

Unknown keys and out-of-range values are errors that name the key (``privacy.k: ...``).
Every parameter here is public: none is derived from the data, so the privacy guarantee
computed from them never depends on the data.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from schemas.base import EngineSettings, LakeSetting, StrictModel, refuse_budget_key
from schemas.sources import SourceSpec


class ColumnMapping(StrictModel):
    """The input file's column names for each canonical column."""

    object_id: str = "object_id"
    source_id: str = "source_id"
    value: str = "value"


class CrowdInput(SourceSpec):
    """Where the claims are (``schemas/sources.py``, issue 15): ``path`` — one file, a folder of
    files (hive partition folders such as ``day=2026-12-01/`` become columns ``columns`` may name)
    or a glob — or an Iceberg ``table`` of ``lake`` at ``snapshot_id`` with ``row_filter``; read
    where they live, by the engine. ``format`` is inferred from the files' suffixes; a single file
    without a known suffix is read as CSV (the format a crowd input always defaulted to)."""

    columns: ColumnMapping = ColumnMapping()
    duplicates: Literal["reject", "keep_last", "mean"] = Field(
        "reject",
        description="two claims of one source on one object: reject the input, keep the last "
        "one in input order (files in path order, rows in file order), or replace them by their mean",
    )
    small_objects: Literal["suppress", "reject"] = Field(
        "suppress",
        description="objects with fewer than k claims: suppress them (never released, counted in "
        "the manifest) or reject the whole input",
    )


class CrowdPrivacy(StrictModel):
    """The public parameters of the guarantee (``docs/PRIVACY.md``, "Crowd")."""

    epsilon: float | None = Field(
        None, gt=0, le=50,
        description="histogram: the whole release's epsilon for the unit, whatever claims_per_object is",
    )
    k: int | None = Field(None, ge=2, description="priscrowd: plausible-deniability threshold (claims that must be indistinguishable)")
    gamma: float | None = Field(None, gt=1, description="priscrowd: indistinguishability factor of the privacy test")
    epsilon0: float | None = Field(None, gt=0, le=50, description="priscrowd: scale of the randomized threshold k + Lap(1/epsilon0)")
    delta: float | None = Field(
        None, gt=0, lt=1,
        description="the whole release's delta; priscrowd computes its epsilon for it; histogram needs it for "
        "the source unit only (the claim unit is pure epsilon-DP)",
    )
    weight_ratio_cap: float | None = Field(None, ge=1, le=1e6, description="priscrowd: public bound R on max/min seed weight per object")
    value_range: tuple[float, float] = Field(
        description="the public range [low, high] of claim values; both multiples of synthesis.precision"
    )
    out_of_range: Literal["clip", "reject"] = Field(
        "clip", description="claims outside value_range: clip them into it (counted for the operator) or reject the input"
    )
    fallback_probability: float = Field(
        0.05, gt=0, lt=1,
        description="q0: each attempt passes with a uniform draw on the public grid with this probability",
    )
    min_claims_per_object: int | None = Field(
        None, ge=1, le=1_000_000,
        description="objects with fewer claims are suppressed (default: k for priscrowd, where a floor above k "
        "tightens the guarantee; 1 for histogram); claim counts are public",
    )
    unit: Literal["claim", "source"] = "claim"
    max_objects_per_source: int | None = Field(
        None, ge=1, le=1_000_000, description="contribution bound L: objects kept per source (source-level unit)"
    )

    _no_budget = model_validator(mode="before")(refuse_budget_key)

    @model_validator(mode="after")
    def _consistent(self) -> CrowdPrivacy:
        low, high = self.value_range
        if not (math.isfinite(low) and math.isfinite(high) and high > low):
            raise ValueError("privacy.value_range must be two finite numbers with low < high")
        if abs(self.fallback_probability * 1_000_000 - round(self.fallback_probability * 1_000_000)) > 1e-6:
            raise ValueError("privacy.fallback_probability must be a multiple of 1e-6")
        if self.unit == "source" and self.max_objects_per_source is None:
            raise ValueError("privacy.unit 'source' needs privacy.max_objects_per_source")
        return self


class GlobalWeightsSettings(StrictModel):
    """The private source qualities: ``iterations`` noisy updates sharing ``epsilon``."""

    epsilon: float = Field(1.0, gt=0, le=100, description="total epsilon of the source qualities (all iterations)")
    iterations: int = Field(3, ge=1, le=100)


class LocalWeightsSettings(StrictModel):
    tolerance: float = Field(1e-6, gt=0)
    max_iterations: int = Field(100, ge=1, le=10_000)
    ratio_cap: float = Field(
        2.0, ge=1, description="R_l: max/min of the local factor per object (combined weights; at most weight_ratio_cap)"
    )


class CrowdWeights(StrictModel):
    method: Literal["combined", "global", "local", "uniform"] | None = Field(
        None, description="default: combined for priscrowd (the paper's), uniform for histogram (the only "
        "one it supports); the others are the evaluation's ablations",
    )
    global_weights: GlobalWeightsSettings = Field(GlobalWeightsSettings(), alias="global")
    local_weights: LocalWeightsSettings = Field(LocalWeightsSettings(), alias="local")

    model_config = StrictModel.model_config | {"populate_by_name": True}


class BandwidthSettings(StrictModel):
    """The kernel bandwidth, public: ``fixed`` (``value``) or ``range`` (``fraction`` of the value
    range). ``silverman`` fits each object's claims — not private: refused for a release."""

    method: Literal["fixed", "range", "silverman"] = "range"
    value: float | None = Field(None, gt=0)
    fraction: float = Field(0.05, gt=0, le=1)
    floor: float | None = Field(None, gt=0, description="silverman only: the smallest bandwidth (default: precision)")

    @model_validator(mode="after")
    def _value_for_fixed(self) -> BandwidthSettings:
        if self.method == "fixed" and self.value is None:
            raise ValueError("synthesis.bandwidth.value is required with method 'fixed'")
        return self


MECHANISMS = ("histogram", "priscrowd")
PRISCROWD_ONLY = ("k", "gamma", "epsilon0", "weight_ratio_cap", "fallback_probability")
"""The privacy keys only ``priscrowd`` reads (``histogram`` refuses them: a config that sets them
expects a mechanism it would not get)."""


class CrowdSynthesis(StrictModel):
    mechanism: Literal["histogram", "priscrowd"] = Field(
        "histogram",
        description="histogram: a private density per object, released once (privacy.epsilon), claims sampled "
        "from it for free; priscrowd: the paper's Algorithm 1, a privacy test per released claim (k, gamma, epsilon0)",
    )
    value_transform: Literal["none", "log"] = Field(
        "none",
        description="histogram: 'log' puts the density's bins on a public grid uniform in log10(1 + x - low) "
        "(scale data such as populations); none: uniform in the value",
    )
    claims_per_object: int = Field(ge=1, le=10_000, description="m: synthetic claims released per object")
    precision: float = Field(0.01, gt=0, description="released values are multiples of this")
    bandwidth: BandwidthSettings = BandwidthSettings()
    max_attempts_per_claim: int | None = Field(
        None, ge=1, le=1_000_000,
        description="T: attempts per claim slot; default the least with (1 - q0)^T <= 1e-9 q0",
    )
    batch_size: int | None = Field(None, ge=1, le=100_000, description="candidates drawn per round; default 2 x m")

    @property
    def effective_batch_size(self) -> int:
        return self.batch_size or min(2 * self.claims_per_object, 100_000)


def default_attempts_per_claim(fallback_probability: float) -> int:
    """The least ``T`` with ``(1 − q0)^T ≤ 10⁻⁹ q0``: a slot then reaches its cap so rarely that
    the cap's term in the guarantee is negligible."""
    return max(1, math.ceil(math.log(1e-9 * fallback_probability) / math.log1p(-fallback_probability)))


class CrowdEvaluation(StrictModel):
    """Optional ground truth, used only to report utility in the manifest (never for the release)."""

    truth_path: Path | None = None
    truth_columns: dict[str, str] = {"object_id": "object_id", "truth": "truth"}


class CrowdConfig(StrictModel):
    kind: Literal["crowd"]
    dataset: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.\-]+$", description="at most 100 characters (a generated release id is the dataset and 24 more)")
    lake: LakeSetting
    input: CrowdInput
    privacy: CrowdPrivacy
    synthesis: CrowdSynthesis
    weights: CrowdWeights = CrowdWeights()
    engine: EngineSettings = EngineSettings()
    evaluation: CrowdEvaluation = CrowdEvaluation()

    @model_validator(mode="after")
    def _range_on_the_grid(self) -> CrowdConfig:
        precision = self.synthesis.precision
        for name, bound in zip(("low", "high"), self.privacy.value_range, strict=True):
            steps = bound / precision
            # a multiple up to the rounding of the division (8 ulps), as transforms/crowd/value_grid.py
            # checks: a relative tolerance would admit a bound half a step off the grid
            if abs(steps - round(steps)) > 8 * math.ulp(max(1.0, abs(steps))):
                raise ValueError(f"privacy.value_range: {name} ({bound}) must be a multiple of synthesis.precision ({precision})")
        if (high_low := self.privacy.value_range[1] - self.privacy.value_range[0]) / precision > 2**40:
            raise ValueError(f"privacy.value_range: at most 2^40 values of synthesis.precision (got {high_low / precision:.3g})")
        if self.synthesis.mechanism == "priscrowd":
            self._priscrowd_keys()
        else:
            self._histogram_keys()
        return self

    def _priscrowd_keys(self) -> None:
        privacy = self.privacy
        missing = [key for key in ("k", "gamma", "epsilon0", "delta", "weight_ratio_cap") if getattr(privacy, key) is None]
        if missing:
            raise ValueError(f"privacy.{missing[0]} is required with synthesis.mechanism 'priscrowd'")
        if self.synthesis.value_transform != "none":
            raise ValueError("synthesis.value_transform 'log' is available with synthesis.mechanism 'histogram' only")
        if privacy.epsilon is not None:
            raise ValueError("privacy.epsilon: priscrowd computes its epsilon from k, gamma, epsilon0 and delta; "
                             "remove it (or use synthesis.mechanism 'histogram')")
        if self.weights_method == "combined" and self.weights.local_weights.ratio_cap > privacy.weight_ratio_cap:
            raise ValueError("weights.local.ratio_cap must not exceed privacy.weight_ratio_cap")

    def _histogram_keys(self) -> None:
        privacy = self.privacy
        chosen = "synthesis.mechanism is 'histogram' (the default)"
        for key in PRISCROWD_ONLY:
            if key in privacy.model_fields_set:
                raise ValueError(f"privacy.{key} is a parameter of synthesis.mechanism 'priscrowd'; {chosen}: "
                                 "remove it, or set synthesis.mechanism: priscrowd")
        if privacy.epsilon is None:
            raise ValueError(f"privacy.epsilon is required: {chosen}, which releases each object's density once "
                             "at that epsilon")
        if privacy.unit == "source" and privacy.delta is None:
            raise ValueError("privacy.delta is required with privacy.unit 'source' (the L objects' densities "
                             "compose at it)")
        if self.weights_method != "uniform":
            raise ValueError(f"weights.method '{self.weights_method}' is not available with {chosen}: its "
                             "per-claim weights would have to enter the privacy proof; use uniform")

    @property
    def weights_method(self) -> str:
        """The weighting used: ``weights.method``, else the mechanism's default."""
        if self.weights.method is not None:
            return self.weights.method
        return "combined" if self.synthesis.mechanism == "priscrowd" else "uniform"

    @property
    def suppression_floor(self) -> int:
        """The fewest claims of a released object (public): ``max(k, min_claims_per_object)`` for
        priscrowd, ``min_claims_per_object`` (default 1) for histogram."""
        floor = self.privacy.min_claims_per_object or 0
        if self.synthesis.mechanism == "priscrowd":
            return max(int(self.privacy.k or 0), floor)
        return max(1, floor)

    @property
    def max_attempts_per_claim(self) -> int:
        return self.synthesis.max_attempts_per_claim or default_attempts_per_claim(self.privacy.fallback_probability)

    @field_validator("lake", mode="before")
    @classmethod
    def _lake_not_empty(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            raise ValueError("lake must be a folder path")
        return value
