"""The engines' specification for the crowd release: the same config and fixed secret give the
identical exported release on local, Spark and Beam, equal to the in-memory reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipelines.crowd.pipeline import reference_settings
from pipelines.engines import make_engine
from schemas.crowd.config import CrowdConfig
from tests.e2e.crowd_cases import (
    CONFORMANCE_SECRET_HEX,
    assert_same_release,
    conformance_claims,
    conformance_config,
    engine_for,
    release_on_engine,
)
from transforms.crowd.release import synthesize_in_memory


@pytest.fixture(scope="module")
def claims_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("conformance") / "claims.csv"
    conformance_claims().to_csv(path, index=False)
    return path




@pytest.fixture(scope="module")
def releases(claims_file: Path, tmp_path_factory: pytest.TempPathFactory, spark_session) -> dict:
    results = {}
    for name in ("local", "spark", "beam"):
        lake = tmp_path_factory.mktemp(f"lake-{name}")
        with engine_for(name, spark_session) as engine:
            results[name] = release_on_engine(engine, conformance_config(claims_file, lake), "conformance-1")
    return results


@pytest.mark.spark
@pytest.mark.beam
@pytest.mark.parametrize("engine", ["spark", "beam"])
def test_engines_publish_the_identical_release(releases: dict, engine: str) -> None:
    assert releases[engine]["engine"] == engine
    assert_same_release(releases["local"], releases[engine])


@pytest.mark.spark
def test_release_equals_the_in_memory_reference(releases: dict) -> None:
    claims = conformance_claims()
    config = CrowdConfig.model_validate(conformance_config(Path("unused.csv"), Path("unused")))
    largest = int(claims.groupby("object_id").size().max())
    parameters, bandwidth, weights = reference_settings(config, largest)
    _, result = synthesize_in_memory(
        claims, parameters, secret=bytes.fromhex(CONFORMANCE_SECRET_HEX), release_id="conformance-1",
        bandwidth=bandwidth, weights=weights,
    )
    reference = result.claims.sort_values(["object_id", "claim_index"], ignore_index=True)
    released = releases["local"]["rows"]
    assert len(released) == len(reference) > 0
    assert released["object_id"].tolist() == reference["object_id"].tolist()
    assert np.array_equal(released["value"].to_numpy(), reference["value"].to_numpy())
    suppressed = set(result.objects.loc[result.objects["suppressed"], "object_id"])
    assert suppressed == {"tiny-a"}
    assert not set(released["object_id"]) & suppressed
    same = released.loc[released["object_id"] == "same", "value"]
    assert len(same) == 6 and ((same - 42.0).abs() < 4 * bandwidth).sum() >= 4


def test_a_different_secret_gives_a_different_release(claims_file: Path, tmp_path: Path, monkeypatch) -> None:
    with make_engine("local") as engine:
        first = release_on_engine(engine, conformance_config(claims_file, tmp_path / "a"), "conformance-1")
    import tests.e2e.crowd_cases as cases

    monkeypatch.setattr(cases, "CONFORMANCE_SECRET_HEX", "ab" * 32)
    with make_engine("local") as engine:
        second = cases.release_on_engine(engine, conformance_config(claims_file, tmp_path / "b"), "conformance-1")
    assert len(first["rows"]) > 0
    merged = first["rows"].merge(second["rows"], on=["object_id", "claim_index"], how="inner")
    assert (merged["value_x"] != merged["value_y"]).mean() > 0.9


@pytest.mark.spark
@pytest.mark.beam
def test_source_level_unit_with_contribution_bound_agrees_on_every_engine(
    claims_file: Path, tmp_path: Path, spark_session
) -> None:
    results = {}
    for name in ("local", "spark", "beam"):
        config = conformance_config(claims_file, tmp_path / name, unit="source", max_objects_per_source=5,
                                   epsilon0=6.0)
        with engine_for(name, spark_session) as engine:
            results[name] = release_on_engine(engine, config, "conformance-source")
    assert_same_release(results["local"], results["spark"])
    assert_same_release(results["local"], results["beam"])
    claims = pd.read_csv(claims_file)
    kept = results["local"]["figures"]["input_rows_after_contribution_bound"]
    per_source = claims.groupby("source_id").size()
    assert kept == int(np.minimum(per_source, 5).sum())
    assert results["local"]["figures"]["epsilon"] > 4.0


@pytest.mark.spark
def test_an_engine_serving_several_releases_drops_each_releases_side_values(
    releases: dict, claims_file: Path, tmp_path: Path, spark_session
) -> None:
    """One engine for a batch of releases (``privlake run A.yaml B.yaml``): after each release
    its broadcasts (which hold the release's secret) and caches are gone, and the engine still
    gives the identical release."""
    with engine_for("spark", spark_session) as engine:
        release_on_engine(engine, conformance_config(claims_file, tmp_path / "first"), "batch-1")
        assert engine._broadcasts == [] and engine._cached_frames == []
        again = release_on_engine(engine, conformance_config(claims_file, tmp_path / "second"), "conformance-1")
    assert_same_release(releases["local"], again)
