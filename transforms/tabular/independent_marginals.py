"""Baseline: DP independent marginals — every attribute sampled on its own from a noisy 1-way histogram.

Issue 3, "Evaluation", baselines at the same ε. The simplest DP synthesizer: it keeps each
attribute's distribution and none of the dependencies, so it bounds from below what a Bayesian
network should add (PrivBayes, Zhang et al. 2014, uses it as a reference point too).

Privacy (neighbours: same public record count, one record replaced). Replacing a record changes
each attribute's histogram in two cells by one, so each histogram has L1 sensitivity 2 and the
``m`` histograms together ``2m``. Discrete Laplace noise of scale ``2m/ε`` on every cell
(``discrete_laplace_scale(ε, 2m)``, rounded up; exact integer sampling) makes the released
histograms ``ε``-DP — the same as ``ε/m`` per histogram composed over the ``m`` attributes.
Clipping negatives to zero, normalizing (an all-zero histogram becomes uniform) and sampling are
post-processing.

Randomness: everything comes from the caller's generator (a keyed stream in a release), in this
order: the noise of attribute 0, 1, …, ``m−1``, then the samples of attribute 0, 1, ….
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from transforms.core.discrete_laplace import discrete_laplace_scale, sample_discrete_laplace
from transforms.tabular.contingency import contingency_counts

REPLACE_ONE_HISTOGRAM_SENSITIVITY = 2


def _checked_codes(codes: np.ndarray, domain_sizes: Sequence[int]) -> np.ndarray:
    matrix = np.asarray(codes)
    if matrix.ndim != 2 or matrix.shape[1] != len(domain_sizes):
        raise ValueError(f"codes must be an (n, {len(domain_sizes)}) matrix, got shape {matrix.shape}")
    if len(domain_sizes) == 0:
        raise ValueError("the baseline needs at least one attribute")
    return matrix


def noisy_one_way_counts(
    codes: np.ndarray, domain_sizes: Sequence[int], epsilon: float, rng: np.random.Generator
) -> list[np.ndarray]:
    """Each attribute's histogram plus discrete Laplace noise of scale ``2m/ε`` (int64, may be negative)."""
    matrix = _checked_codes(codes, domain_sizes)
    attribute_count = len(domain_sizes)
    scale = discrete_laplace_scale(epsilon, REPLACE_ONE_HISTOGRAM_SENSITIVITY * attribute_count)
    noisy = []
    for attribute in range(attribute_count):
        counts = contingency_counts(matrix, (attribute,), domain_sizes)
        noisy.append(counts + sample_discrete_laplace(scale, counts.size, rng))
    return noisy


def distributions_from_noisy_counts(noisy_counts: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Clip at zero and normalize each histogram; one that is all zero after clipping becomes uniform."""
    distributions = []
    for counts in noisy_counts:
        clipped = np.clip(np.asarray(counts, dtype=np.float64), 0.0, None)
        total = clipped.sum()
        distributions.append(clipped / total if total > 0 else np.full(clipped.size, 1.0 / clipped.size))
    return distributions


def independent_marginals_synthesis(
    codes: np.ndarray,
    domain_sizes: Sequence[int],
    epsilon: float,
    record_count: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """``record_count`` coded records (int32, ``(record_count, m)``) whose attributes are drawn
    independently from the ε-DP noisy 1-way marginals of ``codes``."""
    if isinstance(record_count, bool) or not isinstance(record_count, int | np.integer) or record_count < 0:
        raise ValueError(f"record_count must be a non-negative integer, got {record_count!r}")
    distributions = distributions_from_noisy_counts(noisy_one_way_counts(codes, domain_sizes, epsilon, rng))
    synthetic = np.empty((int(record_count), len(domain_sizes)), dtype=np.int32)
    for attribute, distribution in enumerate(distributions):
        synthetic[:, attribute] = rng.choice(distribution.size, size=int(record_count), p=distribution)
    return synthetic
