"""Fixtures for end-to-end tests: small claim files and config writers. ``write_config`` also
prepares the config's lake as an operator would (a test lake with a budget for the dataset:
``tests/lake_setup.py``); pass ``prepare=False`` for a lake left as it is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.lake_setup import prepare_for

TEST_SECRET_HEX = "5eed" * 16


@pytest.fixture(autouse=True)
def _fixed_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVLAKE_TEST_SECRET", TEST_SECRET_HEX)


def small_claims(objects: int = 40, claims_per_object: int = 8, seed: int = 3) -> pd.DataFrame:
    """Claims with a few reliable and a few noisy sources, integer object ids."""
    rng = np.random.default_rng(seed)
    sources = [f"worker{j:02d}" for j in range(20)]
    noise = np.where(np.arange(20) < 14, 1.0, 15.0)
    rows = []
    for obj in range(objects):
        truth = rng.uniform(0, 100)
        chosen = rng.choice(20, size=claims_per_object, replace=False)
        for source in chosen:
            rows.append((obj, sources[source], round(truth + rng.normal(0, noise[source]), 2)))
    return pd.DataFrame(rows, columns=["question", "worker", "answer"])


@pytest.fixture
def claims_csv(tmp_path: Path) -> Path:
    path = tmp_path / "claims.csv"
    small_claims().to_csv(path, index=False)
    return path


def write_config(directory: Path, input_path: Path, lake: Path, prepare: bool = True, **overrides: object) -> Path:
    """A valid crowd config; ``overrides`` replaces top-level sections or dotted keys."""
    config: dict = {
        "kind": "crowd",
        "dataset": "small",
        "lake": str(lake),
        "input": {
            "path": str(input_path),
            "format": "csv",
            "columns": {"object_id": "question", "source_id": "worker", "value": "answer"},
        },
        "privacy": {"k": 4, "gamma": 4.0, "epsilon0": 4.0, "delta": 0.01, "weight_ratio_cap": 4.0,
                    "value_range": [-100.0, 200.0]},
        "synthesis": {"mechanism": "priscrowd", "claims_per_object": 5, "precision": 0.01, "bandwidth": {"method": "fixed", "value": 3.0}},
        "engine": {"name": "local"},
    }
    for dotted, value in overrides.items():
        section = config
        parts = dotted.split("__")
        for part in parts[:-1]:
            section = section.setdefault(part, {})
        if value is None:
            section.pop(parts[-1], None)
        else:
            section[parts[-1]] = value
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    if prepare:
        prepare_for(config)
    return path
