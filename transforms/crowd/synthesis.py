"""Candidate synthesis and Algorithm 1 of PrisCrowd (issue 2, steps 4-6).

PrisCrowd (Huai, Wang, Miao, Xu, Zhang, IJCAI 2019, Section 4 and Algorithm 1) releases, for each
object ``i``, synthetic claims drawn from the object's weighted KDE
``f_i = Σ_s c_is K_h(·, x_is)``: pick a seed claim ``s`` with probability ``c_is`` (step 4), draw
``y ~ N(x_is, h_i²)``, round it to the public precision, and release it only if it passes the
randomized plausible-deniability test (step 5, ``transforms.core.plausible_deniability``). Repeat
until ``m`` candidates passed or the attempt cap is reached (step 6). Objects with fewer than
``k`` claims can never pass (``k' ≤ |S_i| < k`` would need negative noise) and are suppressed
without drawing anything.

Draw order (the contract that makes every engine, partitioning and retry produce the same
release). Object ``i`` draws its candidates in rounds of ``batch_size``; round ``r`` uses only
``keyed_generator(secret, release_id, "crowd/synthesis", (object_id, r))``, from which it takes
``batch_size × 3`` uniforms in C order, three per candidate in draw order:

* column 0 chooses the seed: the first ``s`` whose cumulative weight exceeds ``u·Σ_s c_is``;
* column 1 gives the kernel draw ``y = x_is + h_i·Φ⁻¹(u)`` (``standard_normal_from_uniform``);
* column 2 gives the threshold ``k̃ = k + F⁻¹_Lap(1/ε0)(u)`` (``laplace_from_uniform``).

Because a candidate's draws are three consecutive uniforms, the same stream can be consumed
one candidate at a time (``synthesize_object_reference``) or a whole round at once
(``synthesize_block``) with bitwise-identical results. Candidates are tested and released in
draw order; the first ``m`` that pass are released and every candidate up to and including the
``m``-th pass counts as one attempt (an invocation of the randomized test).

Rounding: ``y = precision · round(y / precision)`` with NumPy's round-half-to-even (a tie has
probability zero under a continuous kernel, so the rule only matters for reproducibility).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from transforms.core.keyed_randomness import keyed_generator
from transforms.core.plausible_deniability import (
    NO_INTERVAL,
    deniability_interval_index,
    laplace_from_uniform,
    plausible_deniability_test,
    standard_normal_from_uniform,
)
from transforms.crowd.claims_block import OBJECT_ID, VALUE, ClaimsBlock
from transforms.crowd.rounded_kernel import rounded_value_log_probability

SYNTHESIS_PURPOSE = "crowd/synthesis"
UNIFORMS_PER_CANDIDATE = 3
SEED_COLUMN, KERNEL_COLUMN, THRESHOLD_COLUMN = 0, 1, 2
REASON_FEWER_THAN_K = "fewer than k claims"
_PAIRS_PER_CHUNK = 1 << 20


def _is_integer(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


@dataclass(frozen=True)
class SynthesisParameters:
    """Public parameters of Algorithm 1 and the randomized test.

    Attributes:
        claims_per_object: ``m``, synthetic claims released per object (at most).
        k: the plausible-deniability threshold before noise (``k ≥ 1``).
        gamma: the interval ratio ``γ > 1`` of the test.
        epsilon0: the threshold noise parameter, ``k̃ = k + Lap(1/ε0)``.
        precision: released values are multiples of it; ``P(y|x)`` is the mass of its cell.
        max_attempts_per_object: cap on candidates tested per object (every test counts).
        batch_size: candidates drawn per round (one keyed stream per object and round).
    """

    claims_per_object: int
    k: int
    gamma: float
    epsilon0: float
    precision: float
    max_attempts_per_object: int
    batch_size: int

    def __post_init__(self) -> None:
        for name in ("claims_per_object", "k", "max_attempts_per_object", "batch_size"):
            if not _is_integer(getattr(self, name)):
                raise ValueError(f"{name} must be an integer")
        checks = [
            (self.claims_per_object >= 1, "claims_per_object (m) must be at least 1"),
            (self.k >= 1, "k must be at least 1"),
            (np.isfinite(self.gamma) and self.gamma > 1.0, "gamma must be a finite number greater than 1"),
            (np.isfinite(self.epsilon0) and self.epsilon0 > 0.0, "epsilon0 must be a finite positive number"),
            (
                np.isfinite(self.precision) and self.precision > 0.0,
                "precision must be a finite positive number",
            ),
            (self.max_attempts_per_object >= 1, "max_attempts_per_object must be at least 1"),
            (self.batch_size >= 1, "batch_size must be at least 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


@dataclass(frozen=True)
class BlockSynthesis:
    """Output of ``synthesize_block``.

    Attributes:
        claims: one row per released synthetic claim: ``object_id``, ``claim_index`` (int32,
            ``0..released-1`` in draw order), ``value`` (float64, a multiple of the precision);
            objects in block order.
        objects: one row per object of the block: ``object_id``, ``claims`` (``|S_i|``),
            ``released``, ``attempts`` (tests run), ``suppressed`` (fewer than ``k`` claims, never
            sampled) and ``reason`` (``"fewer than k claims"`` or ``""``). A non-suppressed
            object with ``released < m`` hit the attempt cap; its shortfall is ``m - released``.
    """

    claims: pd.DataFrame
    objects: pd.DataFrame


@dataclass(frozen=True)
class CandidateDraws:
    """One round of candidates (leading axes: objects, then candidates in draw order)."""

    seed_index: np.ndarray
    unrounded_values: np.ndarray
    values: np.ndarray
    thresholds: np.ndarray


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
    return keyed_generator(
        secret, release_id, SYNTHESIS_PURPOSE, (object_id_key(object_id), int(round_index))
    )


def candidate_uniforms(rng: np.random.Generator, batch_size: int) -> np.ndarray:
    """``(batch_size, 3)`` uniforms of one round: per candidate (seed, kernel, threshold)."""
    return rng.random((batch_size, UNIFORMS_PER_CANDIDATE))


def choose_seeds(seed_uniforms: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Seed index per uniform: ``s`` with probability ``c_s / Σ c`` (inverse CDF on cumulative weights).

    ``seed_uniforms`` is ``(..., B)`` and ``weights`` ``(..., n)``; the cumulative sums are
    sequential (``np.cumsum``) so a plain running sum gives the same bits.
    """
    cumulative = np.cumsum(np.asarray(weights, dtype=np.float64), axis=-1)
    target = np.asarray(seed_uniforms, dtype=np.float64) * cumulative[..., -1:]
    below = (cumulative[..., None, :] <= target[..., :, None]).sum(axis=-1, dtype=np.int64)
    return np.minimum(below, cumulative.shape[-1] - 1)


def kernel_draws(
    seed_values: np.ndarray, bandwidth: np.ndarray | float, kernel_uniforms: np.ndarray
) -> np.ndarray:
    """Unrounded kernel draws ``y = x + h·Φ⁻¹(u)``, i.e. ``y ~ N(x, h²)`` (step 4)."""
    return seed_values + bandwidth * standard_normal_from_uniform(kernel_uniforms)


def round_to_precision(values: np.ndarray, precision: float) -> np.ndarray:
    """``precision · round(values / precision)`` (half to even)."""
    return precision * np.round(values / precision)


def draw_candidates(
    uniforms: np.ndarray,
    values: np.ndarray,
    weights: np.ndarray,
    bandwidth: np.ndarray | float,
    parameters: SynthesisParameters,
) -> CandidateDraws:
    """Turn a round's uniforms ``(..., B, 3)`` into candidates for objects ``(..., n)``.

    ``bandwidth`` has the objects' leading shape (a scalar for one object).
    """
    uniforms = np.asarray(uniforms, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    bandwidth = np.asarray(bandwidth, dtype=np.float64)[..., None]
    seed_index = choose_seeds(uniforms[..., SEED_COLUMN], weights)
    seed_values = np.take_along_axis(values, seed_index, axis=-1)
    unrounded = kernel_draws(seed_values, bandwidth, uniforms[..., KERNEL_COLUMN])
    thresholds = parameters.k + laplace_from_uniform(
        uniforms[..., THRESHOLD_COLUMN], 1.0 / parameters.epsilon0
    )
    return CandidateDraws(
        seed_index=seed_index,
        unrounded_values=unrounded,
        values=round_to_precision(unrounded, parameters.precision),
        thresholds=thresholds,
    )


def _validate_inputs(block: ClaimsBlock, bandwidths: np.ndarray, combined_weights: np.ndarray) -> None:
    if bandwidths.shape != (block.number_of_objects,):
        raise ValueError(
            f"bandwidths must have one entry per object ({block.number_of_objects}), got {bandwidths.shape}"
        )
    if combined_weights.shape != (block.number_of_claims,):
        raise ValueError(
            f"combined_weights must have one entry per claim ({block.number_of_claims}), got {combined_weights.shape}"
        )
    if not np.all(np.isfinite(bandwidths) & (bandwidths > 0.0)):
        raise ValueError("bandwidths must be finite and positive")
    if not np.all(np.isfinite(combined_weights) & (combined_weights >= 0.0)):
        raise ValueError("combined_weights must be finite and non-negative")
    if np.any(block.counts == 0):
        raise ValueError("every object of a block must have at least one claim")
    if block.number_of_objects and np.any(np.add.reduceat(combined_weights, block.offsets[:-1]) <= 0.0):
        raise ValueError("every object's combined weights must have a positive sum")


def synthesize_block(
    block: ClaimsBlock,
    bandwidths: np.ndarray,
    combined_weights: np.ndarray,
    parameters: SynthesisParameters,
    secret: bytes,
    release_id: str,
) -> BlockSynthesis:
    """Algorithm 1 for every object of ``block``, vectorized across objects.

    Args:
        block: whole objects' claims ``x_is``.
        bandwidths: ``(O,)`` per-object kernel bandwidth ``h_i > 0``.
        combined_weights: ``(N,)`` per-claim seed probabilities ``c_is`` (normalized per object
            here, so only their ratios matter).
        parameters: the public synthesis parameters.
        secret, release_id: the release's keyed randomness (see module docstring for the streams).

    Each object's output depends only on its own claims, weights, bandwidth, id and the
    release's secret — not on the other objects of the block, on chunking or on the engine.
    """
    bandwidths = np.asarray(bandwidths, dtype=np.float64)
    combined_weights = np.asarray(combined_weights, dtype=np.float64)
    _validate_inputs(block, bandwidths, combined_weights)
    m = parameters.claims_per_object
    batch = parameters.batch_size
    cap = parameters.max_attempts_per_object
    counts = block.counts.astype(np.int64)
    number_of_objects = block.number_of_objects
    eligible = counts >= parameters.k
    released = np.zeros(number_of_objects, dtype=np.int64)
    attempts = np.zeros(number_of_objects, dtype=np.int64)
    keys = [object_id_key(object_id) for object_id in block.object_ids]
    released_objects: list[np.ndarray] = []
    released_values: list[np.ndarray] = []

    active = np.flatnonzero(eligible)
    round_index = 0
    while active.size:
        uniforms = np.empty((active.size, batch, UNIFORMS_PER_CANDIDATE), dtype=np.float64)
        for row, object_index in enumerate(active):
            rng = keyed_generator(secret, release_id, SYNTHESIS_PURPOSE, (keys[object_index], round_index))
            rng.random(out=uniforms[row])
        passed, values = _test_round(block, bandwidths, combined_weights, parameters, active, uniforms)

        within_cap = (round_index * batch + np.arange(batch)) < cap
        need = m - released[active]
        candidate_passes = passed & within_cap
        passes_so_far = np.cumsum(candidate_passes, axis=1)
        release_mask = candidate_passes & (passes_so_far <= need[:, None])
        completes = passes_so_far[:, -1] >= need
        completing_attempt = np.argmax(passes_so_far >= need[:, None], axis=1)
        attempts[active] += np.where(completes, completing_attempt + 1, int(within_cap.sum()))
        released[active] += release_mask.sum(axis=1)
        rows, columns = np.nonzero(release_mask)
        released_objects.append(active[rows])
        released_values.append(values[rows, columns])

        active = active[(released[active] < m) & (attempts[active] < cap)]
        round_index += 1

    return BlockSynthesis(
        claims=_claims_frame(block, released_objects, released_values),
        objects=pd.DataFrame(
            {
                OBJECT_ID: block.object_ids,
                "claims": counts,
                "released": released,
                "attempts": attempts,
                "suppressed": ~eligible,
                "reason": np.where(eligible, "", REASON_FEWER_THAN_K).astype(object),
            }
        ),
    )


def _test_round(
    block: ClaimsBlock,
    bandwidths: np.ndarray,
    combined_weights: np.ndarray,
    parameters: SynthesisParameters,
    active: np.ndarray,
    uniforms: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw and test one round's candidates for the ``active`` objects; objects grouped by ``|S_i|``."""
    batch = parameters.batch_size
    passed = np.empty((active.size, batch), dtype=bool)
    values = np.empty((active.size, batch), dtype=np.float64)
    active_counts = block.counts[active]
    order = np.argsort(active_counts, kind="stable")
    boundaries = np.flatnonzero(np.diff(active_counts[order])) + 1
    for group in np.split(order, boundaries):
        n = int(active_counts[group[0]])
        per_chunk = max(1, _PAIRS_PER_CHUNK // (batch * n))
        for start in range(0, group.size, per_chunk):
            rows = group[start : start + per_chunk]
            objects = active[rows]
            claim_index = block.offsets[objects][:, None] + np.arange(n)
            seeds = block.values[claim_index]
            bandwidth = bandwidths[objects]
            draws = draw_candidates(
                uniforms[rows], seeds, combined_weights[claim_index], bandwidth, parameters
            )
            log_probabilities = rounded_value_log_probability(
                draws.values[:, :, None], seeds[:, None, :], bandwidth[:, None, None], parameters.precision
            )
            passed[rows] = plausible_deniability_test(
                log_probabilities, draws.seed_index, parameters.gamma, draws.thresholds
            )
            values[rows] = draws.values
    return passed, values


def _claims_frame(
    block: ClaimsBlock, released_objects: list[np.ndarray], released_values: list[np.ndarray]
) -> pd.DataFrame:
    if released_objects:
        objects = np.concatenate(released_objects)
        values = np.concatenate(released_values)
    else:
        objects = np.empty(0, dtype=np.int64)
        values = np.empty(0, dtype=np.float64)
    order = np.argsort(objects, kind="stable")
    objects = objects[order]
    claim_index = np.arange(objects.size, dtype=np.int64) - np.searchsorted(objects, objects, side="left")
    return pd.DataFrame(
        {
            OBJECT_ID: block.object_ids[objects],
            "claim_index": claim_index.astype(np.int32),
            VALUE: values[order].astype(np.float64),
        }
    )


def synthesize_object_reference(
    values: np.ndarray,
    weights: np.ndarray,
    bandwidth: float,
    parameters: SynthesisParameters,
    rng: Callable[[int], np.random.Generator] | np.random.Generator,
) -> list[float]:
    """Algorithm 1 for one object, one candidate at a time — the plain form that tests the block.

    ``rng`` gives round ``r``'s generator (e.g. ``lambda r: synthesis_round_generator(secret,
    release_id, object_id, r)``, which reproduces ``synthesize_block``), or is one generator used
    for all rounds. Each candidate takes its three uniforms from the current round's stream;
    the seed is chosen by a running sum, ``k'`` is counted by a loop over the seeds. Returns the
    released values in draw order (empty for an object with fewer than ``k`` claims).
    """
    values = [float(v) for v in np.asarray(values, dtype=np.float64)]
    weights = [float(w) for w in np.asarray(weights, dtype=np.float64)]
    if len(values) < parameters.k:
        return []
    precision = parameters.precision
    released: list[float] = []
    attempts = 0
    round_index = 0
    while len(released) < parameters.claims_per_object and attempts < parameters.max_attempts_per_object:
        generator = rng(round_index) if callable(rng) else rng
        for _ in range(parameters.batch_size):
            if (
                len(released) >= parameters.claims_per_object
                or attempts >= parameters.max_attempts_per_object
            ):
                break
            seed_uniform, kernel_uniform, threshold_uniform = generator.random(UNIFORMS_PER_CANDIDATE)
            attempts += 1

            running_sum = 0.0
            cumulative = []
            for weight in weights:
                running_sum += weight
                cumulative.append(running_sum)
            target = seed_uniform * running_sum
            seed = len(values) - 1
            for index, partial in enumerate(cumulative):
                if target < partial:
                    seed = index
                    break

            candidate = values[seed] + bandwidth * standard_normal_from_uniform(kernel_uniform)
            candidate = precision * np.round(candidate / precision)
            threshold = parameters.k + laplace_from_uniform(threshold_uniform, 1.0 / parameters.epsilon0)

            intervals = [
                int(
                    deniability_interval_index(
                        rounded_value_log_probability(candidate, value, bandwidth, precision),
                        parameters.gamma,
                    )
                )
                for value in values
            ]
            own = intervals[seed]
            k_prime = 0
            if own != NO_INTERVAL:
                for interval in intervals:
                    if interval == own:
                        k_prime += 1
            if k_prime >= threshold:
                released.append(float(candidate))
        round_index += 1
    return released
