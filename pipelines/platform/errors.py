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

Every expected failure is one of the classes below, so it carries its code; an ``OSError`` that
reaches the command line is mapped by :func:`expected_failure` (a full disk is transient, a
read-only or unusable path is bad input). Error lines never echo raw input values (issue 12): a
reader names the file, row and column and says what is wrong, never the cell or the row.
"""

from __future__ import annotations

import errno
import re

MAX_LINE = 300
"""The longest error line a message is cut to (config values echoed in it stay readable)."""


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


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` as one line of at most ``limit`` characters: runs of whitespace (newlines too)
    become one space, and a longer text is cut with ``...``."""
    flat = re.sub(r"\s+", " ", str(text)).strip()
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


_TRANSIENT_ERRNOS = frozenset(
    code for code in (getattr(errno, name, None) for name in ("ENOSPC", "EDQUOT", "EIO", "ETIMEDOUT", "EAGAIN"))
    if code is not None
)
_BAD_PATH_ERRNOS = frozenset(
    code for code in (getattr(errno, name, None)
                      for name in ("EROFS", "EACCES", "EPERM", "ENOTDIR", "EISDIR", "ENAMETOOLONG", "ELOOP"))
    if code is not None
)


_UNREACHABLE_ERRNOS = frozenset(
    code for code in (getattr(errno, name, None)
                      for name in ("ECONNREFUSED", "ECONNRESET", "ECONNABORTED", "EHOSTUNREACH", "ENETUNREACH",
                                   "ENETDOWN", "EPIPE"))
    if code is not None
)
_UNREACHABLE_TEXT = re.compile(
    r"NETWORK_CONNECTION|Couldn't connect to server|curlCode: (6|7|28)|Connection refused|could not connect to server|"
    r"server closed the connection|timed out|timeout expired|could not translate host name|Name or service not known|"
    r"Temporary failure in name resolution|too many clients|SLOW_DOWN|SERVICE_UNAVAILABLE|INTERNAL_FAILURE|"
    r"HTTP status 5\d\d", re.IGNORECASE)
_REFUSED_TEXT = re.compile(
    r"ACCESS_DENIED|INVALID_ACCESS_KEY_ID|SIGNATURE_DOES_NOT_MATCH|NO_SUCH_BUCKET|password authentication failed|"
    r"authentication failed|HTTP status 40[13]", re.IGNORECASE)
_SERVICE_MODULES = ("sqlalchemy", "psycopg2", "requests", "urllib3", "botocore", "pyiceberg", "pyspark", "thrift")
_URI_CREDENTIALS = re.compile(r"(?<=://)[^@\s]*@")


def _service_line(name: str, text: str) -> str:
    first = _URI_CREDENTIALS.sub("", (text.strip().splitlines() or [""])[0])
    return f"({name}: {first})"


def unreachable_service(error: BaseException) -> PrivlakeError | None:
    """What a failure of one of the lake's services (the catalog's database or REST server, Glue,
    Hive, the object store; also seen through a Spark task) stands for, or ``None``: it did not
    answer, was busy or failed inside (``TransientFailure``, 75: retry), or it refused our
    credentials or names a bucket that does not exist (``ConfigError``, 2: fix the lake's settings).
    Looks through the exceptions ``error`` was raised from. The line names the kind of error and its
    first line with any ``user:password@`` removed."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        name, module = type(current).__name__, type(current).__module__
        text = str(current)
        from_service = isinstance(current, OSError | ConnectionError) or module.startswith(_SERVICE_MODULES)
        if from_service and _REFUSED_TEXT.search(text):
            return ConfigError(one_line(f"the lake's catalog or storage refused the request {_service_line(name, text)}: "
                                        "check the lake's credentials, bucket and endpoint"))
        unreachable = (
            (isinstance(current, OSError) and current.errno in _UNREACHABLE_ERRNOS)
            or (module.startswith(("requests", "urllib3", "botocore")) and ("Connection" in name or "Timeout" in name
                                                                           or "Endpoint" in name))
            or (module.startswith("pyiceberg") and name in ("ServiceUnavailableError", "ServerError"))
            or (from_service and bool(_UNREACHABLE_TEXT.search(text)))
        )
        if unreachable:
            return TransientFailure(one_line(f"the lake's catalog or storage did not answer {_service_line(name, text)} "
                                             "(transient: retry when it is back)"))
        current = current.__cause__ or current.__context__
    return None


def expected_failure(error: BaseException) -> PrivlakeError | None:
    """The expected failure an exception stands for, or ``None`` for a bug.

    A ``PrivlakeError`` is itself. A catalog or object store that does not answer is a
    ``TransientFailure`` (:func:`unreachable_service`). An ``OSError`` is the file system speaking: a full disk or
    quota, an I/O error or a timeout is a ``TransientFailure`` (75: a retry may succeed once
    space is freed); a read-only file system, a permission refused, a path that is a file where a
    folder is needed (or the reverse) is bad input (2). Anything else stays a bug. The line names the path
    and the reason, never file contents.
    """
    if isinstance(error, PrivlakeError):
        return error
    unreachable = unreachable_service(error)
    if unreachable is not None:
        return unreachable
    if not isinstance(error, OSError) or error.errno is None:
        return None
    where = error.filename if error.filename is not None else "the lake"
    reason = error.strerror or errno.errorcode.get(error.errno, "I/O error")
    if error.errno in _TRANSIENT_ERRNOS:
        return TransientFailure(one_line(f"{where}: {reason} (transient: retry when fixed)"))
    if error.errno in _BAD_PATH_ERRNOS:
        return PrivlakeError(one_line(f"{where}: {reason}"))
    return None
