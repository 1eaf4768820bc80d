"""The error every encoder over public domains raises for a value outside its domain, and the
bounds rule they share (refuse, or clip and count)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class DomainViolation(ValueError):
    """A value outside its column's public domain; ``row`` is the 0-based position in the frame."""

    def __init__(self, row: int, column: str, message: str) -> None:
        super().__init__(f"row {row}, column {column!r}: {message}")
        self.row = row
        self.column = column
        self.message = message


def within_bounds(values: np.ndarray, low: float, high: float, clip: bool, column: str,
                  shown: Callable[[int], object]) -> tuple[np.ndarray, int]:
    """``values`` inside the public bounds ``[low, high]``: a value outside (or NaN) raises
    ``DomainViolation`` for its first row, showing ``shown(row)``, unless ``clip``; then the values
    are clipped and the number clipped is returned with them."""
    outside = ~((values >= low) & (values <= high))
    if not outside.any():
        return values, 0
    if not clip:
        row = int(np.flatnonzero(outside)[0])
        raise DomainViolation(row, column, f"value {shown(row)!r} is outside the bounds [{low}, {high}]")
    return np.clip(values, low, high), int(outside.sum())
