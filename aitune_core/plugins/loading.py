"""Loading plugins: import each one on its own, check it, register its guarded hooks, resolve name clashes.

Loading follows conda's plugin loader: every plugin is imported and registered on its
own, and one that fails is logged, recorded with the reason and skipped, so a broken
plugin never takes the others down (``AITUNE_STRICT_PLUGINS=1`` raises instead).
Anything a plugin raises while it is imported or registered, ``sys.exit()`` included,
refuses it; only ``KeyboardInterrupt`` goes through, since that is the user asking to stop.

Nothing depends on the order plugins are found in: they are loaded sorted by
distribution name, and the names they register follow :mod:`aitune_core.plugins.named`.

A plugin is registered with pluggy as its guarded namespace
(:mod:`aitune_core.plugins.containment`), and while it loads its registration hooks are
called through pluggy's ``subset_hook_caller``, which leaves every other plugin out. Only
once it has passed every check are its faults contained rather than refusing it.

Plugins load on first use, so their cost is paid by the first ``Module()``, ``tune()`` or
checkpoint load; one slower than :data:`SLOW_LOAD_S` is named in a warning.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import pluggy
import torch

from aitune_core.backends.base import Backend
from aitune_core.backends.config_types import config_type_error, unsupported_fields
from aitune_core.log import get_logger
from aitune_core.metadata.containers import ContainerType
from aitune_core.names import default_device
from aitune_core.plugins import hookspecs
from aitune_core.plugins.api import API_ATTRIBUTE, MIN_SUPPORTED_PLUGIN_API, PLUGIN_API_VERSION
from aitune_core.plugins.containment import (
    FaultHandler,
    GuardedPlugin,
    Implementation,
    attributed,
    availability_of,
    describe_error,
    implementations,
)
from aitune_core.plugins.loader import PluginSource, Selection, all_sources, strict_from_env
from aitune_core.plugins.named import BACKENDS, KINDS, TARGETS, Claim, NamedClasses, conflicts
from aitune_core.plugins.records import ContainerRegistrar, PluginError, PluginRecord, PluginStatus, Refused
from aitune_core.serialization import make_converter

SLOW_LOAD_S = 2.0
"""Seconds past which importing and registering one plugin is logged as a warning, and
loading all of them as an info line: plugins load on first use, so their cost is paid
by the first ``Module()``, ``tune()`` or checkpoint load, which would otherwise just hang."""

Clock = Callable[[], float]


@attrs.frozen
class Loaded:
    """What loading found: every plugin's record, and what the committed ones registered."""

    records: dict[str, PluginRecord]
    """By plugin id: built-in first, then by distribution name."""
    plugins: dict[str, GuardedPlugin]
    """The committed plugins, by plugin id, in load order."""
    named: dict[str, NamedClasses]
    """The registered classes, by kind (``"backend"``, ``"executor"``)."""
    containers: dict[type, ContainerType]
    seconds: dict[str, float]
    """Seconds each plugin took to import and register, by plugin id."""


@attrs.define
class _Candidate:
    """A plugin that passed its own checks, before clashes between plugins are resolved."""

    source: PluginSource
    guarded: GuardedPlugin
    api_version: int
    classes: dict[str, list[type]]
    containers: list[tuple[type, ContainerType]]

    def claim(self, noun: str) -> Claim:
        source = self.source
        return Claim(source.plugin_id, source.distribution, source.builtin, self.classes[noun])


def load(
    manager: pluggy.PluginManager,
    on_fault: FaultHandler,
    sources: Sequence[PluginSource] | None = None,
    *,
    strict: bool | None = None,
    selection: Selection | None = None,
    device: torch.device | None = None,
    clock: Clock = time.perf_counter,
) -> Loaded:
    """Load ``sources`` (by default the built-in plugin and every installed one) into ``manager``.

    ``on_fault`` hears each hook fault of a committed plugin; ``clock`` times the loading,
    for :data:`SLOW_LOAD_S` (tests pass a fake one).
    """
    started = clock()
    loader = _Loader(manager, on_fault, strict_from_env() if strict is None else strict, clock)
    loaded = loader.run(
        all_sources() if sources is None else sources,
        Selection.from_env() if selection is None else selection,
        default_device() if device is None else device,
    )
    _report_load_time(loaded, clock() - started)
    return loaded


class _Loader:
    def __init__(self, manager: pluggy.PluginManager, on_fault: FaultHandler, strict: bool, clock: Clock) -> None:
        self.manager = manager
        self.on_fault = on_fault
        self.strict = strict
        self.clock = clock
        self.log = get_logger()
        self.seconds: dict[str, float] = {}
        self.candidates: list[_Candidate] = []
        self.containers: dict[type, ContainerType] = {}

    def run(self, sources: Sequence[PluginSource], selection: Selection, device: torch.device) -> Loaded:
        ordered: dict[str, PluginSource] = {}
        for source in sorted(sources, key=lambda s: s.sort_key):
            ordered.setdefault(source.plugin_id, source)
        records: dict[str, PluginRecord] = {}
        for plugin_id, source in ordered.items():
            refusal = selection.refusal(source)
            if refusal is not None:
                records[plugin_id] = _record(source, PluginStatus.DISABLED, refusal)
                self.log.debug("plugin disabled", **context(source), reason=refusal)
                continue
            started = self.clock()
            try:
                self.candidates.append(self._load_one(source))
            except Refused as error:
                records[plugin_id] = self._fail(source, str(error))
            finally:
                self._timed(source, self.clock() - started)
        clashes = self._clashes()
        committed = []
        for item in self.candidates:
            plugin_id = item.source.plugin_id
            if plugin_id in clashes:
                self.manager.unregister(item.guarded.namespace)
                records[plugin_id] = self._fail(item.source, clashes[plugin_id], item.api_version)
            else:
                records[plugin_id] = self._commit(item, device)
                committed.append(item)
        return Loaded(
            records={plugin_id: records[plugin_id] for plugin_id in ordered},
            plugins={item.source.plugin_id: item.guarded for item in committed},
            named={kind.noun: NamedClasses(kind, [item.claim(kind.noun) for item in committed]) for kind in KINDS},
            containers=self.containers,
            seconds=self.seconds,
        )

    def _clashes(self) -> dict[str, str]:
        """Plugins refused over a name another plugin or the core has, by plugin id (the first reason)."""
        refused: dict[str, str] = {}
        for kind in KINDS:
            for plugin_id, reason in conflicts(kind, [item.claim(kind.noun) for item in self.candidates]).items():
                refused.setdefault(plugin_id, reason)
        return refused

    def _load_one(self, source: PluginSource) -> _Candidate:
        """Import, check and register one plugin; any exception but KeyboardInterrupt refuses it."""
        with _refusing("import failed"):
            plugin = source.load()
        api_version = _check_api(plugin)
        for other in self.candidates:
            if other.guarded.plugin is plugin:
                raise Refused(f"{source.value} is already loaded as plugin {other.source.plugin_id!r}")
        with _refusing("invalid hook implementation"):
            found = implementations(self.manager, plugin)
        _check_hooks(found)
        guarded = GuardedPlugin(source.plugin_id, plugin, found, self.on_fault)
        with _refusing("invalid hook implementation"):
            self.manager.register(guarded.namespace, name=source.plugin_id)
        try:
            with _refusing("registration failed"):
                classes = {kind.noun: kind.check(self._own(guarded, kind.hook)) for kind in KINDS}
                self._check_config_types(guarded, classes[BACKENDS.noun])
                registrar = ContainerRegistrar()
                self._own(guarded, "aitune_register_containers", containers=registrar)
        except Refused:
            self.manager.unregister(guarded.namespace)
            raise
        return _Candidate(source, guarded, api_version, classes, registrar.items())

    def _own(self, guarded: GuardedPlugin, hook: str, **kwargs: Any) -> list[Any]:
        """Call one plugin's implementations of ``hook``, leaving every other plugin out."""
        others = [plugin for plugin in self.manager.get_plugins() if plugin is not guarded.namespace]
        results = self.manager.subset_hook_caller(hook, others)(**kwargs)
        return [attributed(result)[1] for result in results]

    def _check_config_types(self, guarded: GuardedPlugin, classes: list[type]) -> None:
        """Refuse a backend whose config has a field the converter cannot store and read back.

        Checked against the core converter taught by this plugin's own
        ``aitune_extend_converter`` hook, so a type the plugin teaches is accepted.
        """
        if not classes:
            return
        converter = make_converter()
        self._own(guarded, "aitune_extend_converter", converter=converter)
        for cls in classes:
            problems = unsupported_fields(cls.config_class, converter)  # type: ignore[attr-defined]
            if problems:
                raise Refused(config_type_error(cls, problems))

    def _commit(self, item: _Candidate, device: torch.device) -> PluginRecord:
        source = item.source
        for cls, container in item.containers:
            if cls in self.containers:
                self.log.warning(
                    "container type registered twice",
                    container=cls.__qualname__,
                    distribution=source.distribution,
                    hint="the plugin whose distribution name sorts first keeps it",
                )
                continue
            self.containers[cls] = container
        backends: list[type[Backend]] = item.classes[BACKENDS.noun]
        status, reason = PluginStatus.LOADED, ""
        if backends:
            checks = [(cls.name, availability_of(cls, device)) for cls in backends]
            if not any(availability.available for _, availability in checks):
                status = PluginStatus.UNAVAILABLE
                reason = "; ".join(f"{name}: {availability.reason}" for name, availability in checks)
                self.log.debug("plugin unavailable", **context(source), reason=reason)
        item.guarded.contained = True
        targets = tuple(cls.name for cls in item.classes[TARGETS.noun])  # type: ignore[attr-defined]
        return _record(source, status, reason, tuple(cls.name for cls in backends), item.api_version, targets)

    def _fail(self, source: PluginSource, reason: str, api_version: int | None = None) -> PluginRecord:
        record = _record(source, PluginStatus.FAILED, reason, api_version=api_version)
        if self.strict:
            raise PluginError(record)
        self.log.warning("plugin failed to load", **context(source), error=reason)
        return record

    def _timed(self, source: PluginSource, seconds: float) -> None:
        self.seconds[source.plugin_id] = seconds
        if seconds > SLOW_LOAD_S:
            self.log.warning(
                "plugin import is slow",
                **context(source),
                seconds=round(seconds, 2),
                hint=(
                    "plugins load on the first use of aitune (Module, tune, load); ask its authors to import "
                    "heavy libraries inside the functions that need them, or block it with AITUNE_DISABLED_PLUGINS"
                ),
            )


@contextlib.contextmanager
def _refusing(what: str) -> Iterator[None]:
    """Any exception but KeyboardInterrupt refuses the plugin, as ``what: error``; a refusal goes through as it is.

    BaseException, not Exception: a plugin calling ``sys.exit()`` when imported must
    not end the program that merely wanted to list or use plugins.
    """
    try:
        yield
    except (KeyboardInterrupt, Refused):
        raise
    except BaseException as error:
        raise Refused(f"{what}: {describe_error(error)}") from error


def _check_api(plugin: Any) -> int:
    version = getattr(plugin, API_ATTRIBUTE, None)
    if version is None:
        raise Refused(
            f"it does not declare the plugin API it targets; add `{API_ATTRIBUTE} = {PLUGIN_API_VERSION}` "
            f"to the entry-point module"
        )
    if isinstance(version, bool) or not isinstance(version, int):
        raise Refused(f"{API_ATTRIBUTE} must be an integer, got {version!r}")
    if version > PLUGIN_API_VERSION:
        raise Refused(
            f"it targets plugin API {version}, newer than this aitune-core supports "
            f"(plugin API {PLUGIN_API_VERSION}); upgrade aitune-core"
        )
    if version < MIN_SUPPORTED_PLUGIN_API:
        raise Refused(
            f"it targets plugin API {version}, older than this aitune-core supports "
            f"(plugin API {MIN_SUPPORTED_PLUGIN_API} to {PLUGIN_API_VERSION}); upgrade the plugin"
        )
    return version


def _check_hooks(found: list[Implementation]) -> None:
    """What pluggy's ``check_pending`` checks, for one plugin, plus what its wrappers must be.

    Checked on the plugin's own functions: the guarded ones pluggy sees are always
    generators where a wrapper is declared, so pluggy could not tell.
    """
    known = [spec.__name__ for spec in hookspecs.hook_specs()]
    for implementation in found:
        hook = implementation.hook
        if hook not in known:
            if not implementation.options.get("optionalhook"):
                raise Refused(
                    f"unknown hook {hook!r} (plugin API {PLUGIN_API_VERSION} has: {', '.join(known)}); "
                    "mark hooks of newer aitune versions with @hookimpl(optionalhook=True)"
                )
        elif hook in hookspecs.WRAPPER_ONLY and not implementation.wraps:
            raise Refused(f"{hook} must be implemented as a wrapper: @hookimpl(wrapper=True)")
        elif implementation.wraps and not inspect.isgeneratorfunction(implementation.function):
            raise Refused(f"invalid hook implementation: {hook} is declared a wrapper but is not a generator function")


def _record(
    source: PluginSource,
    status: PluginStatus,
    reason: str = "",
    backends: tuple[str, ...] = (),
    api_version: int | None = None,
    targets: tuple[str, ...] = (),
) -> PluginRecord:
    return PluginRecord(
        name=source.name,
        distribution=source.distribution,
        version=source.version,
        status=status,
        reason=reason,
        backends=backends,
        builtin=source.builtin,
        api_version=api_version,
        targets=targets,
    )


def context(plugin: PluginSource | PluginRecord) -> dict[str, str]:
    """A plugin's name, distribution and version, as every log line about it carries them."""
    return {"plugin": plugin.name, "distribution": plugin.distribution, "version": plugin.version}


def _report_load_time(loaded: Loaded, seconds: float) -> None:
    if seconds <= SLOW_LOAD_S or not loaded.seconds:
        return
    slowest, slowest_s = max(loaded.seconds.items(), key=lambda item: item[1])
    distribution = loaded.records[slowest].distribution
    get_logger().info(
        f"loading plugins took {seconds:.1f} s (slowest: {distribution}, {slowest_s:.1f} s)",
        seconds=round(seconds, 2),
        slowest=distribution,
        slowest_seconds=round(slowest_s, 2),
    )
