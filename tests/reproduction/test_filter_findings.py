"""The filter kind's evaluation on real data (issue 5, "Evaluation"; Chen, Navidi, Rajagopal,
"Generating private data with user customization"), engine-free, with honest thresholds.

Every figure is a classifier trained afresh on privatized records that filter training never saw
(a disjoint release part) and scored on held-out privatized records of that part, next to the
same classifier on the raw records (``filter_datasets.evaluate_release``). The path of a record:
shared VAE (trained once on features only) → posterior draw ``z`` → ``z̃ = z + Aε + B e_y`` →
decoded record → read back as a feature matrix. All draws are keyed (fixed test secret); torch on
one thread, deterministic, so the numbers quoted below are what this module computes.

What the method is expected to do, and what the thresholds say (each test's docstring has its
reasons and the measured values):

* at a large budget the retrained adversary falls to within a few points of the majority-class
  rate while the utility classifier stays within a few points of raw (Adult), and the additive
  Gaussian mechanism at the same distortion protects less and keeps no more utility; with the
  label-sensitivity cap (1 or 2) Adult is protected as well;
* the protection grows with ``b``; a tiny ``b`` changes nothing (Abalone, 0.01 → 10; there the VAE
  itself costs 5 points of utility, so "within a few points of raw" is not claimed);
* on digits, a per-label shift can hide the digit while keeping "contains a circle" (the shift
  moves each digit onto its circle group), which noise alone cannot; the capped filter (trained as
  ``B = A·C``) hides the digit even better than the uncapped one but keeps circle only at the
  Gaussian's level at β = 1 (under the cap a shift of size d costs noise of standard deviation d
  along it; a larger β trades privacy back for utility); hiding "digit ≥ 5" while keeping parity is only partial
  (one shift per class of a binary label cannot map 5–9 onto 0–4), with parity 5–10 points below
  raw yet far above the Gaussian baseline's;
* the mutual information between the release and the private label falls;
* two users with opposite choices sharing one VAE: in the pooled release each group's private
  label is as hidden as in a release where everyone made that group's choice.

Every bound keeps three standard deviations beyond the worst of ten keys
(``tests/reproduction/margins.py``; each test's docstring gives the spread, ``margins.json`` the
figures): the numerics of torch and BLAS differ between machines of the same kind, and a key
changes far more than a machine does. Where that margin leaves a claim without meaning it is
recorded and reported, not asserted (the digits tests say which).

VAE settings for speed (the benchmark ``benchmarks/filter_evaluation.py`` uses the defaults on
full data): Adult 8,000 training rows × 40 epochs with the numeric likelihood scale ``s = 0.1``
(with the default ``s = 0.03`` and so short a training the VAE itself dropped nearly all of ``sex``
— its round trip alone left the adversary at the majority rate — so a privacy test would pass
for the wrong reason); Abalone the defaults, 100 epochs on half of the records; digits ``s = 0.3``
(with 0.03 the posteriors are so narrow that every budget up to 1,024 nats buys almost no noise;
the benchmark's "likelihood scale" table), 200 epochs on half of the images.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import pytest

from tests.reproduction import filter_datasets as fd
from tests.reproduction.margins import Claim, Figures, check_claims, key_secret
from transforms.core.keyed_randomness import keyed_generator
from transforms.filter.accounting import (
    filter_renyi_epsilon,
    gaussian_baseline_filter,
    gaussian_baseline_noise_scale,
)
from transforms.filter.evaluation import classifier_scores, knn_mutual_information
from transforms.filter.filter_training import FilterTrainingConfig, train_latent_filter
from transforms.filter.latent_filter import (
    LinearLatentFilter,
    label_sensitivity,
)
from transforms.filter.vae import VaeTrainingConfig, configure_deterministic_torch

pytestmark = pytest.mark.slow

SECRET = bytes(range(32))
TEST_KEY = 0
Scores = dict[str, dict[str, Any]]


@dataclass
class Lab:
    """One dataset's shared VAE, its filter-training part and its release part, with the trained
    filters and the privatized releases cached (several figures share them). Every draw is keyed
    by ``secret``: the measurement key of ``tests/reproduction/margins.py``."""

    name: str
    secret: bytes
    model: Any
    training: fd.EncodedPart
    release: fd.EncodedPart
    filter_settings: dict[str, Any]
    filters: dict[tuple, LinearLatentFilter] = field(default_factory=dict)
    releases: dict[tuple, fd.PrivatizedPart] = field(default_factory=dict)

    @property
    def latent_dimension(self) -> int:
        return int(self.training.mean.shape[1])

    def classes(self, label: str) -> int:
        return len(self.training.data.classes[label])

    def filter(self, private: str, utility: str, budget: float, cap: float | None = None) -> LinearLatentFilter:
        key = (private, utility, budget, cap)
        if key not in self.filters:
            data = self.training.data
            trained = train_latent_filter(
                self.training.mean,
                self.training.log_variance,
                data.labels[private],
                data.labels[utility],
                self.classes(private),
                self.classes(utility),
                FilterTrainingConfig(budget=budget, max_sensitivity=cap, **self.filter_settings),
                keyed_generator(self.secret, self.name, "filter-training", (private, utility, repr(budget), repr(cap))),
            )
            assert trained.distortion <= budget
            self.filters[key] = trained.latent_filter
        return self.filters[key]

    def gaussian(self, private: str, budget: float) -> LinearLatentFilter:
        sigma = gaussian_baseline_noise_scale(self.training.log_variance, budget)
        return gaussian_baseline_filter(self.latent_dimension, self.classes(private), sigma)

    def privatized(self, private: str, latent_filter: LinearLatentFilter, tag: tuple) -> fd.PrivatizedPart:
        key = (private, *tag)
        if key not in self.releases:
            rng = keyed_generator(self.secret, self.name, "privatize", tuple(str(part) for part in key))
            self.releases[key] = fd.privatize_part(self.model, self.release, private, latent_filter, rng)
        return self.releases[key]

    def scores(
        self, private: str, utility: str, method: str, budget: float = 0.0, cap: float | None = None,
        classifier: str = "logistic",
    ) -> Scores:
        """``method``: ``raw`` (the release part's own records), ``vae`` (round trip, ``A = B = 0``),
        ``filter`` or ``gaussian`` (at ``budget``)."""
        data = self.release.data
        if method == "raw":
            return fd.evaluate_release(data.matrix, data, private, utility, classifier)
        if method == "vae":
            latent_filter = fd.identity_filter(self.latent_dimension, self.classes(private))
        elif method == "filter":
            latent_filter = self.filter(private, utility, budget, cap)
        else:
            latent_filter = self.gaussian(private, budget)
        release = self.privatized(private, latent_filter, (method, utility, budget, cap))
        return fd.evaluate_release(release.matrix, data, private, utility, classifier)


@cache
def adult_lab(key: int) -> Lab:
    """VAE on 8,000 keyed rows of ``adult-train.csv``; filters on 6,000 of them; release part:
    6,000 keyed rows of ``adult-test.csv`` (evaluation halves of 3,000)."""
    configure_deterministic_torch(1)
    secret = key_secret(key, SECRET)
    train, test = fd.adult("train"), fd.adult("test")
    rows = keyed_generator(secret, "adult", "rows", "train").permutation(train.rows)
    release = test.subset(keyed_generator(secret, "adult", "rows", "test").permutation(test.rows)[:6000])
    model = fd.train_shared_vae(
        train.matrix[rows[:8000]], fd.ADULT_SPEC, secret, "adult", VaeTrainingConfig(epochs=40),
        numeric_noise_scale=0.1,
    )
    return Lab(
        "adult", secret, model, fd.encode_part(model, train.subset(rows[:6000])), fd.encode_part(model, release), {}
    )


def split_lab(data: fd.LabelledFeatures, key: int, epochs: int, noise_scale: float, filter_epochs: int) -> Lab:
    """A keyed 50/50 split: the VAE and the filters on one half, the other half released. Filters
    run ``filter_epochs`` epochs of batch 128 (the default batch of 512 would give a few hundred
    training records two or three steps an epoch)."""
    configure_deterministic_torch(1)
    secret = key_secret(key, SECRET)
    order = keyed_generator(secret, data.name, "split", 0).permutation(data.rows)
    training, release = data.subset(order[: data.rows // 2]), data.subset(order[data.rows // 2 :])
    model = fd.train_shared_vae(
        training.matrix, data.spec, secret, data.name, VaeTrainingConfig(epochs=epochs),
        numeric_noise_scale=noise_scale,
    )
    settings = {"epochs": filter_epochs, "batch_size": 128}
    return Lab(data.name, secret, model, fd.encode_part(model, training), fd.encode_part(model, release), settings)


@cache
def abalone_lab(key: int) -> Lab:
    return split_lab(fd.abalone(), key, epochs=100, noise_scale=0.03, filter_epochs=30)


@cache
def digits_lab(key: int) -> Lab:
    return split_lab(fd.digits(), key, epochs=200, noise_scale=0.3, filter_epochs=50)


def release_key_caches() -> None:
    """Drop every key's labs (the margin measurement calls it between modules)."""
    for lab in (adult_lab, abalone_lab, digits_lab):
        lab.cache_clear()


def accuracy(scores: Scores, role: str) -> float:
    return float(scores[role]["accuracy"])


def auroc(scores: Scores, role: str) -> float:
    return float(scores[role]["auroc"])


@pytest.fixture(scope="module", autouse=True)
def _deterministic_torch() -> None:
    configure_deterministic_torch(1)


# ---------------------------------------------------------------------------------------------
# Adult: private sex, utility income > 50K


def adult_large_budget(key: int) -> Figures:
    lab = adult_lab(key)
    raw, vae = lab.scores("sex", "income", "raw"), lab.scores("sex", "income", "vae")
    majority = raw["adversary"]["majority_rate"]
    figures = {
        "adult_large_budget.raw_adversary_over_majority": accuracy(raw, "adversary") - majority,
        "adult_large_budget.vae_adversary_over_majority": accuracy(vae, "adversary") - majority,
    }
    for classifier in ("logistic", "gradient_boosting"):
        private = lab.scores("sex", "income", "filter", 16.0, classifier=classifier)
        figures[f"adult_large_budget.{classifier}_adversary_over_majority"] = accuracy(private, "adversary") - majority
        figures[f"adult_large_budget.{classifier}_adversary_auroc"] = auroc(private, "adversary")
    private = lab.scores("sex", "income", "filter", 16.0)
    figures["adult_large_budget.utility_minus_raw"] = accuracy(private, "utility") - accuracy(raw, "utility")
    figures["adult_large_budget.utility_minus_vae"] = accuracy(private, "utility") - accuracy(vae, "utility")
    figures["adult_large_budget.utility_auroc_minus_raw"] = auroc(private, "utility") - auroc(raw, "utility")
    return figures


def test_adult_filter_hides_sex_and_keeps_income_at_a_large_budget() -> None:
    """At ``b = 16`` the retrained adversary is at the majority rate, the utility classifier a few
    points below raw.

    Preconditions (so the test can fail for the right reason): the raw records reveal sex, and so
    does the VAE's round trip alone: the filter, not the VAE, must remove it. Claims: the
    adversary near the majority rate for logistic regression and gradient boosting, with a low
    AUROC; income accuracy a few points below raw and below the VAE's round trip.

    Over ten keys (VAE, rows, filter training and privatization all keyed; ``margins.json``): raw
    adversary 0.158–0.188 over the majority rate, the VAE's round trip 0.065–0.096 over it (sd
    0.010); the filter's adversary −0.011–0.003 (logistic) and −0.034–−0.012 (gradient boosting)
    from the majority rate, AUROC 0.556–0.598 and 0.547–0.589; income −0.057–−0.043 from raw (sd
    0.004), −0.031–−0.011 from the VAE's round trip (sd 0.006), AUROC −0.095–−0.056 from raw (sd
    0.013). Hence the bounds: income within 0.07 of raw and 0.05 of the VAE, AUROC within 0.14 —
    the earlier 0.03 from the VAE sat 0.0007 from the value another machine computed."""
    check_claims(CLAIMS, "adult_large_budget", adult_large_budget(TEST_KEY))


def adult_sweep(key: int) -> Figures:
    lab = adult_lab(key)
    raw_utility = accuracy(lab.scores("sex", "income", "raw"), "utility")
    figures, filter_auroc = {}, {}
    for budget in (0.5, 4.0, 16.0):
        scores = lab.scores("sex", "income", "filter", budget)
        filter_auroc[budget] = auroc(scores, "adversary")
        figures[f"adult_sweep.utility_minus_raw_b{budget:g}"] = accuracy(scores, "utility") - raw_utility
    figures["adult_sweep.auroc_b16_minus_b0.5"] = filter_auroc[16.0] - filter_auroc[0.5]
    figures["adult_sweep.auroc_b4_minus_b0.5"] = filter_auroc[4.0] - filter_auroc[0.5]
    figures["adult_sweep.auroc_b16_minus_b4"] = filter_auroc[16.0] - filter_auroc[4.0]
    for budget in (4.0, 16.0):
        ours = lab.scores("sex", "income", "filter", budget)
        baseline = lab.scores("sex", "income", "gaussian", budget)
        figures[f"adult_sweep.gaussian_auroc_minus_filter_b{budget:g}"] = auroc(baseline, "adversary") - auroc(
            ours, "adversary"
        )
        figures[f"adult_sweep.gaussian_utility_minus_filter_b{budget:g}"] = accuracy(
            baseline, "utility"
        ) - accuracy(ours, "utility")
    strong_baseline = lab.scores("sex", "income", "gaussian", 64.0)
    ours = lab.scores("sex", "income", "filter", 16.0)
    figures["adult_sweep.gaussian_b64_auroc_minus_filter_b16"] = auroc(strong_baseline, "adversary") - auroc(
        ours, "adversary"
    )
    figures["adult_sweep.gaussian_b64_utility_minus_filter_b16"] = accuracy(strong_baseline, "utility") - accuracy(
        ours, "utility"
    )
    return figures


def test_adult_budget_sweep_and_the_gaussian_baseline_at_equal_distortion() -> None:
    """Protection grows with ``b``, and the Gaussian mechanism at the same distortion protects less
    without keeping more utility; to protect as well it needs a much larger distortion, at which
    its utility falls toward the majority rate.

    Ten keys (logistic; NumPy inference): adversary AUROC falls by 0.131–0.184 from b = 0.5 to 16
    (sd 0.019), by 0.092–0.132 to b = 4, and by 0.011–0.080 more to 16 (sd 0.021: the step from 4
    to 16 is within a key's noise, so the claim is only that protection does not fall); income
    within 0.028–0.039 (b = 0.5), 0.031–0.046 (b = 4) and 0.037–0.054 (b = 16) of raw. The Gaussian
    at equal distortion: AUROC 0.091–0.150 above the filter's, utility −0.041–0.000 from it (sd
    0.009); the Gaussian at b = 64 against the filter at 16: AUROC 0.031–0.083 above (sd 0.016),
    utility 0.030–0.052 below (sd 0.007). Each bound three standard deviations beyond the worst key."""
    check_claims(CLAIMS, "adult_sweep", adult_sweep(TEST_KEY))


def adult_cap(key: int, cap: float) -> Figures:
    lab = adult_lab(key)
    raw = lab.scores("sex", "income", "raw")
    scores = lab.scores("sex", "income", "filter", 16.0, cap)
    group = f"adult_cap{cap:g}"
    return {
        f"{group}.adversary_over_majority": accuracy(scores, "adversary") - raw["adversary"]["majority_rate"],
        f"{group}.utility_minus_raw": accuracy(scores, "utility") - accuracy(raw, "utility"),
    }


@pytest.mark.parametrize("cap", [1.0, 2.0])
def test_adult_sensitivity_cap_bounds_epsilon_and_still_hides_sex(cap: float) -> None:
    """With ``max_sensitivity`` the filter's label RDP is ``ε(α) = α/2·s²`` with ``s ≤ cap`` (without
    it ``s`` = 16.4 here, ``ε(2) = 269``). On Adult the cap costs no privacy at ``b = 16``: the
    adversary stays near the majority rate and income a few points below raw. The bounds on ``s``
    and ``ε`` hold by construction (the projection), not statistically: plain asserts.

    Ten keys: adversary −0.009–0.008 (cap 1) and −0.021–0.011 (cap 2) from the majority rate;
    income 0.032–0.055 and 0.037–0.058 below raw (sd 0.006 and 0.007)."""
    lab = adult_lab(TEST_KEY)
    uncapped = lab.filter("sex", "income", 16.0)
    capped = lab.filter("sex", "income", 16.0, cap)
    assert label_sensitivity(uncapped) > 2.0
    assert label_sensitivity(capped) <= cap * (1 + 1e-9)
    assert filter_renyi_epsilon(capped, [2.0])[2.0] <= cap**2 * (1 + 1e-9)
    check_claims(CLAIMS, f"adult_cap{cap:g}", adult_cap(TEST_KEY, cap))


# ---------------------------------------------------------------------------------------------
# Abalone: private sex (M/F/I), utility rings > 10


def abalone_sweep(key: int) -> Figures:
    lab = abalone_lab(key)
    raw = lab.scores("sex", "rings_over_10", "raw")
    vae = lab.scores("sex", "rings_over_10", "vae")
    majority = raw["adversary"]["majority_rate"]
    tiny = lab.scores("sex", "rings_over_10", "filter", 0.01)
    large = lab.scores("sex", "rings_over_10", "filter", 10.0)
    return {
        "abalone_sweep.raw_adversary_over_majority": accuracy(raw, "adversary") - majority,
        "abalone_sweep.b0.01_auroc_distance_from_vae": abs(auroc(tiny, "adversary") - auroc(vae, "adversary")),
        "abalone_sweep.b10_adversary_over_majority": accuracy(large, "adversary") - majority,
        "abalone_sweep.b10_adversary_auroc": auroc(large, "adversary"),
        "abalone_sweep.b10_utility_minus_vae": accuracy(large, "utility") - accuracy(vae, "utility"),
    }


def test_abalone_budget_sweep_from_a_hundredth_to_ten() -> None:
    """``b = 0.01`` changes nothing, ``b = 10`` brings the adversary near the majority rate; the
    utility stays at the VAE's level, which on Abalone is itself well below raw. Not claimed:
    "within a few points of raw" — the VAE (16 latents, numeric scale 0.03, 2,088 records) loses 5
    points of rings > 10 before any filter, at every budget (the benchmark: the same with other
    settings).

    Ten keys: raw adversary 0.174–0.253 over the majority rate; b = 0.01 AUROC within 0.000–0.010
    of the VAE's; b = 10 adversary AUROC 0.561–0.600 (sd 0.012) and utility −0.028–0.008 from the
    VAE's (sd 0.012). Not asserted: the b = 10 adversary's accuracy over the majority rate,
    0.005–0.103 (sd 0.027, three classes on 1,044 records) — three standard deviations above the
    worst key reach the raw records' level, so only the AUROC, which is steadier, is claimed."""
    check_claims(CLAIMS, "abalone_sweep", abalone_sweep(TEST_KEY))


# ---------------------------------------------------------------------------------------------
# Digits (scikit-learn 8×8)


def digits_value(key: int) -> Figures:
    lab = digits_lab(key)
    raw = lab.scores("digit", "circle", "raw")
    ours = lab.scores("digit", "circle", "filter", 64.0)
    baseline = lab.scores("digit", "circle", "gaussian", 64.0)
    return {
        "digits_value.raw_adversary": accuracy(raw, "adversary"),
        "digits_value.adversary": accuracy(ours, "adversary"),
        "digits_value.utility_minus_raw": accuracy(ours, "utility") - accuracy(raw, "utility"),
        "digits_value.gaussian_adversary_minus_filter": accuracy(baseline, "adversary") - accuracy(ours, "adversary"),
        "digits_value.gaussian_utility_minus_filter": accuracy(baseline, "utility") - accuracy(ours, "utility"),
    }


def test_digits_value_hidden_circle_kept_where_gaussian_noise_fails() -> None:
    """Private digit value (10 classes), utility "contains a circle" (0, 6, 8, 9), ``b = 64``.

    The per-label shift can move every digit onto a common point of its circle group; then the
    best adversary can still tell the groups apart and guess the commonest digit within each:
    about 0.4·¼ + 0.6·⅙ = 0.20. Claims: the adversary near that floor (majority 0.087), circle
    accuracy near raw; the Gaussian mechanism at the same distortion keeps far less utility.

    Ten keys (449 test images each; NumPy inference): raw adversary 0.927–0.958; the filter's
    0.240–0.311 (sd 0.023); circle −0.004–0.056 below raw (sd 0.019); the Gaussian's circle
    0.211–0.276 below the filter's. Not asserted: "the Gaussian protects no better" — its adversary
    is −0.016–0.107 above the filter's (mean 0.055, sd 0.034): higher on most keys, not by a margin."""
    check_claims(CLAIMS, "digits_value", digits_value(TEST_KEY))


def digits_cap(key: int) -> Figures:
    lab = digits_lab(key)
    ours = lab.scores("digit", "circle", "filter", 64.0, 1.0)
    baseline = lab.scores("digit", "circle", "gaussian", 64.0)
    vae = lab.scores("digit", "circle", "vae")
    return {
        "digits_cap.adversary_minus_vae": accuracy(ours, "adversary") - accuracy(vae, "adversary"),
        "digits_cap.adversary_minus_gaussian": accuracy(ours, "adversary") - accuracy(baseline, "adversary"),
    }


def test_digits_value_with_the_sensitivity_cap() -> None:
    """The cap (``max_sensitivity = 1``) on the same choice: ``s ≤ 1`` (by construction), the digit
    still hidden far below the VAE's round trip, and the adversary below the Gaussian baseline's
    at equal distortion: trained as ``B = A·C`` the capped filter uses its label shift.

    Not asserted, reported: what the cap costs here. Under the cap a shift of size d needs noise of
    standard deviation d along it, so moving digits onto their circle group costs more than b = 64
    buys at β = 1: circle accuracy falls to about the Gaussian's level, against 0.936 raw and about
    0.93 uncapped. β = 3 gives adversary 0.264 and circle 0.78, better than the Gaussian on both.

    Ten keys (NumPy inference): the adversary 0.591–0.700 below the VAE's round trip (sd 0.030). Not
    asserted: below the Gaussian baseline's, by 0.013–0.120 (mean 0.084, sd 0.028) — on every key,
    but not by three standard deviations."""
    assert label_sensitivity(digits_lab(TEST_KEY).filter("digit", "circle", 64.0, 1.0)) <= 1.0 + 1e-9
    check_claims(CLAIMS, "digits_cap", digits_cap(TEST_KEY))


def digits_at_least_5(key: int) -> Figures:
    lab = digits_lab(key)
    raw = lab.scores("at_least_5", "parity", "raw")
    vae = lab.scores("at_least_5", "parity", "vae")
    ours = lab.scores("at_least_5", "parity", "filter", 64.0)
    baseline = lab.scores("at_least_5", "parity", "gaussian", 64.0)
    return {
        "digits_at_least_5.adversary_minus_vae": accuracy(ours, "adversary") - accuracy(vae, "adversary"),
        "digits_at_least_5.utility_minus_raw": accuracy(ours, "utility") - accuracy(raw, "utility"),
        "digits_at_least_5.utility_minus_gaussian": accuracy(ours, "utility") - accuracy(baseline, "utility"),
    }


def test_digits_at_least_5_is_only_partly_hidden_while_parity_is_kept() -> None:
    """Private "digit ≥ 5", utility parity, ``b = 64``: a binary private label gets one shift per
    class, which cannot move 5–9 onto 0–4 digit by digit, so only noise hides it, and noise that
    hides it also hides parity. Expected: a partial fall of the adversary below the VAE's round
    trip, parity kept far better than by the Gaussian baseline. Not claimed: parity "within a few
    points of raw" — it loses 5–10 points; the bound below raw only guards against a collapse to
    the Gaussian's level.

    Ten keys (NumPy inference): the adversary 0.200–0.336 below the VAE's round trip (sd 0.037);
    parity 0.051–0.107 below raw (sd 0.019) and 0.109–0.176 above the Gaussian's (sd 0.026)."""
    check_claims(CLAIMS, "digits_at_least_5", digits_at_least_5(TEST_KEY))


# ---------------------------------------------------------------------------------------------
# mutual information


def mutual_information(key: int) -> Figures:
    figures = {}
    for lab, private, utility, budget in (
        (adult_lab(key), "sex", "income", 16.0),
        (digits_lab(key), "digit", "circle", 64.0),
    ):
        release = lab.privatized(private, lab.filter(private, utility, budget), ("filter", utility, budget, None))
        labels = lab.release.data.labels[private]
        before = knn_mutual_information(release.latents, labels)
        after = knn_mutual_information(release.filtered, labels)
        raw_bound = lab.scores(private, utility, "raw")["adversary"]["mutual_information_bound"]
        released_bound = lab.scores(private, utility, "filter", budget)["adversary"]["mutual_information_bound"]
        figures[f"mutual_information.{lab.name}_knn_after_over_before"] = after / before
        figures[f"mutual_information.{lab.name}_raw_bound"] = raw_bound
        figures[f"mutual_information.{lab.name}_released_over_raw_bound"] = released_bound / raw_bound
    return figures


def test_mutual_information_with_the_private_label_falls() -> None:
    """Ross's k-NN estimate on the latents (the posterior draw ``z`` vs the filtered ``z̃`` of the same
    records) and the classifier lower bound ``H(Y) − CE`` on the records (raw vs released).
    Claim: the filter removes a large part of what the kNN estimate sees in ``z`` and most of the
    classifier bound on raw records (Adult at b = 16, digits' value at b = 64).

    Ten keys: kNN estimate after/before 0.276–0.435 on Adult (sd 0.052), 0.258–0.321 on digits; the
    classifier bound on raw records 0.302–0.331 and 2.04–2.13 nats; released/raw bound 0.000–0.030
    and 0.011–0.168 (sd 0.044)."""
    check_claims(CLAIMS, "mutual_information", mutual_information(TEST_KEY))


# ---------------------------------------------------------------------------------------------
# two users with opposite choices, one VAE


def two_users(key: int) -> Figures:
    lab = digits_lab(key)
    choices = {1: ("at_least_5", "parity"), 2: ("parity", "at_least_5")}
    data = lab.release.data
    group = 1 + keyed_generator(lab.secret, "digits", "two-users", "group").integers(0, 2, data.rows)
    filters = {number: lab.filter(private, utility, 64.0) for number, (private, utility) in choices.items()}
    pooled = np.zeros_like(data.matrix)
    for number, (private, _) in choices.items():
        members = np.flatnonzero(group == number)
        part = fd.EncodedPart(data.subset(members), lab.release.mean[members], lab.release.log_variance[members])
        rng = keyed_generator(lab.secret, "digits", "two-users", number)
        pooled[members] = fd.privatize_part(lab.model, part, private, filters[number], rng).matrix
    half = data.rows // 2
    figures = {}
    for number, (private, utility) in choices.items():
        test = half + np.flatnonzero(group[half:] == number)
        single = lab.privatized(private, filters[number], ("filter", utility, 64.0, None)).matrix

        def score(matrix: np.ndarray, label: str, test: np.ndarray = test) -> Any:
            return classifier_scores(
                matrix[:half], data.labels[label][:half], matrix[test], data.labels[label][test], 2
            )

        pooled_adversary = score(pooled, private).accuracy
        kept = score(pooled, utility)
        figures[f"two_users.group{number}_pooled_adversary_minus_raw"] = pooled_adversary - score(
            data.matrix, private
        ).accuracy
        figures[f"two_users.group{number}_pooled_adversary_minus_single"] = pooled_adversary - score(
            single, private
        ).accuracy
        figures[f"two_users.group{number}_kept_over_majority"] = kept.accuracy - kept.majority_rate
    for name in ("pooled_adversary_minus_raw", "pooled_adversary_minus_single", "kept_over_majority"):
        figures[f"two_users.mean_{name}"] = (figures[f"two_users.group1_{name}"] + figures[f"two_users.group2_{name}"]) / 2
    return figures


def test_two_users_with_opposite_choices_are_each_protected_in_the_pooled_release() -> None:
    """Group 1 privatizes "digit ≥ 5" and keeps parity, group 2 the reverse (a keyed fair coin per
    record of the release part); each choice's filter (``b = 64``) is trained once on the shared
    VAE's training part. The adversary for each private label is trained on the first half of the
    *pooled* release — where the other group's records show that label on purpose — and scored on
    the group's records of the second half.

    Claims: the adversary well below raw on each group, and pooling gives little over a release in
    which everyone made the group's choice (two accuracies on about 200 records each). The kept
    label in the pooled release stays above its majority rate (lower than in a single-choice
    release, since the other group's records, half of the classifier's training set, hide it).

    Each group's figures rest on about 225 test images, so the claims are on the mean of the two
    groups. Ten keys (NumPy inference): the pooled adversary 0.222–0.307 below raw (sd 0.028),
    −0.090–0.001 from a single-choice release (sd 0.030; the bound, 0.17, only guards against
    pooling undoing the filter), the kept label 0.175–0.333 over its majority rate (sd 0.040). Per group (recorded):
    group 1's pooled adversary 0.194–0.359 below raw, group 2's 0.207–0.298."""
    check_claims(CLAIMS, "two_users", two_users(TEST_KEY))


FIGURES = {
    "adult_large_budget": adult_large_budget,
    "adult_sweep": adult_sweep,
    "adult_cap1": lambda key: adult_cap(key, 1.0),
    "adult_cap2": lambda key: adult_cap(key, 2.0),
    "abalone_sweep": abalone_sweep,
    "digits_value": digits_value,
    "digits_cap": digits_cap,
    "digits_at_least_5": digits_at_least_5,
    "mutual_information": mutual_information,
    "two_users": two_users,
}

CLAIMS = (
    Claim("adult_large_budget.raw_adversary_over_majority", ">=", 0.10, "raw records reveal sex"),
    Claim("adult_large_budget.vae_adversary_over_majority", ">=", 0.03, "the VAE alone does not hide sex"),
    Claim("adult_large_budget.logistic_adversary_over_majority", "<=", 0.03, "adversary at the majority rate"),
    Claim("adult_large_budget.logistic_adversary_auroc", "<=", 0.70, "adversary near chance"),
    Claim("adult_large_budget.gradient_boosting_adversary_over_majority", "<=", 0.03, "adversary at the majority rate"),
    Claim("adult_large_budget.gradient_boosting_adversary_auroc", "<=", 0.70, "adversary near chance"),
    Claim("adult_large_budget.utility_minus_raw", ">=", -0.07, "income a few points below raw"),
    Claim("adult_large_budget.utility_minus_vae", ">=", -0.05, "income a few points below the VAE"),
    Claim("adult_large_budget.utility_auroc_minus_raw", ">=", -0.14, "income AUROC near raw"),
    Claim("adult_sweep.utility_minus_raw_b0.5", ">=", -0.06, "income a few points below raw"),
    Claim("adult_sweep.utility_minus_raw_b4", ">=", -0.07, "income a few points below raw"),
    Claim("adult_sweep.utility_minus_raw_b16", ">=", -0.07, "income a few points below raw"),
    Claim("adult_sweep.auroc_b16_minus_b0.5", "<=", -0.05, "protection grows with b"),
    Claim("adult_sweep.auroc_b4_minus_b0.5", "<=", 0.02, "protection does not fall with b"),
    Claim("adult_sweep.auroc_b16_minus_b4", "<=", 0.06, "protection does not fall with b"),
    Claim("adult_sweep.gaussian_auroc_minus_filter_b4", ">=", 0.03, "the Gaussian protects less"),
    Claim("adult_sweep.gaussian_auroc_minus_filter_b16", ">=", 0.03, "the Gaussian protects less"),
    Claim("adult_sweep.gaussian_utility_minus_filter_b4", "<=", 0.02, "the Gaussian keeps no more utility"),
    Claim("adult_sweep.gaussian_utility_minus_filter_b16", "<=", 0.02, "the Gaussian keeps no more utility"),
    Claim("adult_sweep.gaussian_b64_auroc_minus_filter_b16", ">=", -0.05, "the Gaussian at b = 64 protects about as well"),
    Claim("adult_sweep.gaussian_b64_utility_minus_filter_b16", "<=", -0.005, "...and keeps less utility"),
    Claim("adult_cap1.adversary_over_majority", "<=", 0.03, "the cap costs no privacy"),
    Claim("adult_cap1.utility_minus_raw", ">=", -0.08, "income a few points below raw"),
    Claim("adult_cap2.adversary_over_majority", "<=", 0.04, "the cap costs no privacy"),
    Claim("adult_cap2.utility_minus_raw", ">=", -0.08, "income a few points below raw"),
    Claim("abalone_sweep.raw_adversary_over_majority", ">=", 0.10, "raw records reveal sex"),
    Claim("abalone_sweep.b0.01_auroc_distance_from_vae", "<=", 0.03, "a tiny b changes nothing"),
    Claim("abalone_sweep.b10_adversary_auroc", "<=", 0.65, "b = 10 near chance"),
    Claim("abalone_sweep.b10_utility_minus_vae", ">=", -0.07, "utility at the VAE's level"),
    Claim("digits_value.raw_adversary", ">=", 0.85, "raw records reveal the digit"),
    Claim("digits_value.adversary", "<=", 0.385, "the digit hidden down to its circle group"),
    Claim("digits_value.utility_minus_raw", ">=", -0.10, "circle kept"),
    Claim("digits_value.gaussian_utility_minus_filter", "<=", -0.10, "the Gaussian loses circle"),
    Claim("digits_cap.adversary_minus_vae", "<=", -0.3, "the capped filter hides the digit"),
    Claim("digits_at_least_5.adversary_minus_vae", "<=", -0.08, "a partial fall of the adversary"),
    Claim("digits_at_least_5.utility_minus_raw", ">=", -0.18, "parity does not collapse"),
    Claim("digits_at_least_5.utility_minus_gaussian", ">=", 0.02, "parity kept better than by noise"),
    Claim("mutual_information.adult_knn_after_over_before", "<=", 0.60, "kNN information falls"),
    Claim("mutual_information.adult_raw_bound", ">=", 0.1, "raw records carry information"),
    Claim("mutual_information.adult_released_over_raw_bound", "<=", 0.25, "classifier bound falls"),
    Claim("mutual_information.digits_knn_after_over_before", "<=", 0.5, "kNN information falls"),
    Claim("mutual_information.digits_raw_bound", ">=", 0.1, "raw records carry information"),
    Claim("mutual_information.digits_released_over_raw_bound", "<=", 0.31, "classifier bound falls"),
    Claim("two_users.mean_pooled_adversary_minus_raw", "<=", -0.08, "each group protected"),
    Claim("two_users.mean_pooled_adversary_minus_single", "<=", 0.17, "pooling costs little"),
    Claim("two_users.mean_kept_over_majority", ">=", 0.05, "the kept label survives pooling"),
)
