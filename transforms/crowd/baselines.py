"""The two baselines PrisCrowd is compared against (issue 2, method item 8; evaluation only).

* ``Uniform``: PrisCrowd with every claim of an object weighted equally — the same candidate
  synthesis and the same randomized plausible-deniability test, only the truth-discovery
  weights are replaced by ``1/|S_i|``. It isolates what the global/local/combined weights
  buy. ``uniform_weights`` gives the weights; the caller feeds them to the same synthesis.
* ``Basic``: the textbook differential-privacy answer — publish every raw claim with Laplace
  noise added (``basic_laplace_release``). No synthesis, no weights. ``resampled`` draws ``m``
  of an object's noisy claims (post-processing) so that it is compared at the release's ``m``.
* ``Noisy histogram`` (issue 29): per object, ``NOISY_HISTOGRAM_BINS`` equal bins of the public
  range, Laplace(2/ε) noise on each count, clipped at 0, normalized, ``m`` claims drawn
  (``noisy_histogram_release``): the crude density baseline the ``histogram`` mechanism must beat.

Neither is ever published as a release; they exist so the benchmarks and the reproduction
tests can show the method's advantage.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from transforms.core.keyed_randomness import keyed_generator
from transforms.crowd.claims_block import ClaimsBlock

BASIC_PURPOSE = "crowd/basic"
RESAMPLE_PURPOSE = "crowd/basic-resample"
NOISY_HISTOGRAM_PURPOSE = "crowd/noisy-histogram-baseline"
NOISY_HISTOGRAM_BINS = 20


def uniform_weights(block: ClaimsBlock) -> np.ndarray:
    """(N,) the Uniform baseline's weights: ``1/|S_i|`` for every claim of object ``i``.

    They sum to 1 within each object, like the combined weights they replace, so the weighted
    KDE, the seed sampling and the privacy test run unchanged (and the weight ratio
    ``max/min`` is 1, the smallest possible ``R`` in Theorem 2).
    """
    counts = block.counts
    return np.repeat(1.0 / np.maximum(counts, 1), counts).astype(np.float64)


def basic_laplace_scale(epsilon: float, public_range: tuple[float, float]) -> float:
    """Laplace scale ``(hi − lo) / ε`` of the Basic baseline (validates its arguments)."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("the Basic baseline needs a positive finite epsilon")
    low, high = float(public_range[0]), float(public_range[1])
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError("the public range must be two finite numbers lo < hi")
    return (high - low) / epsilon


def basic_laplace_release(
    block: ClaimsBlock,
    epsilon: float,
    public_range: tuple[float, float],
    secret: bytes,
    release_id: str,
) -> pd.DataFrame:
    """The Basic baseline: every raw claim, clipped to the public range, plus Laplace noise.

    Each claim ``x`` is clipped to ``[lo, hi]`` and released as ``clip(x) + Lap((hi − lo)/ε)``.
    Privacy: changing one claim moves its clipped value by at most ``hi − lo`` (the sensitivity,
    from the *stated public range*, never from the data), so each released value is ε-DP for
    that claim, and the release is ε-DP with one claim of one object as the unit of privacy
    (each claim appears in exactly one output row) — the same unit as PrisCrowd's Theorem 2
    guarantee, so the comparison at ε = 0.1, 1, 10 is like for like. Released values are not
    clipped back into the range (that would be free post-processing, but Basic as stated in
    issue 2 is the plain noisy claim).

    Randomness: object ``i``'s noise comes from
    ``keyed_generator(secret, release_id, "crowd/basic", object_id)``, one Laplace draw per
    claim in the block's canonical order (by source id), so the output for an object does not
    depend on which other objects share the block.

    Returns:
        Columns ``object_id`` (the block's id type), ``claim_index`` (int32, 0.. within the
        object) and ``value`` (float64), one row per input claim, in block order.
    """
    scale = basic_laplace_scale(epsilon, public_range)
    low, high = float(public_range[0]), float(public_range[1])
    clipped = np.clip(block.values, low, high)
    noise = np.empty(block.number_of_claims, dtype=np.float64)
    counts = block.counts
    for object_index, object_id in enumerate(block.object_ids):
        rows = block.object_slice(object_index)
        generator = keyed_generator(secret, release_id, BASIC_PURPOSE, object_id)
        noise[rows] = generator.laplace(0.0, scale, size=int(counts[object_index]))
    first_claim = np.repeat(block.offsets[:-1], counts)
    claim_index = (np.arange(block.number_of_claims, dtype=np.int64) - first_claim).astype(np.int32)
    return pd.DataFrame(
        {
            "object_id": np.repeat(block.object_ids, counts),
            "claim_index": claim_index,
            "value": clipped + noise,
        }
    )


def resampled(released: pd.DataFrame, claims_per_object: int, secret: bytes, release_id: str) -> pd.DataFrame:
    """``m`` of each object's released claims drawn uniformly with replacement (post-processing of
    any release: its ε is unchanged), so that a baseline is compared at the same ``m``."""
    parts = []
    for object_id, group in released.groupby("object_id", sort=True):
        rng = keyed_generator(secret, release_id, RESAMPLE_PURPOSE, object_id)
        values = group["value"].to_numpy(np.float64)
        parts.append(pd.DataFrame({"object_id": object_id, "claim_index": np.arange(claims_per_object, dtype=np.int32),
                                   "value": values[rng.integers(0, len(values), claims_per_object)]}))
    return pd.concat(parts, ignore_index=True)


def noisy_histogram_release(block: ClaimsBlock, epsilon: float, public_range: tuple[float, float],
                            claims_per_object: int, secret: bytes, release_id: str,
                            bins: int = NOISY_HISTOGRAM_BINS) -> pd.DataFrame:
    """The noisy-histogram baseline: per object, ``bins`` equal bins of ``[lo, hi]``, each count
    plus Laplace(2/ε) (one claim's value moves one unit between two bins: L1 sensitivity 2, so
    the object's histogram is ε-DP and, each claim in one object, the release is ε-DP for one
    claim's value), clipped at 0 and normalized (uniform when all are 0); ``m`` claims drawn
    from it, uniform within their bin. Noise from ``keyed_generator(secret, release_id,
    "crowd/noisy-histogram-baseline", object_id)`` (numpy's Laplace: a baseline for the
    benchmarks, never a release)."""
    basic_laplace_scale(epsilon, public_range)  # validates both
    low, high = float(public_range[0]), float(public_range[1])
    edges = np.linspace(low, high, bins + 1)
    parts = []
    for object_index, object_id in enumerate(block.object_ids):
        values = np.clip(block.values[block.object_slice(object_index)], low, high)
        counts = np.histogram(values, bins=edges)[0].astype(np.float64)
        rng = keyed_generator(secret, release_id, NOISY_HISTOGRAM_PURPOSE, object_id)
        mass = np.maximum(counts + rng.laplace(0.0, 2.0 / epsilon, bins), 0.0)
        mass = mass / mass.sum() if mass.sum() > 0 else np.full(bins, 1.0 / bins)
        chosen = rng.choice(bins, size=claims_per_object, p=mass)
        drawn = edges[chosen] + rng.random(claims_per_object) * (edges[1] - edges[0])
        parts.append(pd.DataFrame({"object_id": object_id, "claim_index": np.arange(claims_per_object, dtype=np.int32),
                                   "value": drawn}))
    return pd.concat(parts, ignore_index=True)
