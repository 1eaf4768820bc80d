"""Client-side local-privacy mechanisms of the ``ldp`` release kind.

ElSalamouny and Palamidessi, "Reconstruction of the distribution of sensitive data under
free-will privacy": every user privatizes a secret ``x`` in the alphabet ``0..k-1`` with a
mechanism and ε of their own choosing and sends one report ``z``. A mechanism is described by
its channel matrix ``A[x, z] = P(z | x)`` (rows are secrets and sum to 1; the report
distribution is ``q = θ A``), or, for RAPPOR whose output alphabet has ``2^k`` bit vectors, by
a factorized likelihood of each report. Grids number their cells ``row * columns + col``.

Each mechanism is a frozen dataclass with ``name``, ``epsilon``, ``input_size``,
``output_size``, ``channel_matrix()`` (RAPPOR: ``report_likelihood``), ``sanitize(values,
rng)`` — the client code path, also used by the simulator — and ``to_spec()``, a JSON-ready
``{"type": ..., parameters}`` that ``mechanism_from_spec`` turns back into the mechanism.
``sanitize`` takes the generator as an argument; in pipelines it must come from
``transforms.core.keyed_randomness.keyed_generator``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from numbers import Integral, Real
from typing import Any

import numpy as np
import scipy.sparse
from scipy.optimize import linprog

from transforms.core.exact_sampling import sample_geometric_exp

PLANAR_TAIL_TOLERANCE = 1e-12
PLANAR_MAX_RADIUS = 6000
SHOKRI_MAX_CELLS = 144

RANDOMIZED_RESPONSE = "krr"
TRUNCATED_GEOMETRIC = "truncated_geometric"
PLANAR_GEOMETRIC = "planar_geometric"
BASIC_RAPPOR = "rappor"
SHOKRI_OPTIMAL = "shokri_optimal"


def _check_epsilon(epsilon: object) -> None:
    if (
        isinstance(epsilon, bool)
        or not isinstance(epsilon, Real)
        or not (math.isfinite(float(epsilon)) and float(epsilon) > 0.0)
    ):
        raise ValueError(f"epsilon must be a finite positive number, got {epsilon!r}")


def _check_integer(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_cell_side(cell_side: object) -> None:
    if (
        isinstance(cell_side, bool)
        or not isinstance(cell_side, Real)
        or not (math.isfinite(float(cell_side)) and float(cell_side) > 0.0)
    ):
        raise ValueError(f"cell_side must be a finite positive number, got {cell_side!r}")


def _as_secrets(values: np.ndarray, input_size: int) -> np.ndarray:
    secrets = np.asarray(values)
    if secrets.ndim != 1 or (secrets.size and not np.issubdtype(secrets.dtype, np.integer)):
        raise ValueError("values must be a one-dimensional integer array of secrets")
    secrets = secrets.astype(np.int64, copy=False)
    if secrets.size and (secrets.min() < 0 or secrets.max() >= input_size):
        raise ValueError(f"every secret must lie in 0..{input_size - 1}")
    return secrets


CLIENT_CHUNK_USERS = 1 << 16
_RAPPOR_CHUNK_BITS = 1 << 18


def _randomized_response_threshold(epsilon: float, input_size: int) -> int:
    """``T`` such that a uniform 64-bit word ``r`` keeps the secret iff ``r < T``.

    ``2^64 − T = ⌈(1−p)·2^64⌉`` with ``1−p = (k−1)/(e^ε+k−1)`` in exact rational arithmetic
    (from the double ``e^ε``), so ``P(keep) = T/2^64`` is ``p`` rounded down to a multiple of
    ``2^-64``: never above ``p`` (the ε-LDP ratio can only shrink), less than ``2^-64`` below.
    """
    change = Fraction(input_size - 1) / (Fraction(math.exp(epsilon)) + (input_size - 1))
    words_changed = min(max(math.ceil(change * 2**64), 1), 2**64)
    return 2**64 - words_changed


def _randomized_response_chunk(
    secrets: np.ndarray, threshold: int, input_size: int, rng: np.random.Generator
) -> np.ndarray:
    words = rng.bit_generator.random_raw(secrets.size)
    keep = words < np.uint64(threshold)
    np.subtract(words, np.uint64(threshold), out=words)
    np.remainder(words, np.uint64(input_size - 1), out=words)
    other = words.view(np.int64)
    other += other >= secrets
    np.copyto(other, secrets, where=keep)
    return other


def _rappor_flip_threshold(epsilon: float) -> int:
    """``T = ⌈f·2^32⌉`` with ``f = 1/(1+e^{ε/2})`` in exact rational arithmetic (from the
    double ``e^{ε/2}``): a uniform 32-bit word ``w`` flips a bit iff ``w < T``, so the flip
    probability is ``f`` rounded up to a multiple of ``2^-32`` (less than ``2^-32`` above it).
    Rounding up can only shrink ``(1−f)/f = e^{ε/2}``, so the ε-LDP promise holds."""
    flip = 1 / (1 + Fraction(math.exp(epsilon / 2.0)))
    return min(max(math.ceil(flip * 2**32), 1), 2**31)


def _rappor_flips(users: int, input_size: int, threshold: int, rng: np.random.Generator) -> np.ndarray:
    """``(users, k)`` independent flips, each ``True`` with probability ``threshold / 2^32``,
    from consecutive 32-bit halves (low half first) of the generator's 64-bit words."""
    bits = users * input_size
    words = np.asarray(rng.bit_generator.random_raw((bits + 1) // 2), dtype="<u8")
    halves = words.view("<u4")[:bits]
    return (halves < np.uint32(threshold)).reshape(users, input_size)


def sample_from_channel(channel: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One report per secret, drawn from the rows of a channel matrix by inverse CDF.

    Used by mechanisms that only have a matrix (Shokri's); one uniform per secret.
    """
    secrets = _as_secrets(values, channel.shape[0])
    cumulative = np.cumsum(channel, axis=1)
    cumulative[:, -1] = 1.0
    uniforms = rng.random(secrets.size)
    reports = np.empty(secrets.size, dtype=np.int64)
    for secret in np.unique(secrets):
        members = secrets == secret
        reports[members] = np.searchsorted(cumulative[secret], uniforms[members], side="right")
    return np.minimum(reports, channel.shape[1] - 1)


def grid_distances(rows: int, columns: int, cell_side: float) -> np.ndarray:
    """Euclidean distances between the centres of the cells of a ``rows × columns`` grid of
    square cells of side ``cell_side``, indexed ``row * columns + col``."""
    row_of, column_of = np.divmod(np.arange(rows * columns), columns)
    return cell_side * np.hypot(row_of[:, None] - row_of[None, :], column_of[:, None] - column_of[None, :])


@dataclass(frozen=True)
class RandomizedResponse:
    """k-ary randomized response (k-RR): report the secret with probability
    ``e^ε/(e^ε+k−1)``, otherwise one of the other ``k−1`` values uniformly, so
    ``A[x,x] = e^ε/(e^ε+k−1)`` and ``A[x,z] = 1/(e^ε+k−1)`` for ``z ≠ x`` (paper, Section on
    mechanisms; Kairouz et al. 2016). ε-LDP: every column's max/min ratio is ``e^ε``."""

    epsilon: float
    input_size: int
    name: str = field(default=RANDOMIZED_RESPONSE, init=False)

    def __post_init__(self) -> None:
        _check_epsilon(self.epsilon)
        _check_integer("input_size", self.input_size, 2)

    @property
    def output_size(self) -> int:
        return self.input_size

    @property
    def keep_probability(self) -> float:
        return math.exp(self.epsilon) / (math.exp(self.epsilon) + self.input_size - 1)

    def channel_matrix(self) -> np.ndarray:
        other = 1.0 / (math.exp(self.epsilon) + self.input_size - 1)
        matrix = np.full((self.input_size, self.input_size), other)
        np.fill_diagonal(matrix, self.keep_probability)
        return matrix

    def sanitize(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One report per secret from one uniform 64-bit word ``r`` of ``rng``'s bit stream.

        ``r < T`` keeps the secret (``T/2^64`` is ``p`` rounded down by less than ``2^-64``,
        ``_randomized_response_threshold``); otherwise ``(r − T) mod (k−1)`` picks one of the
        other ``k−1`` values, each within ``2^-63`` of ``(1−p)/(k−1)``. Users are processed in
        chunks of ``CLIENT_CHUNK_USERS`` that stay in cache; the draws do not depend on the
        chunking (one word per user, in order).
        """
        secrets = _as_secrets(values, self.input_size)
        threshold = _randomized_response_threshold(float(self.epsilon), int(self.input_size))
        reports = np.empty(secrets.size, dtype=np.int64)
        for begin in range(0, secrets.size, CLIENT_CHUNK_USERS):
            end = min(begin + CLIENT_CHUNK_USERS, secrets.size)
            reports[begin:end] = _randomized_response_chunk(
                secrets[begin:end], threshold, int(self.input_size), rng
            )
        return reports

    def to_spec(self) -> dict[str, Any]:
        return {"type": self.name, "epsilon": float(self.epsilon), "input_size": int(self.input_size)}


@dataclass(frozen=True)
class TruncatedGeometric:
    """Truncated linear geometric mechanism on the integers ``[lower, upper]`` (r1, r2),
    ``α = e^{−ε}`` (Ghosh, Roughgarden, Sundararajan 2009; paper's mechanisms section).

    Secrets and reports are offsets ``value − lower`` in ``0..upper−lower``. Interior
    ``A[x,z] = (1−α)/(1+α)·α^{|z−x|}``; boundary ``A[x,r1] = α^{x−r1}/(1+α)`` and
    ``A[x,r2] = α^{r2−x}/(1+α)``. This is exactly the two-sided geometric noise
    ``P(d) = (1−α)/(1+α)·α^{|d|}`` on ℤ clamped to the range (the boundary entries are its
    tails), which is how ``sanitize`` draws. ε-LDP between neighbouring values, so
    ``e^{ε(r2−r1)}`` across the whole range.
    """

    epsilon: float
    lower: int
    upper: int
    name: str = field(default=TRUNCATED_GEOMETRIC, init=False)

    def __post_init__(self) -> None:
        _check_epsilon(self.epsilon)
        _check_integer("lower", self.lower, -(2**62))
        _check_integer("upper", self.upper, int(self.lower) + 1)

    @property
    def input_size(self) -> int:
        return int(self.upper) - int(self.lower) + 1

    @property
    def output_size(self) -> int:
        return self.input_size

    def channel_matrix(self) -> np.ndarray:
        alpha = math.exp(-self.epsilon)
        offsets = np.arange(self.input_size)
        matrix = (1.0 - alpha) / (1.0 + alpha) * alpha ** np.abs(offsets[None, :] - offsets[:, None])
        matrix[:, 0] = alpha**offsets / (1.0 + alpha)
        matrix[:, -1] = alpha ** (self.input_size - 1 - offsets) / (1.0 + alpha)
        return matrix

    def sanitize(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        secrets = _as_secrets(values, self.input_size)
        # the difference of two exact geometrics with ratio e^{−ε} is the two-sided geometric
        noise = sample_geometric_exp(self.epsilon, secrets.size, rng) - sample_geometric_exp(
            self.epsilon, secrets.size, rng
        )
        return np.clip(secrets + noise, 0, self.input_size - 1).astype(np.int64)

    def to_spec(self) -> dict[str, Any]:
        return {
            "type": self.name,
            "epsilon": float(self.epsilon),
            "lower": int(self.lower),
            "upper": int(self.upper),
        }


def planar_truncation_radius(decay: float) -> int:
    """Smallest integer radius ``R`` such that the lattice mass of ``e^{−decay·‖o‖}`` outside
    the box ``[−R, R]²`` is below ``PLANAR_TAIL_TOLERANCE`` of the total.

    Bound: each lattice point ``o`` owns the unit square around it, on which
    ``‖y‖ ≤ ‖o‖ + √2/2``, so ``e^{−β‖o‖} ≤ e^{β/√2}·∫_square e^{−β‖y‖}dy``; the points outside
    the disc of radius ``R`` (which contains every point outside the box) therefore weigh at
    most ``e^{β/√2}·2π·e^{−βR'}(R'/β + 1/β²)`` with ``R' = R − √2/2``. The total is at least the
    origin's weight 1, so this bound below the tolerance is a relative bound.
    """
    radius = 1
    while True:
        shifted = radius - math.sqrt(0.5)
        tail = (
            math.exp(decay * math.sqrt(0.5) - decay * shifted)
            * 2.0
            * math.pi
            * (shifted / decay + 1.0 / decay**2)
        )
        if tail < PLANAR_TAIL_TOLERANCE:
            return radius
        radius += 1
        if radius > PLANAR_MAX_RADIUS:
            raise ValueError(
                f"epsilon * cell_side = {decay:g} is too small: the planar geometric lattice would need "
                f"a radius above {PLANAR_MAX_RADIUS} cells"
            )


@lru_cache(maxsize=64)
def _planar_offset_bins(decay: float, rows: int, columns: int) -> np.ndarray:
    """Normalized lattice mass ``c·e^{−decay·‖(a,b)‖}`` aggregated into offset bins.

    Bin ``(a', b')`` with ``a' = clip(a, −rows, rows)`` and ``b' = clip(b, −columns, columns)``:
    every offset in one bin clamps to the same grid cell from any secret, so the bins are all
    that the truncated channel needs. Shape ``(2·rows+1, 2·columns+1)``; sums to 1 (the mass
    beyond the truncation radius, < 1e-12 relative, is left out and ``c`` normalizes what is
    kept). Read-only.
    """
    radius = planar_truncation_radius(decay)
    offsets = np.arange(-radius, radius + 1)
    column_bins = np.clip(offsets, -columns, columns) + columns
    row_bins = np.clip(offsets, -rows, rows) + rows
    starts = np.flatnonzero(np.r_[True, np.diff(column_bins) != 0])
    table = np.zeros((2 * rows + 1, 2 * columns + 1))
    chunk = max(1, 4_000_000 // offsets.size)
    for begin in range(0, offsets.size, chunk):
        row_offsets = offsets[begin : begin + chunk]
        weights = np.exp(-decay * np.hypot(row_offsets[:, None], offsets[None, :]))
        by_column_bin = np.add.reduceat(weights, starts, axis=1)
        np.add.at(table, (row_bins[begin : begin + chunk], slice(None)), by_column_bin)
    table /= table.sum()
    table.setflags(write=False)
    return table


@dataclass(frozen=True)
class PlanarGeometric:
    """Planar geometric mechanism on a ``rows × columns`` grid of square cells of side
    ``cell_side`` (Chatzikokolakis et al., geo-indistinguishability; paper's planar setting).

    On the infinite lattice of cells the report is ``z`` with probability
    ``c_ε·e^{−ε·d(x,z)}``, ``d`` the Euclidean distance between cell centres in the units of
    ``cell_side`` (so ``ε`` is per unit of distance, e.g. per km with ``cell_side = 0.5`` km;
    with ``cell_side = 1`` distances are counted in cells). ``c_ε`` normalizes the infinite
    lattice. The report is then truncated to the grid by clamping each coordinate to the
    nearest grid cell. The lattice is summed out to a box whose outside mass is below 1e-12
    of the total (``planar_truncation_radius``). ε·d-geo-indistinguishable:
    ``A[x,z] ≤ e^{ε·d(x,x')}·A[x',z]`` (clamping is post-processing).
    """

    epsilon: float
    rows: int
    columns: int
    cell_side: float = 1.0
    name: str = field(default=PLANAR_GEOMETRIC, init=False)

    def __post_init__(self) -> None:
        _check_epsilon(self.epsilon)
        _check_integer("rows", self.rows, 1)
        _check_integer("columns", self.columns, 1)
        _check_cell_side(self.cell_side)

    @property
    def input_size(self) -> int:
        return int(self.rows) * int(self.columns)

    @property
    def output_size(self) -> int:
        return self.input_size

    def offset_bins(self) -> np.ndarray:
        return _planar_offset_bins(
            float(self.epsilon) * float(self.cell_side), int(self.rows), int(self.columns)
        )

    def channel_matrix(self) -> np.ndarray:
        table = self.offset_bins()
        rows, columns = int(self.rows), int(self.columns)
        row_shift = np.arange(-rows, rows + 1)
        column_shift = np.arange(-columns, columns + 1)
        matrix = np.zeros((self.input_size, self.input_size))
        for secret in range(self.input_size):
            secret_row, secret_column = divmod(secret, columns)
            report_rows = np.clip(secret_row + row_shift, 0, rows - 1)
            report_columns = np.clip(secret_column + column_shift, 0, columns - 1)
            cells = report_rows[:, None] * columns + report_columns[None, :]
            np.add.at(matrix[secret], cells.ravel(), table.ravel())
        return matrix

    def sanitize(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        secrets = _as_secrets(values, self.input_size)
        table = self.offset_bins()
        rows, columns = int(self.rows), int(self.columns)
        cumulative = np.cumsum(table.ravel())
        cumulative[-1] = 1.0
        bins = np.minimum(np.searchsorted(cumulative, rng.random(secrets.size), side="right"), table.size - 1)
        row_offset, column_offset = np.divmod(bins, table.shape[1])
        secret_row, secret_column = np.divmod(secrets, columns)
        report_row = np.clip(secret_row + row_offset - rows, 0, rows - 1)
        report_column = np.clip(secret_column + column_offset - columns, 0, columns - 1)
        return (report_row * columns + report_column).astype(np.int64)

    def to_spec(self) -> dict[str, Any]:
        return {
            "type": self.name,
            "epsilon": float(self.epsilon),
            "rows": int(self.rows),
            "columns": int(self.columns),
            "cell_side": float(self.cell_side),
        }


@dataclass(frozen=True)
class BasicRappor:
    """Basic one-time RAPPOR (Erlingsson et al., CCS 2014) with a per-user ε: the secret is
    one-hot encoded in ``k`` bits and each bit is flipped independently with probability
    ``f = 1/(1+e^{ε/2})`` (paper's RAPPOR section).

    Likelihood. With ``e`` the one-hot vector of ``x`` and ``P(b_j | e_j) = f`` if
    ``b_j ≠ e_j`` else ``1−f``,
    ``P(b | x) = Π_j P(b_j | e_j) = [Π_j f^{b_j}(1−f)^{1−b_j}] · P(b_x | 1)/P(b_x | 0)``,
    because only bit ``x`` differs from the all-zero encoding. ``P(b_x|1)/P(b_x|0)`` is
    ``(1−f)/f = e^{ε/2}`` when ``b_x = 1`` and ``f/(1−f) = e^{−ε/2}`` when ``b_x = 0``, so
    ``P(b | x) = f^{s}(1−f)^{k−s}·e^{ε(b_x − 1/2)}`` with ``s = Σ_j b_j``: over the secrets,
    ``P(b | x) ∝ e^{ε·b_x}``. ε-LDP: ``P(b|x)/P(b|x') = e^{ε(b_x − b_x')} ≤ e^ε``.

    The output alphabet has ``2^k`` reports; ``channel_matrix`` exists for small ``k`` only
    (report index ``z`` has bit ``j`` equal to ``(z >> j) & 1``).
    """

    epsilon: float
    input_size: int
    name: str = field(default=BASIC_RAPPOR, init=False)

    def __post_init__(self) -> None:
        _check_epsilon(self.epsilon)
        _check_integer("input_size", self.input_size, 2)

    @property
    def output_size(self) -> int:
        return 2 ** int(self.input_size)

    @property
    def flip_probability(self) -> float:
        return 1.0 / (1.0 + math.exp(self.epsilon / 2.0))

    def _check_reports(self, reports: np.ndarray) -> np.ndarray:
        bits = np.asarray(reports)
        if bits.ndim != 2 or bits.shape[1] != self.input_size:
            raise ValueError(
                f"RAPPOR reports must be an (n, {self.input_size}) bit array, got shape {bits.shape}"
            )
        if bits.dtype != np.bool_:
            if bits.size and not np.isin(bits, (0, 1)).all():
                raise ValueError("RAPPOR report bits must be 0 or 1")
            bits = bits.astype(bool)
        return bits

    def sanitize(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``(n, k)`` bit vectors: the one-hot secret with every bit flipped independently.

        Each flip compares one uniform 32-bit word of ``rng``'s bit stream with
        ``⌈f·2^32⌉`` (``_rappor_flip_threshold``): the flip probability exceeds ``f`` by less
        than ``2^-32``, which keeps the ε-LDP promise and changes the estimators' expected bit
        sums by less than ``n·2^-32``. Users are processed in even-sized chunks of about
        ``2^18`` bits, so the draws do not depend on the chunking (``k`` words per user, in
        order; an odd total leaves the last word's high half unused).
        """
        secrets = _as_secrets(values, self.input_size)
        size = int(self.input_size)
        threshold = _rappor_flip_threshold(float(self.epsilon))
        reports = np.empty((secrets.size, size), dtype=bool)
        chunk = max(2, (_RAPPOR_CHUNK_BITS // size) & ~1)
        for begin in range(0, secrets.size, chunk):
            end = min(begin + chunk, secrets.size)
            reports[begin:end] = _rappor_flips(end - begin, size, threshold, rng)
        users = np.arange(secrets.size)
        reports[users, secrets] = ~reports[users, secrets]
        return reports

    def report_likelihood(self, reports: np.ndarray) -> np.ndarray:
        """``(n, k)`` values ``e^{ε·b_x}``, proportional (per report) to ``P(report | x)``."""
        return np.exp(self.epsilon * self._check_reports(reports).astype(np.float64))

    def report_probability(self, reports: np.ndarray) -> np.ndarray:
        """``(n, k)`` exact ``P(report | x) = f^{s}(1−f)^{k−s}·e^{ε(b_x − 1/2)}``."""
        bits = self._check_reports(reports)
        flip = self.flip_probability
        ones = bits.sum(axis=1, keepdims=True)
        base = np.exp(ones * math.log(flip) + (self.input_size - ones) * math.log1p(-flip))
        return base * np.exp(self.epsilon * (bits.astype(np.float64) - 0.5))

    def channel_matrix(self) -> np.ndarray:
        if self.input_size > 16:
            raise ValueError("the RAPPOR channel matrix has 2^k columns; use report_likelihood for k > 16")
        codes = np.arange(self.output_size)
        reports = ((codes[:, None] >> np.arange(self.input_size)[None, :]) & 1).astype(bool)
        return self.report_probability(reports).T.copy()

    def to_spec(self) -> dict[str, Any]:
        return {"type": self.name, "epsilon": float(self.epsilon), "input_size": int(self.input_size)}


def expected_quality_loss(channel: np.ndarray, prior: np.ndarray, distances: np.ndarray) -> float:
    """``Σ_x Σ_z π(x) A[x,z] d(x,z)``: the user's expected quality loss (Shokri et al. 2012)."""
    return float(np.sum(prior[:, None] * channel * distances))


def adversary_expected_error(channel: np.ndarray, prior: np.ndarray, distances: np.ndarray) -> float:
    """The Bayesian adversary's expected error ``Σ_z min_x̂ Σ_x π(x) A[x,z] d(x̂,x)``: for each
    report it guesses the cell minimizing the posterior expected distance (Shokri et al. 2012,
    the optimal localization attack)."""
    joint = prior[:, None] * channel
    return float(np.sum(np.min(distances @ joint, axis=0)))


@lru_cache(maxsize=32)
def _shokri_channel(
    quality_loss_bound: float, prior: tuple[float, ...], rows: int, columns: int, cell_side: float
) -> np.ndarray:
    """Solve Shokri et al.'s LP (CCS 2012, Section 4): variables ``f(z|x)`` and ``e_z``;
    maximize ``Σ_z e_z`` subject to ``e_z ≤ Σ_x π(x) f(z|x) d(x̂,x)`` for every ``z, x̂``,
    ``Σ_{x,z} π(x) f(z|x) d(x,z) ≤ Q``, ``Σ_z f(z|x) = 1``, ``f ≥ 0``. At the optimum
    ``e_z`` is the adversary's best-guess error on report ``z``."""
    size = rows * columns
    weights = np.asarray(prior)
    distances = grid_distances(rows, columns, cell_side)
    channel_variables = size * size
    objective = np.r_[np.zeros(channel_variables), -np.ones(size)]
    # Adversary rows (z, x̂): e_z − Σ_x π(x) d(x̂,x) f(x,z) ≤ 0; f(x,z) is variable x*size+z.
    report_index, guess_index, secret_index = np.meshgrid(
        np.arange(size), np.arange(size), np.arange(size), indexing="ij"
    )
    adversary = scipy.sparse.coo_matrix(
        (
            -(weights[secret_index] * distances[guess_index, secret_index]).ravel(),
            ((report_index * size + guess_index).ravel(), (secret_index * size + report_index).ravel()),
        ),
        shape=(size * size, channel_variables + size),
    )
    error_columns = scipy.sparse.coo_matrix(
        (
            np.ones(size * size),
            (np.arange(size * size), channel_variables + np.repeat(np.arange(size), size)),
        ),
        shape=(size * size, channel_variables + size),
    )
    quality = np.r_[(weights[:, None] * distances).ravel(), np.zeros(size)]
    inequalities = scipy.sparse.vstack([adversary + error_columns, scipy.sparse.csr_matrix(quality)]).tocsr()
    bounds_right = np.r_[np.zeros(size * size), quality_loss_bound]
    rows_sum = scipy.sparse.coo_matrix(
        (np.ones(channel_variables), (np.repeat(np.arange(size), size), np.arange(channel_variables))),
        shape=(size, channel_variables + size),
    ).tocsr()
    result = linprog(
        objective,
        A_ub=inequalities,
        b_ub=bounds_right,
        A_eq=rows_sum,
        b_eq=np.ones(size),
        bounds=[(0.0, None)] * channel_variables + [(None, None)] * size,
        method="highs",
    )
    if result.status != 0:
        raise ValueError(f"Shokri's linear program did not solve: {result.message}")
    channel = np.clip(result.x[:channel_variables].reshape(size, size), 0.0, None)
    channel /= channel.sum(axis=1, keepdims=True)
    channel.setflags(write=False)
    return channel


@dataclass(frozen=True)
class ShokriOptimal:
    """Shokri et al.'s optimal location-privacy mechanism ("Protecting location privacy:
    optimal strategy against localization attacks", CCS 2012): the channel that maximizes the
    Bayesian adversary's expected error (Euclidean distance between guess and true cell) under
    the expected quality-loss bound ``Σ π(x) A[x,z] d(x,z) ≤ quality_loss_bound`` for the prior
    ``π`` over the cells of a ``rows × columns`` grid, distances in the units of ``cell_side``.
    Solved with HiGHS (``scipy.optimize.linprog``) and cached by its parameters; up to
    ``SHOKRI_MAX_CELLS`` cells.

    It is not parametrized by ε: ``epsilon`` is the smallest ε for which the solved channel is
    ε-LDP, ``max_z ln(max_x A[x,z]/min_x A[x,z])``, infinite if a column has a zero.
    """

    quality_loss_bound: float
    prior: tuple[float, ...]
    rows: int
    columns: int
    cell_side: float = 1.0
    name: str = field(default=SHOKRI_OPTIMAL, init=False)

    def __post_init__(self) -> None:
        _check_integer("rows", self.rows, 1)
        _check_integer("columns", self.columns, 1)
        _check_cell_side(self.cell_side)
        bound = self.quality_loss_bound
        if (
            isinstance(bound, bool)
            or not isinstance(bound, Real)
            or not (math.isfinite(bound) and bound >= 0.0)
        ):
            raise ValueError(f"quality_loss_bound must be a finite non-negative number, got {bound!r}")
        size = int(self.rows) * int(self.columns)
        if size > SHOKRI_MAX_CELLS:
            raise ValueError(f"Shokri's mechanism is solved for at most {SHOKRI_MAX_CELLS} cells, got {size}")
        prior = tuple(float(p) for p in self.prior)
        if (
            len(prior) != size
            or not all(math.isfinite(p) and p >= 0.0 for p in prior)
            or not math.isclose(sum(prior), 1.0, abs_tol=1e-9)
        ):
            raise ValueError(f"prior must be {size} non-negative probabilities summing to 1")
        object.__setattr__(self, "prior", prior)

    @property
    def input_size(self) -> int:
        return int(self.rows) * int(self.columns)

    @property
    def output_size(self) -> int:
        return self.input_size

    @property
    def epsilon(self) -> float:
        channel = self.channel_matrix()
        smallest = channel.min(axis=0)
        if np.any(smallest <= 0.0):
            return math.inf
        return float(np.max(np.log(channel.max(axis=0) / smallest)))

    def distances(self) -> np.ndarray:
        return grid_distances(int(self.rows), int(self.columns), float(self.cell_side))

    def channel_matrix(self) -> np.ndarray:
        return _shokri_channel(
            float(self.quality_loss_bound),
            self.prior,
            int(self.rows),
            int(self.columns),
            float(self.cell_side),
        ).copy()

    def sanitize(self, values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return sample_from_channel(self.channel_matrix(), values, rng)

    def to_spec(self) -> dict[str, Any]:
        return {
            "type": self.name,
            "quality_loss_bound": float(self.quality_loss_bound),
            "prior": list(self.prior),
            "rows": int(self.rows),
            "columns": int(self.columns),
            "cell_side": float(self.cell_side),
        }


Mechanism = RandomizedResponse | TruncatedGeometric | PlanarGeometric | BasicRappor | ShokriOptimal

_PARAMETERS: dict[str, tuple[type, tuple[str, ...], tuple[str, ...]]] = {
    RANDOMIZED_RESPONSE: (RandomizedResponse, ("epsilon", "input_size"), ()),
    TRUNCATED_GEOMETRIC: (TruncatedGeometric, ("epsilon", "lower", "upper"), ()),
    PLANAR_GEOMETRIC: (PlanarGeometric, ("epsilon", "rows", "columns"), ("cell_side",)),
    BASIC_RAPPOR: (BasicRappor, ("epsilon", "input_size"), ()),
    SHOKRI_OPTIMAL: (ShokriOptimal, ("quality_loss_bound", "prior", "rows", "columns"), ("cell_side",)),
}


def mechanism_from_spec(spec: dict[str, Any]) -> Mechanism:
    """The mechanism described by a ``to_spec()`` dictionary; a clear ``ValueError`` for an
    unknown type, a missing or unexpected parameter, or an invalid value."""
    if not isinstance(spec, dict) or "type" not in spec:
        raise ValueError("a mechanism spec must be a mapping with a 'type'")
    kind = spec["type"]
    if kind not in _PARAMETERS:
        raise ValueError(f"unknown mechanism type {kind!r}; expected one of {sorted(_PARAMETERS)}")
    cls, required, optional = _PARAMETERS[kind]
    parameters = {key: value for key, value in spec.items() if key != "type"}
    missing = [key for key in required if key not in parameters]
    unexpected = sorted(set(parameters) - set(required) - set(optional))
    if missing or unexpected:
        raise ValueError(
            f"mechanism {kind!r}: missing parameters {missing}, unexpected parameters {unexpected}"
        )
    if "prior" in parameters:
        parameters["prior"] = tuple(parameters["prior"])
    return cls(**parameters)
