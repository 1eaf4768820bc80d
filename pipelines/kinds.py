"""The registry of release kinds: the one place that lists them.

Each entry names a kind's configuration model and its pipeline module (which defines the kind's
:class:`~pipelines.platform.release.ReleaseKind` as ``KIND``). Both are imported only when that
kind is used, so ``privlake`` on a crowd config never imports torch, and the config loader reads a
config without importing any pipeline. A kind that needs an optional extra (the filter kind:
``privlake[filter]``, torch) says so in one line when it is missing (``require_kind``). Adding a kind: one package per layer and one line here
(``docs/ARCHITECTURE.md``, "Adding a release kind").
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipelines.platform.errors import PrivlakeError

if TYPE_CHECKING:  # the release code is heavy: the command line imports this registry to build its parser
    from pipelines.platform.release import ReleaseKind


@dataclass(frozen=True)
class KindEntry:
    """Where a kind lives: ``config`` as ``module:ClassName``, ``pipeline`` a module path,
    ``commands`` a light module whose ``add_commands(subparsers)`` adds the kind's own commands."""

    config: str
    pipeline: str
    commands: str | None = None
    requires: tuple[str, ...] = ()
    """Modules of an optional extra the kind's pipeline needs (the filter kind: torch)."""
    extra: str | None = None
    report: str | None = None
    """A light module whose ``report_sections(manifest, released, internal)`` draws the kind's part
    of ``privlake report`` (numpy and pandas only: it runs where the kind's extra may be missing)."""


KINDS: dict[str, KindEntry] = {
    "crowd": KindEntry("schemas.crowd.config:CrowdConfig", "pipelines.crowd.pipeline", "pipelines.crowd.commands",
                       report="pipelines.crowd.report_page"),
    "tabular": KindEntry("schemas.tabular.config:TabularConfig", "pipelines.tabular.pipeline",
                         report="pipelines.tabular.report_page"),
    "ldp": KindEntry("schemas.ldp.config:LdpConfig", "pipelines.ldp.pipeline", "pipelines.ldp.commands",
                     report="pipelines.ldp.report_page"),
    "filter": KindEntry("schemas.filter.config:FilterConfig", "pipelines.filter.pipeline", "pipelines.filter.commands",
                        requires=("torch",), extra="filter", report="pipelines.filter.report_page"),
}


def kind_names() -> list[str]:
    return sorted(KINDS)


def config_model(kind: str) -> type[Any]:
    """The configuration model of ``kind`` (``KeyError`` for an unknown kind)."""
    module, name = KINDS[kind].config.split(":")
    return getattr(importlib.import_module(module), name)


class KindUnavailable(PrivlakeError):
    """The kind's optional extra is not installed (one line saying which to install; exit 2)."""


def require_kind(kind: str) -> None:
    """Raise :class:`KindUnavailable` when a module the kind needs is not installed."""
    entry = KINDS[kind]
    for module in entry.requires:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise KindUnavailable(f"the {kind} kind needs {module}, which is not installed: "
                                  f"pip install 'privlake[{entry.extra or kind}]'")


def release_kind(kind: str) -> ReleaseKind:
    """The :class:`ReleaseKind` of ``kind`` (``KeyError`` for an unknown kind; ``KindUnavailable``
    when its optional extra is missing)."""
    require_kind(kind)
    return importlib.import_module(KINDS[kind].pipeline).KIND


def report_figures(kind: str) -> Any:
    """The kind's figure function for ``privlake report`` (``report_sections(manifest, released,
    internal)``), or ``None`` for an unknown kind or one without a report module. It never needs the
    kind's optional extra: a filter release's report renders without torch."""
    entry = KINDS.get(kind)
    if entry is None or entry.report is None:
        return None
    return importlib.import_module(entry.report).report_sections


def add_kind_commands(commands: Any) -> None:
    """Each kind's own subcommands (``generate-crowd``, ``simulate-ldp``, ``train-encoder``), from
    its light ``commands`` module (heavy imports stay inside the commands' handlers)."""
    for kind in KINDS.values():
        if kind.commands is not None:
            importlib.import_module(kind.commands).add_commands(commands)
