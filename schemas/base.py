"""What every release kind's configuration shares: strict models, the engine settings, the
dataset's privacy budget and how a table file is read.

Each kind's own configuration lives in its package (``schemas/crowd/config.py``, …) and builds
on these; no kind's schema imports another kind's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class StrictModel(BaseModel):
    """Unknown keys are errors, and so are infinite and NaN numbers (``.inf`` for a budget or a
    sensitivity cap would otherwise pass every ``gt`` check); a loaded configuration is immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Budget(StrictModel):
    """The total privacy budget of the dataset, summed over its releases (basic composition)."""

    epsilon: float = Field(gt=0)
    delta: float = Field(gt=0, lt=1)


class SparkSettings(StrictModel):
    master: str = "local[*]"
    conf: dict[str, str] = {}


class BeamSettings(StrictModel):
    options: list[str] = []


class EngineSettings(StrictModel):
    name: Literal["local", "spark", "beam"] = "local"
    parallelism: int | None = Field(
        None, ge=1, le=4096, description="partitions or workers; at most 4096 (more only writes more, smaller files)"
    )
    spark: SparkSettings = SparkSettings()
    beam: BeamSettings = BeamSettings()


class TableReading(StrictModel):
    """How to read a table file: CSV with or without a header row (without one, the columns are
    the schema's attributes in order), Parquet; ``recode`` maps spellings to the schema's
    categories per column (e.g. Adult's test file writes ``>50K.`` for ``>50K``)."""

    path: Path
    format: Literal["csv", "parquet"] = "csv"
    header: bool = True
    recode: dict[str, dict[str, str]] = {}
