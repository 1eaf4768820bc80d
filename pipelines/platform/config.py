"""Load a release configuration from YAML and validate it against its schema.

Errors name the file and the key (``crowd.yaml: privacy.gamma: must be greater than 1``).
Relative paths in the config are taken relative to the working directory, as a shell user
expects when running ``privlake run examples/x.yaml`` from the project root.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from pipelines.platform.errors import ConfigError

ModelT = TypeVar("ModelT", bound=BaseModel)
ReleaseConfig = Any
"""A validated configuration of one of the kinds in the registry (``pipelines/kinds.py``)."""


def _describe(error: dict[str, Any]) -> str:
    location = ".".join(str(part) for part in error["loc"] if not isinstance(part, int) or True)
    message = error["msg"]
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    elif error["type"] == "missing":
        message = "required key is missing"
    elif error["type"] == "value_error":
        message = message.removeprefix("Value error, ")
    given = error.get("input")
    if error["type"] not in ("missing", "extra_forbidden") and not isinstance(given, dict):
        message += f" (got {given!r})"
    return f"{location}: {message}" if location else message


def parse_config(document: Any, source: str) -> ReleaseConfig:
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: the config must be a YAML mapping of keys to values")
    from pipelines.kinds import KINDS, config_model

    kind = document.get("kind")
    if kind not in KINDS:
        known = ", ".join(sorted(KINDS))
        raise ConfigError(f"{source}: kind: must be one of {known} (got {kind!r})")
    return validate_document(config_model(kind), document, source)


def validate_document(model: type[ModelT], document: Any, source: str) -> ModelT:
    """``model`` validated from ``document``; the first problem as one ``ConfigError`` line naming
    ``source`` and the key (with a count of the others)."""
    try:
        return model.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        more = len(error.errors()) - 1
        suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        raise ConfigError(f"{source}: {_describe(first)}{suffix}") from None


def read_yaml(path: Path, what: str) -> Any:
    """The YAML document of a file (``what`` names the file in the error when it is missing)."""
    if not path.is_file():
        raise ConfigError(f"{path}: {what} file not found")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"{path}: not valid YAML: {first_line}") from None


def load_config(path: Path | str) -> ReleaseConfig:
    path = Path(path)
    return parse_config(read_yaml(path, "config"), str(path))
