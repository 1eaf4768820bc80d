"""The private source qualities (``transforms/crowd/global_weights.py``: ``PrivateSourceQuality``
and ``iterate_source_quality(..., private=...)``).

The proof's premise is checked on the real map half (``source_loss_contributions``): for random
blocks and random single-claim value changes (public bandwidths, fixed qualities), the per-source
fixed-point sums move by at most ``2·2^40 + n`` in L1 (``n`` the changed object's claims), and the
sums in noisy units (``>> 20``) by at most ``sensitivity()``; for a source's claims on ``L`` objects,
by at most ``L`` times that. Then the sensitivity by hand, the update against its formula written
out with the keyed stream and the discrete Laplace sampler called directly, the noise's keying,
and the fixed number of private iterations."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from transforms.core.discrete_laplace import discrete_laplace_scale, sample_discrete_laplace
from transforms.core.keyed_randomness import keyed_generator
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.global_weights import (
    GLOBAL_WEIGHTS_NOISE_PURPOSE,
    LOSS_FIXED_POINT_SCALE,
    MINIMUM_MEAN_LOSS,
    PrivateSourceQuality,
    SourceQuality,
    estimate_global_weights,
    iterate_source_quality,
    source_loss_contributions,
    update_source_quality,
)

SECRET = bytes.fromhex("9e" * 32)
SOURCES = 30
UNIT_SHIFT = 20  # fixed point 2^-40 -> noisy units 2^-20


def random_claims(rng: np.random.Generator, objects: int = 6) -> pd.DataFrame:
    """Objects of 1..19 claims from distinct sources among 30 (so sources span objects): all
    identical, or spread at one of three scales around a random centre."""
    rows = []
    for object_id in range(objects):
        n = int(rng.integers(1, 20))
        centre = rng.uniform(-10, 10)
        if rng.random() < 0.3:
            values = np.full(n, centre)
        else:
            values = centre + rng.choice([0.1, 1.0, 5.0]) * rng.standard_normal(n)
        sources = rng.choice(SOURCES, n, replace=False)
        rows += [(object_id, int(s), float(v)) for s, v in zip(sources, values, strict=True)]
    return pd.DataFrame(rows, columns=["object_id", "source_id", "value"])


def moved(rng: np.random.Generator, value: float, others: np.ndarray) -> float:
    kind = rng.integers(0, 4)
    if kind == 0:
        return value + rng.choice([0.01, 0.5, 3.0]) * rng.standard_normal()
    if kind == 1:
        return value + rng.choice([-1, 1]) * 1e3
    if kind == 2:
        return float(rng.choice(others))
    return float(rng.uniform(-20, 20))


def sums(block: ClaimsBlock, quality: SourceQuality) -> pd.Series:
    bandwidths = np.full(block.number_of_objects, 1.0)  # public: the same for both datasets
    frame = source_loss_contributions(block, bandwidths, quality)
    return frame.set_index("source_id")[["loss_fixed", "objects"]]


def differences(before: pd.DataFrame, after: pd.DataFrame) -> tuple[int, int]:
    """L1 distances of the fixed-point sums and of the sums in noisy units."""
    pd.testing.assert_series_equal(before["objects"], after["objects"])
    a, b = before["loss_fixed"].to_numpy(), after["loss_fixed"].to_numpy()
    fixed = sum(abs(int(x) - int(y)) for x, y in zip(a, b, strict=True))
    coarse = sum(abs(int(x >> UNIT_SHIFT) - int(y >> UNIT_SHIFT)) for x, y in zip(a, b, strict=True))
    return fixed, coarse


def private(largest_object: int, objects_per_unit: int = 1, **overrides) -> PrivateSourceQuality:
    values = dict(iterations=3, epsilon_per_iteration=0.5, largest_object=largest_object, secret=SECRET,
                  release_id="private-quality", objects_per_unit=objects_per_unit)
    values.update(overrides)
    return PrivateSourceQuality(**values)


def test_a_changed_claim_moves_the_source_sums_by_at_most_the_sensitivity() -> None:
    """300 random blocks, one claim of one object changed in each (a small or large move, onto
    another claim of the object, anywhere): L1 of the fixed-point sums ≤ ``2·2^40 + n`` and of the
    noisy-unit sums ≤ ``sensitivity()`` with ``largest_object`` the block's largest object."""
    rng = np.random.default_rng(11)
    largest_share = 0.0
    for _ in range(300):
        block = ClaimsBlock.from_frame(random_claims(rng))
        quality = SourceQuality(np.arange(SOURCES), rng.uniform(0.05, 5.0, SOURCES))
        index = int(rng.integers(0, block.number_of_objects))
        part = block.object_slice(index)
        claim = int(rng.integers(part.start, part.stop))
        values = block.values.copy()
        values[claim] = moved(rng, values[claim], block.values[part])
        neighbour = ClaimsBlock(block.object_ids, block.offsets, block.source_ids, values)
        fixed, coarse = differences(sums(block, quality), sums(neighbour, quality))
        n = int(block.counts[index])
        assert fixed <= 2 * LOSS_FIXED_POINT_SCALE + n
        assert coarse <= private(int(block.counts.max())).sensitivity()
        largest_share = max(largest_share, fixed / (2 * LOSS_FIXED_POINT_SCALE))
    assert largest_share > 0.2, "some changes must move the sums by a good part of the bound"


def test_the_worst_single_change_is_within_the_bound() -> None:
    """Two identical claims, the first source nearly weightless: moving its claim far makes its
    loss ≈ 2 (its feature is orthogonal to a KDE that is all the other claim) — the sums move by
    about ``2^40``, half the bound (the per-claim losses are divided by ``n = 2``)."""
    before = pd.DataFrame({"object_id": [0, 0], "source_id": [0, 1], "value": [0.0, 0.0]})
    after = before.assign(value=[1e6, 0.0])
    quality = SourceQuality(np.array([0, 1]), np.array([1e-9, 1.0]))
    fixed, coarse = differences(sums(ClaimsBlock.from_frame(before), quality),
                                sums(ClaimsBlock.from_frame(after), quality))
    assert 0.99 * LOSS_FIXED_POINT_SCALE < fixed <= 2 * LOSS_FIXED_POINT_SCALE + 2
    assert coarse <= private(2).sensitivity()


@pytest.mark.parametrize("objects_per_source", [2, 5])
def test_a_changed_source_moves_the_sums_by_at_most_l_sensitivities(objects_per_source: int) -> None:
    """A source's claims on ``L`` objects all changed: at most ``L (2·2^40 + n_max)`` and
    ``sensitivity()`` with ``objects_per_unit = L``."""
    rng = np.random.default_rng(12 + objects_per_source)
    for _ in range(100):
        frame = random_claims(rng, objects=8)
        source = int(frame["source_id"].value_counts().index[0])
        objects = frame.loc[frame["source_id"] == source, "object_id"].unique()[:objects_per_source]
        frame = frame[(frame["source_id"] != source) | frame["object_id"].isin(objects)].reset_index(drop=True)
        changed = frame["source_id"] == source
        neighbour = frame.copy()
        neighbour.loc[changed, "value"] = [moved(rng, v, frame["value"].to_numpy()) for v in frame.loc[changed, "value"]]
        block = ClaimsBlock.from_frame(frame)
        quality = SourceQuality(np.arange(SOURCES), rng.uniform(0.05, 5.0, SOURCES))
        fixed, coarse = differences(sums(block, quality), sums(ClaimsBlock.from_frame(neighbour), quality))
        largest = int(block.counts.max())
        assert fixed <= objects_per_source * (2 * LOSS_FIXED_POINT_SCALE + largest)
        assert coarse <= private(largest, objects_per_unit=objects_per_source).sensitivity()


@pytest.mark.parametrize(("largest_object", "objects_per_unit", "expected"),
                         [(1, 1, 2_097_154), (25, 1, 2_097_202), (7, 3, 6_291_498), (10_000, 4, 8_468_608)])
def test_the_sensitivity_by_hand(largest_object: int, objects_per_unit: int, expected: int) -> None:
    """``L (2·2^20 + 2 n_max)``: ``2^21 = 2,097,152``."""
    subject = private(largest_object, objects_per_unit)
    assert subject.sensitivity() == expected == objects_per_unit * (2 * 2**20 + 2 * largest_object)
    assert isinstance(subject.sensitivity(), int)


def source_sums_frame() -> pd.DataFrame:
    """Reduced per-source sums, some sources split over two rows (partial sums of two blocks)."""
    return pd.DataFrame({
        "source_id": [3, 1, 2, 3, 4, 5],
        "loss_fixed": np.array([7, 40, 3, 5, 1, 2], dtype=np.int64) * 2**38 + 12345,
        "objects": np.array([2, 9, 3, 1, 2, 4], dtype=np.int64),
    })


def update_by_hand(frame: pd.DataFrame, subject: PrivateSourceQuality, iteration: int) -> dict[int, float]:
    """The private update written out: reduce by source, floor to noisy units, add discrete
    Laplace noise of scale ``sensitivity/ε`` from the iteration's keyed stream, then
    ``g_s = log(Σ L / (L_s/n_s))`` with the floors."""
    reduced = frame.groupby("source_id").sum().sort_index()
    coarse = [int(value) // 2**UNIT_SHIFT for value in reduced["loss_fixed"]]
    rng = keyed_generator(subject.secret, subject.release_id, GLOBAL_WEIGHTS_NOISE_PURPOSE, iteration)
    noise = sample_discrete_laplace(discrete_laplace_scale(subject.epsilon_per_iteration, subject.sensitivity()),
                                    len(coarse), rng)
    objects = reduced["objects"].tolist()
    mean = [max((c + int(z)) / 2**UNIT_SHIFT / n, MINIMUM_MEAN_LOSS)
            for c, z, n in zip(coarse, noise, objects, strict=True)]
    total = max(sum(m * n for m, n in zip(mean, objects, strict=True)), MINIMUM_MEAN_LOSS)
    return {int(s): max(math.log(total / m), 1e-6) for s, m in zip(reduced.index, mean, strict=True)}


def as_dict(quality: SourceQuality) -> dict[int, float]:
    return dict(zip(quality.source_ids.tolist(), quality.quality.tolist(), strict=True))


@pytest.mark.parametrize("iteration", [1, 2, 7])
def test_the_update_is_its_formula_with_the_keyed_noise(iteration: int) -> None:
    subject = private(12, epsilon_per_iteration=0.2)
    result = as_dict(subject.update(source_sums_frame(), iteration))
    expected = update_by_hand(source_sums_frame(), subject, iteration)
    assert list(result) == [1, 2, 3, 4, 5]
    for source, value in expected.items():
        assert result[source] == pytest.approx(value, rel=1e-12), source


def test_the_noise_is_keyed_by_secret_release_and_iteration() -> None:
    frame = source_sums_frame()
    subject = private(12, epsilon_per_iteration=0.05)
    first = subject.update(frame, 1).quality
    np.testing.assert_array_equal(subject.update(frame, 1).quality, first)
    np.testing.assert_array_equal(private(12, epsilon_per_iteration=0.05).update(frame.iloc[::-1], 1).quality, first)
    others = [
        subject.update(frame, 2).quality,
        private(12, epsilon_per_iteration=0.05, secret=bytes(32)).update(frame, 1).quality,
        private(12, epsilon_per_iteration=0.05, release_id="another").update(frame, 1).quality,
    ]
    for other in others:
        assert not np.array_equal(other, first)
    exact = update_source_quality(frame).quality
    assert not np.allclose(first, exact, rtol=1e-3), "at this epsilon the noise must be visible"


def test_a_huge_epsilon_is_the_exact_update_up_to_the_noisy_unit() -> None:
    frame = source_sums_frame()
    nearly_exact = private(12, epsilon_per_iteration=1e7).update(frame, 1)
    exact = update_source_quality(frame)
    np.testing.assert_array_equal(nearly_exact.source_ids, exact.source_ids)
    np.testing.assert_allclose(nearly_exact.quality, exact.quality, rtol=1e-5)


@pytest.mark.parametrize("iterations", [0, 1, 4])
def test_private_iteration_runs_exactly_its_iterations_and_ignores_the_stopping_rule(iterations: int) -> None:
    rng = np.random.default_rng(21)
    block = ClaimsBlock.from_frame(random_claims(rng, objects=10))
    bandwidths = np.full(block.number_of_objects, 1.0)
    seen: list[SourceQuality] = []
    announced: list[int] = []

    def loss_sums(quality: SourceQuality) -> pd.DataFrame:
        seen.append(quality)
        return source_loss_contributions(block, bandwidths, quality)

    subject = private(int(block.counts.max()), iterations=iterations)
    # a tolerance that stops the exact loop at once, and an iteration cap below the count
    quality, made, converged = iterate_source_quality(loss_sums, tolerance=1e9, max_iterations=1,
                                                      on_iteration=announced.append, private=subject)
    assert made == iterations and converged is False
    assert len(seen) == iterations and announced == list(range(1, iterations + 1))
    expected = SourceQuality.uniform()
    for iteration in range(1, iterations + 1):
        expected = subject.update(source_loss_contributions(block, bandwidths, expected), iteration)
    np.testing.assert_array_equal(quality.source_ids, expected.source_ids)
    np.testing.assert_array_equal(quality.quality, expected.quality)
    # the exact loop with the same tolerance stops after one update
    _, exact_made, exact_converged = iterate_source_quality(loss_sums, tolerance=1e9, max_iterations=50)
    assert exact_made == 1 and exact_converged
    # estimate_global_weights passes the private form through
    in_memory = estimate_global_weights(block, bandwidths, tolerance=1e9, max_iterations=1, private=subject)
    assert in_memory[1] == iterations
    np.testing.assert_array_equal(in_memory[0].quality, expected.quality)


def test_a_source_on_too_many_objects_is_refused_before_its_sum_can_wrap() -> None:
    """A review wrapped an int64 source sum (two partials of 2^62 − 2^40, one claim's change of
    2^41 flipped its sign); the sums fit while a source answers at most 2^21 objects."""
    from transforms.crowd.global_weights import LOSS_FIXED, MAX_OBJECTS_PER_SOURCE, OBJECTS

    private = PrivateSourceQuality(iterations=1, epsilon_per_iteration=1.0, largest_object=2, secret=SECRET,
                                   release_id="r")
    worst = MAX_OBJECTS_PER_SOURCE * 2 * LOSS_FIXED_POINT_SCALE
    fits = pd.DataFrame({"source_id": [1, 1], LOSS_FIXED: [worst // 2, worst // 2],
                         OBJECTS: [MAX_OBJECTS_PER_SOURCE // 2, MAX_OBJECTS_PER_SOURCE // 2]})
    assert private.exact_sums(fits)[1][0] == worst >> UNIT_SHIFT
    too_many = fits.assign(**{OBJECTS: [MAX_OBJECTS_PER_SOURCE // 2, MAX_OBJECTS_PER_SOURCE // 2 + 1]})
    with pytest.raises(ValueError, match="more than 2097152 objects"):
        private.exact_sums(too_many)
