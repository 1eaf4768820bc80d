"""The one-line ``InputError`` contract, checked the same way by every reader's tests."""

from __future__ import annotations

from pathlib import Path

from pipelines.platform.errors import InputError


def assert_input_error(
    error: InputError, path: Path | str, *says: str, row: int | None = None, column: str | None = None,
    hides: tuple[str, ...] = (),
) -> None:
    """``error`` is one line ``<file>[, row <row>][, column '<column>']: <message>`` naming exactly
    this file, row and column (``None``: not named), its message contains every ``says`` and none
    of ``hides`` (raw values of the input, which an error line never echoes)."""
    text = str(error)
    assert "\n" not in text, text
    assert (error.file, error.row, error.column) == (str(path), row, column), text
    where = str(path) + (f", row {row}" if row is not None else "") + (f", column '{column}'" if column is not None else "")
    assert text.startswith(where + ": "), text
    for fragment in says:
        assert fragment in text, (fragment, text)
    message = text.removeprefix(where + ": ")
    for raw in hides:
        assert raw not in message, (raw, text)
