"""The default crowd mechanism (``histogram``, issue 29) on every engine: the same config and fixed
secret give the identical exported release on local, Spark and Beam, equal to the in-memory
``synthesize_density_block`` of the transforms; with the source unit too (contribution bound first)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipelines.crowd.pipeline import density_parameters, guarantee_for
from pipelines.engines import make_engine
from schemas.crowd.config import CrowdConfig
from tests.e2e.crowd_cases import (
    CONFORMANCE_SECRET_HEX,
    assert_same_release,
    conformance_claims,
    engine_for,
    histogram_config,
    release_on_engine,
)
from transforms.crowd.claims_block import ClaimsBlock, in_canonical_order
from transforms.crowd.private_density import synthesize_density_block


@pytest.fixture(scope="module")
def claims_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("histogram") / "claims.csv"
    conformance_claims().to_csv(path, index=False)
    return path




@pytest.mark.spark
@pytest.mark.beam
@pytest.mark.parametrize("privacy", [{}, {"unit": "source", "max_objects_per_source": 5, "delta": 1e-6}],
                         ids=["claim", "source"])
def test_every_engine_publishes_the_identical_histogram_release(claims_file: Path, tmp_path: Path, spark_session,
                                                               privacy: dict) -> None:
    results = {}
    for name in ("local", "spark", "beam"):
        with engine_for(name, spark_session) as engine:
            results[name] = release_on_engine(engine, histogram_config(claims_file, tmp_path / name, **privacy),
                                              f"histogram-{len(privacy)}")
    assert_same_release(results["local"], results["spark"])
    assert_same_release(results["local"], results["beam"])
    figures = results["local"]["figures"]
    assert figures["mechanism"] == "histogram" and figures["candidate_attempts"] is None
    if not privacy:  # tiny-a; with the source unit the contribution bound leaves more objects below the floor
        assert figures["suppressed_reasons"] == {"fewer claims than min_claims_per_object": 1}
    assert 2.0 - 1e-4 <= figures["epsilon"] <= 2.0  # the source unit's composition: within the budget


def test_the_local_release_equals_the_in_memory_mechanism(claims_file: Path, tmp_path: Path) -> None:
    document = histogram_config(claims_file, tmp_path / "lake")
    with make_engine("local") as engine:
        released = release_on_engine(engine, document, "histogram-reference")["rows"]
    config = CrowdConfig.model_validate(document)
    claims = conformance_claims()
    claims["source_id"] = pd.factorize(claims["source_id"], sort=True)[0]
    block = ClaimsBlock.from_frame(in_canonical_order(claims))
    reference = synthesize_density_block(block, density_parameters(config, guarantee_for(config)),
                                         bytes.fromhex(CONFORMANCE_SECRET_HEX), "histogram-reference").claims
    reference = reference.sort_values(["object_id", "claim_index"], ignore_index=True)
    assert len(released) == len(reference) == 20 * (claims["object_id"].nunique() - 1)
    assert released["object_id"].tolist() == reference["object_id"].tolist()
    assert np.array_equal(released["value"].to_numpy(), reference["value"].to_numpy())
    values = released["value"].to_numpy()
    assert np.all((values >= 0) & (values <= 100)) and np.allclose(values * 100, np.round(values * 100))
