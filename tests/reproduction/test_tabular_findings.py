"""The tabular kind's evaluation on real data, with honest thresholds (issue 3, "Evaluation").

Adult (train on ``adult-train.csv``, held out ``adult-test.csv``) and Abalone (a keyed 2/3–1/3
split of ``abalone.csv``), at ε = 1 through the in-memory reference release (the engines equal it,
``tests/e2e/test_tabular_release.py``). What the method is known to do (Bindschaedler et al. 2017,
Section 7; PrivBayes): a learned network keeps the association between attributes that
independent noisy marginals destroy (pairwise Cramér's V, train-on-synthetic models), while its
mean 2- and 3-way marginal error stays of the same order as the independent baseline's at this ε
(on Adult most attribute pairs are weakly dependent, so independence is a good approximation for
the average marginal and each of the baseline's 15 small histograms gets far less noise than the
network's conditional tables; measured here: 2-way TVD 0.08–0.10 against 0.085, depending on the
keyed draw); the released records copy the seeds no more than fresh real records do.

Every bound keeps three standard deviations beyond the worst of ten keys
(``tests/reproduction/margins.py``), each key the mean of four releases (``RELEASES_PER_KEY``).
Recorded, not asserted: the test's pass rate falls as ``k`` grows (40 → 150: by 0.06–0.53 on all
ten keys) and rises with ``ω`` (11 → 13: by 0.10–0.93), one network and one candidate stream per
key (``pass_rate``); the spread between keys — the learned network decides how far candidates fall
from their seeds — is wider than the margin rule allows. The unit tests of the privacy test check
its monotonicity on fixed candidates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipelines.tabular.input import read_tabular_records
from schemas.base import TableReading
from schemas.tabular.schema import load_tabular_schema
from tests.reproduction.margins import Claim, Figures, check_claims, key_secret
from transforms.core.keyed_randomness import keyed_generator
from transforms.tabular.encoding import decode_records, domain_sizes
from transforms.tabular.evaluation import (
    exact_match_rate,
    mean_cramers_v_difference,
    mean_marginal_tvd,
    train_on_synthetic_test_on_real,
)
from transforms.tabular.guarantee import split_total_epsilon
from transforms.tabular.independent_marginals import independent_marginals_synthesis
from transforms.tabular.release import (
    PURPOSE_STRUCTURE,
    TabularReleaseParameters,
    release_split,
    tabular_release,
)
from transforms.tabular.structure_learning import learn_structure

pytestmark = pytest.mark.slow

PROJECT = Path(__file__).resolve().parents[2]
DATASETS = PROJECT.parent / "shared" / "datasets"
SECRET = bytes(range(32))
TEST_KEY = 0
EPSILON, DELTA, K, GAMMA = 1.0, 1e-6, 50, 4.0
RELEASES_PER_KEY = 4
"""Releases averaged into one key's figures: the learned network (structure chosen by the
exponential mechanism at a small ε) changes a release's utility far more than anything else, so a
single release's figure swings from key to key (one release per key: 2-way marginal error ratio
1.00–2.24, TSTR AUC 0.75–0.88)."""


def release_parameters(codes: np.ndarray, omega: int, k: int, records: int | None) -> TabularReleaseParameters:
    split_budget = split_total_epsilon(EPSILON, DELTA, k, GAMMA)
    return TabularReleaseParameters(
        seed_fraction=0.3, structure_fraction=0.1, parameter_fraction=0.6,
        epsilon_parameters=split_budget.epsilon_parameters, dirichlet_alpha=1.0, omega=omega, k=k,
        epsilon0=split_budget.epsilon0, max_attempts=20 * (records or len(codes)), batch_size=65_536,
        target_records=records,
    )


def learned_structure(codes: np.ndarray, schema, parameters: TabularReleaseParameters, release_id: str,
                      secret: bytes, cap: int = 64):
    split_budget = split_total_epsilon(EPSILON, DELTA, parameters.k, GAMMA)
    split = release_split(len(codes), parameters, secret, release_id)
    structure = learn_structure(codes[split.structure], domain_sizes(schema), "mutual_information",
                                split_budget.epsilon_structure, 2, cap,
                                keyed_generator(secret, release_id, PURPOSE_STRUCTURE, 0))
    return structure, codes[split.seeds]


def synthesize(codes: np.ndarray, schema, omega: int, release_id: str, secret: bytes, k: int = K,
               records: int | None = None) -> tuple[np.ndarray, pd.DataFrame, float, np.ndarray]:
    parameters = release_parameters(codes, omega, k, records)
    structure, seeds = learned_structure(codes, schema, parameters, release_id, secret)
    release = tabular_release(codes, schema, structure, parameters, secret=secret, release_id=release_id)
    return release.released_codes, release.released_records, release.pass_rate, seeds


@cache
def adult_data() -> dict:
    schema = load_tabular_schema(PROJECT / "examples" / "tabular_adult_schema.yaml")
    folder = DATASETS / "adult"
    assert (folder / "adult-train.csv").is_file(), f"the shared Adult data set is missing at {folder}"
    train = read_tabular_records(TableReading(path=folder / "adult-train.csv", header=False), schema)
    test = read_tabular_records(
        TableReading(path=folder / "adult-test.csv", header=False,
                     recode={"income": {"<=50K.": "<=50K", ">50K.": ">50K"}}),
        schema,
    )
    return {"schema": schema, "sizes": domain_sizes(schema), "train": train, "test": test}


def release_secret(key: int, release: int) -> bytes:
    """Release ``release`` of measurement key ``key`` (key 0's first release: the tests' secret)."""
    return key_secret(RELEASES_PER_KEY * key + release, SECRET)


@cache
def adult(key: int, release: int = 0) -> dict:
    """Adult at ε = 1, ω = 11, and the independent-marginals baseline, for release ``release`` of
    measurement key ``key``."""
    secret = release_secret(key, release)
    data = dict(adult_data())
    train, sizes = data["train"], data["sizes"]
    released_codes, released, pass_rate, seeds = synthesize(train.encoded.codes, data["schema"], 11, "adult-11", secret)
    independent_codes = independent_marginals_synthesis(
        train.encoded.codes, sizes, EPSILON, len(train.encoded.codes), keyed_generator(secret, "adult", "baseline", 0)
    )
    independent = decode_records(independent_codes, data["schema"], keyed_generator(secret, "adult", "baseline-decode", 0))
    data.update(secret=secret, released_codes=released_codes, released=released, pass_rate=pass_rate, seeds=seeds,
                independent_codes=independent_codes, independent=independent)
    return data


def release_key_caches() -> None:
    adult.cache_clear()


def averaged(figure: Callable[[dict], Figures], key: int) -> Figures:
    """``figure`` of each of the key's releases, averaged."""
    runs = [figure(adult(key, release)) for release in range(RELEASES_PER_KEY)]
    return {name: float(np.mean([run[name] for run in runs])) for name in runs[0]}


def release_marginals(data: dict) -> Figures:
    figures = {}
    for way in (2, 3):
        subsets = 150 if way == 3 else None
        rng = keyed_generator(data["secret"], "adult", "subsets", way)
        ours = mean_marginal_tvd(data["test"].encoded.codes, data["released_codes"], data["sizes"], way, subsets, rng)
        rng = keyed_generator(data["secret"], "adult", "subsets", way)
        baseline = mean_marginal_tvd(data["test"].encoded.codes, data["independent_codes"], data["sizes"], way,
                                     subsets, rng)
        figures[f"marginals.{way}_way_tvd_over_independent"] = ours / baseline
    return figures


def marginals(key: int) -> Figures:
    return averaged(release_marginals, key)


def test_adult_marginal_error_is_of_the_order_of_independent_marginals() -> None:
    """Mean TVD of 2-way (all pairs) and 3-way (150 keyed triples) marginals against the held-out
    records, over the baseline's. Ten keys of four releases: 1.03–1.93 (mean 1.24, sd 0.27) and
    0.86–1.31 (mean 0.98, sd 0.13); the bounds (2.75 and 1.7) keep three standard deviations."""
    check_claims(CLAIMS, "marginals", marginals(TEST_KEY))


def association(key: int) -> Figures:
    return averaged(release_association, key)


def release_association(data: dict) -> Figures:
    test_codes = data["test"].encoded.codes
    ours = mean_cramers_v_difference(test_codes, data["released_codes"], data["sizes"])
    baseline = mean_cramers_v_difference(test_codes, data["independent_codes"], data["sizes"])
    return {"association.cramers_v_difference_over_independent": ours / baseline}


def test_adult_pairwise_association_is_kept_better_than_by_independent_marginals() -> None:
    """Mean |Cramér's V difference| over attribute pairs, over the baseline's: 0.58–0.74 on ten keys
    of four releases (sd 0.051)."""
    check_claims(CLAIMS, "association", association(TEST_KEY))


def adult_tstr(key: int) -> Figures:
    return averaged(release_tstr, key)


def release_tstr(data: dict) -> Figures:
    train, test = data["train"].frame, data["test"].frame
    ours = train_on_synthetic_test_on_real(data["released"], train, test, "income", ">50K")
    baseline = train_on_synthetic_test_on_real(data["independent"], train, test, "income", ">50K")
    return {
        "adult_tstr.independent_auc": baseline["synthetic_auc"],
        "adult_tstr.synthetic_auc": ours["synthetic_auc"],
        "adult_tstr.synthetic_minus_real_auc": ours["synthetic_auc"] - ours["real_auc"],
        "adult_tstr.synthetic_minus_independent_auc": ours["synthetic_auc"] - baseline["synthetic_auc"],
    }


def test_adult_income_model_trained_on_synthetic_records_predicts_real_income() -> None:
    """Ten keys of four releases: synthetic AUC 0.804–0.856 (sd 0.016), 0.071–0.124 below the model
    trained on real records, 0.271–0.417 above the independent baseline's (0.430–0.564)."""
    check_claims(CLAIMS, "adult_tstr", adult_tstr(TEST_KEY))


def seed_copies(key: int) -> Figures:
    data = adult(key)
    released_rate = exact_match_rate(data["released_codes"], data["seeds"])
    holdout_rate = exact_match_rate(data["test"].encoded.codes, data["seeds"])
    return {"seed_copies.released_minus_holdout_match_rate": released_rate - holdout_rate}


def test_adult_released_records_copy_the_seeds_no_more_than_fresh_real_records() -> None:
    """Exact-match rate against the seeds, released minus held-out real records: −0.072–−0.063
    on ten keys (sd 0.003)."""
    check_claims(CLAIMS, "seed_copies", seed_copies(TEST_KEY))


def pass_rate(key: int) -> Figures:
    """One learned network and one set of candidates (same split, structure, noisy parameters and
    seeds: the same release id and secret), tested at three settings: the paper's claim is about
    the test, so nothing but ``k`` and ``ω`` may change between the three. (Learning a network per
    setting, as a release would, made the difference swing from −0.80 to +0.20 over ten keys.)"""
    data = adult(key)
    codes = data["train"].encoded.codes
    structure, _ = learned_structure(codes, data["schema"], release_parameters(codes, 11, K, 3000), "rate",
                                     data["secret"])
    rates = {}
    for k, omega in ((40, 11), (150, 11), (150, 13)):
        parameters = replace(release_parameters(codes, omega, K, 3000), k=k)
        rates[k, omega] = tabular_release(
            codes, data["schema"], structure, parameters, secret=data["secret"], release_id="rate"
        ).pass_rate
    return {
        "pass_rate.k150_minus_k40": rates[150, 11] - rates[40, 11],
        "pass_rate.omega11_minus_omega13": rates[150, 11] - rates[150, 13],
    }




def abalone_tstr(key: int) -> Figures:
    """Each of the key's releases draws its own keyed 2/3–1/3 split and release; averaged."""
    schema = load_tabular_schema(PROJECT / "examples" / "tabular_abalone_schema.yaml")
    path = DATASETS / "abalone" / "abalone.csv"
    assert path.is_file(), f"the shared Abalone data set is missing at {path}"
    records = read_tabular_records(TableReading(path=path, header=False), schema)
    runs = []
    for release in range(RELEASES_PER_KEY):
        secret = release_secret(key, release)
        positions = keyed_generator(secret, "abalone", "holdout", 0).permutation(len(records.encoded.codes))
        cut = 2 * len(positions) // 3
        train_positions, test_positions = np.sort(positions[:cut]), np.sort(positions[cut:])
        _, released, _, _ = synthesize(records.encoded.codes[train_positions], schema, len(schema.names), "abalone",
                                       secret, k=40)
        train_frame = records.frame.iloc[train_positions].reset_index(drop=True)
        test_frame = records.frame.iloc[test_positions].reset_index(drop=True)
        runs.append(train_on_synthetic_test_on_real(released, train_frame, test_frame, "rings", lambda rings: rings > 10))
    return {
        "abalone_tstr.synthetic_auc": float(np.mean([run["synthetic_auc"] for run in runs])),
        "abalone_tstr.synthetic_minus_real_auc": float(np.mean([run["synthetic_auc"] - run["real_auc"] for run in runs])),
    }


def test_abalone_rings_model_trained_on_synthetic_records_predicts_real_rings() -> None:
    """A model trained on synthetic records is no better than one trained on real records: AUC
    0.174–0.316 below it on ten keys of four releases (sd 0.042). Not asserted (recorded): the
    synthetic AUC itself, whose margin would reach chance level (``margins.json``)."""
    check_claims(CLAIMS, "abalone_tstr", abalone_tstr(TEST_KEY))


FIGURES = {
    "marginals": marginals,
    "association": association,
    "adult_tstr": adult_tstr,
    "seed_copies": seed_copies,
    "pass_rate": pass_rate,
    "abalone_tstr": abalone_tstr,
}

CLAIMS = (
    Claim("marginals.2_way_tvd_over_independent", "<=", 2.75, "2-way marginal error of the baseline's order"),
    Claim("marginals.3_way_tvd_over_independent", "<=", 1.7, "3-way marginal error of the baseline's order"),
    Claim("association.cramers_v_difference_over_independent", "<=", 0.9, "association kept better"),
    Claim("adult_tstr.independent_auc", "<=", 0.69, "independent marginals lose income's association"),
    Claim("adult_tstr.synthetic_auc", ">=", 0.70, "synthetic records predict real income"),
    Claim("adult_tstr.synthetic_minus_real_auc", "<=", 0.01, "no better than real records"),
    Claim("adult_tstr.synthetic_minus_independent_auc", ">=", 0.12, "far better than independent marginals"),
    Claim("seed_copies.released_minus_holdout_match_rate", "<=", 0.0, "no more seed copies than fresh records"),
    Claim("abalone_tstr.synthetic_minus_real_auc", "<=", 0.02, "no better than real records"),
)
