"""Finding plugins: entry points, the built-in plugin, and the allow and block lists.

Discovery reads distribution metadata, which means walking every folder on
``sys.path``; it is done once, when the plugin registry is first used, and never at
``import aitune_core``. ``importlib.metadata`` is imported here, inside functions, for
the same reason.

Environment variables, read at load time:

* ``AITUNE_PLUGINS``: comma-separated allow list. When set, only plugins named in it
  load (by distribution or entry-point name); the others are listed as disabled.
* ``AITUNE_DISABLED_PLUGINS``: comma-separated block list, same names.
* ``AITUNE_STRICT_PLUGINS=1``: a plugin that fails to load, or whose hook raises later,
  raises instead of being logged and skipped (or disabled).

The built-in plugin cannot be blocked: the eager baseline must always exist.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from aitune_core._version import __version__
from aitune_core.config import env_flag, env_text
from aitune_core.plugins.api import ENTRY_POINT_GROUP

CORE_DISTRIBUTION = "aitune-core"
BUILTIN_NAME = "builtin"
BUILTIN_MODULE = "aitune_core.plugins.builtin"

ALLOW_ENV = "AITUNE_PLUGINS"
BLOCK_ENV = "AITUNE_DISABLED_PLUGINS"
STRICT_ENV = "AITUNE_STRICT_PLUGINS"


def normalize_name(name: str) -> str:
    """Distribution names compare as pip compares them: case and ``-_.`` runs do not matter."""
    return re.sub(r"[-_.]+", "-", name).lower().strip()


@attrs.frozen
class PluginSource:
    """A plugin that was found but not imported yet."""

    name: str
    distribution: str
    version: str
    value: str
    load: Callable[[], Any] = attrs.field(eq=False, repr=False)
    builtin: bool = False

    @property
    def sort_key(self) -> tuple[bool, str, str]:
        """Built-in first, then by distribution and entry-point name: never by discovery order."""
        return (not self.builtin, normalize_name(self.distribution), self.name)

    @property
    def plugin_id(self) -> str:
        """The name the plugin has inside pluggy, unique even when entry-point names repeat."""
        return f"{normalize_name(self.distribution)}:{self.name}"


def builtin_source() -> PluginSource:
    return PluginSource(
        name=BUILTIN_NAME,
        distribution=CORE_DISTRIBUTION,
        version=__version__,
        value=BUILTIN_MODULE,
        load=lambda: importlib.import_module(BUILTIN_MODULE),
        builtin=True,
    )


def discover(paths: Iterable[str | Path] | None = None) -> list[PluginSource]:
    """The plugins installed on ``paths`` (``sys.path`` by default), one per entry point.

    A distribution found twice (installed and also on a development path) counts once:
    the first one found wins, as it does for imports.
    """
    import importlib.metadata as metadata

    if paths is None:
        distributions = metadata.distributions()
    else:
        distributions = metadata.distributions(path=[str(path) for path in paths])
    seen: set[str] = set()
    sources: list[PluginSource] = []
    for dist in distributions:
        name = dist.metadata["Name"] if dist.metadata is not None else None
        if not name:
            continue
        key = normalize_name(name)
        if key in seen:
            continue
        seen.add(key)
        for entry_point in dist.entry_points.select(group=ENTRY_POINT_GROUP):
            sources.append(
                PluginSource(
                    name=entry_point.name,
                    distribution=name,
                    version=dist.version or "",
                    value=entry_point.value,
                    load=entry_point.load,
                )
            )
    return sorted(sources, key=lambda source: source.sort_key)


def _names(value: str | None) -> frozenset[str] | None:
    if value is None or not value.strip():
        return None
    return frozenset(normalize_name(part) for part in value.split(",") if part.strip())


@attrs.frozen
class Selection:
    """Which plugins may load, from ``AITUNE_PLUGINS`` and ``AITUNE_DISABLED_PLUGINS``."""

    allow: frozenset[str] | None = None
    block: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Selection:
        return cls(_names(env_text(ALLOW_ENV, environ)), _names(env_text(BLOCK_ENV, environ)) or frozenset())

    def refusal(self, source: PluginSource) -> str | None:
        """Why ``source`` must not load, or None when it may."""
        if source.builtin:
            return None
        names = {normalize_name(source.distribution), normalize_name(source.name)}
        if names & self.block:
            return f"blocked by {BLOCK_ENV}"
        if self.allow is not None and not names & self.allow:
            return f"not in {ALLOW_ENV} ({', '.join(sorted(self.allow))})"
        return None


def strict_from_env(environ: Mapping[str, str] | None = None) -> bool:
    return env_flag(STRICT_ENV, environ)


def all_sources(paths: Sequence[str | Path] | None = None) -> list[PluginSource]:
    """The built-in plugin followed by every installed one."""
    return [builtin_source(), *discover(paths)]
