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
from typing import Any

import numpy as np
import pytest

from tests.reproduction import filter_datasets as fd
from transforms.filter.filter_accounting import (
    filter_renyi_epsilon,
    gaussian_baseline_filter,
    gaussian_baseline_noise_scale,
)
from transforms.filter.filter_evaluation import classifier_scores, knn_mutual_information
from transforms.filter.latent_filter import (
    FilterTrainingConfig,
    LinearLatentFilter,
    label_sensitivity,
    train_latent_filter,
)
from transforms.filter.vae import VaeTrainingConfig, configure_deterministic_torch
from transforms.keyed_randomness import keyed_generator

pytestmark = pytest.mark.slow

SECRET = bytes(range(32))
Scores = dict[str, dict[str, Any]]


@dataclass
class Lab:
    """One dataset's shared VAE, its filter-training part and its release part, with the trained
    filters and the privatized releases cached (several tests share them)."""

    name: str
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
                keyed_generator(SECRET, self.name, "filter-training", (private, utility, repr(budget), repr(cap))),
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
            rng = keyed_generator(SECRET, self.name, "privatize", tuple(str(part) for part in key))
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


@pytest.fixture(scope="module", autouse=True)
def _deterministic_torch() -> None:
    configure_deterministic_torch(1)


@pytest.fixture(scope="module")
def adult() -> Lab:
    return adult_lab()


def adult_lab() -> Lab:
    """VAE on 8,000 keyed rows of ``adult-train.csv``; filters on 6,000 of them; release part:
    6,000 keyed rows of ``adult-test.csv`` (evaluation halves of 3,000)."""
    train, test = fd.adult("train"), fd.adult("test")
    rows = keyed_generator(SECRET, "adult", "rows", "train").permutation(train.rows)
    release = test.subset(keyed_generator(SECRET, "adult", "rows", "test").permutation(test.rows)[:6000])
    model = fd.train_shared_vae(
        train.matrix[rows[:8000]], fd.ADULT_SPEC, SECRET, "adult", VaeTrainingConfig(epochs=40),
        numeric_noise_scale=0.1,
    )
    return Lab("adult", model, fd.encode_part(model, train.subset(rows[:6000])), fd.encode_part(model, release), {})


def split_lab(data: fd.LabelledFeatures, epochs: int, noise_scale: float, filter_epochs: int) -> Lab:
    """A keyed 50/50 split: the VAE and the filters on one half, the other half released. Filters
    run ``filter_epochs`` epochs of batch 128 (the default batch of 512 would give a few hundred
    training records two or three steps an epoch)."""
    order = keyed_generator(SECRET, data.name, "split", 0).permutation(data.rows)
    training, release = data.subset(order[: data.rows // 2]), data.subset(order[data.rows // 2 :])
    model = fd.train_shared_vae(
        training.matrix, data.spec, SECRET, data.name, VaeTrainingConfig(epochs=epochs),
        numeric_noise_scale=noise_scale,
    )
    settings = {"epochs": filter_epochs, "batch_size": 128}
    return Lab(data.name, model, fd.encode_part(model, training), fd.encode_part(model, release), settings)


@pytest.fixture(scope="module")
def abalone() -> Lab:
    return split_lab(fd.abalone(), epochs=100, noise_scale=0.03, filter_epochs=30)


@pytest.fixture(scope="module")
def digits() -> Lab:
    return split_lab(fd.digits(), epochs=200, noise_scale=0.3, filter_epochs=50)


def accuracy(scores: Scores, role: str) -> float:
    return float(scores[role]["accuracy"])


def auroc(scores: Scores, role: str) -> float:
    return float(scores[role]["auroc"])


# ---------------------------------------------------------------------------------------------
# Adult: private sex, utility income > 50K


def test_adult_filter_hides_sex_and_keeps_income_at_a_large_budget(adult: Lab) -> None:
    """At ``b = 16`` the retrained adversary is at the majority rate, the utility classifier a few
    points below raw.

    Preconditions (so the test can fail for the right reason): the raw records reveal sex (logistic
    0.842, AUROC 0.925, majority 0.682), and so does the VAE's round trip alone (0.764, AUROC 0.830):
    the filter, not the VAE, must remove it. Claims: adversary accuracy within 0.03 of the majority
    rate for logistic regression and gradient boosting (measured 0.674 and 0.655; 0.672–0.677 for
    logistic over five training keys) and AUROC at most 0.70 (measured 0.598 and 0.570); income
    accuracy within 0.06 of raw (the method's "few points"; measured 0.804 against 0.841: 2 points
    are the VAE's round trip, 2 the filter's; 0.795–0.807 over five keys) and within 0.03 of the
    VAE's round trip (0.823), AUROC within 0.10 of raw (0.806 against 0.884)."""
    raw = adult.scores("sex", "income", "raw")
    vae = adult.scores("sex", "income", "vae")
    majority = raw["adversary"]["majority_rate"]
    assert accuracy(raw, "adversary") >= majority + 0.10
    assert accuracy(vae, "adversary") >= majority + 0.04
    for classifier in ("logistic", "gradient_boosting"):
        private = adult.scores("sex", "income", "filter", 16.0, classifier=classifier)
        assert accuracy(private, "adversary") <= majority + 0.03, classifier
        assert auroc(private, "adversary") <= 0.70, classifier
    private = adult.scores("sex", "income", "filter", 16.0)
    assert accuracy(private, "utility") >= accuracy(raw, "utility") - 0.06
    assert accuracy(private, "utility") >= accuracy(vae, "utility") - 0.03
    assert auroc(private, "utility") >= auroc(raw, "utility") - 0.10


def test_adult_budget_sweep_and_the_gaussian_baseline_at_equal_distortion(adult: Lab) -> None:
    """Protection grows with ``b``, and the Gaussian mechanism at the same distortion protects less
    without keeping more utility; to protect as well it needs a much larger distortion, at which
    its utility falls to the majority rate.

    Measured (logistic; adversary AUROC / utility accuracy): filter b = 0.5: 0.748 / 0.808,
    b = 4: 0.632 / 0.810, b = 16: 0.598 / 0.804; Gaussian b = 4: 0.770 / 0.799, b = 16:
    0.707 / 0.763, b = 64: 0.660 / 0.752 (utility majority 0.760). Thresholds: AUROC falls from
    b = 0.5 to b = 16 by at least 0.05, never rises by more than 0.02 (sampling noise of an AUROC
    on 3,000 records is about 0.01); at b = 4 and 16 the Gaussian's AUROC is at least 0.03 above
    the filter's and its utility no more than 0.01 above; the Gaussian at b = 64 (as private as
    the filter at 16) has at least 0.02 less utility."""
    filter_auroc = {}
    for budget in (0.5, 4.0, 16.0):
        scores = adult.scores("sex", "income", "filter", budget)
        filter_auroc[budget] = auroc(scores, "adversary")
        assert accuracy(scores, "utility") >= accuracy(adult.scores("sex", "income", "raw"), "utility") - 0.06
    assert filter_auroc[16.0] <= filter_auroc[0.5] - 0.05
    assert filter_auroc[4.0] <= filter_auroc[0.5] + 0.02
    assert filter_auroc[16.0] <= filter_auroc[4.0] + 0.02
    for budget in (4.0, 16.0):
        ours = adult.scores("sex", "income", "filter", budget)
        baseline = adult.scores("sex", "income", "gaussian", budget)
        assert auroc(baseline, "adversary") >= auroc(ours, "adversary") + 0.03, budget
        assert accuracy(baseline, "utility") <= accuracy(ours, "utility") + 0.01, budget
    strong_baseline = adult.scores("sex", "income", "gaussian", 64.0)
    ours = adult.scores("sex", "income", "filter", 16.0)
    assert auroc(strong_baseline, "adversary") >= auroc(ours, "adversary") - 0.02
    assert accuracy(strong_baseline, "utility") <= accuracy(ours, "utility") - 0.02


@pytest.mark.parametrize("cap", [1.0, 2.0])
def test_adult_sensitivity_cap_bounds_epsilon_and_still_hides_sex(adult: Lab, cap: float) -> None:
    """With ``max_sensitivity`` the filter's label RDP is ``ε(α) = α/2·s²`` with ``s ≤ cap`` (without
    it ``s`` = 16.4 here, ``ε(2) = 269``). On Adult the cap costs no privacy at ``b = 16``: the
    adversary stays within 0.03 of the majority rate (measured 0.674 at cap 1, 0.678 at cap 2;
    uncapped 0.674; majority 0.682) and income within 0.06 of raw (0.802, 0.799; raw 0.841). The
    trained filters end at ``s`` = 0.61 and 0.81: at this budget the cap does not always bind."""
    uncapped = adult.filter("sex", "income", 16.0)
    capped = adult.filter("sex", "income", 16.0, cap)
    assert label_sensitivity(uncapped) > 2.0
    assert label_sensitivity(capped) <= cap * (1 + 1e-9)
    assert filter_renyi_epsilon(capped, [2.0])[2.0] <= cap**2 * (1 + 1e-9)
    raw = adult.scores("sex", "income", "raw")
    scores = adult.scores("sex", "income", "filter", 16.0, cap)
    assert accuracy(scores, "adversary") <= raw["adversary"]["majority_rate"] + 0.03
    assert accuracy(scores, "utility") >= accuracy(raw, "utility") - 0.06


# ---------------------------------------------------------------------------------------------
# Abalone: private sex (M/F/I), utility rings > 10


def test_abalone_budget_sweep_from_a_hundredth_to_ten(abalone: Lab) -> None:
    """``b = 0.01`` changes nothing, ``b = 10`` brings the adversary near the majority rate; the
    utility stays at the VAE's level, which on Abalone is itself well below raw.

    Measured (logistic): raw sex 0.568 (AUROC 0.758, majority 0.352), VAE round trip 0.520 (0.741);
    b = 0.01: AUROC 0.734; b = 10: 0.393 (AUROC 0.587; over five training keys 0.377–0.422 and
    0.570–0.606). Rings > 10: raw 0.769, VAE 0.715, b = 10 0.713 (majority 0.679). Thresholds:
    b = 0.01 within 0.03 of the VAE's AUROC; b = 10 within 0.08 of the majority rate (three
    classes, 1,044 test records: a standard error of 0.015, plus the spread over training keys
    above) and AUROC at most 0.65; utility within 0.03 of the VAE's round trip. Not claimed:
    "within a few points of raw" — the VAE (16 latents, numeric scale 0.03, 2,088 records) loses 5
    points of rings > 10 before any filter, at every budget (the benchmark: the same with other
    settings)."""
    raw = abalone.scores("sex", "rings_over_10", "raw")
    vae = abalone.scores("sex", "rings_over_10", "vae")
    majority = raw["adversary"]["majority_rate"]
    assert accuracy(raw, "adversary") >= majority + 0.10
    tiny = abalone.scores("sex", "rings_over_10", "filter", 0.01)
    assert abs(auroc(tiny, "adversary") - auroc(vae, "adversary")) <= 0.03
    large = abalone.scores("sex", "rings_over_10", "filter", 10.0)
    assert accuracy(large, "adversary") <= majority + 0.08
    assert auroc(large, "adversary") <= 0.65
    assert accuracy(large, "utility") >= accuracy(vae, "utility") - 0.03


# ---------------------------------------------------------------------------------------------
# Digits (scikit-learn 8×8)


def test_digits_value_hidden_circle_kept_where_gaussian_noise_fails(digits: Lab) -> None:
    """Private digit value (10 classes), utility "contains a circle" (0, 6, 8, 9), ``b = 64``.

    The per-label shift can move every digit onto a common point of its circle group; then the
    best adversary can still tell the groups apart and guess the commonest digit within each:
    about 0.4·¼ + 0.6·⅙ = 0.20. Claims: adversary at most 0.35 (0.15 above that floor; raw 0.951,
    VAE 0.869, majority 0.087; measured 0.264, 0.229–0.271 over six training keys), circle
    accuracy within 0.05 of raw (measured 0.936 against 0.929; 0.924–0.960). The Gaussian mechanism
    at the same distortion: no better privacy (measured 0.329) and at least 0.10 less utility
    (0.711)."""
    raw = digits.scores("digit", "circle", "raw")
    ours = digits.scores("digit", "circle", "filter", 64.0)
    assert accuracy(raw, "adversary") >= 0.85
    assert accuracy(ours, "adversary") <= 0.35
    assert accuracy(ours, "utility") >= accuracy(raw, "utility") - 0.05
    baseline = digits.scores("digit", "circle", "gaussian", 64.0)
    assert accuracy(baseline, "adversary") >= accuracy(ours, "adversary")
    assert accuracy(baseline, "utility") <= accuracy(ours, "utility") - 0.10


def test_digits_value_with_the_sensitivity_cap(digits: Lab) -> None:
    """The cap (``max_sensitivity = 1``) on the same choice: ``s ≤ 1``, the digit still hidden far
    below the VAE's round trip, and the adversary at least 0.04 below the Gaussian baseline's at
    equal distortion (measured 0.240 against 0.329, VAE 0.878; 0.196–0.240 over six training keys;
    0.04 is about 1.5 standard errors of the difference of two accuracies on 449 records, well under
    the smallest margin seen, 0.09): trained as ``B = A·C`` the capped filter uses its label shift.

    Not asserted, reported: what the cap costs here. Under the cap a shift of size d needs noise of
    standard deviation d along it, so moving digits onto their circle group costs more than b = 64
    buys at β = 1: circle accuracy 0.682 (0.682–0.767 over six keys), the Gaussian's level, against
    0.936 raw and about 0.93 uncapped. β = 3 gives adversary 0.264 and circle 0.78, better than the
    Gaussian on both."""
    capped = digits.filter("digit", "circle", 64.0, 1.0)
    assert label_sensitivity(capped) <= 1.0 + 1e-9
    ours = digits.scores("digit", "circle", "filter", 64.0, 1.0)
    baseline = digits.scores("digit", "circle", "gaussian", 64.0)
    vae = digits.scores("digit", "circle", "vae")
    assert accuracy(ours, "adversary") <= accuracy(vae, "adversary") - 0.3
    assert accuracy(ours, "adversary") <= accuracy(baseline, "adversary") - 0.04


def test_digits_at_least_5_is_only_partly_hidden_while_parity_is_kept(digits: Lab) -> None:
    """Private "digit ≥ 5", utility parity, ``b = 64``: a binary private label gets one shift per
    class, which cannot move 5–9 onto 0–4 digit by digit, so only noise hides it, and noise that
    hides it also hides parity. Expected: a partial fall of the adversary, parity kept far better
    than by the Gaussian baseline.

    Measured (logistic): adversary raw 0.856, VAE 0.916, filter 0.656 (majority 0.489; 0.609–0.689
    over six training keys), Gaussian 0.600; parity raw 0.880, VAE 0.911, filter 0.776
    (0.776–0.827 over six keys), Gaussian 0.640. Claims: the adversary at least 0.15 below the
    VAE's round trip; parity at least 0.10 above the Gaussian's. Not claimed: parity "within a few
    points of raw" — it loses 5–10 points; the bound of 0.15 below raw only guards against a
    collapse to the Gaussian's level."""
    raw = digits.scores("at_least_5", "parity", "raw")
    vae = digits.scores("at_least_5", "parity", "vae")
    ours = digits.scores("at_least_5", "parity", "filter", 64.0)
    baseline = digits.scores("at_least_5", "parity", "gaussian", 64.0)
    assert accuracy(ours, "adversary") <= accuracy(vae, "adversary") - 0.15
    assert accuracy(ours, "utility") >= accuracy(raw, "utility") - 0.15
    assert accuracy(ours, "utility") >= accuracy(baseline, "utility") + 0.10


# ---------------------------------------------------------------------------------------------
# mutual information


def test_mutual_information_with_the_private_label_falls(adult: Lab, digits: Lab) -> None:
    """Ross's k-NN estimate on the latents (the posterior draw ``z`` vs the filtered ``z̃`` of the same
    records) and the classifier lower bound ``H(Y) − CE`` on the records (raw vs released).
    Claim: the filter removes at least half of what the kNN estimate sees in ``z`` and at least
    three quarters of the classifier bound on raw records. Measured: Adult (b = 16) kNN 0.050 vs
    0.225 nats, bound 0.012 vs 0.308; digits value (b = 64) kNN 0.44 vs 1.74, bound 0.245 vs
    2.12."""
    for lab, private, utility, budget in ((adult, "sex", "income", 16.0), (digits, "digit", "circle", 64.0)):
        release = lab.privatized(
            private, lab.filter(private, utility, budget), ("filter", utility, budget, None)
        )
        labels = lab.release.data.labels[private]
        before = knn_mutual_information(release.latents, labels)
        after = knn_mutual_information(release.filtered, labels)
        assert after <= 0.5 * before, lab.name
        raw_bound = lab.scores(private, utility, "raw")["adversary"]["mutual_information_bound"]
        released_bound = lab.scores(private, utility, "filter", budget)["adversary"]["mutual_information_bound"]
        assert raw_bound > 0.1, lab.name
        assert released_bound <= 0.25 * raw_bound, lab.name


# ---------------------------------------------------------------------------------------------
# two users with opposite choices, one VAE


def test_two_users_with_opposite_choices_are_each_protected_in_the_pooled_release(digits: Lab) -> None:
    """Group 1 privatizes "digit ≥ 5" and keeps parity, group 2 the reverse (a keyed fair coin per
    record of the release part); each choice's filter (``b = 64``) is trained once on the shared
    VAE's training part. The adversary for each private label is trained on the first half of the
    *pooled* release — where the other group's records show that label on purpose — and scored on
    the group's records of the second half.

    Claims: the adversary is at least 0.12 below raw on each group (measured 0.655 against 0.850
    and 0.586 against 0.877), and pooling gives no more than 0.08 over a release in which everyone
    made the group's choice (two accuracies on 206 and 244 records: a standard error of about
    0.045 for the difference; measured +0.034 and −0.033). The kept label in the pooled release:
    at least 0.10 above its majority rate (measured 0.762 and 0.660 against 0.49 and 0.48; lower
    than in a single-choice release, 0.786 and 0.754, since the other group's records, half of the
    classifier's training set, hide it)."""
    choices = {1: ("at_least_5", "parity"), 2: ("parity", "at_least_5")}
    data = digits.release.data
    group = 1 + keyed_generator(SECRET, "digits", "two-users", "group").integers(0, 2, data.rows)
    filters = {number: digits.filter(private, utility, 64.0) for number, (private, utility) in choices.items()}
    pooled = np.zeros_like(data.matrix)
    for number, (private, _) in choices.items():
        members = np.flatnonzero(group == number)
        part = fd.EncodedPart(
            data.subset(members), digits.release.mean[members], digits.release.log_variance[members]
        )
        rng = keyed_generator(SECRET, "digits", "two-users", number)
        pooled[members] = fd.privatize_part(digits.model, part, private, filters[number], rng).matrix
    half = data.rows // 2
    for number, (private, utility) in choices.items():
        test = half + np.flatnonzero(group[half:] == number)
        single = digits.privatized(private, filters[number], ("filter", utility, 64.0, None)).matrix

        def score(matrix: np.ndarray, label: str, test: np.ndarray = test) -> Any:
            return classifier_scores(
                matrix[:half], data.labels[label][:half], matrix[test], data.labels[label][test], 2
            )

        raw = score(data.matrix, private)
        pooled_adversary = score(pooled, private)
        assert pooled_adversary.accuracy <= raw.accuracy - 0.12, number
        assert pooled_adversary.accuracy <= score(single, private).accuracy + 0.08, number
        kept = score(pooled, utility)
        assert kept.accuracy >= kept.majority_rate + 0.10, number
