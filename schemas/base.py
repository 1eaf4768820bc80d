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

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer


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


_SECRET_KEY = re.compile(
    r"secret|password|passwd|pwd|token|credential|access-key|account-key|session-key|private|sas|signature|"
    r"connection-string|apikey|api-key|auth|header\.|cookie|\bkey$|\.key$",
    re.IGNORECASE,
)
_URI_USER_INFO = re.compile(r"(?<=://)([^:/@?#]*):[^@]*@")
_URI_SECRET_PARAMETER = re.compile(
    r"([?&;](?:password|passwd|pwd|token|secret|key|sig|signature|credential|auth)[^=&;]*=)[^&;#]*", re.IGNORECASE)


def redacted_text(value: str) -> str:
    """``value`` with a URI's password (``user:password@host``, whatever characters the password
    holds) and secret-named query parameters (``?password=...``) replaced by ``***``."""
    return _URI_SECRET_PARAMETER.sub(r"\1***", _URI_USER_INFO.sub(r"\1:***@", value))


def redacted_properties(properties: dict[str, str]) -> dict[str, str]:
    """Catalog or FileIO properties safe to show an operator (a log line, an error): values of keys
    that may name a secret are replaced by ``***``, URI passwords and secret parameters too."""
    return {key: "***" if _SECRET_KEY.search(key) else redacted_text(value) for key, value in properties.items()}


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
    Credentials belong in ``${ENV}`` references. A recorded lake (the manifest's ``config``, read
    by the lake's consumers) is only its catalog's type and name and the warehouse: no host, user,
    endpoint, key or property of any kind."""

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

    @model_serializer
    def _recorded(self) -> dict[str, Any]:
        catalog = {key: self.catalog[key] for key in ("type", "name") if key in self.catalog}
        return {"catalog": catalog, "warehouse": redacted_text(self.warehouse)}


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
