"""The tabular evaluation report (``pipelines/tabular/report.py``) on tiny inputs: its keys, marginal
distances, Cramér's V differences, exact-match rates and closest-seed distances recomputed by hand
(pandas crosstabs, SciPy's chi-square, Python sets), values in range, and the same report under the
same secret."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import chi2_contingency

from pipelines.tabular.report import evaluation_report
from schemas.tabular.config import TabularConfig
from schemas.tabular.schema import TabularSchema
from transforms.tabular.encoding import encode_records

SECRET = bytes(range(32))
SCHEMA = TabularSchema.model_validate(
    {
        "attributes": [
            {"type": "categorical", "name": "group", "categories": ["a", "b", "c"]},
            {"type": "numeric", "name": "age", "bounds": [0, 100], "bins": 4, "integer": True},
            {"type": "categorical", "name": "income", "categories": ["<=50K", ">50K"]},
        ]
    }
)


def records(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 3, rows)
    age = np.clip(30 * group + rng.integers(0, 40, rows), 0, 100)
    income = np.where(age + rng.normal(0, 15, rows) > 50, ">50K", "<=50K")
    return pd.DataFrame({"group": np.array(["a", "b", "c"])[group].astype(object), "age": age,
                         "income": income.astype(object)})


def config(tmp_path: Path, holdout: pd.DataFrame, **evaluation: object) -> TabularConfig:
    path = tmp_path / "holdout.csv"
    holdout.to_csv(path, index=False)
    return TabularConfig.model_validate(
        {
            "kind": "tabular",
            "dataset": "tiny",
            "lake": str(tmp_path / "lake"),
            "input": {"path": str(tmp_path / "input.csv"), "schema": str(tmp_path / "schema.yaml")},
            "privacy": {"k": 3, "gamma": 2.0, "epsilon": 1.0, "delta": 1e-3},
            "evaluation": {"holdout": {"path": str(path)}, **evaluation},
        }
    )


def tvd(real: np.ndarray, synthetic: np.ndarray, attributes: tuple[int, ...]) -> float:
    first = Counter(tuple(row) for row in real[:, attributes].tolist())
    second = Counter(tuple(row) for row in synthetic[:, attributes].tolist())
    return 0.5 * sum(abs(first[key] / len(real) - second[key] / len(synthetic)) for key in set(first) | set(second))


def cramers_v(codes: np.ndarray, first: int, second: int) -> float:
    table = pd.crosstab(codes[:, first], codes[:, second]).to_numpy()
    if min(table.shape) < 2:
        return 0.0
    chi_square = chi2_contingency(table, correction=False)[0]
    return math.sqrt(chi_square / (table.sum() * (min(table.shape) - 1)))


def closest_distances(released: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    return (released[:, None, :] != seeds[None, :, :]).sum(axis=2).min(axis=1)


def test_report_values_recomputed_by_hand(tmp_path: Path) -> None:
    holdout, released, training, seeds = records(30, 1), records(25, 2), records(40, 3), records(20, 4)
    seeds.iloc[:3] = released.iloc[:3].to_numpy()
    seeds_codes = encode_records(seeds, SCHEMA).codes
    settings = config(tmp_path, holdout)
    report = evaluation_report(settings, SCHEMA, released, training, seeds_codes, SECRET, "report")
    assert set(report) == {"note", "holdout_records", "marginal_tvd", "cramers_v_mean_abs_difference",
                           "privacy_evidence"}
    assert report["holdout_records"] == 30
    real = encode_records(holdout, SCHEMA).codes
    synthetic = encode_records(released, SCHEMA).codes
    assert set(report["marginal_tvd"]) == {"1-way", "2-way", "3-way"}
    for way in (1, 2, 3):
        subsets = list(itertools.combinations(range(3), way))
        expected = np.mean([tvd(real, synthetic, subset) for subset in subsets])
        assert report["marginal_tvd"][f"{way}-way"] == pytest.approx(expected, abs=1e-12)
        assert 0.0 <= report["marginal_tvd"][f"{way}-way"] <= 1.0
    pairs = list(itertools.combinations(range(3), 2))
    expected_v = np.mean([abs(cramers_v(real, *pair) - cramers_v(synthetic, *pair)) for pair in pairs])
    assert report["cramers_v_mean_abs_difference"] == pytest.approx(expected_v, abs=1e-9)
    evidence = report["privacy_evidence"]
    seed_rows = {tuple(row) for row in seeds_codes.tolist()}
    assert evidence["exact_match_rate_released_to_seeds"] == pytest.approx(
        np.mean([tuple(row) in seed_rows for row in synthetic.tolist()]), abs=0)
    assert evidence["exact_match_rate_released_to_seeds"] >= 3 / 25
    assert evidence["exact_match_rate_holdout_to_seeds"] == pytest.approx(
        np.mean([tuple(row) in seed_rows for row in real.tolist()]), abs=0)
    for name, codes in (("released", synthetic), ("holdout", real)):
        distribution = evidence[f"distance_to_closest_seed_{name}"]
        assert len(distribution) == 4 and sum(distribution) == pytest.approx(1.0)
        expected_distribution = np.bincount(closest_distances(codes, seeds_codes), minlength=4) / len(codes)
        np.testing.assert_allclose(distribution, expected_distribution, rtol=0, atol=1e-15)
    json.dumps(report)


def test_train_on_synthetic_test_on_real_is_reported_for_a_target(tmp_path: Path) -> None:
    holdout, released, training = records(40, 5), records(60, 6), records(60, 7)
    seeds_codes = encode_records(records(20, 8), SCHEMA).codes
    settings = config(tmp_path, holdout, target_column="income", positive_values=[">50K"])
    report = evaluation_report(settings, SCHEMA, released, training, seeds_codes, SECRET, "report")
    scores = report["train_on_synthetic_test_on_real"]
    assert set(scores) == {"synthetic_accuracy", "synthetic_auc", "real_accuracy", "real_auc", "test_records",
                           "test_positive_rate"}
    assert scores["test_records"] == 40.0
    assert scores["test_positive_rate"] == pytest.approx((holdout["income"] == ">50K").mean())
    for name in ("synthetic_accuracy", "synthetic_auc", "real_accuracy", "real_auc"):
        assert 0.0 <= scores[name] <= 1.0, name
    by_threshold = evaluation_report(config(tmp_path, holdout, target_column="age", positive_above=50.0), SCHEMA,
                                     released, training, seeds_codes, SECRET, "report")
    assert by_threshold["train_on_synthetic_test_on_real"]["test_positive_rate"] == pytest.approx(
        (holdout["age"] > 50).mean())


def test_the_sampled_three_way_marginals_depend_on_the_secret_only(tmp_path: Path) -> None:
    """Twelve attributes have 220 three-way marginals, more than the 200 the report samples with its
    keyed generator: the same secret gives the same report, another secret another sample."""
    schema = TabularSchema.model_validate(
        {"attributes": [{"type": "categorical", "name": f"x{index}", "categories": ["0", "1"]} for index in range(12)]}
    )
    rng = np.random.default_rng(9)

    def frame(rows: int) -> pd.DataFrame:
        return pd.DataFrame({f"x{index}": rng.integers(0, 2, rows).astype(str).astype(object) for index in range(12)})

    holdout, released = frame(30), frame(30)
    seeds_codes = encode_records(frame(10), schema).codes
    settings = config(tmp_path, holdout)
    first = evaluation_report(settings, schema, released, released, seeds_codes, SECRET, "report")
    again = evaluation_report(settings, schema, released, released, seeds_codes, SECRET, "report")
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    other = evaluation_report(settings, schema, released, released, seeds_codes, bytes(32), "report")
    assert other["marginal_tvd"]["1-way"] == first["marginal_tvd"]["1-way"]
    assert other["marginal_tvd"]["2-way"] == first["marginal_tvd"]["2-way"]
    assert other["marginal_tvd"]["3-way"] != first["marginal_tvd"]["3-way"]
    real = encode_records(holdout, schema).codes
    synthetic = encode_records(released, schema).codes
    every = [tvd(real, synthetic, subset) for subset in itertools.combinations(range(12), 3)]
    assert min(every) <= first["marginal_tvd"]["3-way"] <= max(every)


def test_a_holdout_larger_than_sample_records_is_read_as_its_keyed_sample(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15: the held-out file is read on the driver, at most ``evaluation.sample_records`` of
    its rows — a larger file as a keyed sample, read in chunks (the whole-file reader is never
    called); the same secret and release give the same sample, another release another."""
    import pipelines.tabular.input as tabular_input

    holdout, released, training, seeds = records(400, 11), records(25, 2), records(40, 3), records(20, 4)
    encoded = encode_records(seeds, SCHEMA).codes
    settings = config(tmp_path, holdout, sample_records=50)

    def whole_file(*_: object) -> None:
        raise AssertionError("the held-out file was read whole")

    monkeypatch.setattr(tabular_input, "read_records_table", whole_file)
    first = evaluation_report(settings, SCHEMA, released, training, encoded, SECRET, "r-1")
    again = evaluation_report(settings, SCHEMA, released, training, encoded, SECRET, "r-1")
    other = evaluation_report(settings, SCHEMA, released, training, encoded, SECRET, "r-2")
    assert first["holdout_records"] == 50
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    assert json.dumps(first, sort_keys=True) != json.dumps(other, sort_keys=True)
