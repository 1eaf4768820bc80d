"""The schema file of a tabular release: every attribute's type and its public domain.

Issue 3, step 1. Domains come from this file, never from the data: the category list of a
categorical attribute, and the bounds and bin edges of a numeric one are public knowledge (a
codebook, a documented range), so the domain sizes, the encoding and every privacy parameter
derived from them do not depend on any record. A value outside its domain is a validation error
(``out_of_domain: error``) or, if the schema says so, clipped to the bounds and counted
(``out_of_domain: clip``).

Numeric attributes are modelled through their bins: ``bins: B`` cuts ``[low, high]`` into ``B``
equal-width bins; ``bin_edges`` lists the edges ``low = e_0 < e_1 < … < e_B = high`` explicitly.
Bins are ``[e_i, e_{i+1})`` with the last one closed at ``high``. The domain size of a numeric
attribute is its number of bins. ``integer: true`` means released values are integers (see
``transforms/tabular/encoding.py`` for the rule that draws a value within its bin).

Unknown keys are refused everywhere (``extra="forbid"``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from schemas.base import StrictModel
from schemas.uniqueness import require_unique


class CategoricalAttribute(StrictModel):
    """A categorical attribute: its values are exactly the listed categories (codes 0, 1, … in list order)."""

    type: Literal["categorical"]
    name: str = Field(min_length=1)
    categories: list[str] = Field(min_length=1)

    @field_validator("categories")
    @classmethod
    def _unique_categories(cls, categories: list[str]) -> list[str]:
        require_unique(categories, "category", "is listed twice")
        return categories

    @property
    def domain_size(self) -> int:
        return len(self.categories)


class NumericAttribute(StrictModel):
    """A numeric attribute with public ``bounds: [low, high]`` and either ``bins`` (equal width) or
    explicit ``bin_edges`` from ``low`` to ``high``."""

    type: Literal["numeric"]
    name: str = Field(min_length=1)
    bounds: tuple[float, float]
    bins: int | None = Field(None, ge=1)
    bin_edges: list[float] | None = None
    integer: bool = False
    out_of_domain: Literal["error", "clip"] = "error"

    @model_validator(mode="after")
    def _check_domain(self) -> NumericAttribute:
        low, high = self.bounds
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError("bounds must be finite numbers")
        if not low < high:
            raise ValueError(f"bounds must satisfy low < high (got [{low}, {high}])")
        if (self.bins is None) == (self.bin_edges is None):
            raise ValueError("give exactly one of bins (equal-width) and bin_edges")
        if self.bin_edges is not None:
            edges = self.bin_edges
            if len(edges) < 2:
                raise ValueError("bin_edges needs at least two edges (low and high)")
            if any(not math.isfinite(edge) for edge in edges):
                raise ValueError("bin_edges must be finite numbers")
            if any(later <= earlier for earlier, later in zip(edges, edges[1:], strict=False)):
                raise ValueError("bin_edges must be strictly increasing")
            if edges[0] != low or edges[-1] != high:
                raise ValueError(
                    f"bin_edges must start at the lower bound {low} and end at the upper bound {high} "
                    f"(got {edges[0]} ... {edges[-1]})"
                )
        if self.integer and math.ceil(low) > math.floor(high):
            raise ValueError(f"integer attribute: the bounds [{low}, {high}] contain no integer")
        return self

    @property
    def domain_size(self) -> int:
        return self.bins if self.bins is not None else len(self.bin_edges) - 1  # type: ignore[arg-type]


AttributeSpec = Annotated[CategoricalAttribute | NumericAttribute, Field(discriminator="type")]


class TabularSchema(StrictModel):
    """The attributes of a tabular release, in the order of the coded record matrix's columns."""

    attributes: list[AttributeSpec] = Field(min_length=1)

    @field_validator("attributes")
    @classmethod
    def _unique_names(cls, attributes: list[AttributeSpec]) -> list[AttributeSpec]:
        require_unique((attribute.name for attribute in attributes), "attribute name")
        return attributes

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(attribute.name for attribute in self.attributes)


def _describe_validation_error(error: ValidationError) -> str:
    parts = []
    for detail in error.errors():
        location = ".".join(str(step) for step in detail["loc"])
        message = detail["msg"]
        if detail["type"] == "string_type":
            message += " (quote values such as yes, no, on, off or numbers in YAML to keep them text)"
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)


def load_tabular_schema(path: str | Path) -> TabularSchema:
    """Read and validate a schema file (YAML); every problem is a ``ValueError`` naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"{path}: cannot read the schema file ({error.strerror or error})") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML ({error})") from None
    if not isinstance(document, dict):
        raise ValueError(f"{path}: a schema file must be a mapping with the key 'attributes'")
    try:
        return TabularSchema.model_validate(document)
    except ValidationError as error:
        raise ValueError(f"{path}: invalid schema: {_describe_validation_error(error)}") from None
