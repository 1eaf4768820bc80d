"""The configuration contract of a tabular release (``kind: tabular``), validated on load.

Bindschaedler, Shokri, Gunter (VLDB 2017) seed-based synthesis with the randomized
plausible-deniability test, over a Bayesian network learned with differential privacy in the
style of PrivBayes (Zhang et al. 2014). Every parameter here is public; none is derived from the
data, so the guarantee computed from them does not depend on the data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from schemas.base import EngineSettings, LakeSetting, StrictModel, TableReading, refuse_budget_key
from schemas.sources import SourceSpec

# Upper bounds of the size parameters (issue 14: an absurd size fails on load, naming its key,
# instead of late with MemoryError).
MAX_DEGREE = 6
MAX_COMPLEXITY_CAP = 1 << 20
MAX_RECORDS = 100_000_000
MAX_ATTEMPTS = 10_000_000_000
MAX_BATCH_SIZE = 1 << 20
MAX_DOMAIN_SIZE = 1 << 20
"""The most codes (categories or bins) of one attribute of the schema file (checked on reading it)."""


MAX_EVALUATION_SAMPLE = 10_000_000
"""The most input records the evaluation may read on the driver (``evaluation.sample_records``)."""


class TabularInput(SourceSpec):
    """Where the records are (``schemas/sources.py``): ``path`` — one file, a folder of files (hive
    partition folders such as ``day=2026-12-01/`` become columns, which the schema may name) or a
    glob — or an Iceberg ``table`` of ``lake`` at ``snapshot_id`` with ``row_filter``; read where
    they live, by the engine, as ``TableReading`` reads a file: a CSV with a header row or
    (``header: false``) with the schema's attributes as its columns in order; ``recode`` maps
    spellings to the schema's categories per column. ``format`` is inferred from the files'
    suffixes; a file without a known suffix is CSV (the format a tabular input always defaulted to)."""

    header: bool = True
    recode: dict[str, dict[str, str]] = {}
    schema_path: Path = Field(alias="schema", description="the schema file: attributes and public domains")

    model_config = StrictModel.model_config | {"populate_by_name": True}


class DataSplitFractions(StrictModel):
    """Fractions of the records in the seeds ``DS``, structure data ``DT`` and parameter data ``DP``."""

    seeds: float = Field(0.5, gt=0, lt=1)
    structure: float = Field(0.25, gt=0, lt=1)
    parameters: float = Field(0.25, gt=0, lt=1)

    @model_validator(mode="after")
    def _at_most_one(self) -> DataSplitFractions:
        if self.seeds + self.structure + self.parameters > 1 + 1e-12:
            raise ValueError("split.seeds + split.structure + split.parameters must be at most 1")
        return self


class TabularPrivacy(StrictModel):
    """Either a total ``epsilon`` (with a ``delta`` target) from which the parts are derived, or every
    part explicitly: ``epsilon_structure``, ``epsilon_parameters``, ``epsilon0`` and ``t`` (or ``delta``)."""

    k: int = Field(ge=2, description="plausible-deniability threshold: seeds that must be able to produce a record")
    gamma: float = Field(gt=1, description="indistinguishability factor of the privacy test")
    epsilon: float | None = Field(None, gt=0, description="total epsilon; the split is derived")
    delta: float | None = Field(None, gt=0, lt=1, description="target delta; t is chosen from it")
    epsilon_structure: float | None = Field(None, gt=0)
    epsilon_parameters: float | None = Field(None, gt=0)
    epsilon0: float | None = Field(None, gt=0)
    t: int | None = Field(None, ge=1)

    _no_budget = model_validator(mode="before")(refuse_budget_key)

    @model_validator(mode="after")
    def _total_or_parts(self) -> TabularPrivacy:
        parts = (self.epsilon_structure, self.epsilon_parameters, self.epsilon0)
        if self.epsilon is not None:
            if any(part is not None for part in parts) or self.t is not None:
                raise ValueError("give privacy.epsilon (total) or the parts (epsilon_structure, "
                                 "epsilon_parameters, epsilon0, t), not both")
            if self.delta is None:
                raise ValueError("privacy.epsilon (total) needs privacy.delta (target)")
        else:
            if any(part is None for part in parts):
                raise ValueError("give privacy.epsilon (total), or all of epsilon_structure, "
                                 "epsilon_parameters and epsilon0")
            if (self.t is None) == (self.delta is None):
                raise ValueError("with explicit parts, give exactly one of privacy.t and privacy.delta")
        if self.t is not None and self.t >= self.k:
            raise ValueError(f"privacy.t must be smaller than privacy.k (t={self.t}, k={self.k})")
        return self


class TabularModel(StrictModel):
    score: Literal["mutual_information", "correlation_merit"] = "mutual_information"
    max_degree: int = Field(2, ge=0, le=MAX_DEGREE, description=f"largest parent set; at most {MAX_DEGREE}")
    complexity_cap: int = Field(
        4096, ge=1, le=MAX_COMPLEXITY_CAP,
        description="largest table: product of the parents' domain sizes times the child's; at most 2^20 cells",
    )
    dirichlet_alpha: float = Field(1.0, ge=0, description="pseudo-count added to every noisy count")


class TabularSynthesis(StrictModel):
    omega: int | Literal["all"] = Field(
        "all", description="attributes resampled from the model (the rest are kept from the seed); all = m"
    )
    records: int | None = Field(
        None, ge=1, le=MAX_RECORDS, description="records to release; default: the input's size; at most 10^8"
    )
    max_attempts: int | None = Field(
        None, ge=1, le=MAX_ATTEMPTS, description="candidate cap; default 20 x records; at most 10^10"
    )
    batch_size: int = Field(
        65_536, ge=1, le=MAX_BATCH_SIZE, description="candidates per keyed batch; at most 2^20 (held in memory at once)"
    )


class TabularEvaluation(StrictModel):
    """Optional held-out real records for the manifest's utility and privacy-evidence report
    (computed from raw data: an internal report, not privacy-protected)."""

    holdout: TableReading | None = None
    target_column: str | None = None
    positive_values: list[str] = Field(default_factory=list, description="target values counted as positive")
    positive_above: float | None = Field(None, description="numeric target: positive when above this")
    sample_records: int = Field(
        100_000, ge=1, le=MAX_EVALUATION_SAMPLE,
        description="the most input records and the most held-out records the evaluation reads on the driver "
        "(a keyed sample beyond it); at most 10^7",
    )

    @model_validator(mode="after")
    def _target(self) -> TabularEvaluation:
        if self.target_column is not None and not self.positive_values and self.positive_above is None:
            raise ValueError("evaluation.target_column needs positive_values or positive_above")
        return self


class TabularConfig(StrictModel):
    kind: Literal["tabular"]
    dataset: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.\-]+$", description="at most 100 characters (a generated release id is the dataset and 24 more)")
    lake: LakeSetting
    input: TabularInput
    privacy: TabularPrivacy
    split: DataSplitFractions = DataSplitFractions()
    model: TabularModel = TabularModel()
    synthesis: TabularSynthesis = TabularSynthesis()
    engine: EngineSettings = EngineSettings()
    evaluation: TabularEvaluation = TabularEvaluation()
