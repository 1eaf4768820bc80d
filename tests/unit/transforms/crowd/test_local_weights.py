"""Hampel loss and the IRWLS local weights (transforms/crowd/local_weights.py).

The vectorized all-objects IRWLS is compared with a plain per-object loop written from Kim &
Scott's kernelized IRWLS (own Hampel functions from the piecewise definitions, ``np.percentile``
thresholds, dense kernel matrices), and checked for the fixed-point property directly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.unit.transforms.crowd.test_gaussian_kernel import (
    claim_mask,
    random_block,
    random_split,
    spread_bandwidths,
)
from transforms.crowd.bandwidth import object_bandwidths
from transforms.crowd.claims_block import ClaimsBlock
from transforms.crowd.local_weights import hampel_phi, hampel_psi, hampel_rho, local_weights


def psi_by_definition(r: float, a: float, b: float, c: float) -> float:
    if r < a:
        return r
    if r < b:
        return a
    if r < c:
        return a * (c - r) / (c - b)
    return 0.0


def rho_by_definition(r: float, a: float, b: float, c: float) -> float:
    if r < a:
        return r * r / 2
    if r < b:
        return a * r - a * a / 2
    if r < c:
        return -a * (c - r) ** 2 / (2 * (c - b)) + a * (b + c - a) / 2
    return a * (b + c - a) / 2


def test_hampel_psi_and_rho_match_their_piecewise_definitions():
    rng = np.random.default_rng(1)
    a = rng.uniform(0.1, 1.0, 500)
    b = a + rng.uniform(0.01, 1.0, 500)
    c = b + rng.uniform(0.01, 1.0, 500)
    r = rng.uniform(0, 3.5, 500)
    psi = hampel_psi(r, (a, b, c))
    rho = hampel_rho(r, (a, b, c))
    for j in range(500):
        assert psi[j] == pytest.approx(psi_by_definition(r[j], a[j], b[j], c[j]), rel=1e-13, abs=1e-15)
        assert rho[j] == pytest.approx(rho_by_definition(r[j], a[j], b[j], c[j]), rel=1e-13, abs=1e-15)


def test_rho_is_continuous_and_psi_is_its_derivative():
    a, b, c = 0.4, 0.9, 1.6
    grid = np.linspace(0, 2.5, 25001)
    rho = hampel_rho(grid, (a, b, c))
    assert np.max(np.abs(np.diff(rho))) < 1e-4
    derivative = np.gradient(rho, grid)
    interior = np.all(np.abs(grid[:, None] - np.array([a, b, c])[None, :]) > 1e-3, axis=1)
    np.testing.assert_allclose(
        derivative[interior][1:-1], hampel_psi(grid, (a, b, c))[interior][1:-1], atol=1e-6
    )
    assert float(hampel_rho(np.array(5.0), (a, b, c))) == pytest.approx(a * (b + c - a) / 2)


def test_phi_is_psi_over_r_with_one_at_zero_and_degenerate_pieces_are_skipped():
    r = np.array([0.0, 0.2, 0.5, 1.0, 1.5, 2.0])
    phi = hampel_phi(r, (0.4, 0.8, 1.6))
    np.testing.assert_allclose(phi, [1.0, 1.0, 0.8, 0.4 * 0.6 / 0.8, 0.4 * 0.1 / 0.8 / 1.5, 0.0])
    # b == c: no descending piece, psi drops from a to 0 at b
    np.testing.assert_array_equal(
        hampel_psi(np.array([0.3, 0.7, 0.8, 0.9]), (0.5, 0.8, 0.8)), [0.3, 0.5, 0.0, 0.0]
    )
    # a == b: no flat piece
    assert float(hampel_psi(np.array(0.6), (0.5, 0.5, 1.0))) == pytest.approx(0.5 * 0.4 / 0.5)


def brute_force_irwls(values: np.ndarray, h: float, tolerance: float, max_iterations: int):
    """Kim & Scott IRWLS on one object with the Hampel loss, written out plainly."""
    n = len(values)
    kernel = np.array([[math.exp(-((x - y) ** 2) / (2 * h * h)) for y in values] for x in values])

    def distances(w: np.ndarray) -> np.ndarray:
        return np.array([math.sqrt(max(1 - 2 * kernel[j] @ w + w @ kernel @ w, 0.0)) for j in range(n)])

    w = np.full(n, 1.0 / n)
    r = distances(w)
    if r.max() == 0:
        return w, 0, True
    a, b, c = np.percentile(r, [50, 75, 95])
    objective = np.mean([rho_by_definition(x, a, b, c) for x in r])
    for iteration in range(1, max_iterations + 1):
        phi = np.array([1.0 if x == 0 else psi_by_definition(x, a, b, c) / x for x in r])
        if phi.sum() == 0:
            return np.full(n, 1.0 / n), iteration, True
        w = phi / phi.sum()
        r = distances(w)
        new_objective = np.mean([rho_by_definition(x, a, b, c) for x in r])
        assert new_objective <= objective * (
            1 + 1e-12
        )  # kernelized IRWLS never increases J (Kim & Scott 2012)
        if abs(new_objective - objective) <= tolerance * objective:
            return w, iteration, True
        objective = new_objective
    return w, max_iterations, False


def test_vectorized_irwls_matches_the_per_object_loop():
    rng = np.random.default_rng(6)
    block = random_block(rng, objects=40, max_claims=18)
    bandwidths = spread_bandwidths(block)
    result = local_weights(block, bandwidths, tolerance=1e-8, max_iterations=60)
    agreeing_counts = 0
    for i in range(block.number_of_objects):
        part = block.object_slice(i)
        weights, iterations, converged = brute_force_irwls(block.values[part], bandwidths[i], 1e-8, 60)
        np.testing.assert_allclose(result.weights[part], weights, rtol=0, atol=1e-7)
        agreeing_counts += int(result.iterations[i] == iterations and result.converged[i] == converged)
    assert agreeing_counts >= block.number_of_objects - 2


def test_converged_weights_are_a_fixed_point_of_the_irwls_map():
    rng = np.random.default_rng(7)
    block = random_block(rng, objects=30, max_claims=25)
    bandwidths = spread_bandwidths(block)
    result = local_weights(block, bandwidths, tolerance=1e-13, max_iterations=2000)
    checked = 0
    for i in np.flatnonzero(result.converged):
        part = block.object_slice(i)
        values, h = block.values[part], bandwidths[i]
        if len(values) < 3:
            continue
        kernel = np.exp(-((values[:, None] - values[None, :]) ** 2) / (2 * h * h))
        uniform = np.full(len(values), 1 / len(values))
        first = np.sqrt(np.maximum(1 - 2 * kernel @ uniform + uniform @ kernel @ uniform, 0))
        thresholds = tuple(np.percentile(first, [50, 75, 95]))
        w = result.weights[part]
        r = np.sqrt(np.maximum(1 - 2 * kernel @ w + w @ kernel @ w, 0))
        phi = hampel_phi(r, thresholds)
        np.testing.assert_allclose(w, phi / phi.sum(), atol=1e-5)
        checked += 1
    assert checked >= 15


def test_outlying_claims_are_down_weighted_and_clean_objects_are_not_shifted():
    rng = np.random.default_rng(8)
    n, outliers = 200, 12
    inliers = rng.normal(0, 1, n - outliers)
    values = np.concatenate([inliers, rng.normal(15, 1, outliers), rng.normal(0, 1, n)])
    block = ClaimsBlock(np.array([0, 1]), np.array([0, n, 2 * n]), np.tile(np.arange(n), 2), values)
    result = local_weights(block, object_bandwidths(block, 1e-3))
    assert result.converged.all()
    contaminated, clean = result.weights[:n], result.weights[n:]
    assert np.all(contaminated[n - outliers :] == 0.0)
    uniform_shift = abs(values[:n].mean() - inliers.mean())
    assert uniform_shift > 0.8
    assert abs(contaminated @ values[:n] - inliers.mean()) < 0.25 * uniform_shift
    # negative control: without outliers the weighted mean stays near the sample mean
    assert abs(clean @ values[n:] - values[n:].mean()) < 0.25 * uniform_shift


def test_weights_sum_to_one_and_special_cases():
    values = np.array([3.0, 3.0, 3.0, 5.0, 1.0, 2.0, 9.0])
    block = ClaimsBlock(np.array([0, 1, 2]), np.array([0, 3, 4, 7]), np.array([0, 1, 2, 0, 0, 1, 2]), values)
    result = local_weights(block, np.array([0.5, 0.5, 0.5]))
    np.testing.assert_array_equal(result.weights[:4], [1 / 3, 1 / 3, 1 / 3, 1.0])
    np.testing.assert_array_equal(result.iterations[:2], [0, 0])
    assert result.converged[:2].all()
    totals = np.bincount(block.object_of_claim, weights=result.weights)
    np.testing.assert_allclose(totals, 1.0, rtol=1e-14)
    assert np.all(result.weights >= 0)


def test_iteration_cap_is_respected_and_reported():
    rng = np.random.default_rng(9)
    block = random_block(rng, objects=40, max_claims=20)
    bandwidths = spread_bandwidths(block)
    capped = local_weights(block, bandwidths, tolerance=1e-15, max_iterations=2)
    assert capped.iterations.max() <= 2
    multi = block.counts >= 4
    assert (~capped.converged[multi]).sum() > 0.5 * multi.sum()
    full = local_weights(block, bandwidths, tolerance=1e-15, max_iterations=500)
    assert full.iterations.max() > 2


def test_each_object_is_bitwise_independent_of_its_block():
    rng = np.random.default_rng(10)
    block = random_block(rng, objects=150, max_claims=30)
    bandwidths = spread_bandwidths(block)
    whole = local_weights(block, bandwidths)
    for mask in random_split(rng, block, 3):
        part = local_weights(block.select_objects(mask), bandwidths[mask])
        assert np.array_equal(part.weights, whole.weights[claim_mask(block, mask)])
        assert np.array_equal(part.iterations, whole.iterations[mask])
        assert np.array_equal(part.converged, whole.converged[mask])


def test_chunked_processing_gives_bitwise_the_same_result():
    rng = np.random.default_rng(13)
    block = random_block(rng, objects=90, max_claims=30)
    bandwidths = spread_bandwidths(block)
    whole = local_weights(block, bandwidths, chunk_claims=10**9)
    for chunk_claims in (1, 37, 400):
        chunked = local_weights(block, bandwidths, chunk_claims=chunk_claims)
        assert np.array_equal(chunked.weights, whole.weights)
        assert np.array_equal(chunked.iterations, whole.iterations)
        assert np.array_equal(chunked.converged, whole.converged)
