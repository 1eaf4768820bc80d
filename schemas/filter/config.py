"""The configuration contract of a filter release (``kind: filter``), validated on load.

Chen, Navidi, Rajagopal, "Generating private data with user customization": one shared VAE (trained
once by ``privlake train-encoder`` on the collector's training records, stored in the lake) and one
small linear latent filter per *choice* of a private label and a utility label, trained on the same
training records and applied to the records of the owners who made that choice.

Every parameter here is public. Labels are declared over public domains: a label is a column read
as text and mapped to a class by ``categories`` (the class is the text), by ``groups`` (named sets
of values), or, for a numeric column, by a public ``above`` threshold (two classes). Unknown keys
are refused everywhere.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from schemas.base import EngineSettings, LakeSetting, StrictModel, TableReading, refuse_budget_key
from schemas.sources import SourceSpec
from schemas.uniqueness import require_unique

NAME_PATTERN = r"^[A-Za-z0-9_.\-]+$"
# Upper bounds of the size parameters (issue 14: an absurd size fails on load, naming its key).
MAX_EPOCHS = 10_000
MAX_BATCH_SIZE = 1 << 20
MAX_LATENT_DIMENSION = 1024
MAX_HIDDEN_WIDTH = 8192
MAX_HIDDEN_LAYERS = 8
MAX_VAE_WEIGHTS = 1 << 26
"""The hidden layers' and latent's weights together (float32: 256 MiB), checked on load."""
MAX_TRAINING_RECORDS = 1_000_000_000
MAX_EVALUATION_RECORDS = 10_000_000
MAX_CHOICES = 256


MAX_TRAINING_READ = 100_000_000
"""The most training records ``training.max_records`` lets the driver hold."""


class FilterTableReading(TableReading):
    """A table file; ``columns`` names the columns of a CSV without a header row, in order;
    ``max_records``: the most records the driver reads (a larger file gives a keyed sample of this
    many, read in chunks)."""

    columns: list[str] | None = None
    max_records: int = Field(
        1_000_000, ge=1, le=MAX_TRAINING_READ,
        description="the most training records read on the driver (beyond, a keyed sample); at most 10^8",
    )

    @model_validator(mode="after")
    def _names_for_headerless_csv(self) -> FilterTableReading:
        if self.format == "csv" and not self.header and not self.columns:
            raise ValueError("a CSV without a header row needs `columns` (the column names, in order)")
        if self.columns is not None:
            require_unique(self.columns, "column", "is named twice")
        return self


class FilterTrainingInput(SourceSpec):
    """The collector's labelled training records (``schemas/sources.py``): ``path`` — one file, a
    folder of files (hive partition folders become columns) or a glob — or an Iceberg ``table`` of
    ``lake`` at ``snapshot_id`` with ``row_filter``, read as a table file is read (``header``;
    ``columns`` names the columns of a CSV without a header row, in order; ``recode``). ``format``
    is inferred from the files' suffixes; a file without a known suffix is CSV. The driver reads at
    most ``max_records`` of them: a larger input gives a keyed sample of that many (the stream
    ``filter-training-records``), read fragment by fragment (a single file in chunks), so the
    driver holds one fragment (or chunk) and the sample."""

    header: bool = True
    recode: dict[str, dict[str, str]] = {}
    columns: list[str] | None = None
    max_records: int = Field(
        1_000_000, ge=1, le=MAX_TRAINING_READ,
        description="the most training records read on the driver (beyond, a keyed sample); at most 10^8",
    )

    @model_validator(mode="after")
    def _names_for_headerless_csv(self) -> FilterTrainingInput:
        if self.format in (None, "csv") and not self.header and not self.columns:
            raise ValueError("a CSV without a header row needs `columns` (the column names, in order)")
        if self.columns is not None:
            require_unique(self.columns, "column", "is named twice")
        return self


class FilterInput(SourceSpec):
    """The records to privatize (``schemas/sources.py``): ``path`` — one file, a folder of files (hive
    partition folders become columns) or a glob — or an Iceberg ``table`` of ``lake`` at
    ``snapshot_id`` with ``row_filter``; read where they live, by the engine, as a table file is
    read (``header``; ``columns`` names the columns of a CSV without a header row, in order;
    ``recode``). ``format`` is inferred from the files' suffixes; a file without a known suffix is
    CSV. ``choice_column`` holds each owner's choice by name (without it, every record takes
    ``FilterConfig.default_choice``)."""

    header: bool = True
    recode: dict[str, dict[str, str]] = {}
    columns: list[str] | None = None
    choice_column: str | None = None

    @model_validator(mode="after")
    def _names_for_headerless_csv(self) -> FilterInput:
        if self.format in (None, "csv") and not self.header and not self.columns:
            raise ValueError("a CSV without a header row needs `columns` (the column names, in order)")
        if self.columns is not None:
            require_unique(self.columns, "column", "is named twice")
        return self


class LabelDefinition(StrictModel):
    """A label over a public domain, read from ``column`` (exactly one of the three forms).

    * ``categories``: the column's text is the class; the listed values are the classes, in order.
    * ``groups``: named classes, each a list of the column's values (as text); a value in no group
      is an error.
    * ``above``: a numeric column; class ``"<=T"`` (code 0) or ``">T"`` (code 1) for ``T = above``.
    """

    column: str = Field(min_length=1)
    categories: list[str] | None = None
    groups: dict[str, list[str]] | None = None
    above: float | None = None

    @model_validator(mode="after")
    def _one_form(self) -> LabelDefinition:
        given = [form for form in (self.categories, self.groups, self.above) if form is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of categories, groups and above")
        if self.categories is not None:
            if len(self.categories) < 2:
                raise ValueError("a label needs at least two categories")
            require_unique(self.categories, "category", "is listed twice")
        if self.groups is not None:
            if len(self.groups) < 2:
                raise ValueError("a label needs at least two groups")
            values = [value for members in self.groups.values() for value in members]
            if any(not members for members in self.groups.values()):
                raise ValueError("every group needs at least one value")
            require_unique(values, "value", "is in two groups")
        if self.above is not None and not math.isfinite(self.above):
            raise ValueError("above must be a finite number")
        return self

    @property
    def classes(self) -> list[str]:
        """The class names, in code order."""
        if self.categories is not None:
            return list(self.categories)
        if self.groups is not None:
            return list(self.groups)
        return [f"<={self.above:g}", f">{self.above:g}"]


class FilterChoice(StrictModel):
    """One choice: the label kept private, the label kept useful, and the filter's settings:
    the distortion budget ``b`` (nats of ``D(q_f ‖ q_e)``), the utility weight ``β`` and the cap
    on the label sensitivity that bounds the filter's Rényi ε (``null``: no cap, ε is what the
    training gives)."""

    name: str = Field(min_length=1, pattern=NAME_PATTERN)
    private: str = Field(min_length=1)
    utility: str = Field(min_length=1)
    budget: float = Field(gt=0, description="distortion budget b (nats)")
    utility_weight: float = Field(1.0, ge=0, description="beta")
    max_sensitivity: float | None = Field(1.0, gt=0, le=100.0, description="cap on the label sensitivity s (at most 100: a Gaussian step of sensitivity/sigma 100 already states epsilon in the thousands; larger caps overflow the accountant)")

    @model_validator(mode="after")
    def _two_labels(self) -> FilterChoice:
        if self.private == self.utility:
            raise ValueError("the private and the utility label must differ")
        return self


class EncoderTraining(StrictModel):
    """Adam settings of the VAE (``transforms.filter.vae.VaeTrainingConfig``)."""

    epochs: int = Field(40, ge=1, le=MAX_EPOCHS)
    batch_size: int = Field(256, ge=1, le=MAX_BATCH_SIZE)
    learning_rate: float = Field(2e-3, gt=0)
    robustness_weight: float = Field(1.0, ge=0, description="lambda of the decoder-robustness term")
    robustness_max_sigma: float = Field(0.5, ge=0, description="largest latent perturbation in training")


class EncoderSettings(StrictModel):
    """Which VAE to use (``latest``: the newest one in the lake for this dataset and feature spec;
    or an artifact id) and, for ``train-encoder``, its shape and training."""

    artifact: str = Field("latest", pattern=r"^(latest|[0-9a-f]{64})$")
    latent_dimension: int = Field(16, ge=1, le=MAX_LATENT_DIMENSION)
    hidden_widths: list[int] = Field(default_factory=lambda: [128, 128], max_length=MAX_HIDDEN_LAYERS,
                                     description=f"at most {MAX_HIDDEN_LAYERS} layers of at most {MAX_HIDDEN_WIDTH}")
    numeric_noise_scale: float = Field(0.03, gt=0)
    training: EncoderTraining = EncoderTraining()

    @field_validator("hidden_widths")
    @classmethod
    def _positive(cls, widths: list[int]) -> list[int]:
        if any(width < 1 for width in widths):
            raise ValueError("hidden widths must be positive")
        if any(width > MAX_HIDDEN_WIDTH for width in widths):
            raise ValueError(f"hidden widths must be at most {MAX_HIDDEN_WIDTH}")
        return widths

    @model_validator(mode="after")
    def _weights_fit(self) -> EncoderSettings:
        layers = [*self.hidden_widths, self.latent_dimension]
        weights = sum(left * right for left, right in zip(layers, layers[1:], strict=False))
        if weights > MAX_VAE_WEIGHTS:
            raise ValueError(f"the VAE's hidden and latent layers would hold {weights} weights; at most {MAX_VAE_WEIGHTS}")
        return self


class FilterTraining(StrictModel):
    """Settings shared by every choice's min-max training (``FilterTrainingConfig``)."""

    epochs: int = Field(15, ge=1, le=MAX_EPOCHS)
    batch_size: int = Field(512, ge=1, le=MAX_BATCH_SIZE)
    privacy_objective: Literal["adversary_loss", "prior_matching"] = "adversary_loss"
    refit_every: int = Field(50, ge=1, le=1_000_000)
    max_records: int | None = Field(
        None, ge=2, le=MAX_TRAINING_RECORDS,
        description="train each filter on at most this many training records (keyed sample); at most 10^9",
    )


class FilterSetSettings(StrictModel):
    """Where the choices' filters come from: ``train`` (trained by the release itself on the training
    records, keyed by the release id), or a filter set stored by ``privlake train-filters``:
    ``latest`` (the newest set in the lake trained for this dataset, this encoder and exactly these
    choices, labels and filter-training settings) or its artifact id. A release with stored filters
    reads no training record (but for its evaluation) and never imports torch."""

    artifact: str = Field("train", pattern=r"^(train|latest|[0-9a-f]{64})$")


class FilterPrivacy(StrictModel):
    delta: float = Field(1e-5, gt=0, lt=1, description="the delta of the converted (epsilon, delta)")
    orders: list[float] = Field(
        default_factory=lambda: [1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 16.0, 32.0, 64.0],
        min_length=1,
        max_length=256,
        description="Renyi orders alpha > 1 reported in the manifest (at most 256)",
    )
    conversion: Literal["balle2020", "mironov2017"] = "balle2020"

    _no_budget = model_validator(mode="before")(refuse_budget_key)

    @field_validator("orders")
    @classmethod
    def _orders(cls, orders: list[float]) -> list[float]:
        if any(not (math.isfinite(order) and order > 1) for order in orders):
            raise ValueError("every Renyi order must be a finite number above 1")
        return orders


class FilterEvaluation(StrictModel):
    """The manifest's evaluation: adversaries and utility classifiers trained afresh on a keyed
    sample of the release (and, for comparison, on the raw records, on the VAE round trip without a
    filter and on the Gaussian baseline at the same distortion), scored on held-out records.
    Computed from raw labels: an internal report, not privacy-protected."""

    enabled: bool = True
    classifiers: list[Literal["logistic", "gradient_boosting"]] = Field(
        default_factory=lambda: ["logistic", "gradient_boosting"], min_length=1
    )
    max_records: int = Field(20_000, ge=20, le=MAX_EVALUATION_RECORDS, description="at most 10^7")
    test_fraction: float = Field(0.3, gt=0, lt=1)


class FilterConfig(StrictModel):
    kind: Literal["filter"]
    dataset: str = Field(min_length=1, max_length=100, pattern=NAME_PATTERN, description="at most 100 characters (a generated release id is the dataset and 24 more)")
    lake: LakeSetting
    training: FilterTrainingInput = Field(description="the collector's labelled records: VAE and filters; a file, "
                                          "a folder, a glob or an Iceberg table, as input")
    input: FilterInput = Field(description="the records to privatize")
    feature_spec: Path = Field(description="YAML file with `features:` (schemas/filter/features.py)")
    labels: dict[str, LabelDefinition] = Field(min_length=2, max_length=MAX_CHOICES)
    choices: list[FilterChoice] = Field(min_length=1, max_length=MAX_CHOICES,
                                        description=f"one filter trained per choice; at most {MAX_CHOICES}")
    default_choice: str | None = None
    encoder: EncoderSettings = EncoderSettings()
    filter_training: FilterTraining = FilterTraining()
    filters: FilterSetSettings = FilterSetSettings()
    privacy: FilterPrivacy = FilterPrivacy()
    evaluation: FilterEvaluation = FilterEvaluation()
    engine: EngineSettings = EngineSettings()

    @model_validator(mode="after")
    def _choices(self) -> FilterConfig:
        require_unique((choice.name for choice in self.choices), "choice name")
        for choice in self.choices:
            for role, label in (("private", choice.private), ("utility", choice.utility)):
                if label not in self.labels:
                    raise ValueError(f"choice {choice.name!r}: its {role} label {label!r} is not in labels")
        names = [choice.name for choice in self.choices]
        if self.input.choice_column is None:
            if self.default_choice is None and len(self.choices) > 1:
                raise ValueError("with several choices, give input.choice_column or default_choice")
        if self.default_choice is not None and self.default_choice not in names:
            raise ValueError(f"default_choice {self.default_choice!r} is not a choice's name")
        return self

    @property
    def choice_names(self) -> list[str]:
        return [choice.name for choice in self.choices]

    def choice(self, name: str) -> FilterChoice:
        return next(choice for choice in self.choices if choice.name == name)

    @property
    def fallback_choice(self) -> str | None:
        """The choice of every record when there is no choice column."""
        if self.input.choice_column is not None:
            return None
        return self.default_choice or self.choices[0].name
