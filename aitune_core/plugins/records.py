"""The values that pass between plugins and the core, and the errors the plugin system raises.

They are attrs classes rather than dicts so that a typo in a field name fails where it
is made, and so that ``aitune plugins --json`` and the Python API show the same fields.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from aitune_core.backends.base import Availability, Backend
from aitune_core.extensions import UnknownBackendError
from aitune_core.metadata.containers import ContainerRegistry
from aitune_core.plugins.api import DEFAULT_PRIORITY


class PluginStatus(enum.Enum):
    LOADED = "loaded"
    FAILED = "failed"
    """Refused while loading, or disabled later because one of its hooks raised."""
    UNAVAILABLE = "unavailable"
    """Loaded, but none of its backends can run here (no CUDA device, a library missing)."""
    DISABLED = "disabled"
    """Left out on purpose, by ``AITUNE_DISABLED_PLUGINS`` or ``AITUNE_PLUGINS``."""


@attrs.frozen
class PluginRecord:
    """One plugin as ``aitune plugins`` shows it.

    ``name`` is the entry-point name; ``backends`` and ``targets`` (deploy targets) are the
    names it registered (empty unless the plugin loaded). ``reason`` says why a plugin
    failed, is unavailable or is disabled.
    """

    name: str
    distribution: str
    version: str
    status: PluginStatus
    reason: str = ""
    backends: tuple[str, ...] = ()
    builtin: bool = False
    api_version: int | None = None
    targets: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        """Whether its hooks take part (loaded or unavailable)."""
        return self.status in (PluginStatus.LOADED, PluginStatus.UNAVAILABLE)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status.value,
            "reason": self.reason,
            "backends": list(self.backends),
            "builtin": self.builtin,
            "api_version": self.api_version,
            "targets": list(self.targets),
        }


@attrs.frozen(eq=False)
class Candidate:
    """A backend a plugin proposes for a device when the user names none.

    ``backend`` is a blueprint: strategies build copies of it. Higher ``priority`` is
    tried first; the eager baseline has the lowest. ``availability`` is filled in from
    ``backend.availability(device)`` when the plugin leaves it out. ``plugin`` is the
    distribution that contributed it, filled in by the registry.
    """

    backend: Backend
    priority: int = DEFAULT_PRIORITY
    availability: Availability | None = None
    plugin: str = ""

    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def available(self) -> bool:
        return self.availability is None or self.availability.available


class ContainerRegistrar(ContainerRegistry):
    """Collects the container types one plugin registers.

    They reach :data:`aitune_core.metadata.containers.CONTAINERS` only once the whole
    plugin has loaded, so a plugin that fails halfway leaves nothing behind.
    """


class Refused(Exception):
    """A plugin is refused while it loads; the message is the reason ``aitune plugins`` shows."""


class PluginError(RuntimeError):
    """A plugin could not be loaded, and ``AITUNE_STRICT_PLUGINS=1`` asks for failures to raise."""

    def __init__(self, record: PluginRecord) -> None:
        self.record = record
        super().__init__(
            f"aitune plugin {record.name!r} from {record.distribution} {record.version} failed to load: {record.reason}"
        )


class PluginHookError(BaseException):
    """A plugin's hook raised while ``AITUNE_STRICT_PLUGINS=1`` asks for plugin faults to stop the process's work.

    A ``BaseException``, as ``KeyboardInterrupt`` is: tuning turns any ``Exception`` a
    candidate's build or validation raises into a failed candidate and goes on (the
    graph left eager), which would hide the very fault strict mode is there to show.
    The hook's own error is its ``__cause__``.
    """

    def __init__(self, record: PluginRecord, hook: str, error: BaseException) -> None:
        self.record = record
        self.hook = hook
        self.error = error
        super().__init__(
            f"aitune plugin {record.name!r} from {record.distribution} {record.version} raised "
            f"{type(error).__name__}: {error} in its hook {hook}; AITUNE_STRICT_PLUGINS=1 stops at a plugin's fault "
            "(unset it to disable the plugin, log the fault and go on)"
        )


__all__ = ["UnknownBackendError"]  # defined below the plugin layer, which raises it too
