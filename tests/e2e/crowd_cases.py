"""Whole crowd releases run on a given engine, for the engine conformance and cluster tests.

Module-level functions so a child process (the standalone-cluster driver) can import them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipelines.crowd.pipeline import run_crowd_release
from pipelines.platform.internal import OperatorRecords
from pipelines.platform.lake import Lake
from schemas.crowd.config import CrowdConfig
from tests.lake_setup import prepare_for
from transforms.crowd.sample_data import generate_sample_crowd_data

CONFORMANCE_SECRET_HEX = "c0ffee" * 10 + "c0ffee00"[:4]


def conformance_claims() -> pd.DataFrame:
    """Generated claims plus the awkward cases: small objects, identical claims, string ids."""
    data = generate_sample_crowd_data(objects=120, claims_per_object=12, sources=60, seed=11)
    claims = data.claims.copy()
    claims["object_id"] = "object-" + claims["object_id"].astype(str)
    extra = pd.DataFrame(
        {
            "object_id": ["tiny-a", "tiny-a", "same", "same", "same", "same", "same"],
            "source_id": ["s001", "s002", "s001", "s002", "s003", "s004", "s005"],
            "value": [10.0, 11.0, 42.0, 42.0, 42.0, 42.0, 42.0],
        }
    )
    return pd.concat([claims, extra], ignore_index=True)


def conformance_config(input_path: Path, lake: Path, **privacy: Any) -> dict[str, Any]:
    return {
        "kind": "crowd",
        "dataset": "conformance",
        "lake": str(lake),
        "input": {"path": str(input_path), "format": "csv"},
        "privacy": {"k": 4, "gamma": 4.0, "epsilon0": 4.0, "delta": 0.01, "weight_ratio_cap": 4.0,
                    "value_range": [0.0, 100.0], **privacy},
        "synthesis": {"mechanism": "priscrowd", "claims_per_object": 6, "precision": 0.01, "bandwidth": {"method": "fixed", "value": 2.0}},
    }


def histogram_config(input_path: Path, lake: Path, **privacy: Any) -> dict[str, Any]:
    """The conformance release with the default mechanism (``histogram``, issue 29)."""
    return {
        "kind": "crowd", "dataset": "conformance", "lake": str(lake),
        "input": {"path": str(input_path), "format": "csv"},
        "privacy": {"epsilon": 2.0, "value_range": [0.0, 100.0], "min_claims_per_object": 4, **privacy},
        "synthesis": {"claims_per_object": 20, "precision": 0.01},
    }


def engine_for(name: str, spark_session: Any) -> Any:
    """A local, Beam or Spark engine (Spark on the test session's embedded session)."""
    from pipelines.engines import make_engine

    return make_engine("spark", spark_session=spark_session) if name == "spark" else make_engine(name)


def release_on_engine(engine: Any, config: dict[str, Any], release_id: str) -> dict[str, Any]:
    """Run the release on ``engine`` and return its exported rows and the manifest's key figures."""
    os.environ["PRIVLAKE_TEST_SECRET"] = CONFORMANCE_SECRET_HEX
    prepare_for(config)
    outcome = run_crowd_release(CrowdConfig.model_validate(config), engine=engine, release_id=release_id)
    rows = Lake(config["lake"]).read_release(release_id).to_pandas()
    rows = rows.sort_values(["object_id", "claim_index"], ignore_index=True)
    manifest = outcome.manifest
    internal = OperatorRecords(Lake(config["lake"])).read(release_id)[-1]["record"]
    figures = {key: manifest[key] for key in ("rows", "objects_released", "objects_suppressed", "epsilon", "delta")}
    figures.update({key: internal.get(key) for key in ("suppressed_reasons", "candidate_attempts", "fallback_claims",
                                                       "global_weights", "input_rows_after_contribution_bound")})
    figures["mechanism"] = manifest["mechanism"]
    return {"rows": rows, "figures": figures, "engine": manifest["engine"]}


def assert_same_release(first: dict[str, Any], second: dict[str, Any]) -> None:
    pd.testing.assert_frame_equal(first["rows"], second["rows"], check_exact=True)
    assert np.array_equal(first["rows"]["value"].to_numpy(), second["rows"]["value"].to_numpy())
    assert first["figures"] == second["figures"]
