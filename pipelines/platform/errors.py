"""Errors that end a command with one clear line and a non-zero exit (never a traceback).

The exit codes are the scheduler contract (``privlake --help``, ``README.md``):

| code | meaning |
|---|---|
| 0 | success (also: the release id is already published) |
| 2 | bad input, bad config, bad arguments, unusable lake path |
| 3 | the output failed validation and was quarantined |
| 4 | refused by budget or policy |
| 5 | nothing to release |
| 75 | transient infrastructure failure: a retry may succeed |
| 1 | a bug (one line; ``PRIVLAKE_DEBUG=1`` for the traceback) |
"""

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
    """The release was refused by budget or policy before touching the data (the budget would be
    exceeded, the dataset has none, a test secret in a production lake, a non-private setting)."""

    exit_code = 4


class NothingToRelease(PrivlakeError):
    """The release would publish no rows (e.g. no record passed the privacy test)."""

    exit_code = 5


class TransientFailure(PrivlakeError):
    """Infrastructure that may come back: an unreachable master or catalog, lost storage, a full
    disk. A scheduler may retry."""

    exit_code = 75


class ReleaseQuarantined(PrivlakeError):
    """The output failed validation: it went to quarantine, nothing was published."""

    exit_code = 3
