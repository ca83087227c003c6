"""The plugin registry: a ``pluggy.PluginManager`` that also holds the plugins' records and named classes.

Every hook is called through pluggy (``registry.hook.<name>(...)``, or its
``subset_hook_caller`` while one plugin loads), so ``firstresult``, ``tryfirst``,
``trylast`` and wrappers behave as pluggy documents them. What pluggy calls is each
plugin's guarded namespace (:mod:`aitune_core.plugins.containment`): a result comes back
tagged with the plugin that gave it, so every result can be checked and a bad one names
its plugin, and an implementation that raises disables its plugin (:meth:`PluginRegistry.disable`)
instead of failing the call.

Loading is in :mod:`aitune_core.plugins.loading`, the named classes' policy in
:mod:`aitune_core.plugins.named`, and what the core asks plugins in
:mod:`aitune_core.plugins.queries`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import attrs
import pluggy
import torch

from aitune_core.backends.base import Backend
from aitune_core.extensions import KeyParts, UnknownBackendError
from aitune_core.log import get_logger
from aitune_core.metadata.containers import CONTAINERS, ContainerType
from aitune_core.plugins import hookspecs, loading, queries
from aitune_core.plugins.api import PROJECT_NAME
from aitune_core.plugins.containment import GuardedPlugin, attributed, describe_error, raised_at
from aitune_core.plugins.loader import PluginSource, Selection, strict_from_env
from aitune_core.plugins.named import BACKENDS, EXECUTORS, TARGETS, NamedClasses
from aitune_core.plugins.records import Candidate, PluginHookError, PluginRecord, PluginStatus

LIFECYCLE_HOOKS = ("aitune_before_step", "aitune_wrap_step", "aitune_after_step")


class PluginRegistry(pluggy.PluginManager):
    """The loaded plugins of one process (or of one test), and what they registered.

    Build one with :meth:`load`; :func:`aitune_core.plugins.manager.current_registry`
    holds the process-wide one. Only the installed registry has its container types in
    the process-wide container registry (see :meth:`attach`), so a registry loaded just
    to list plugins changes nothing.
    """

    def __init__(self) -> None:
        super().__init__(PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self._records: dict[str, PluginRecord] = {}  # by plugin id, built-in first
        self._plugins: dict[str, GuardedPlugin] = {}  # active plugins by id, in load order
        self.backends = NamedClasses(BACKENDS)
        self.executors = NamedClasses(EXECUTORS)
        self.targets = NamedClasses(TARGETS)
        self._containers: dict[type, ContainerType] = {}
        self._log = get_logger()
        self.strict = False
        self.observes_lifecycle = False
        self._lock = threading.Lock()
        self.load_seconds: dict[str, float] = {}
        """Seconds each plugin took to import and register, by plugin id."""

    @classmethod
    def load(
        cls,
        sources: Sequence[PluginSource] | None = None,
        *,
        strict: bool | None = None,
        selection: Selection | None = None,
        device: torch.device | None = None,
        clock: loading.Clock = time.perf_counter,
    ) -> PluginRegistry:
        """Load ``sources`` (by default the built-in plugin and every installed one).

        ``clock`` times the loading, for :data:`aitune_core.plugins.loading.SLOW_LOAD_S`;
        tests pass a fake one.
        """
        registry = cls()
        registry.strict = strict_from_env() if strict is None else strict
        loaded = loading.load(
            registry, registry.disable, sources, strict=registry.strict, selection=selection, device=device, clock=clock
        )
        registry._records = loaded.records
        registry._plugins = loaded.plugins
        registry.backends = loaded.named[BACKENDS.noun]
        registry.executors = loaded.named[EXECUTORS.noun]
        registry.targets = loaded.named[TARGETS.noun]
        registry._containers = loaded.containers
        registry.load_seconds = loaded.seconds
        registry._hooks_changed()
        return registry

    def attach(self) -> None:
        """Add the plugins' container types to the process-wide container registry."""
        for cls, container in self._containers.items():
            CONTAINERS.add(cls, container)

    def detach(self) -> None:
        """Take back what :meth:`attach` added."""
        for cls in self._containers:
            CONTAINERS.unregister(cls)

    def _hooks_changed(self) -> None:
        """Work out once what per-call paths need, so they cost nothing without plugins."""
        self.observes_lifecycle = any(getattr(self.hook, name).get_hookimpls() for name in LIFECYCLE_HOOKS)

    # ------------------------------------------------------------------ calling hooks
    def each_result(self, hook_name: str, **kwargs: Any) -> list[tuple[str, Any]]:
        """Call a hook through pluggy; ``(plugin id, result)`` for every result that is not None.

        pluggy decides the order (``tryfirst``, ``trylast``, then the plugin registered
        last first) and stops a ``firstresult`` hook at the first answer. A plugin that
        raises is disabled (:meth:`disable`) and left out, so one faulty plugin cannot
        break tuning for the others.
        """
        caller = getattr(self.hook, hook_name)
        outcome = caller(**kwargs)
        if caller.spec is not None and caller.spec.opts.get("firstresult"):
            return [] if outcome is None else [attributed(outcome)]
        return [attributed(item) for item in outcome]

    def disable(self, plugin_id: str, hook_name: str, error: BaseException) -> None:
        """Take a plugin whose hook raised ``error`` out of every hook, for the rest of the process.

        Its record becomes failed, with the reason, and one error is logged, however many
        threads or modules hit the fault at once. Its backend classes stay registered:
        backends already built from them, and checkpoints naming them, must keep working.
        With ``AITUNE_STRICT_PLUGINS=1`` a :class:`PluginHookError` naming the plugin and
        the hook propagates instead, for plugin authors' test suites, through whatever the
        hook was part of: a candidate's build fails the whole ``tune()``, not the candidate.
        """
        if self.strict:
            raise PluginHookError(self._records[plugin_id], hook_name, error) from error
        with self._lock:
            guarded = self._plugins.get(plugin_id)
            if guarded is None:
                return  # disabled already, by another module or thread
            # Replaced, never mutated: calls in other threads iterate the old values.
            self._plugins = {key: value for key, value in self._plugins.items() if key != plugin_id}
            self.unregister(guarded.namespace)
            described = describe_error(error)
            record = attrs.evolve(
                self._records[plugin_id],
                status=PluginStatus.FAILED,
                reason=f"raised {described} in {hook_name}; disabled",
            )
            self._records = {key: record if key == plugin_id else value for key, value in self._records.items()}
            self._hooks_changed()
        self._log.error(
            "plugin disabled: its hook raised",
            **loading.context(record),
            hook=hook_name,
            error=described,
            raised_at=raised_at(error),
            hint=f"report it to the plugin's authors; until fixed, AITUNE_DISABLED_PLUGINS={record.distribution} "
            "keeps it from loading",
        )

    # ------------------------------------------------------------------ records and names
    def records(self) -> list[PluginRecord]:
        """Every plugin found: built-in first, then by distribution name."""
        return list(self._records.values())

    def record(self, plugin_id: str) -> PluginRecord | None:
        """The record of the plugin with this id, or None."""
        return self._records.get(plugin_id)

    def backend_names(self) -> list[str]:
        return self.backends.names()

    def backend_classes(self) -> dict[str, type[Backend]]:
        return self.backends.classes()

    def backend_origin(self, name: str) -> tuple[str, str] | None:
        """The distribution and version that registered backend ``name``, or None."""
        owner = self.backends.owner(name)
        record = self._records[owner] if owner is not None else None
        return (record.distribution, record.version) if record is not None else None

    def backend_plugin(self, name: str) -> PluginRecord:
        """The plugin that registered backend ``name``."""
        self.backend_class(name)
        return self._records[str(self.backends.owner(name))]

    def backend_class(self, name: str) -> type[Backend]:
        cls = self.backends.get(name)
        if cls is not None:
            return cls
        message = f"unknown backend {name!r}; choose one of: {', '.join(self.backend_names()) or '(none)'}"
        failed = [r for r in self._records.values() if r.status is PluginStatus.FAILED]
        if failed:
            message += "; plugins that failed to load: " + ", ".join(f"{r.distribution} ({r.reason})" for r in failed)
        raise UnknownBackendError(message)

    def executor_classes(self) -> dict[str, type]:
        """Executor classes plugins registered, by name (the core's own are not among them)."""
        return self.executors.classes()

    def target_classes(self) -> dict[str, type]:
        """Deploy target classes, by name: the core's Triton target and those plugins registered."""
        return self.targets.classes()

    # ------------------------------------------------------------------ what the core asks plugins
    def default_candidates(self, device: torch.device | str) -> list[Candidate]:
        """Every plugin's proposals for ``device``: highest priority first, then by backend name."""
        return queries.default_candidates(self, torch.device(device))

    def choose_strategy(self, module: Any, device: torch.device | str) -> Any | None:
        """The first strategy a plugin chooses for ``module``; an answer that is not a strategy is refused, named."""
        return queries.choose_strategy(self, module, torch.device(device))

    def extend_converter(self, converter: Any) -> None:
        """Let plugins add their types to a freshly made cattrs converter."""
        queries.extend_converter(self, converter)

    def graph_key_parts(self) -> KeyParts | None:
        """A function adding the plugins' key parts to a call's key, or None when no plugin gives any."""
        return queries.graph_key_parts(self)
