"""The configuration contract of an ldp release (``kind: ldp``) and of its report simulator.

An ldp release reads reports that users privatized on their devices, each with a mechanism of
their own choosing (free-will privacy, ElSalamouny & Palamidessi), and publishes the estimated
distribution of the secret. The reports table names each user's mechanism by its name in a
mechanism catalog (a JSON file of ``{"name": spec}``, the specs of ``transforms.ldp.mechanisms``).

One YAML file can hold both the release (``input``, ``estimator``) and, for demos, tests and
benchmarks, the ``simulation`` that writes the reports and the catalog from raw secrets through
the clients' own code path (``privlake simulate-ldp``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from schemas.base import EngineSettings, LakeSetting, StrictModel
from schemas.sources import SourceSpec

ESTIMATORS = ("gibu", "inv_m", "ibu_m", "rap_m")
MAX_SECRETS = 4096
"""The most secrets (values or grid cells) a release estimates: the estimators hold secrets x
reports matrices (issue 14: an absurd size fails on load, naming its key)."""


class ReportColumns(StrictModel):
    """The reports file's column names for each canonical column."""

    user_id: str = "user_id"
    mechanism: str = "mechanism"
    report: str = "report"


class LdpInput(SourceSpec):
    """Where the reports are (``schemas/sources.py``): ``path`` — one file, a folder of files (hive
    partition folders such as ``day=2026-12-01/`` become columns ``columns`` may name) or a glob —
    or an Iceberg ``table`` of ``lake`` at ``snapshot_id`` with ``row_filter``; read where they live,
    by the engine. ``format`` is inferred from the files' suffixes; a file without a known suffix is
    read as Parquet (the format an ldp input always defaulted to)."""

    catalog: Path = Field(description="the mechanism catalog: a JSON mapping of mechanism name to spec")
    columns: ReportColumns = ReportColumns()

    def file_format(self, name: str) -> Literal["csv", "parquet"]:
        """The declared format, else the suffix's, else Parquet."""
        if self.format is not None:
            return self.format
        return "csv" if name.lower().endswith(".csv") else "parquet"


class SecretLayout(StrictModel):
    """How the secrets' indices ``0..k-1`` are labelled in the release.

    ``line``: the value ``first_value + index`` (column ``value``), ``values`` of them. ``grid``:
    the cell ``index = row * columns + col`` (columns ``row`` and ``col``). The size, when given,
    must match the catalog's mechanisms; the simulator needs it.
    """

    layout: Literal["line", "grid"] = "line"
    first_value: int = Field(0, ge=-(2**62), le=2**62)
    values: int | None = Field(None, ge=2, le=MAX_SECRETS, description=f"at most {MAX_SECRETS}")
    rows: int | None = Field(None, ge=1, le=MAX_SECRETS)
    columns: int | None = Field(None, ge=1, le=MAX_SECRETS, description=f"rows x columns at most {MAX_SECRETS}")
    cell_side: float = Field(
        1.0, gt=0, description="grid: a cell's side in the unit of distance (planar ε is per unit; EMD is in it)"
    )

    @model_validator(mode="after")
    def _grid_needs_shape(self) -> SecretLayout:
        if self.layout == "grid" and (self.rows is None or self.columns is None):
            raise ValueError("secrets.layout 'grid' needs secrets.rows and secrets.columns")
        if self.layout == "line" and (self.rows is not None or self.columns is not None):
            raise ValueError("secrets.rows and secrets.columns are for layout 'grid'")
        if self.layout == "grid" and self.values is not None:
            raise ValueError("secrets.values is for layout 'line' (a grid has rows x columns cells)")
        if self.layout == "grid" and self.size > MAX_SECRETS:  # type: ignore[operator]
            raise ValueError(f"secrets.rows x secrets.columns is {self.size}; at most {MAX_SECRETS} cells")
        return self

    @property
    def size(self) -> int | None:
        if self.layout == "grid":
            assert self.rows is not None and self.columns is not None
            return self.rows * self.columns
        return self.values


class EstimatorSettings(StrictModel):
    method: Literal["gibu", "inv_m", "ibu_m", "rap_m"] = Field(
        "gibu", description="GIBU (any mix), INV_M / IBU_M (one output alphabet), RAP_M (RAPPOR only)"
    )
    post_processing: Literal["projection", "truncate"] = Field(
        "projection", description="INV_M and RAP_M: projection onto the simplex or truncate-and-normalize"
    )
    tolerance: float = Field(
        1e-8, ge=0,
        description="IBU_M/GIBU: stop when an EM step changes θ by at most this (L1); far below the sampling "
        "error of any realistic n, and EM approaches zero-probability secrets only sublinearly below it",
    )
    max_iterations: int = Field(10_000, ge=1, le=1_000_000, description="IBU_M/GIBU: cap on EM steps; at most 10^6")
    max_vector_cells: int = Field(
        1 << 23, ge=1, le=1 << 31,
        description="GIBU on RAPPOR reports: the most distinct bit vectors times their bits the driver may hold "
        "(bounded by min(reports, mechanisms * 2^k) * k before they are collected; beyond it the release is "
        "refused: use rap_m); at most 2^31",
    )
    acceleration: Literal["squarem", "none"] = Field(
        "squarem", description="IBU_M/GIBU: SQUAREM extrapolation (same fixed point, far fewer steps) or plain EM"
    )


class LdpEvaluation(StrictModel):
    """Optional true distribution (e.g. written by the simulator), used only for the manifest's
    utility report: EMD, L1 and L2 of the estimate against it."""

    truth_path: Path | None = None


class SimulationSource(StrictModel):
    """The raw secrets: one integer column (layout ``line``) or two (``row``, ``col``; layout ``grid``)."""

    path: Path
    format: Literal["csv", "parquet"] = "csv"
    header: bool = True
    columns: list[str] = Field(min_length=1, max_length=2)


class SimulatedMechanisms(StrictModel):
    """A family of mechanisms of one type with ε spread evenly over a range (``count`` of them),
    or one mechanism (``count: 1`` takes the range's lower end)."""

    type: Literal["krr", "truncated_geometric", "planar_geometric", "rappor"]
    epsilon: tuple[float, float] = Field(description="[low, high] range of ε")
    count: int = Field(1, ge=1, le=1000, description="mechanisms in the family; at most 1000")
    share: float = Field(1.0, gt=0, description="relative share of the users given this family")

    @model_validator(mode="after")
    def _range(self) -> SimulatedMechanisms:
        low, high = self.epsilon
        if not (0 < low <= high):
            raise ValueError("epsilon must be a range [low, high] with 0 < low <= high")
        return self


class LdpSimulation(StrictModel):
    source: SimulationSource
    mechanisms: list[SimulatedMechanisms] = Field(min_length=1, max_length=100)
    truth_out: Path | None = Field(None, description="where to write the true distribution (Parquet)")


class LdpConfig(StrictModel):
    kind: Literal["ldp"]
    dataset: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.\-]+$", description="at most 100 characters (a generated release id is the dataset and 24 more)")
    lake: LakeSetting
    input: LdpInput
    secrets: SecretLayout = SecretLayout()
    estimator: EstimatorSettings = EstimatorSettings()
    engine: EngineSettings = EngineSettings()
    evaluation: LdpEvaluation = LdpEvaluation()
    simulation: LdpSimulation | None = None
