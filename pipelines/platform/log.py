"""privlake's lines on standard error, as text or as structured JSON (``--log-format json``).

Text (the default) is what a person reads: ``privlake: <message>``. JSON is what a log pipeline
reads: one object per line with ``ts`` (UTC, ISO 8601), ``level``, ``release_id`` (when a release
is running), ``stage`` (for progress), ``exit_code`` (for the error that ends a command) and
``message``. Either way an error is exactly one line. Everything goes through the standard
``logging`` module (logger ``privlake``), so an embedding application can attach its own handlers.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

LOGGER_NAME = "privlake"
FORMATS = ("text", "json")
current_release: contextvars.ContextVar[str | None] = contextvars.ContextVar("privlake_release", default=None)
"""The id of the release running in this context (set by the release skeleton)."""

logger = logging.getLogger(LOGGER_NAME)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        level = "warning: " if record.levelno == logging.WARNING else ""
        return f"privlake: {level}{record.getMessage()}"


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
        }
        release = getattr(record, "release_id", None) or current_release.get()
        if release:
            entry["release_id"] = release
        for field in ("stage", "exit_code", "config"):
            value = getattr(record, field, None)
            if value is not None:
                entry[field] = value
        entry["message"] = " ".join(record.getMessage().split())  # one line, whatever the message
        return json.dumps(entry)


class _StandardErrorHandler(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is at the time of the record (tests and
    embedding applications replace it)."""

    privlake = True

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201 - logging's own attribute
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # noqa: ANN001
        pass


def configure(log_format: str = "text") -> None:
    """Send the ``privlake`` logger to standard error in ``log_format`` (replacing an earlier
    configuration by this function; handlers an embedding application added are kept)."""
    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}")
    for handler in [h for h in logger.handlers if getattr(h, "privlake", False)]:
        logger.removeHandler(handler)
    handler = _StandardErrorHandler()
    handler.setFormatter(_JsonFormatter() if log_format == "json" else _TextFormatter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def is_json() -> bool:
    return any(isinstance(h.formatter, _JsonFormatter) for h in logger.handlers if getattr(h, "privlake", False))


def _ensure_configured() -> None:
    if not any(getattr(h, "privlake", False) for h in logger.handlers):
        configure("text")


def error(message: str, exit_code: int | None = None, **fields: Any) -> None:
    _ensure_configured()
    logger.error(message, extra={"exit_code": exit_code, **fields})


def warning(message: str, **fields: Any) -> None:
    _ensure_configured()
    logger.warning(message, extra=fields)


def info(message: str, **fields: Any) -> None:
    _ensure_configured()
    logger.info(message, extra=fields)
