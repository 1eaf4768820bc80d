"""The feature spec (``schemas/filter/features.py``) refuses inconsistent features."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.filter.features import FeatureSpec
from tests.unit.transforms.filter.test_features import AGE, COLOUR


def test_the_spec_refuses_inconsistent_features() -> None:
    bad = [
        [{"type": "numeric", "name": "x"}],
        [{"type": "numeric", "name": "x", "center": 1.0}],
        [{"type": "numeric", "name": "x", "bounds": [3, 1]}],
        [{"type": "numeric", "name": "x", "center": 0.0, "scale": 0.0}],
        [{"type": "numeric", "name": "x", "bounds": [0.2, 0.8], "integer": True}],
        [{"type": "categorical", "name": "c", "categories": ["a", "a"]}],
        [AGE, {**COLOUR, "name": "age"}],
        [{**AGE, "unknown_key": 1}],
    ]
    for features in bad:
        with pytest.raises(ValidationError):
            FeatureSpec.model_validate({"features": features})
