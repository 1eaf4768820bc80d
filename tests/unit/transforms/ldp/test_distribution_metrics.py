"""EMD on a line and on a grid, L1 and L2, against scipy, a brute-force transport LP and hand values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from transforms.ldp.distribution_metrics import (
    earth_movers_distance_grid,
    earth_movers_distance_line,
    grid_ground_distance,
    l1_distance,
    l2_distance,
)


@pytest.mark.parametrize("seed", range(6))
def test_line_emd_matches_scipy_wasserstein_distance(seed):
    generator = np.random.default_rng(seed)
    k = int(generator.integers(2, 40))
    p, q = generator.dirichlet(np.ones(k)), generator.dirichlet(np.ones(k) * 0.3)
    positions = np.arange(k)
    expected = stats.wasserstein_distance(positions, positions, u_weights=p, v_weights=q)
    assert earth_movers_distance_line(p, q) == pytest.approx(expected, abs=1e-12)


def test_line_emd_by_hand():
    # Moving all mass from 0 to 3 costs 3; moving half of it costs 1.5.
    assert earth_movers_distance_line(np.array([1.0, 0, 0, 0]), np.array([0, 0, 0, 1.0])) == pytest.approx(3.0)
    assert earth_movers_distance_line(np.array([1.0, 0, 0, 0]), np.array([0.5, 0, 0, 0.5])) == pytest.approx(1.5)
    assert earth_movers_distance_line(np.array([0.2, 0.8]), np.array([0.2, 0.8])) == 0.0


def brute_force_transport_cost(p: np.ndarray, q: np.ndarray, rows: int, columns: int, side: float) -> float:
    """The transport LP ``min Σ π_ij d_ij`` s.t. marginals p and q, solved by scipy's HiGHS.

    The ground distance is computed here from the cell coordinates, independently of the
    module's cost matrix.
    """
    cells = rows * columns
    coordinates = [(side * (c // columns), side * (c % columns)) for c in range(cells)]
    cost = np.array([[math.dist(a, b) for b in coordinates] for a in coordinates])
    row_marginal = np.kron(np.eye(cells), np.ones(cells))
    column_marginal = np.kron(np.ones(cells), np.eye(cells))
    result = optimize.linprog(
        cost.ravel(),
        A_eq=np.vstack([row_marginal, column_marginal]),
        b_eq=np.concatenate([p, q]),
        bounds=(0, None),
        method="highs",
    )
    assert result.status == 0
    return float(result.fun)


@pytest.mark.parametrize("seed", range(5))
def test_grid_emd_matches_a_brute_force_transport_program_on_a_3x3_grid(seed):
    generator = np.random.default_rng(seed)
    p, q = generator.dirichlet(np.ones(9)), generator.dirichlet(np.ones(9) * 0.5)
    side = 0.5
    expected = brute_force_transport_cost(p, q, 3, 3, side)
    assert earth_movers_distance_grid(p, q, 3, 3, cell_side=side) == pytest.approx(expected, abs=1e-9)


def test_grid_emd_by_hand_and_on_a_single_row():
    corner, opposite = np.zeros(9), np.zeros(9)
    corner[0], opposite[8] = 1.0, 1.0
    assert earth_movers_distance_grid(corner, opposite, 3, 3, cell_side=2.0) == pytest.approx(2.0 * math.sqrt(8.0))
    generator = np.random.default_rng(7)
    p, q = generator.dirichlet(np.ones(6)), generator.dirichlet(np.ones(6))
    assert earth_movers_distance_grid(p, q, 1, 6) == pytest.approx(earth_movers_distance_line(p, q), abs=1e-9)
    distances = grid_ground_distance(2, 3, cell_side=1.5)
    assert distances[1, 5] == pytest.approx(1.5 * math.sqrt(1 + 1))
    assert distances[0, 2] == pytest.approx(3.0)


def test_emd_rejects_unequal_masses_and_wrong_sizes():
    with pytest.raises(ValueError):
        earth_movers_distance_line(np.array([0.5, 0.5]), np.array([0.5, 0.6]))
    with pytest.raises(ValueError):
        earth_movers_distance_grid(np.full(4, 0.25), np.full(4, 0.25), 3, 3)


def test_l1_and_l2_by_hand():
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    assert l1_distance(p, q) == pytest.approx(0.6)
    assert l2_distance(p, q) == pytest.approx(math.sqrt(0.09 + 0.09))
    with pytest.raises(ValueError):
        l1_distance(p, q[:2])


def test_the_metrics_do_not_import_torch() -> None:
    """POT loads torch for a backend the ldp kind never uses (+3.6 s, +200 MiB per run) unless its
    torch backend is disabled before the import (the production issue's weight item)."""
    import subprocess
    import sys

    code = "import sys, transforms.ldp.distribution_metrics; print('torch' in sys.modules)"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert completed.stdout.strip() == "False"
