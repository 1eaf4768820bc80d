"""The public output space of a crowd release: the grid ``low, low + p, …, high`` of the public
value range ``[low, high]`` at the release's precision ``p``.

Every released value lies on it: kernel draws are truncated to the range and rounded to the grid
(``transforms/crowd/rounded_kernel.py``), and the fallback draws are uniform on it. Because the
range is public configuration and the grid finite, the law of a released claim is a finite
vector that tests can compute exactly (``released_claim_law`` in ``transforms/crowd/synthesis.py``).
Claims outside the range are clipped to it (a per-claim transformation of the input, so
neighbouring inputs stay neighbours) and counted for the operator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

GRID_ULPS = 8
"""How far ``bound / precision`` may be from an integer, in units in the last place of that
quotient: the rounding of one division and of the decimal inputs, nothing more. A relative
tolerance would let a bound sit half a step off the grid when ``|bound / precision|`` is large,
and then the sampler's cells would no longer be the ones the guarantee's model uses."""


def off_grid(bound: float, precision: float) -> bool:
    """Whether ``bound`` is not a multiple of ``precision`` (up to :data:`GRID_ULPS` ulps)."""
    steps = bound / precision
    return abs(steps - round(steps)) > GRID_ULPS * math.ulp(max(1.0, abs(steps)))


@dataclass(frozen=True)
class ValueGrid:
    """``low`` and ``high`` are multiples of ``precision`` (to :data:`GRID_ULPS` ulps: :func:`off_grid`)."""

    low: float
    high: float
    precision: float

    def __post_init__(self) -> None:
        for name in ("low", "high", "precision"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite")
        if not self.precision > 0:
            raise ValueError("the precision must be positive")
        if not self.high > self.low:
            raise ValueError("the value range must have high > low")
        for name in ("low", "high"):
            if off_grid(getattr(self, name), self.precision):
                raise ValueError(f"the value range's {name} must be a multiple of the precision")

    @property
    def first_step(self) -> int:
        return round(self.low / self.precision)

    @property
    def size(self) -> int:
        """Number of grid values ``J + 1``."""
        return round(self.high / self.precision) - self.first_step + 1

    def values(self, index: np.ndarray) -> np.ndarray:
        """The grid values at integer positions ``index`` (``0 … size−1``), clipped to the range (a
        precision that is not a binary fraction can put ``precision × steps`` one ulp past it)."""
        steps = (self.first_step + np.asarray(index, dtype=np.int64)).astype(np.float64)
        return np.clip(self.precision * steps, self.low, self.high)

    def all_values(self) -> np.ndarray:
        return self.values(np.arange(self.size))

    def round(self, values: np.ndarray) -> np.ndarray:
        """The nearest grid value (ties to even), clipped to the range."""
        steps = np.rint(np.asarray(values, dtype=np.float64) / self.precision)
        steps = np.clip(steps, self.first_step, self.first_step + self.size - 1)
        return np.clip(self.precision * steps, self.low, self.high)

    def clip(self, values: np.ndarray) -> tuple[np.ndarray, int]:
        """Claims clipped into ``[low, high]`` and how many were outside (an operator figure)."""
        values = np.asarray(values, dtype=np.float64)
        outside = int(np.count_nonzero((values < self.low) | (values > self.high)))
        return np.clip(values, self.low, self.high), outside
