"""Load a release configuration from YAML and validate it against its schema.

Errors name the file and the key (``crowd.yaml: privacy.gamma: must be greater than 1``), as one
line of at most ``errors.MAX_LINE`` characters (a config value echoed in it is cut short).
Relative paths in the config are taken relative to the config file's folder (``resolve_paths``),
so a config names the same files from any working directory. ``${NAME}`` in any
string value is replaced by the environment variable (``${NAME:-default}``; ``$$`` is ``$``), and
``privlake run --set key.path=value`` overrides single keys (``interpolate_environment``,
``apply_overrides``).

Hostile files fail fast, before any work (issue 14): a YAML file (config, feature spec) larger
than ``MAX_YAML_BYTES`` is refused unread, and so is one whose aliases would expand to more than
``MAX_YAML_NODES`` nodes (a "billion laughs" document is a few lines that expand to 10^9), one
that refers to itself, or one nested deeper than the parser can follow. Aliases within those
bounds are allowed.

The ``lake`` of a config is checked on load (``check_lake_path``): a path that is a file, lies
under a file, is read-only or cannot be created is a config error (exit 2) naming the key; a
device with no room left is transient (exit 75).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from pipelines.platform.errors import ConfigError, TransientFailure, one_line
from schemas.base import LakeLocation, LakeSetting

ModelT = TypeVar("ModelT", bound=BaseModel)
ReleaseConfig = Any
"""A validated configuration of one of the kinds in the registry (``pipelines/kinds.py``)."""

MAX_YAML_BYTES = 1 << 20
"""A config or feature spec is a few kilobytes: 1 MiB is refused before it is read."""
MAX_YAML_NODES = 100_000
"""The most nodes a YAML document may hold once its aliases are expanded."""
MAX_SHOWN_VALUE = 60
"""The most characters of a config value echoed in an error line."""
MIN_FREE_LAKE_BYTES = 16 << 20
"""Free space the lake's device must have for a release to start (less: transient, exit 75)."""


def _describe(error: dict[str, Any]) -> str:
    location = ".".join(str(part) for part in error["loc"])
    message = error["msg"]
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    elif error["type"] == "missing":
        message = "required key is missing"
    elif error["type"] == "value_error":
        message = message.removeprefix("Value error, ")
    given = error.get("input")
    # a lake's values may be credentials (from ${ENV} references): never echoed
    secret_place = bool(error["loc"]) and error["loc"][0] in ("lake", "catalog", "properties", "warehouse", "staging")
    if error["type"] not in ("missing", "extra_forbidden") and not isinstance(given, dict) and not secret_place:
        message += f" (got {one_line(repr(given), MAX_SHOWN_VALUE)})"
    return f"{location}: {message}" if location else message


def parse_config(document: Any, source: str) -> ReleaseConfig:
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: the config must be a YAML mapping of keys to values")
    from pipelines.kinds import KINDS, config_model

    kind = document.get("kind")
    if kind not in KINDS:
        known = ", ".join(sorted(KINDS))
        shown = one_line(repr(kind), MAX_SHOWN_VALUE) if isinstance(kind, str | int | float | bool | None) else type(kind).__name__
        raise ConfigError(f"{source}: kind: must be one of {known} (got {shown})")
    return validate_document(config_model(kind), document, source)


def validate_document(model: type[ModelT], document: Any, source: str) -> ModelT:
    """``model`` validated from ``document``; the first problem as one ``ConfigError`` line naming
    ``source`` and the key (with a count of the others)."""
    try:
        return model.model_validate(document)
    except ValidationError as error:
        problems = error.errors()
        more = len(problems) - 1
        suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        raise ConfigError(one_line(f"{source}: {_describe(problems[0])}{suffix}")) from None


def _expanded_nodes(root: yaml.Node, source: str, limit: int) -> int:
    """How many nodes the document holds with every alias expanded (an alias node is shared in
    the composed graph, so this is counted over the graph, in linear time); refuses a document
    that refers to itself or exceeds ``limit``."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            children = _children(node)
            sizes[key] = min(1 + sum(sizes[id(child)] for child in children), limit + 1)
            if sizes[key] > limit:
                raise ConfigError(
                    f"{source}: the YAML document expands to more than {limit:,} values (aliases repeat "
                    "content); refused"
                )
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ConfigError(f"{source}: the YAML document refers to itself through an alias; refused")
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _yaml_problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        mark = error.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return f"{error.problem}{where}"
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def load_yaml_text(text: str, source: str) -> Any:
    """The YAML document of ``text`` with aliases bounded (module docstring)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_nodes(node, source, MAX_YAML_NODES)
        return loader.construct_document(node)
    except yaml.YAMLError as error:
        raise ConfigError(one_line(f"{source}: not valid YAML: {_yaml_problem(error)}")) from None
    except RecursionError:
        raise ConfigError(f"{source}: not valid YAML: nested too deeply") from None
    finally:
        loader.dispose()


def read_yaml(path: Path, what: str) -> Any:
    """The YAML document of a file (``what`` names the file in the error when it is missing);
    at most ``MAX_YAML_BYTES``, aliases bounded."""
    if not path.is_file():
        raise ConfigError(f"{path}: {what} file not found")
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise ConfigError(f"{path}: the {what} file is {size:,} bytes; at most {MAX_YAML_BYTES:,} (refused unread)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid YAML: not UTF-8 text") from None
    except OSError as error:
        raise ConfigError(f"{path}: the {what} file cannot be read ({error.strerror or type(error).__name__})") from None
    return load_yaml_text(text, str(path))


_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:/")


def check_lake_path(lake: Path, source: str) -> None:
    """Refuse, before any work, a lake folder that cannot be used: a file, a path under a file, a
    read-only folder, one that cannot be created (``ConfigError``, exit 2, naming the key); a
    device with less than ``MIN_FREE_LAKE_BYTES`` free is ``TransientFailure`` (exit 75). A URI
    (a catalog's object store) is left to the catalog."""
    text = str(lake)
    if _URI.match(text):
        return
    where = f"{source}: lake: {text}"
    path = Path(os.path.abspath(lake))
    existing = path
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise ConfigError(f"{where}: is a file, not a folder" if existing == path
                          else f"{where}: cannot be created: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}: is read-only (cannot write into it)" if existing == path
                          else f"{where}: cannot be created: {existing} is read-only")
    if existing != path:
        first_missing = path
        while first_missing.parent != existing:
            first_missing = first_missing.parent
        try:
            first_missing.mkdir()
            first_missing.rmdir()
        except OSError as error:
            raise ConfigError(f"{where}: cannot be created ({error.strerror or type(error).__name__})") from None
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        return
    if free < MIN_FREE_LAKE_BYTES:
        raise TransientFailure(f"{where}: no space left on the device ({free:,} bytes free; a release needs at "
                               f"least {MIN_FREE_LAKE_BYTES:,}): retry when space is freed")


_ENVIRONMENT_REFERENCE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate_environment(document: Any, source: str, where: str = "") -> Any:
    """``${NAME}`` in every string value replaced by the environment variable ``NAME`` (credentials
    and per-run values stay out of the file); ``${NAME:-default}`` falls back to ``default``, ``$$``
    is a literal ``$``. An unset variable without a default is a ``ConfigError`` naming the key
    (never its value)."""
    if isinstance(document, dict):
        return {key: interpolate_environment(value, source, f"{where}.{key}" if where else str(key))
                for key, value in document.items()}
    if isinstance(document, list):
        return [interpolate_environment(value, source, f"{where}[{index}]") for index, value in enumerate(document)]
    if not isinstance(document, str) or "$" not in document:
        return document

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        value = os.environ.get(name)
        if value is None:
            if default is None:
                raise ConfigError(f"{source}: {where or 'config'}: the environment variable {name} is not set")
            return default
        return value

    return _ENVIRONMENT_REFERENCE.sub(replace, document)


def override_key_parts(key: str) -> list[str] | None:
    """The sections of a ``--set`` key path: split at dots, except inside double or single quotes,
    which name a key that itself holds dots (``lake.properties."s3.endpoint"``); ``None`` for an
    empty part or an unclosed quote."""
    parts, current, quote = [], [], None
    for character in key.strip():
        if quote is not None:
            if character == quote:
                quote = None
            else:
                current.append(character)
        elif character in "\"'":
            quote = character
        elif character == ".":
            parts.append("".join(current))
            current = []
        else:
            current.append(character)
    parts.append("".join(current))
    return parts if quote is None and all(parts) else None


def apply_overrides(document: Any, overrides: list[str], source: str) -> Any:
    """``--set key.path=value`` overrides applied to the YAML document before validation (the
    value is read as a YAML scalar or flow collection: ``3``, ``true``, ``[1, 2]``, ``spark``; a key
    holding dots is quoted: ``--set 'lake.properties."s3.endpoint"=http://127.0.0.1:9000'``)."""
    if not overrides:
        return document
    if not isinstance(document, dict):
        raise ConfigError(f"{source}: the config must be a YAML mapping of keys to values")
    for override in overrides:
        key, separator, text = _split_override(override)
        parts = override_key_parts(key)
        if not separator or not parts:
            raise ConfigError(f"--set {one_line(override, MAX_SHOWN_VALUE)}: expected key.path=value")
        value = load_yaml_text(text, f"--set {key}") if text.strip() else ""
        section = document
        for part in parts[:-1]:
            child = section.get(part)
            if child is None:
                child = section[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {key}: {part} is not a section of the config")
            section = child
        section[parts[-1]] = value
    return document


def _split_override(override: str) -> tuple[str, str, str]:
    """``key``, ``=`` and the value: the first ``=`` outside quotes (a quoted key may hold one)."""
    quote = None
    for position, character in enumerate(override):
        if quote is not None:
            quote = None if character == quote else quote
        elif character in "\"'":
            quote = character
        elif character == "=":
            return override[:position], "=", override[position + 1 :]
    return override, "", ""


def resolve_paths(model: ModelT, base: Path) -> ModelT:
    """``model`` with every relative path field (at any depth: sections, lists, mappings) taken
    relative to ``base``, the config file's folder — so a config means the same files whatever the
    working directory (a scheduler's task runs in a temporary folder)."""

    def resolved(value: Any) -> Any:
        if isinstance(value, Path):
            return value if value.is_absolute() else Path(os.path.normpath(base / value))
        if isinstance(value, BaseModel):
            return resolve_paths(value, base)
        if isinstance(value, list):
            items = [resolved(item) for item in value]
            return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
        if isinstance(value, dict):
            entries = {key: resolved(item) for key, item in value.items()}
            return entries if any(entries[key] is not value[key] for key in value) else value
        return value

    from schemas.sources import SourceSpec

    if isinstance(model, SourceSpec):  # its path is text (a glob or a URI stays one): resolved by its own rule
        from pipelines.platform.sources import resolve_source

        model = resolve_source(model, base)  # type: ignore[assignment]
    updates = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        new = resolved(value)
        if new is not value:
            updates[name] = new
    return model.model_copy(update=updates) if updates else model


def resolve_lake(location: LakeLocation, base: Path) -> LakeLocation:
    """A lake mapping's relative local paths (``state``, and ``staging`` or a ``file``-less
    ``warehouse`` when they are paths rather than URIs) taken relative to ``base``."""
    location = resolve_paths(location, base)
    updates = {name: os.path.normpath(base / value) for name in ("staging", "warehouse")
               if (value := getattr(location, name)) and not _URI.match(value) and not os.path.isabs(value)}
    return location.model_copy(update=updates) if updates else location


def lake_argument(text: str, must_exist: bool = True) -> LakeSetting:
    """What ``--lake`` names: a lake folder, or a YAML file holding a ``lake:`` mapping (a release
    config works too) or being one (``catalog:``, ``warehouse:``, ...). ``${ENV}`` references are
    interpolated and relative paths are relative to the YAML file. ``must_exist``: a folder that
    does not exist is refused (the reading commands; ``init-lake`` creates one)."""
    path = Path(text).expanduser()
    yaml_name = path.suffix.lower() in (".yaml", ".yml")
    if path.is_file() and not yaml_name:
        raise ConfigError(f"{path}: not a lake folder (a file; a lake mapping is a .yaml file)")
    if yaml_name and not path.is_file():
        raise ConfigError(f"{path}: no such lake file (a .yaml name is read as a file holding a lake: mapping)")
    if path.is_file():
        document = read_yaml(path, "lake")
        # only the lake is interpolated: a release config's other ${VARIABLES} need not be set
        if isinstance(document, dict) and "lake" in document:
            document = interpolate_environment(document["lake"], str(path), "lake")
        else:
            document = interpolate_environment(document, str(path))
        base = Path(os.path.abspath(path.parent))
        if isinstance(document, str) and document.strip():
            if _URI.match(document):
                raise ConfigError(f"{path}: lake: a URI is not a lake folder; name a catalog and warehouse in a "
                                  "lake: mapping (docs/PRODUCTION.md)")
            folder = Path(os.path.normpath(base / Path(document).expanduser()))
            if must_exist and not folder.exists():
                raise ConfigError(f"{path}: lake: {folder}: no lake here (the folder does not exist)")
            check_lake_path(folder, f"{path}: lake")
            return folder
        if not isinstance(document, dict):
            raise ConfigError(f"{path}: not a lake folder, nor a YAML file with a lake: mapping or path")
        return resolve_lake(validate_document(LakeLocation, document, f"{path}: lake"), base)
    if must_exist and not path.exists():
        raise ConfigError(f"{path}: no lake here (the folder does not exist)")
    check_lake_path(path, "--lake")
    return path


def load_config(path: Path | str, overrides: list[str] | None = None) -> ReleaseConfig:
    """The validated config of a YAML file: ``${ENV}`` references interpolated, then the ``--set``
    overrides applied, then the kind's model; relative paths are relative to the config file."""
    path = Path(path)
    document = apply_overrides(interpolate_environment(read_yaml(path, "config"), str(path)), overrides or [], str(path))
    config = resolve_paths(parse_config(document, str(path)), Path(os.path.abspath(path.parent)))
    lake = getattr(config, "lake", None)
    if isinstance(lake, str | Path):
        check_lake_path(Path(lake), str(path))
    elif isinstance(lake, LakeLocation):
        config = config.model_copy(update={"lake": resolve_lake(lake, Path(os.path.abspath(path.parent)))})
    return config
