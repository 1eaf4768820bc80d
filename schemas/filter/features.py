"""The feature specification of a filter release: how records become the VAE's feature matrix.

Issue 5, step 1 (Chen, Navidi, Rajagopal, "Generating private data with user customization").
Every parameter is public (a codebook, a documented range), never computed from the data, so the
feature matrix of a record does not depend on the other records:

* a numeric feature is scaled by its public ``bounds: [low, high]`` to ``[0, 1]``, or, when
  ``center`` and ``scale`` are given, to ``(x − center) / scale``; on decoding it is unscaled and
  clipped to the bounds (when given) and rounded when ``integer: true``. A value outside the bounds
  is an error (``out_of_bounds: error``) or is clipped and counted (``out_of_bounds: clip``);
* a categorical feature is one-hot over its public ``categories`` (in list order); on decoding the
  category with the largest score wins.

Labels (the private and the utility label) are not features: they live in the release's config.
Unknown keys are refused everywhere (``extra="forbid"``).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from schemas.base import StrictModel
from schemas.uniqueness import require_unique


class NumericFeature(StrictModel):
    """A numeric feature with public ``bounds``, or a public ``center`` and ``scale``, or both
    (then ``center``/``scale`` scale the value and ``bounds`` validate and clip it)."""

    type: Literal["numeric"]
    name: str = Field(min_length=1)
    bounds: tuple[float, float] | None = None
    center: float | None = None
    scale: float | None = Field(None, gt=0)
    integer: bool = False
    out_of_bounds: Literal["error", "clip"] = "error"

    @model_validator(mode="after")
    def _check_scaling(self) -> NumericFeature:
        if (self.center is None) != (self.scale is None):
            raise ValueError("give both center and scale, or neither")
        if self.bounds is None and self.center is None:
            raise ValueError("a numeric feature needs public bounds or a public center and scale")
        if self.bounds is not None:
            low, high = self.bounds
            if not (math.isfinite(low) and math.isfinite(high)):
                raise ValueError("bounds must be finite numbers")
            if not low < high:
                raise ValueError(f"bounds must satisfy low < high (got [{low}, {high}])")
            if self.integer and math.ceil(low) > math.floor(high):
                raise ValueError(f"integer feature: the bounds [{low}, {high}] contain no integer")
        if self.center is not None and not math.isfinite(self.center):
            raise ValueError("center must be a finite number")
        if self.scale is not None and not math.isfinite(self.scale):
            raise ValueError("scale must be a finite number")
        return self

    @property
    def offset_and_width(self) -> tuple[float, float]:
        """``(c, s)`` such that the scaled value is ``(x − c) / s``."""
        if self.center is not None and self.scale is not None:
            return float(self.center), float(self.scale)
        low, high = self.bounds  # type: ignore[misc]
        return float(low), float(high - low)

    @property
    def width(self) -> int:
        return 1


class CategoricalFeature(StrictModel):
    """A categorical feature, one-hot over exactly the listed categories (columns in list order)."""

    type: Literal["categorical"]
    name: str = Field(min_length=1)
    categories: list[str] = Field(min_length=1)

    @field_validator("categories")
    @classmethod
    def _unique_categories(cls, categories: list[str]) -> list[str]:
        require_unique(categories, "category", "is listed twice")
        return categories

    @property
    def width(self) -> int:
        return len(self.categories)


Feature = Annotated[NumericFeature | CategoricalFeature, Field(discriminator="type")]


class FeatureSpec(StrictModel):
    """The features of the VAE's input, in the order of the feature matrix's column blocks."""

    features: list[Feature] = Field(min_length=1)

    @field_validator("features")
    @classmethod
    def _unique_names(cls, features: list[Feature]) -> list[Feature]:
        require_unique((feature.name for feature in features), "feature name")
        return features

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(feature.name for feature in self.features)

    @property
    def width(self) -> int:
        """The number of columns of the feature matrix."""
        return sum(feature.width for feature in self.features)
