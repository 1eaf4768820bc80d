"""The three evaluation datasets of issue 5 as a filter release sees them (a ``FeatureSpec`` with
public domains only, the VAE's feature matrix, and the label codes, never features), and the
engine-free path of a record through the release that the reproduction test and the benchmark share:
train the shared VAE, privatize a part with a filter (posterior draw, ``z̃ = z + Aε + B e_y``,
decode, read the released records back as a feature matrix), and score fresh classifiers on it.

* UCI Adult (``../shared/datasets/adult``, no header, ``", "`` separators, ``?`` for unknown; test
  labels end in ``"."``). Features: the 12 attributes other than ``sex`` and ``income`` (106
  feature-matrix columns); labels ``sex`` (Female, Male) and ``income`` (<=50K, >50K). Numeric bounds
  and category lists are those of ``examples/tabular_adult_schema.yaml`` (from ``adult.names`` and
  the CPS coding; ``fnlwgt`` above 1,000,000 is clipped).
* UCI Abalone (``../shared/datasets/abalone/abalone.csv``, no header). Features: the 7 physical
  measurements, bounded by the public physical limits of ``examples/tabular_abalone_schema.yaml``
  (lengths 0–200 mm, weights 0–1000 g, in the file's units of /200; ``height`` clipped); labels
  ``sex`` (M, F, I) and ``rings > 10`` (no, yes). ``rings`` itself is not a feature, since it would
  release the utility label verbatim.
* scikit-learn's bundled 8×8 digits (``load_digits``, 1,797 images, no download): 64 integer pixel
  features with the documented range 0–16; labels ``digit`` (0–9), ``at_least_5`` (digit ≥ 5),
  ``parity`` (even, odd) and ``circle`` (the digit contains a closed loop: 0, 6, 8, 9).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.datasets import load_digits

from schemas.filter.features import FeatureSpec
from transforms.core.keyed_randomness import keyed_generator
from transforms.filter.evaluation import ClassifierKind, release_evaluation
from transforms.filter.features import decode_features, encode_features, encode_label, feature_layout
from transforms.filter.inference import decode_latents, encode_latents
from transforms.filter.latent_filter import LinearLatentFilter, apply_latent_filter, sample_posterior
from transforms.filter.vae import (
    VaeArchitecture,
    VaeTrainingConfig,
    VariationalAutoencoder,
    train_vae,
)

PROJECT = Path(__file__).resolve().parents[2]
DATASETS = PROJECT.parent / "shared" / "datasets"

ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
    "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
    "income",
)
ADULT_SPEC = FeatureSpec.model_validate(
    {
        "features": [
            {"type": "numeric", "name": "age", "bounds": [17, 90], "integer": True},
            {
                "type": "categorical",
                "name": "workclass",
                "categories": [
                    "Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
                    "State-gov", "Without-pay", "Never-worked", "?",
                ],
            },
            {
                "type": "numeric",
                "name": "fnlwgt",
                "bounds": [1, 1000000],
                "integer": True,
                "out_of_bounds": "clip",
            },
            {
                "type": "categorical",
                "name": "education",
                "categories": [
                    "Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm",
                    "Assoc-voc", "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th", "Doctorate",
                    "5th-6th", "Preschool",
                ],
            },
            {"type": "numeric", "name": "education-num", "bounds": [0.5, 16.5], "integer": True},
            {
                "type": "categorical",
                "name": "marital-status",
                "categories": [
                    "Married-civ-spouse", "Divorced", "Never-married", "Separated", "Widowed",
                    "Married-spouse-absent", "Married-AF-spouse",
                ],
            },
            {
                "type": "categorical",
                "name": "occupation",
                "categories": [
                    "Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                    "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                    "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
                    "Armed-Forces", "?",
                ],
            },
            {
                "type": "categorical",
                "name": "relationship",
                "categories": ["Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"],
            },
            {
                "type": "categorical",
                "name": "race",
                "categories": ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"],
            },
            {"type": "numeric", "name": "capital-gain", "bounds": [0, 99999], "integer": True},
            {"type": "numeric", "name": "capital-loss", "bounds": [0, 99999], "integer": True},
            {"type": "numeric", "name": "hours-per-week", "bounds": [1, 99], "integer": True},
            {
                "type": "categorical",
                "name": "native-country",
                "categories": [
                    "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
                    "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba",
                    "Iran", "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico",
                    "Portugal", "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan",
                    "Haiti", "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand",
                    "Yugoslavia", "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands",
                    "?",
                ],
            },
        ]
    }
)

ABALONE_COLUMNS = (
    "sex", "length", "diameter", "height", "whole_weight", "shucked_weight", "viscera_weight",
    "shell_weight", "rings",
)
ABALONE_SPEC = FeatureSpec.model_validate(
    {
        "features": [
            {"type": "numeric", "name": "length", "bounds": [0.0, 1.0]},
            {"type": "numeric", "name": "diameter", "bounds": [0.0, 1.0]},
            {"type": "numeric", "name": "height", "bounds": [0.0, 1.0], "out_of_bounds": "clip"},
            {"type": "numeric", "name": "whole_weight", "bounds": [0.0, 5.0]},
            {"type": "numeric", "name": "shucked_weight", "bounds": [0.0, 5.0]},
            {"type": "numeric", "name": "viscera_weight", "bounds": [0.0, 5.0]},
            {"type": "numeric", "name": "shell_weight", "bounds": [0.0, 5.0]},
        ]
    }
)

DIGIT_PIXELS = tuple(f"pixel_{row}_{column}" for row in range(8) for column in range(8))
DIGITS_SPEC = FeatureSpec.model_validate(
    {
        "features": [
            {"type": "numeric", "name": name, "bounds": [0, 16], "integer": True} for name in DIGIT_PIXELS
        ]
    }
)
CIRCLE_DIGITS = (0, 6, 8, 9)


@dataclass(frozen=True)
class LabelledFeatures:
    """Records as the VAE sees them: ``frame`` holds the spec's feature columns, ``matrix`` the
    encoded float32 feature matrix, ``labels[name]`` the integer codes and ``classes[name]`` the
    label's public category list."""

    name: str
    spec: FeatureSpec
    frame: pd.DataFrame
    matrix: np.ndarray
    labels: dict[str, np.ndarray]
    classes: dict[str, tuple[str, ...]]

    @property
    def rows(self) -> int:
        return int(self.matrix.shape[0])

    def subset(self, rows: np.ndarray) -> LabelledFeatures:
        """The records at positions ``rows`` (in that order)."""
        rows = np.asarray(rows)
        return LabelledFeatures(
            self.name,
            self.spec,
            self.frame.iloc[rows].reset_index(drop=True),
            self.matrix[rows],
            {name: codes[rows] for name, codes in self.labels.items()},
            self.classes,
        )


def _labelled(
    name: str, spec: FeatureSpec, frame: pd.DataFrame, labels: dict[str, tuple[pd.Series, tuple[str, ...]]]
) -> LabelledFeatures:
    features = frame[list(spec.names)].reset_index(drop=True)
    codes = {
        label: encode_label(column, list(categories), label) for label, (column, categories) in labels.items()
    }
    return LabelledFeatures(
        name,
        spec,
        features,
        encode_features(features, spec).matrix,
        codes,
        {label: categories for label, (_, categories) in labels.items()},
    )


@lru_cache(maxsize=2)
def adult(part: str) -> LabelledFeatures:
    """``part`` is ``"train"`` (32,561 records) or ``"test"`` (16,281)."""
    path = DATASETS / "adult" / f"adult-{part}.csv"
    frame = pd.read_csv(path, header=None, names=list(ADULT_COLUMNS), skipinitialspace=True, dtype=str)
    frame = frame.dropna(how="all")
    for feature in ADULT_SPEC.features:
        if feature.type == "numeric":
            frame[feature.name] = pd.to_numeric(frame[feature.name])
    income = frame["income"].str.rstrip(".")
    return _labelled(
        "adult",
        ADULT_SPEC,
        frame,
        {"sex": (frame["sex"], ("Female", "Male")), "income": (income, ("<=50K", ">50K"))},
    )


@lru_cache(maxsize=1)
def abalone() -> LabelledFeatures:
    """All 4,177 records, in file order."""
    frame = pd.read_csv(DATASETS / "abalone" / "abalone.csv", header=None, names=list(ABALONE_COLUMNS))
    old = np.where(frame["rings"] > 10, "yes", "no")
    return _labelled(
        "abalone",
        ABALONE_SPEC,
        frame,
        {"sex": (frame["sex"], ("M", "F", "I")), "rings_over_10": (pd.Series(old), ("no", "yes"))},
    )


@lru_cache(maxsize=1)
def digits() -> LabelledFeatures:
    """All 1,797 images of scikit-learn's bundled 8×8 digits, in their stored order."""
    bunch = load_digits()
    frame = pd.DataFrame(bunch.data.astype(np.int64), columns=list(DIGIT_PIXELS))
    digit = bunch.target.astype(np.int64)
    text = pd.Series(digit.astype(str))
    return _labelled(
        "digits",
        DIGITS_SPEC,
        frame,
        {
            "digit": (text, tuple(str(value) for value in range(10))),
            "at_least_5": (pd.Series(np.where(digit >= 5, "yes", "no")), ("no", "yes")),
            "parity": (pd.Series(np.where(digit % 2 == 1, "odd", "even")), ("even", "odd")),
            "circle": (pd.Series(np.where(np.isin(digit, CIRCLE_DIGITS), "yes", "no")), ("no", "yes")),
        },
    )


def release_spec(spec: FeatureSpec) -> FeatureSpec:
    """``spec`` with every numeric feature set to ``out_of_bounds: clip``, to read released records
    back into a feature matrix: ``features.decode_features`` rounds an integer feature after clipping
    it, so a half-integer bound (Adult's ``education-num`` in ``[0.5, 16.5]``) can decode to 0,
    just outside the bounds, which the strict spec would refuse."""
    document = spec.model_dump(mode="json")
    for feature in document["features"]:
        if feature["type"] == "numeric":
            feature["out_of_bounds"] = "clip"
    return FeatureSpec.model_validate(document)


@dataclass(frozen=True)
class EncodedPart:
    """Records and their encoder posterior ``N(mean, diag exp(log_variance))``."""

    data: LabelledFeatures
    mean: np.ndarray
    log_variance: np.ndarray


def train_shared_vae(
    matrix: np.ndarray,
    spec: FeatureSpec,
    secret: bytes,
    release_id: str,
    training: VaeTrainingConfig,
    latent_dimension: int = 16,
    hidden_widths: tuple[int, ...] = (128, 128),
    numeric_noise_scale: float = 0.03,
) -> VariationalAutoencoder:
    """Phase 1: the VAE on the feature matrix (labels never enter), from a keyed generator."""
    architecture = VaeArchitecture(
        feature_layout(spec), latent_dimension, hidden_widths, numeric_noise_scale
    )
    rng = keyed_generator(secret, release_id, "vae-training", 0)
    return train_vae(matrix, architecture, rng, training).model


def encode_part(model: VariationalAutoencoder, data: LabelledFeatures) -> EncodedPart:
    mean, log_variance = encode_latents(model, data.matrix)
    return EncodedPart(data, mean, log_variance)


def released_matrix(model: VariationalAutoencoder, spec: FeatureSpec, latents: np.ndarray) -> np.ndarray:
    """Decode latents into released records (the decoder's means, the most probable category,
    rounded integers) and read them back as a feature matrix: what an analyst of the release sees."""
    records = decode_features(decode_latents(model, latents), spec)
    return encode_features(records, release_spec(spec)).matrix


@dataclass(frozen=True)
class PrivatizedPart:
    """One privatization of a part: the posterior draws ``z``, the filtered latents ``z̃`` and the
    released feature matrix decoded from ``z̃``."""

    latents: np.ndarray
    filtered: np.ndarray
    matrix: np.ndarray


def privatize_part(
    model: VariationalAutoencoder,
    part: EncodedPart,
    private_label: str,
    latent_filter: LinearLatentFilter,
    rng: np.random.Generator,
) -> PrivatizedPart:
    """Issue 5, step 3 for one group: ``z ~ q_e(z|x)``, ``z̃ = z + Aε + B e_y``, decode. Draws in the
    order of ``latent_filter.privatize_latents`` (an ``(n, k)`` then an ``(n, m)`` block), so its
    ``z̃`` equals ``privatize_latents(…, rng)``'s for the same generator state."""
    latents = sample_posterior(part.mean, part.log_variance, rng.standard_normal(part.mean.shape))
    noise = rng.standard_normal((part.data.rows, latent_filter.noise_dimension))
    filtered = apply_latent_filter(latents, part.data.labels[private_label], latent_filter, noise)
    return PrivatizedPart(latents, filtered, released_matrix(model, part.data.spec, filtered))


def evaluate_release(
    matrix: np.ndarray,
    data: LabelledFeatures,
    private_label: str,
    utility_label: str,
    classifier: ClassifierKind = "logistic",
) -> dict[str, dict[str, float]]:
    """A fresh adversary and utility classifier trained on the first half of the released records
    and scored on the second half (the records are in keyed random order)."""
    half = data.rows // 2
    private, utility = data.labels[private_label], data.labels[utility_label]
    return release_evaluation(
        matrix[:half],
        private[:half],
        utility[:half],
        matrix[half:],
        private[half:],
        utility[half:],
        len(data.classes[private_label]),
        len(data.classes[utility_label]),
        classifier,
    )


def identity_filter(latent_dimension: int, private_classes: int) -> LinearLatentFilter:
    """``A = 0``, ``B = 0``: the VAE's round trip alone (a posterior draw, decoded), the release at
    ``b = 0``."""
    return LinearLatentFilter(
        np.zeros((latent_dimension, latent_dimension)), np.zeros((latent_dimension, private_classes))
    )
