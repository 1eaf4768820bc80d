"""Errors that end a command with one clear line and a non-zero exit (never a traceback)."""

from __future__ import annotations


class PrivlakeError(Exception):
    """An expected failure: bad input, bad config, refused budget, unreachable engine.

    ``str(error)`` is the one line shown to the user.
    """

    exit_code = 2


class ConfigError(PrivlakeError):
    """The configuration file is missing, unreadable or invalid (names the key)."""


class InputError(PrivlakeError):
    """The input data is unusable (names the file, row and column where known)."""

    def __init__(self, file: str, message: str, *, row: int | None = None, column: str | None = None):
        self.file = file
        self.row = row
        self.column = column
        self.message = message
        where = [file]
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column '{column}'")
        super().__init__(", ".join(where) + ": " + message)


class ReleaseNotFound(PrivlakeError):
    """No published release has this id."""


class ReleaseRefused(PrivlakeError):
    """The release was refused before touching the data (e.g. the budget would be exceeded)."""


class ReleaseQuarantined(PrivlakeError):
    """The output failed validation: it went to quarantine, nothing was published."""

    exit_code = 3
