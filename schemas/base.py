"""What every release kind's configuration shares: strict models, the engine settings, the refusal
of a budget in a config (budgets are lake policy: ``pipelines/platform/policy.py``) and how a table
file is read.

Each kind's own configuration lives in its package (``schemas/crowd/config.py``, …) and builds
on these; no kind's schema imports another kind's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class StrictModel(BaseModel):
    """Unknown keys are errors, and so are infinite and NaN numbers (``.inf`` for a budget or a
    sensitivity cap would otherwise pass every ``gt`` check); a loaded configuration is immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


BUDGET_IS_POLICY = (
    "budgets are lake policy, set once by an operator, not by a release config: remove privacy.budget and run "
    "`privlake budget set DATASET --epsilon E --delta D --lake LAKE`"
)


def refuse_budget_key(values: object) -> object:
    """A ``before`` validator for a privacy section: a ``budget`` key is refused with the reason
    (a config that could set its own budget could raise it)."""
    if isinstance(values, dict) and "budget" in values:
        raise ValueError(BUDGET_IS_POLICY)
    return values


class SparkSettings(StrictModel):
    """``conf`` may not hold ``spark.authenticate.secret`` (the config is recorded in the manifest):
    a standalone cluster's shared secret is read from the operator-only file ``auth_secret_file``
    (or the one ``PRIVLAKE_SPARK_AUTH_SECRET_FILE`` names). ``allow_unencrypted: true`` lets a run
    on a cluster master go without authentication and encryption (refused otherwise)."""

    master: str = "local[*]"
    conf: dict[str, str] = {}
    allow_unencrypted: bool = False
    auth_secret_file: Path | None = None

    @field_validator("conf")
    @classmethod
    def _no_secret_in_conf(cls, conf: dict[str, str]) -> dict[str, str]:
        if "spark.authenticate.secret" in conf:
            raise ValueError(
                "spark.authenticate.secret may not be set in a config (it is recorded in the manifest): "
                "put the cluster's secret in an operator-only file named by engine.spark.auth_secret_file "
                "or PRIVLAKE_SPARK_AUTH_SECRET_FILE"
            )
        return conf


class BeamSettings(StrictModel):
    """``allow_unencrypted: true`` lets a run use a runner outside this process (a ``--runner`` or
    ``multi_processing`` workers), whose pipeline graph carries the side values and the release
    secret (refused otherwise)."""

    options: list[str] = []
    allow_unencrypted: bool = False


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
