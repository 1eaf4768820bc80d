"""The error every encoder over public domains raises for a value outside its domain."""

from __future__ import annotations


class DomainViolation(ValueError):
    """A value outside its column's public domain; ``row`` is the 0-based position in the frame."""

    def __init__(self, row: int, column: str, message: str) -> None:
        super().__init__(f"row {row}, column {column!r}: {message}")
        self.row = row
        self.column = column
        self.message = message
