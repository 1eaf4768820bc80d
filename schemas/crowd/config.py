"""The configuration contract of a crowd release (``kind: crowd``), validated on load.

Unknown keys and out-of-range values are errors that name the key (``privacy.k: ...``).
Every parameter here is public: none is derived from the data, so the privacy guarantee
computed from them never depends on the data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from schemas.base import Budget, EngineSettings, StrictModel


class ColumnMapping(StrictModel):
    """The input file's column names for each canonical column."""

    object_id: str = "object_id"
    source_id: str = "source_id"
    value: str = "value"


class CrowdInput(StrictModel):
    path: Path
    format: Literal["csv", "parquet"] = "csv"
    columns: ColumnMapping = ColumnMapping()
    duplicates: Literal["reject", "keep_last", "mean"] = Field(
        "reject",
        description="two claims of one source on one object: reject the input, keep the last "
        "one in file order, or replace them by their mean",
    )
    small_objects: Literal["suppress", "reject"] = Field(
        "suppress",
        description="objects with fewer than k claims: suppress them (never released, counted in "
        "the manifest) or reject the whole input",
    )


class CrowdPrivacy(StrictModel):
    k: int = Field(ge=1, description="plausible-deniability threshold: claims that must be indistinguishable")
    gamma: float = Field(gt=1, description="indistinguishability factor of the privacy test")
    epsilon0: float = Field(gt=0, description="scale of the randomized threshold k + Lap(1/epsilon0)")
    delta: float | None = Field(None, gt=0, lt=1, description="target delta; t is chosen from it")
    t: int | None = Field(None, ge=1, description="the t of Theorem 2, instead of a delta target")
    weight_ratio_cap: float = Field(gt=1, description="public bound R on max/min combined weight per object")
    unit: Literal["claim", "source"] = "claim"
    max_objects_per_source: int | None = Field(
        None, ge=1, description="contribution bound L: objects kept per source (source-level unit)"
    )
    budget: Budget | None = None

    @model_validator(mode="after")
    def _t_or_delta(self) -> CrowdPrivacy:
        if (self.delta is None) == (self.t is None):
            raise ValueError("give exactly one of privacy.delta (target) and privacy.t")
        if self.t is not None and self.t >= self.k:
            raise ValueError(f"privacy.t must be smaller than privacy.k (t={self.t}, k={self.k})")
        if self.unit == "source" and self.max_objects_per_source is None:
            raise ValueError("privacy.unit 'source' needs privacy.max_objects_per_source")
        return self


class IterationControl(StrictModel):
    tolerance: float = Field(1e-6, gt=0)
    max_iterations: int = Field(100, ge=1)


class CrowdWeights(StrictModel):
    method: Literal["combined", "global", "local", "uniform"] = Field(
        "combined", description="combined is PrisCrowd; the others are the evaluation's ablations"
    )
    global_weights: IterationControl = Field(IterationControl(), alias="global")
    local_weights: IterationControl = Field(IterationControl(), alias="local")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class CrowdSynthesis(StrictModel):
    claims_per_object: int = Field(ge=1, description="m: synthetic claims released per object")
    precision: float = Field(0.01, gt=0, description="released values are multiples of this")
    bandwidth_floor: float | None = Field(
        None, gt=0, description="smallest kernel bandwidth; default: the precision"
    )
    max_attempts_per_object: int | None = Field(
        None, ge=1, description="attempt cap per object; default 50 x claims_per_object"
    )
    batch_size: int | None = Field(None, ge=1, description="candidates drawn per round; default 2 x m")

    @property
    def effective_bandwidth_floor(self) -> float:
        return self.bandwidth_floor if self.bandwidth_floor is not None else self.precision

    @property
    def effective_max_attempts(self) -> int:
        return self.max_attempts_per_object or 50 * self.claims_per_object

    @property
    def effective_batch_size(self) -> int:
        return self.batch_size or 2 * self.claims_per_object


class CrowdEvaluation(StrictModel):
    """Optional ground truth, used only to report utility in the manifest (never for the release)."""

    truth_path: Path | None = None
    truth_columns: dict[str, str] = {"object_id": "object_id", "truth": "truth"}


class CrowdConfig(StrictModel):
    kind: Literal["crowd"]
    dataset: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    lake: Path
    input: CrowdInput
    privacy: CrowdPrivacy
    synthesis: CrowdSynthesis
    weights: CrowdWeights = CrowdWeights()
    engine: EngineSettings = EngineSettings()
    evaluation: CrowdEvaluation = CrowdEvaluation()

    @field_validator("lake", mode="before")
    @classmethod
    def _lake_not_empty(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            raise ValueError("lake must be a folder path")
        return value
