"""One rule shared by the schema files: names and category lists must not repeat."""

from __future__ import annotations

from collections.abc import Iterable


def first_repeated(values: Iterable[str]) -> str | None:
    """The first value that occurs a second time, or ``None``."""
    seen: set[str] = set()
    for value in values:
        if value in seen:
            return value
        seen.add(value)
    return None


def require_unique(values: Iterable[str], what: str, verb: str = "is used twice") -> None:
    """Raise ``ValueError("<what> 'x' <verb>")`` for the first repeated value."""
    repeated = first_repeated(values)
    if repeated is not None:
        raise ValueError(f"{what} {repeated!r} {verb}")
