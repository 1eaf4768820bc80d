"""Test lakes, made the way an operator makes a lake: ``privlake init-lake LAKE --test`` and
``privlake budget set DATASET …`` (``pipelines/platform/policy.py``), in process.

Tests run releases with the fixed ``PRIVLAKE_TEST_SECRET``, which only a test lake accepts, and
every release needs its dataset's budget. ``TEST_BUDGET`` is large: tests that are about budgets set
their own."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from pipelines.platform.lake import Lake
from pipelines.platform.policy import LakePolicy

TEST_BUDGET = {"epsilon": 1e9, "delta": 0.5}


def prepare_lake(lake: Path | str, *datasets: str, epsilon: float = TEST_BUDGET["epsilon"],
                 delta: float = TEST_BUDGET["delta"], unit: str = "release") -> Path:
    """A test lake at ``lake`` with a budget for each of ``datasets`` (already set ones are kept)."""
    with Lake(lake) as opened:
        LakePolicy(opened).prepare_test_lake(datasets, epsilon, delta, unit)
    return Path(lake)


def prepare_for(config: Mapping[str, Any] | Path | str, **budget: Any) -> None:
    """Prepare the lake a config (a mapping, or a YAML file) releases into, for its dataset."""
    if not isinstance(config, Mapping):
        config = yaml.safe_load(Path(config).read_text(encoding="utf-8"))
    prepare_lake(config["lake"], config["dataset"], **budget)
