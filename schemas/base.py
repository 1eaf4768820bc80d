"""What every release kind's configuration shares: strict models, the engine settings, the refusal
of a budget in a config (budgets are lake policy: ``pipelines/platform/policy.py``) and how a table
file is read.

Each kind's own configuration lives in its package (``schemas/crowd/config.py``, …) and builds
on these; no kind's schema imports another kind's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator


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


_SECRET_KEY = re.compile(r"secret|password|passwd|token|credential|access-key|session-key|private", re.IGNORECASE)
_URI_PASSWORD = re.compile(r"(?<=://)([^:/@]*):[^@/]*@")


def redacted_properties(properties: dict[str, str]) -> dict[str, str]:
    """Catalog or FileIO properties safe to record (a manifest, a log line): values of keys that
    name a secret are replaced by ``***`` and a password in a URI (``user:password@host``) too."""
    return {key: "***" if _SECRET_KEY.search(key) else _URI_PASSWORD.sub(r"\1:***@", value)
            for key, value in properties.items()}


class LakeLocation(StrictModel):
    """A lake on any pyiceberg catalog and file system (docs/PRODUCTION.md, "Catalog and object
    storage"), the alternative to a plain folder (the embedded lake: a SQLite catalog and a local
    warehouse). ``catalog``: pyiceberg catalog properties passed through (``type``: sql, rest, glue,
    hive, ...; ``uri``; ``name``, default ``privlake``). ``warehouse``: the tables' location
    (``s3://bucket/prefix``, ``file:///...``; for a REST catalog its warehouse name). ``staging``:
    where the engines write a release before its commit (default: ``<state>/staging``; a folder
    the driver and the executors share). ``properties``: FileIO properties (``s3.endpoint``,
    ``s3.access-key-id``, ...), given to the catalog and to every file access. ``state``: a local
    folder for this host's leases (default ``~/.local/state/privlake/<lake digest>``).
    Credentials belong in ``${ENV}`` references; a recorded lake has them redacted."""

    catalog: dict[str, str]
    warehouse: str = Field(min_length=1)
    staging: str | None = None
    properties: dict[str, str] = {}
    state: Path | None = None

    @field_validator("catalog", "properties", mode="before")
    @classmethod
    def _strings(cls, value: object) -> object:
        if isinstance(value, dict):
            return {str(key): value if isinstance(value, str) else _scalar_text(value) for key, value in value.items()}
        return value

    @field_validator("catalog")
    @classmethod
    def _catalog_named(cls, catalog: dict[str, str]) -> dict[str, str]:
        if not catalog.get("type") and not catalog.get("uri"):
            raise ValueError("lake.catalog needs a type (sql, rest, glue, hive, ...) or a uri")
        return catalog

    @field_serializer("catalog", "properties")
    def _redacted(self, properties: dict[str, str]) -> dict[str, str]:
        return redacted_properties(properties)


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise ValueError("catalog and FileIO properties are text, numbers or true/false")


LakeSetting = LakeLocation | Path
"""A config's ``lake``: a folder (the embedded lake) or a :class:`LakeLocation` mapping."""


class TableReading(StrictModel):
    """How to read a table file: CSV with or without a header row (without one, the columns are
    the schema's attributes in order), Parquet; ``recode`` maps spellings to the schema's
    categories per column (e.g. Adult's test file writes ``>50K.`` for ``>50K``)."""

    path: Path
    format: Literal["csv", "parquet"] = "csv"
    header: bool = True
    recode: dict[str, dict[str, str]] = {}
