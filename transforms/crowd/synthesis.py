"""Synthetic claims per object: PrisCrowd's Algorithm 1 in the form whose guarantee is proven.

PrisCrowd (Huai, Wang, Miao, Xu, Zhang, IJCAI 2019, Section 4 and Algorithm 1) releases, for each
object ``i``, claims drawn from the object's weighted KDE ``f_i = Σ_s c_is K_h(·, x_is)`` that
pass the randomized plausible-deniability test (Bindschaedler, Shokri, Gunter, VLDB 2017,
Privacy Test 2). Three things make the released claims private at the number
``transforms/crowd/guarantee.py`` states (``docs/PRIVACY.md``, "Crowd"):

* the generative model has no data-fitted input: the bandwidth ``h_i`` is public (configured, or
  derived from the public range and the public claim count), the seed weights ``c_is`` come from
  public or differentially private source qualities and, optionally, the object's own claims
  through a local factor whose ratio is capped (its effect is in the guarantee), and the kernel is
  truncated to the public value range and rounded to its grid (``rounded_kernel.py``);
* every attempt can *pass with a fallback*: with the public probability ``q0`` the candidate is a
  uniform draw on the public grid and passes without a test. So every attempt passes with
  probability at least ``q0``, which bounds how much a changed claim can move the pass
  probability of its object;
* every released object gets exactly ``m`` claims (claim slots). A slot takes candidates until
  one passes, at most ``T`` (``max_attempts_per_claim``); a slot whose ``T`` attempts all fail —
  probability at most ``(1 − q0)^T`` — is filled with a uniform grid value. Attempt counts and
  failures are never part of the release (they are operator figures).

One attempt from seed weights ``c``: with probability ``q0`` a uniform grid value (pass); else a
seed ``s`` with probability ``c_s``, a candidate ``y`` from the truncated rounded kernel around
``x_is``, and the test: ``k'`` = the number of the object's claims whose ``P(y | x)`` lies in the
same ``γ``-interval as the seed's (the seed included), pass iff ``k' ≥ k + N`` with
``N = ⌈Lap(1/ε0)⌉`` drawn exactly (``transforms/core/exact_sampling.py``). Objects with fewer than
``max(k, minimum_claims)`` claims are suppressed (the claim counts are public).

Draw order (the contract that makes every engine, partitioning and retry produce the same
release). Object ``i`` draws candidates in rounds of ``batch_size``; round ``r`` uses only
``keyed_generator(secret, release_id, "crowd/synthesis", (object_id, r))``, taking, in this
order: ``B`` fallback coins (integers below 10⁶, compared with ``q0·10⁶``), ``B`` fallback grid
positions, ``B`` seed uniforms, ``B`` 64-bit kernel words (the exact kernel draw,
``rounded_kernel.exact_truncated_kernel_draws``; an undecided one reads more bits from
``(…, "crowd/synthesis-kernel", (object_id, r, b))``) and ``B`` 64-bit test words (the test's
exact ``Bernoulli(P(N ≤ k' − k))``, ``transforms/core/exact_sampling.py``; a word too close to
the probability to decide reads more bits from ``(…, "crowd/synthesis-refine", (object_id, r,
b))``). Candidates are consumed in draw order by the slots. A slot that reaches its cap takes
its grid position from ``keyed_generator(secret, release_id, "crowd/synthesis-cap", (object_id,
slot))``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from transforms.core.exact_sampling import threshold_noise_cdf, threshold_test_passes
from transforms.core.keyed_randomness import keyed_generator
from transforms.core.plausible_deniability import NO_INTERVAL, deniability_interval_index
from transforms.crowd.claims_block import OBJECT_ID, VALUE, ClaimsBlock
from transforms.crowd.rounded_kernel import exact_truncated_kernel_draws, truncated_log_probability
from transforms.crowd.value_grid import ValueGrid

SYNTHESIS_PURPOSE = "crowd/synthesis"
CAP_PURPOSE = "crowd/synthesis-cap"
REFINE_PURPOSE = "crowd/synthesis-refine"
KERNEL_PURPOSE = "crowd/synthesis-kernel"
SMALLEST_SEED_WEIGHT = 2.0**-32
"""A normalized seed weight below this is refused (objects with ``n·R`` above ``2^32`` claims):
above it, the seed choice's float64 lattice (``2^-53``, plus the cumulative sums' rounding) moves
no weight by more than a relative ``2^-19.7`` (worst case), which the guarantee's factor
``1 + 2^-18`` covers together with ``WEIGHT_RATIO_SLACK`` (``WEIGHT_ROUNDING``)."""
WEIGHT_RATIO_SLACK = 1.0 + 2.0**-20
"""The ratio cap as the guarantee allows for it (``WEIGHT_ROUNDING``): float renormalization may
exceed the cap by a few ulps."""


def largest_object_for(ratio_cap: float) -> int:
    """The most claims an object may have so that no seed weight can fall below
    ``SMALLEST_SEED_WEIGHT`` of its total, whatever the values: with every ratio at most ``R``, the
    smallest share is at least ``1/(1 + (n − 1)R)``. A function of public quantities (the claim count
    and the cap), so refusing an object above it reveals nothing the neighbouring relation hides."""
    return int((1.0 / SMALLEST_SEED_WEIGHT - 1.0) / (ratio_cap * WEIGHT_RATIO_SLACK)) + 1


FALLBACK_DENOMINATOR = 1_000_000
REASON_FEWER_THAN_K = "fewer claims than the minimum (k or min_claims_per_object)"
_PAIRS_PER_CHUNK = 1 << 20


def _is_integer(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class SynthesisParameters:
    """Public parameters of the synthesis and the randomized test.

    Attributes:
        claims_per_object: ``m``, synthetic claims released per object (exactly).
        k: the plausible-deniability threshold before noise (``k ≥ 1``).
        gamma: the interval ratio ``γ > 1`` of the test.
        epsilon0: the threshold noise parameter, ``N = ⌈Lap(1/ε0)⌉``.
        grid: the public value range and precision (every released value is on it).
        fallback_probability: ``q0``, a multiple of ``10⁻⁶`` in ``(0, 1)``.
        max_attempts_per_claim: ``T``, the attempts one claim slot may take.
        batch_size: candidates drawn per round (one keyed stream per object and round).
        minimum_claims: objects with fewer claims than ``max(k, minimum_claims)`` are suppressed (a
            rule on public claim counts; a larger floor than ``k`` tightens the guarantee).
    """

    claims_per_object: int
    k: int
    gamma: float
    epsilon0: float
    grid: ValueGrid
    fallback_probability: float
    max_attempts_per_claim: int
    batch_size: int
    minimum_claims: int = 0

    def __post_init__(self) -> None:
        for name in ("claims_per_object", "k", "max_attempts_per_claim", "batch_size", "minimum_claims"):
            if not _is_integer(getattr(self, name)):
                raise ValueError(f"{name} must be an integer")
        checks = [
            (self.claims_per_object >= 1, "claims_per_object (m) must be at least 1"),
            (self.k >= 1, "k must be at least 1"),
            (math.isfinite(self.gamma) and self.gamma > 1.0, "gamma must be a finite number greater than 1"),
            (math.isfinite(self.epsilon0) and self.epsilon0 > 0.0, "epsilon0 must be a finite positive number"),
            (0.0 < self.fallback_probability < 1.0, "the fallback probability must be in (0, 1)"),
            (self.max_attempts_per_claim >= 1, "max_attempts_per_claim must be at least 1"),
            (self.batch_size >= 1, "batch_size must be at least 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        if abs(self.fallback_parts_per_million - self.fallback_probability * FALLBACK_DENOMINATOR) > 1e-6:
            raise ValueError("the fallback probability must be a multiple of 1e-6")

    @property
    def smallest_released_object(self) -> int:
        return max(self.k, self.minimum_claims)

    @property
    def fallback_parts_per_million(self) -> int:
        return round(self.fallback_probability * FALLBACK_DENOMINATOR)



@dataclass(frozen=True)
class BlockSynthesis:
    """Output of ``synthesize_block``.

    Attributes:
        claims: one row per released synthetic claim: ``object_id``, ``claim_index`` (int32,
            ``0..m-1`` in slot order), ``value`` (float64, a grid value); objects in block order.
        objects: one row per object of the block: ``object_id``, ``claims`` (``|S_i|``),
            ``released`` (``m``, or 0 when suppressed), ``attempts`` (candidates drawn),
            ``fallbacks`` (slots filled by a fallback draw, tested or capped), ``capped`` (slots
            that reached the attempt cap), ``suppressed`` and ``reason``. Everything but
            ``object_id`` and ``released`` is an operator figure computed from the claims.
    """

    claims: pd.DataFrame
    objects: pd.DataFrame


def object_id_key(object_id: object) -> int | str:
    """The random-stream key of an object id: a Python ``int`` or ``str``, the same on every engine."""
    if _is_integer(object_id):
        return int(object_id)  # type: ignore[arg-type]
    if isinstance(object_id, str):
        return str(object_id)
    raise TypeError(f"object ids must be integers or strings, got {type(object_id).__name__}")


def synthesis_round_generator(
    secret: bytes, release_id: str, object_id: Hashable, round_index: int
) -> np.random.Generator:
    """The keyed stream of round ``round_index`` of an object's synthesis."""
    return keyed_generator(secret, release_id, SYNTHESIS_PURPOSE, (object_id_key(object_id), int(round_index)))


def cap_fallback_value(secret: bytes, release_id: str, object_id: Hashable, slot: int, grid: ValueGrid) -> float:
    """The grid value of a slot that reached the attempt cap (its own keyed stream)."""
    rng = keyed_generator(secret, release_id, CAP_PURPOSE, (object_id_key(object_id), int(slot)))
    return float(grid.values(rng.integers(0, grid.size)))


@dataclass(frozen=True)
class RoundDraws:
    """One round's random draws for one object, in the contract's order (module docstring)."""

    fallback: np.ndarray
    fallback_position: np.ndarray
    seed_uniform: np.ndarray
    kernel_words: np.ndarray
    test_bits: np.ndarray

    @classmethod
    def draw(cls, rng: np.random.Generator, parameters: SynthesisParameters) -> RoundDraws:
        batch = parameters.batch_size
        fallback = rng.integers(0, FALLBACK_DENOMINATOR, size=batch) < parameters.fallback_parts_per_million
        position = rng.integers(0, parameters.grid.size, size=batch)
        seed_uniform = rng.random(batch)
        kernel_words = rng.integers(0, 2**64, size=batch, dtype=np.uint64)
        test_bits = rng.integers(0, 2**64, size=batch, dtype=np.uint64)
        return cls(fallback, position, seed_uniform, kernel_words, test_bits)


def choose_seeds(seed_uniforms: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Seed index per uniform: ``s`` with probability ``c_s / Σ c`` (inverse CDF on cumulative weights).

    ``seed_uniforms`` is ``(..., B)`` and ``weights`` ``(..., n)``; the cumulative sums are
    sequential (``np.cumsum``) so a plain running sum gives the same bits.
    """
    cumulative = np.cumsum(np.asarray(weights, dtype=np.float64), axis=-1)
    target = np.asarray(seed_uniforms, dtype=np.float64) * cumulative[..., -1:]
    below = (cumulative[..., None, :] <= target[..., :, None]).sum(axis=-1, dtype=np.int64)
    return np.minimum(below, cumulative.shape[-1] - 1)


def deniability_counts_of_candidates(
    candidates: np.ndarray, seeds: np.ndarray, seed_index: np.ndarray, bandwidth: np.ndarray, parameters: SynthesisParameters
) -> np.ndarray:
    """``k'`` of each candidate ``(..., B)`` among its object's seeds ``(..., n)``: the seeds whose
    ``P(y | x)`` lies in the generating seed's ``γ``-interval (0 when the seed's own has none)."""
    log_probability = truncated_log_probability(
        candidates[..., :, None], seeds[..., None, :], bandwidth[..., None, None], parameters.grid
    )
    intervals = deniability_interval_index(log_probability, parameters.gamma)
    own = np.take_along_axis(intervals, seed_index[..., None], axis=-1)
    matches = (intervals == own) & (own != NO_INTERVAL)
    return matches.sum(axis=-1, dtype=np.int64)


def _validate_inputs(block: ClaimsBlock, bandwidths: np.ndarray, seed_weights: np.ndarray, grid: ValueGrid) -> None:
    if bandwidths.shape != (block.number_of_objects,):
        raise ValueError(f"bandwidths must have one entry per object ({block.number_of_objects}), got {bandwidths.shape}")
    if seed_weights.shape != (block.number_of_claims,):
        raise ValueError(f"seed weights must have one entry per claim ({block.number_of_claims}), got {seed_weights.shape}")
    if not np.all(np.isfinite(bandwidths) & (bandwidths > 0.0)):
        raise ValueError("bandwidths must be finite and positive")
    if not np.all(np.isfinite(seed_weights) & (seed_weights >= 0.0)):
        raise ValueError("seed weights must be finite and non-negative")
    if np.any(block.counts == 0):
        raise ValueError("every object of a block must have at least one claim")
    if block.number_of_objects and np.any(np.add.reduceat(seed_weights, block.offsets[:-1]) <= 0.0):
        raise ValueError("every object's seed weights must have a positive sum")
    if np.any((block.values < grid.low) | (block.values > grid.high)):
        raise ValueError("claims must lie in the public value range (clip them first)")
    if block.number_of_objects:
        totals = np.add.reduceat(seed_weights, block.offsets[:-1])
        if np.any(seed_weights < SMALLEST_SEED_WEIGHT * totals[block.object_of_claim]):
            # unreachable for objects within largest_object_for(R), which the release checks on counts
            raise ValueError("a seed weight is below 2^-32 of its object's total (an object of more than 2^32/R claims)")


def _round_candidates(
    block: ClaimsBlock, bandwidths: np.ndarray, seed_weights: np.ndarray, parameters: SynthesisParameters,
    objects: np.ndarray, draws: list[RoundDraws], refine: Callable[[str, int, int], np.random.Generator],
) -> tuple[np.ndarray, np.ndarray]:
    """``(passed, values)`` of one round's candidates for ``objects`` (rows in that order);
    ``refine(purpose, row, candidate)`` is the stream of an undecided kernel or test word."""
    batch = parameters.batch_size
    grid = parameters.grid
    values = np.empty((objects.size, batch), dtype=np.float64)
    k_prime = np.empty((objects.size, batch), dtype=np.int64)
    fallback = np.stack([d.fallback for d in draws])
    counts = block.counts[objects]
    order = np.argsort(counts, kind="stable")
    boundaries = np.flatnonzero(np.diff(counts[order])) + 1
    for group in np.split(order, boundaries):
        if group.size == 0:
            continue
        n = int(counts[group[0]])
        per_chunk = max(1, _PAIRS_PER_CHUNK // (batch * n))
        for start in range(0, group.size, per_chunk):
            rows = group[start : start + per_chunk]
            members = objects[rows]
            claim_index = block.offsets[members][:, None] + np.arange(n)
            seeds = block.values[claim_index]
            bandwidth = bandwidths[members]
            seed_uniform = np.stack([draws[row].seed_uniform for row in rows])
            kernel_words = np.stack([draws[row].kernel_words for row in rows])
            seed_index = choose_seeds(seed_uniform, seed_weights[claim_index])
            seed_values = np.take_along_axis(seeds, seed_index, axis=-1)
            candidates = exact_truncated_kernel_draws(
                seed_values, bandwidth[:, None], grid, kernel_words,
                lambda flat, rows=rows: refine(KERNEL_PURPOSE, int(rows[flat // batch]), flat % batch),
            )
            k_prime[rows] = deniability_counts_of_candidates(candidates, seeds, seed_index, bandwidth, parameters)
            fallback_values = grid.values(np.stack([draws[row].fallback_position for row in rows]))
            values[rows] = np.where(fallback[rows], fallback_values, candidates)
    bits = np.stack([d.test_bits for d in draws])
    tested = threshold_test_passes(k_prime - parameters.k, parameters.epsilon0, bits,
                                   lambda position: refine(REFINE_PURPOSE, *divmod(position, batch)))
    return fallback | tested, values


@dataclass
class _SlotState:
    """Per object: claim slots filled, attempts in the current slot, totals (all vectors over objects)."""

    filled: np.ndarray
    run: np.ndarray
    attempts: np.ndarray
    fallbacks: np.ndarray
    capped: np.ndarray


def synthesize_block(
    block: ClaimsBlock,
    bandwidths: np.ndarray,
    seed_weights: np.ndarray,
    parameters: SynthesisParameters,
    secret: bytes,
    release_id: str,
) -> BlockSynthesis:
    """The synthesis for every object of ``block``, vectorized across objects.

    Args:
        block: whole objects' claims ``x_is``, inside the public value range.
        bandwidths: ``(O,)`` public per-object kernel bandwidths ``h_i > 0``.
        seed_weights: ``(N,)`` per-claim seed weights ``c_is`` (normalized per object here).
        parameters: the public synthesis parameters.
        secret, release_id: the release's keyed randomness (module docstring for the streams).

    Each object's output depends only on its own claims, weights, bandwidth, id and the release's
    secret — not on the other objects of the block, on chunking or on the engine.
    """
    bandwidths = np.asarray(bandwidths, dtype=np.float64)
    seed_weights = np.asarray(seed_weights, dtype=np.float64)
    grid = parameters.grid
    _validate_inputs(block, bandwidths, seed_weights, grid)
    m, cap = parameters.claims_per_object, parameters.max_attempts_per_claim
    counts = block.counts.astype(np.int64)
    objects = block.number_of_objects
    eligible = counts >= parameters.smallest_released_object
    keys = [object_id_key(object_id) for object_id in block.object_ids]
    state = _SlotState(*(np.zeros(objects, dtype=np.int64) for _ in range(5)))
    released = np.zeros((objects, m), dtype=np.float64)

    active = np.flatnonzero(eligible)
    round_index = 0
    while active.size:
        draws = [RoundDraws.draw(keyed_generator(secret, release_id, SYNTHESIS_PURPOSE, (keys[o], round_index)),
                                 parameters) for o in active]
        passed, values = _round_candidates(
            block, bandwidths, seed_weights, parameters, active, draws,
            lambda purpose, row, candidate, r=round_index, rows=active: keyed_generator(
                secret, release_id, purpose, (keys[rows[row]], r, candidate)),
        )
        fallback = np.stack([d.fallback for d in draws])
        for row, object_index in enumerate(active):
            _consume_round(state, released, object_index, passed[row], values[row], fallback[row], m, cap,
                           lambda slot, o=object_index: cap_fallback_value(secret, release_id, block.object_ids[o],
                                                                           slot, grid))
        active = active[state.filled[active] < m]
        round_index += 1

    released_objects = np.flatnonzero(eligible)
    return BlockSynthesis(
        claims=pd.DataFrame(
            {
                OBJECT_ID: np.repeat(block.object_ids[released_objects], m),
                "claim_index": np.tile(np.arange(m, dtype=np.int32), released_objects.size),
                VALUE: released[released_objects].ravel(),
            }
        ),
        objects=pd.DataFrame(
            {
                OBJECT_ID: block.object_ids,
                "claims": counts,
                "released": np.where(eligible, m, 0).astype(np.int64),
                "attempts": state.attempts,
                "fallbacks": state.fallbacks,
                "capped": state.capped,
                "suppressed": ~eligible,
                "reason": np.where(eligible, "", REASON_FEWER_THAN_K).astype(object),
            }
        ),
    )


def _consume_round(state: _SlotState, released: np.ndarray, index: int, passed: np.ndarray, values: np.ndarray,
                   fallback: np.ndarray, m: int, cap: int, cap_value) -> None:
    """Feed one object's round of candidates to its claim slots, in draw order.

    Fast path (every case but a slot reaching its cap inside this round): the passes fill the
    slots in order and the failure runs between them stay below the cap. Otherwise the candidates
    are walked one by one (probability at most ``(1 − q0)^T`` per slot).
    """
    filled, run = int(state.filled[index]), int(state.run[index])
    needed = m - filled
    positions = np.flatnonzero(passed)[:needed]
    completes = positions.size == needed
    if positions.size:
        runs = [run + int(positions[0])] + (np.diff(positions) - 1).tolist()
        if not completes:
            runs.append(passed.size - 1 - int(positions[-1]))
    else:
        runs = [run + passed.size]
    if max(runs) < cap:
        released[index, filled : filled + positions.size] = values[positions]
        state.fallbacks[index] += int(np.count_nonzero(fallback[positions]))
        state.filled[index] = filled + positions.size
        if completes:
            state.attempts[index] += int(positions[-1]) + 1
            state.run[index] = 0
        else:
            state.attempts[index] += passed.size
            state.run[index] = runs[-1]
        return
    for position in range(passed.size):
        if filled == m:
            break
        state.attempts[index] += 1
        run += 1
        if passed[position]:
            released[index, filled] = values[position]
            state.fallbacks[index] += int(fallback[position])
            filled, run = filled + 1, 0
        elif run == cap:
            released[index, filled] = cap_value(filled)
            state.fallbacks[index] += 1
            state.capped[index] += 1
            filled, run = filled + 1, 0
    state.filled[index], state.run[index] = filled, run


def synthesize_object_reference(
    values: np.ndarray,
    weights: np.ndarray,
    bandwidth: float,
    parameters: SynthesisParameters,
    secret: bytes,
    release_id: str,
    object_id: Hashable,
) -> list[float]:
    """The synthesis of one object, one candidate and one slot at a time — the plain form that
    tests the block. Same streams as :func:`synthesize_block`; ``k'`` counted by a loop over the
    seeds. Returns the ``m`` released values (empty for an object with fewer than ``k`` claims)."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    if values.size < parameters.smallest_released_object:
        return []
    grid = parameters.grid
    released: list[float] = []
    run = 0
    round_index = 0
    while len(released) < parameters.claims_per_object:
        draws = RoundDraws.draw(synthesis_round_generator(secret, release_id, object_id, round_index), parameters)
        for b in range(parameters.batch_size):
            if len(released) == parameters.claims_per_object:
                break
            run += 1
            if draws.fallback[b]:
                candidate, passes = float(grid.values(draws.fallback_position[b])), True
            else:
                seed = int(choose_seeds(draws.seed_uniform[b : b + 1], weights)[0])
                candidate = float(exact_truncated_kernel_draws(
                    values[seed], bandwidth, grid, draws.kernel_words[b : b + 1],
                    lambda _, r=round_index, c=b: keyed_generator(
                        secret, release_id, KERNEL_PURPOSE, (object_id_key(object_id), r, c)),
                )[0])
                intervals = [
                    int(deniability_interval_index(truncated_log_probability(candidate, x, bandwidth, grid), parameters.gamma))
                    for x in values
                ]
                own = intervals[seed]
                k_prime = 0 if own == NO_INTERVAL else sum(1 for interval in intervals if interval == own)
                passes = bool(threshold_test_passes(
                    np.array([k_prime - parameters.k]), parameters.epsilon0, draws.test_bits[b : b + 1],
                    lambda _, r=round_index, c=b: keyed_generator(
                        secret, release_id, REFINE_PURPOSE, (object_id_key(object_id), r, c)),
                )[0])
            if passes:
                released.append(candidate)
                run = 0
            elif run == parameters.max_attempts_per_claim:
                released.append(cap_fallback_value(secret, release_id, object_id, len(released), grid))
                run = 0
        round_index += 1
    return released


def attempt_law(
    values: np.ndarray, weights: np.ndarray, bandwidth: float, parameters: SynthesisParameters
) -> tuple[np.ndarray, np.ndarray]:
    """The exact law of one attempt on an object, by enumeration of the grid: ``(grid values,
    A(y))`` where ``A(y)`` is the probability that the attempt passes *with value* ``y``;
    ``1 − Σ A`` is the probability that it fails. For the privacy analysis and its tests:

    ``A(y) = q0/|grid| + (1 − q0) Σ_s c_s P(y | x_s) P(N ≤ k'_s(y) − k)``.
    """
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    weights = weights / weights.sum()
    grid = parameters.grid
    y = grid.all_values()
    log_probability = truncated_log_probability(y[:, None], values[None, :], bandwidth, grid)
    intervals = deniability_interval_index(log_probability, parameters.gamma)
    same = (intervals[:, :, None] == intervals[:, None, :]) & (intervals[:, :, None] != NO_INTERVAL)
    k_prime = same.sum(axis=2)
    pass_probability = threshold_noise_cdf(k_prime - parameters.k, parameters.epsilon0)
    q0 = parameters.fallback_probability
    tested = (np.exp(log_probability) * pass_probability) @ weights
    return y, q0 / grid.size + (1.0 - q0) * tested


def released_claim_law(
    values: np.ndarray, weights: np.ndarray, bandwidth: float, parameters: SynthesisParameters
) -> tuple[np.ndarray, np.ndarray]:
    """The exact law of one released claim (one slot, attempt cap included): ``(grid values, L(y))``
    with ``L = A (1 − (1 − S)^T) / S + (1 − S)^T / |grid|`` and ``S = Σ A``."""
    y, attempt = attempt_law(values, weights, bandwidth, parameters)
    passing = attempt.sum()
    capped = (1.0 - passing) ** parameters.max_attempts_per_claim
    return y, attempt * (1.0 - capped) / passing + capped / parameters.grid.size
