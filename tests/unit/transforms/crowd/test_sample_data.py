"""The built-in sample crowd data generator: its model, its bounds, its reproducibility."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from transforms.crowd.sample_data import (
    generate_sample_crowd_data,
    read_sample_crowd_data,
    write_sample_crowd_data,
)


@pytest.fixture(scope="module")
def data():
    return generate_sample_crowd_data(
        objects=3000, claims_per_object=20, sources=300, seed=3, outlier_fraction=0.15
    )


def with_sources(data) -> pd.DataFrame:
    claims = data.claims.merge(data.sources, on="source_id", how="left", validate="many_to_one")
    return claims.merge(data.truth, on="object_id", how="left", validate="many_to_one")


def test_same_seed_same_data_other_seed_other_data() -> None:
    first = generate_sample_crowd_data(objects=200, claims_per_object=8, sources=50, seed=9)
    second = generate_sample_crowd_data(objects=200, claims_per_object=8, sources=50, seed=9)
    for name in ("claims", "truth", "true_densities", "sources"):
        pd.testing.assert_frame_equal(getattr(first, name), getattr(second, name))
    other = generate_sample_crowd_data(objects=200, claims_per_object=8, sources=50, seed=10)
    assert not np.array_equal(first.claims["value"].to_numpy(), other.claims["value"].to_numpy())


def test_columns_and_types(data) -> None:
    assert list(data.claims.columns) == ["object_id", "source_id", "value"]
    assert data.claims["object_id"].dtype == np.int64
    assert data.claims["value"].dtype == np.float64
    assert all(isinstance(source, str) for source in data.claims["source_id"].head(100))
    assert list(data.truth.columns) == ["object_id", "truth"]
    assert set(data.sources["kind"]) == {"reliable", "noisy", "outlier"}


def test_claims_per_object_from_distinct_sources(data) -> None:
    per_object = data.claims.groupby("object_id")["source_id"]
    assert (per_object.size() == 20).all()
    assert (per_object.nunique() == 20).all()
    assert len(per_object.size()) == 3000
    assert set(data.claims["source_id"]) <= set(data.sources["source_id"])
    ordered = data.claims.sort_values(["object_id", "source_id"], kind="mergesort", ignore_index=True)
    pd.testing.assert_frame_equal(ordered, data.claims)


def test_distinct_sources_when_almost_every_source_is_needed() -> None:
    dense = generate_sample_crowd_data(objects=400, claims_per_object=11, sources=12, seed=1)
    assert (dense.claims.groupby("object_id")["source_id"].nunique() == 11).all()
    every = generate_sample_crowd_data(objects=30, claims_per_object=5, sources=5, seed=1)
    assert (every.claims.groupby("object_id")["source_id"].nunique() == 5).all()
    with pytest.raises(ValueError):
        generate_sample_crowd_data(objects=3, claims_per_object=6, sources=5)


def test_sources_are_picked_uniformly(data) -> None:
    load = data.claims["source_id"].value_counts().reindex(data.sources["source_id"], fill_value=0).to_numpy()
    expected = np.full(300, 3000 * 20 / 300)
    # each object draws 20 of 300 without replacement: per-source counts are nearly binomial
    assert stats.chisquare(load, expected).pvalue > 0.001


def test_values_and_truths_lie_in_the_public_range(data) -> None:
    low, high = data.public_range
    assert (low, high) == (0.0, 100.0)
    assert data.claims["value"].between(low, high).all()
    assert data.truth["truth"].between(low, high).all()
    shifted = generate_sample_crowd_data(
        objects=300, claims_per_object=10, sources=40, public_range=(-5.0, 3.0)
    )
    assert shifted.claims["value"].between(-5.0, 3.0).all()
    assert shifted.truth["truth"].between(-5.0, 3.0).all()


def test_outlier_claims_are_farther_from_the_truth_than_reliable_ones(data) -> None:
    claims = with_sources(data)
    deviation = (claims["value"] - claims["truth"]).abs().groupby(claims["kind"]).mean()
    assert deviation["outlier"] > 3.0 * deviation["noisy"]
    assert deviation["noisy"] > 2.0 * deviation["reliable"]
    assert deviation["reliable"] < 5.0


def test_outlier_share_and_noise_scales(data) -> None:
    kinds = data.sources["kind"].value_counts()
    assert kinds["outlier"] == 45
    reliable = data.sources.loc[data.sources["kind"] == "reliable", "noise_scale"]
    noisy = data.sources.loc[data.sources["kind"] == "noisy", "noise_scale"]
    assert reliable.max() <= 3.0 < noisy.min()
    assert data.sources.loc[data.sources["kind"] == "outlier", "noise_scale"].isna().all()
    scales = data.sources["noise_scale"].dropna().to_numpy()
    # log-uniform over [0.5, 25]: log-scales uniform
    assert (
        stats.kstest(np.log(scales), "uniform", args=(np.log(0.5), np.log(25.0) - np.log(0.5))).pvalue > 0.001
    )


def test_true_densities_are_one_or_two_component_mixtures_around_the_truth(data) -> None:
    densities = data.true_densities
    components = densities.groupby("object_id").size()
    assert set(components.unique()) <= {1, 2}
    assert (components == 2).sum() > 0 and (components == 1).sum() > 0
    np.testing.assert_allclose(densities.groupby("object_id")["weight"].sum().to_numpy(), 1.0)
    main = densities[densities["component"] == 0].set_index("object_id")
    np.testing.assert_array_equal(
        main["mean"].to_numpy(), data.truth.set_index("object_id")["truth"].to_numpy()
    )
    assert (main["weight"] >= 0.65 - 1e-12).all()
    mixture = data.true_density(int(components.index[components == 2][0]))
    assert mixture.number_of_components == 2
    with pytest.raises(KeyError):
        data.true_density(10**9)


def test_non_outlier_claims_follow_the_true_density_plus_source_noise(data) -> None:
    claims = with_sources(data)
    single = data.true_densities.groupby("object_id").size()
    single_objects = single.index[single == 1]
    spread = data.true_densities.set_index("object_id")["scale"]
    honest = claims[(claims["kind"] != "outlier") & claims["object_id"].isin(single_objects)]
    honest = honest[honest["noise_scale"] < 5.0]  # far from the range bounds: no clipping
    total_scale = np.sqrt(
        spread.loc[honest["object_id"]].to_numpy() ** 2 + honest["noise_scale"].to_numpy() ** 2
    )
    standardized = (honest["value"].to_numpy() - honest["truth"].to_numpy()) / total_scale
    assert stats.kstest(standardized, "norm").pvalue > 0.001
    assert stats.kstest(standardized / 1.3, "norm").pvalue < 1e-6


def test_write_and_read_back(tmp_path, data) -> None:
    paths = write_sample_crowd_data(data, tmp_path / "sample")
    assert {"claims_csv", "claims_parquet", "truth", "true_densities", "sources", "metadata"} <= set(paths)
    from_csv = pd.read_csv(paths["claims_csv"])
    np.testing.assert_array_equal(from_csv["value"].to_numpy(), data.claims["value"].to_numpy())
    assert from_csv["source_id"].tolist() == data.claims["source_id"].tolist()
    again = read_sample_crowd_data(tmp_path / "sample")
    pd.testing.assert_frame_equal(again.claims, data.claims)
    pd.testing.assert_frame_equal(again.truth, data.truth)
    pd.testing.assert_frame_equal(again.true_densities, data.true_densities)
    pd.testing.assert_frame_equal(again.sources, data.sources)
    assert again.public_range == data.public_range
    only_csv = write_sample_crowd_data(data, tmp_path / "csv_only", claim_formats=("csv",))
    assert "claims_parquet" not in only_csv and not (tmp_path / "csv_only" / "claims.parquet").exists()


def test_a_million_claims_generate_quickly() -> None:
    million = generate_sample_crowd_data(objects=50_000, claims_per_object=20, sources=5_000, seed=1)
    assert len(million.claims) == 1_000_000
    assert million.claims["value"].between(*million.public_range).all()
