"""The plugin registry: a ``pluggy.PluginManager`` that also holds typed records and backend lookup.

Hooks are called through pluggy (``registry.hook.<name>(...)``), so ``firstresult``,
``tryfirst``, ``trylast`` and wrappers behave as pluggy documents them. Each loaded
plugin's hook implementations are guarded when it is committed: a result comes back
tagged with the plugin that gave it (:class:`Attributed`), so every result can be
checked and a bad one names its plugin, and an implementation that raises disables
its plugin instead of failing the call.

Loading follows conda's plugin loader: every plugin is imported and registered on its
own, and one that fails is logged, recorded with the reason and skipped, so a broken
plugin never takes the others down (``AITUNE_STRICT_PLUGINS=1`` raises instead).

Nothing depends on the order plugins are found in. They are loaded sorted by
distribution name, and a backend name claimed by two plugins is a conflict that
refuses *both* (a name taken by the built-in plugin refuses only the newcomer): keeping
"the first one" would make the chosen backend depend on which one sorted first.

A plugin is foreign code running inside the host, so every way it can fail is contained:
``sys.exit()`` at import is a failed plugin like an ``ImportError`` (only
``KeyboardInterrupt`` goes through, since that is the user asking to stop), a hook that
raises later disables its plugin for the rest of the process (:meth:`PluginRegistry.disable`),
and a slow import is named (:data:`SLOW_LOAD_S`), since it stalls the first ``Module()``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import time
import traceback
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any

import attrs
import pluggy
import torch

import aitune_core.plugins.hookspecs as hookspecs
from aitune_core.backends.base import Availability, Backend, BackendConfig
from aitune_core.backends.config_types import config_type_error, unsupported_fields
from aitune_core.extensions import UnknownBackendError
from aitune_core.log import get_logger
from aitune_core.metadata.containers import CONTAINERS, ContainerType
from aitune_core.names import NAME_RULE, default_device, is_valid_name
from aitune_core.plugins.api import API_ATTRIBUTE, MIN_SUPPORTED_PLUGIN_API, PLUGIN_API_VERSION, PROJECT_NAME
from aitune_core.plugins.loader import PluginSource, Selection, all_sources, strict_from_env
from aitune_core.plugins.records import Candidate, ContainerRegistrar, PluginError, PluginRecord, PluginStatus
from aitune_core.serialization import make_converter

_LIFECYCLE_HOOKS = ("aitune_before_step", "aitune_wrap_step", "aitune_after_step")
_KEY_PARTS_HOOK = "aitune_graph_key_parts"

SLOW_LOAD_S = 2.0
"""Seconds past which importing and registering one plugin is logged as a warning, and
loading all of them as an info line: plugins load on first use, so their cost is paid
by the first ``Module()``, ``tune()`` or checkpoint load, which would otherwise just hang."""

KeyParts = Callable[[dict[str, Any]], Hashable | None]
Clock = Callable[[], float]


class _Refused(Exception):
    """A plugin is refused; the message is the reason shown to users."""


@attrs.define
class _Loaded:
    """A plugin that passed its own checks, before conflicts between plugins are resolved."""

    source: PluginSource
    plugin: Any
    api_version: int
    backends: list[type[Backend]]
    containers: list[tuple[type, ContainerType]]


def _describe_error(error: BaseException, limit: int = 400) -> str:
    """One line for tables and logs: the type and the message with its line breaks folded."""
    text = " ".join(str(error).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@contextlib.contextmanager
def _refusing(what: str) -> Iterator[None]:
    """Any exception but KeyboardInterrupt refuses the plugin, as ``what: error``; a refusal goes through as it is.

    BaseException, not Exception: a plugin calling ``sys.exit()`` when imported must
    not end the program that merely wanted to list or use plugins.
    """
    try:
        yield
    except (KeyboardInterrupt, _Refused):
        raise
    except BaseException as error:
        raise _Refused(f"{what}: {_describe_error(error)}") from error


def _raised_at(error: BaseException) -> str:
    """Where ``error`` was raised (file:line), so a plugin author can find it from one log line."""
    frames = traceback.extract_tb(error.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def _check_api(plugin: Any) -> int:
    version = getattr(plugin, API_ATTRIBUTE, None)
    if version is None:
        raise _Refused(
            f"it does not declare the plugin API it targets; add `{API_ATTRIBUTE} = {PLUGIN_API_VERSION}` "
            f"to the entry-point module"
        )
    if isinstance(version, bool) or not isinstance(version, int):
        raise _Refused(f"{API_ATTRIBUTE} must be an integer, got {version!r}")
    if version > PLUGIN_API_VERSION:
        raise _Refused(
            f"it targets plugin API {version}, newer than this aitune-core supports "
            f"(plugin API {PLUGIN_API_VERSION}); upgrade aitune-core"
        )
    if version < MIN_SUPPORTED_PLUGIN_API:
        raise _Refused(
            f"it targets plugin API {version}, older than this aitune-core supports "
            f"(plugin API {MIN_SUPPORTED_PLUGIN_API} to {PLUGIN_API_VERSION}); upgrade the plugin"
        )
    return version


def _check_backend_class(cls: Any) -> str:
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise _Refused(f"aitune_register_backends returned {cls!r}, which is not a Backend subclass")
    name = cls.name
    if not is_valid_name(name):
        raise _Refused(
            f"{cls.__qualname__}.name must be a lowercase name such as 'my_backend' ({NAME_RULE}), got {name!r}"
        )
    config_class = cls.config_class
    if not (isinstance(config_class, type) and issubclass(config_class, BackendConfig) and attrs.has(config_class)):
        raise _Refused(f"{cls.__qualname__}.config_class must be an attrs subclass of BackendConfig")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise _Refused(f"{cls.__qualname__} is abstract (missing {missing})")
    return name


@attrs.frozen
class Attributed:
    """A hook result and the plugin that returned it (what guarded implementations return)."""

    plugin_id: str
    value: Any


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
        self._backends: dict[str, tuple[type[Backend], PluginRecord]] = {}
        self._plugins: dict[str, Any] = {}  # distribution:entry point -> plugin object, in load order
        self._containers: dict[type, ContainerType] = {}
        self._log = get_logger()
        self.strict = False
        self.observes_lifecycle = False
        self._key_parts: tuple[tuple[str, Callable[..., Any], bool], ...] = ()
        self._lock = threading.Lock()
        self.load_seconds: dict[str, float] = {}
        """Seconds each plugin took to import and register, by plugin id."""

    # ------------------------------------------------------------------ loading
    @classmethod
    def load(
        cls,
        sources: Sequence[PluginSource] | None = None,
        *,
        strict: bool | None = None,
        selection: Selection | None = None,
        device: torch.device | None = None,
        clock: Clock = time.perf_counter,
    ) -> PluginRegistry:
        """Load ``sources`` (by default the built-in plugin and every installed one).

        ``clock`` times the loading, for :data:`SLOW_LOAD_S`; tests pass a fake one.
        """
        started = clock()
        registry = cls()
        registry._load(
            all_sources() if sources is None else sources,
            strict_from_env() if strict is None else strict,
            Selection.from_env() if selection is None else selection,
            default_device() if device is None else device,
            clock,
        )
        registry._report_load_time(clock() - started)
        return registry

    def _load(
        self,
        sources: Sequence[PluginSource],
        strict: bool,
        selection: Selection,
        device: torch.device,
        clock: Clock,
    ) -> None:
        self.strict = strict
        ordered: dict[str, PluginSource] = {}
        for source in sorted(sources, key=lambda s: s.sort_key):
            ordered.setdefault(source.plugin_id, source)
        records: dict[str, PluginRecord] = {}
        loaded: list[_Loaded] = []
        for plugin_id, source in ordered.items():
            refusal = selection.refusal(source)
            if refusal is not None:
                records[plugin_id] = self._record(source, PluginStatus.DISABLED, refusal)
                self._log.debug("plugin disabled", **self._context(source), reason=refusal)
                continue
            started = clock()
            try:
                loaded.append(self._load_one(source))
            except _Refused as refused:
                records[plugin_id] = self._fail(source, str(refused), strict)
            finally:
                self._timed(source, clock() - started)
        for item, reason in self._conflicts(loaded):
            self.unregister(item.plugin)
            records[item.source.plugin_id] = self._fail(item.source, reason, strict, item.api_version)
        for item in loaded:
            if item.source.plugin_id not in records:
                records[item.source.plugin_id] = self._commit(item, device)
        self._records = {plugin_id: records[plugin_id] for plugin_id in ordered}
        self._prepare_fast_paths()

    def _load_one(self, source: PluginSource) -> _Loaded:
        """Import and register one plugin; any exception but KeyboardInterrupt refuses it."""
        with _refusing("import failed"):
            plugin = source.load()
        api_version = _check_api(plugin)
        if self.is_registered(plugin):
            raise _Refused(f"{source.value} is already loaded as plugin {self.get_name(plugin)!r}")
        with _refusing("invalid hook implementation"):
            self.register(plugin, name=source.plugin_id)
        try:
            with _refusing("registration failed"):
                self._check_hooks(plugin)
                backends = self._call_own(plugin, "aitune_register_backends")
                classes = self._check_backends(backends)
                self._check_config_types(plugin, classes)
                registrar = ContainerRegistrar()
                self._call_own(plugin, "aitune_register_containers", containers=registrar)
        except _Refused:
            self.unregister(plugin)
            raise
        return _Loaded(source, plugin, api_version, classes, registrar.items())

    def _check_hooks(self, plugin: Any) -> None:
        """What pluggy's ``check_pending`` does, for one plugin, plus wrapper-only hooks."""
        for caller in self.get_hookcallers(plugin) or []:
            impls = [impl for impl in caller.get_hookimpls() if impl.plugin is plugin]
            if not caller.has_spec():
                if any(not impl.optionalhook for impl in impls):
                    known = ", ".join(spec.__name__ for spec in hookspecs.hook_specs())
                    raise _Refused(
                        f"unknown hook {caller.name!r} (plugin API {PLUGIN_API_VERSION} has: {known}); "
                        "mark hooks of newer aitune versions with @hookimpl(optionalhook=True)"
                    )
            elif caller.name in hookspecs.WRAPPER_ONLY and any(not (i.wrapper or i.hookwrapper) for i in impls):
                raise _Refused(f"{caller.name} must be implemented as a wrapper: @hookimpl(wrapper=True)")

    def _call_own(self, plugin: Any, hook_name: str, **kwargs: Any) -> list[Any]:
        """Call one plugin's implementations of a hook, leaving every other plugin out."""
        caller = getattr(self.hook, hook_name)
        results = []
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin:
                result = impl.function(*[kwargs[name] for name in impl.argnames])
                if result is not None:
                    results.append(result)
        return results

    def _check_backends(self, results: list[Any]) -> list[type[Backend]]:
        classes: list[type[Backend]] = []
        names: set[str] = set()
        for result in results:
            if isinstance(result, (str, bytes)) or not isinstance(result, Iterable):
                raise _Refused(f"aitune_register_backends must return a list of Backend classes, got {result!r}")
            for cls in result:
                name = _check_backend_class(cls)
                if name in names:
                    raise _Refused(f"it registers the backend name {name!r} twice")
                names.add(name)
                classes.append(cls)
        return classes

    def _check_config_types(self, plugin: Any, classes: list[type[Backend]]) -> None:
        """Refuse a backend whose config has a field the converter cannot store and read back.

        Checked against the core converter taught by this plugin's own
        ``aitune_extend_converter`` hook, so a type the plugin teaches is accepted.
        """
        if not classes:
            return
        converter = make_converter()
        self._call_own(plugin, "aitune_extend_converter", converter=converter)
        for cls in classes:
            problems = unsupported_fields(cls.config_class, converter)
            if problems:
                raise _Refused(config_type_error(cls, problems))

    def _conflicts(self, loaded: list[_Loaded]) -> list[tuple[_Loaded, str]]:
        """Plugins refused because another one claims one of their backend names."""
        claims: dict[str, list[_Loaded]] = {}
        for item in loaded:
            for cls in item.backends:
                claims.setdefault(cls.name, []).append(item)
        refused: dict[str, tuple[_Loaded, str]] = {}
        for name, owners in sorted(claims.items()):
            if len(owners) < 2:
                continue
            builtin = next((owner for owner in owners if owner.source.builtin), None)
            for owner in owners:
                if owner is builtin or owner.source.plugin_id in refused:
                    continue
                if builtin is not None:
                    reason = f"backend name {name!r} is taken by the built-in plugin of {builtin.source.distribution}"
                else:
                    others = " and ".join(o.source.distribution for o in owners)
                    reason = (
                        f"backend name {name!r} is registered by both {others}; neither is loaded "
                        f"(disable one with AITUNE_DISABLED_PLUGINS)"
                    )
                refused[owner.source.plugin_id] = (owner, reason)
        return list(refused.values())

    def _commit(self, item: _Loaded, device: torch.device) -> PluginRecord:
        source = item.source
        for cls, container in item.containers:
            if cls in self._containers:
                self._log.warning(
                    "container type registered twice",
                    container=cls.__qualname__,
                    distribution=source.distribution,
                    hint="the plugin whose distribution name sorts first keeps it",
                )
                continue
            self._containers[cls] = container
        status, reason = PluginStatus.LOADED, ""
        if item.backends:
            checks = [(cls.name, self._availability(cls, device)) for cls in item.backends]
            if not any(availability.available for _, availability in checks):
                status = PluginStatus.UNAVAILABLE
                reason = "; ".join(f"{name}: {availability.reason}" for name, availability in checks)
                self._log.debug("plugin unavailable", **self._context(source), reason=reason)
        record = self._record(source, status, reason, tuple(cls.name for cls in item.backends), item.api_version)
        for cls in item.backends:
            self._backends[cls.name] = (cls, record)
        self._plugins[source.plugin_id] = item.plugin
        self._guard_hooks(source.plugin_id, item.plugin)
        return record

    def _guard_hooks(self, plugin_id: str, plugin: Any) -> None:
        """Wrap each of the plugin's hook implementations (wrappers aside) to attribute and contain it.

        pluggy computed each implementation's argument names when it was registered, and
        calls ``impl.function(*args)``, so replacing the function keeps its calling
        convention. Wrappers are left alone: :mod:`aitune_core.plugins.lifecycle` contains
        them one plugin at a time.
        """
        for caller in self.get_hookcallers(plugin) or []:
            for impl in caller.get_hookimpls():
                if impl.plugin is plugin and not (impl.wrapper or impl.hookwrapper):
                    impl.function = self._guarded(plugin_id, caller.name, impl.function)  # type: ignore[misc]

    def _guarded(self, plugin_id: str, hook_name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        registry = self

        @functools.wraps(function)
        def guarded(*args: Any) -> Any:
            try:
                value = function(*args)
            except KeyboardInterrupt:
                raise
            except BaseException as error:
                registry.disable(plugin_id, hook_name, error)
                return None
            return None if value is None else Attributed(plugin_id, value)

        return guarded

    def _availability(self, cls: type[Backend], device: torch.device) -> Availability:
        try:
            return cls.availability(device)
        except KeyboardInterrupt:
            raise
        except BaseException as error:
            return Availability.no(f"availability check failed: {_describe_error(error)}")

    def _fail(self, source: PluginSource, reason: str, strict: bool, api_version: int | None = None) -> PluginRecord:
        record = self._record(source, PluginStatus.FAILED, reason, api_version=api_version)
        if strict:
            raise PluginError(record)
        self._log.warning("plugin failed to load", **self._context(source), error=reason)
        return record

    def _timed(self, source: PluginSource, seconds: float) -> None:
        self.load_seconds[source.plugin_id] = seconds
        if seconds > SLOW_LOAD_S:
            self._log.warning(
                "plugin import is slow",
                **self._context(source),
                seconds=round(seconds, 2),
                hint=(
                    "plugins load on the first use of aitune (Module, tune, load); ask its authors to import "
                    "heavy libraries inside the functions that need them, or block it with AITUNE_DISABLED_PLUGINS"
                ),
            )

    def _report_load_time(self, seconds: float) -> None:
        if seconds <= SLOW_LOAD_S or not self.load_seconds:
            return
        slowest, slowest_s = max(self.load_seconds.items(), key=lambda item: item[1])
        distribution = self._records[slowest].distribution
        self._log.info(
            f"loading plugins took {seconds:.1f} s (slowest: {distribution}, {slowest_s:.1f} s)",
            seconds=round(seconds, 2),
            slowest=distribution,
            slowest_seconds=round(slowest_s, 2),
        )

    @staticmethod
    def _record(
        source: PluginSource,
        status: PluginStatus,
        reason: str = "",
        backends: tuple[str, ...] = (),
        api_version: int | None = None,
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
        )

    @staticmethod
    def _context(plugin: PluginSource | PluginRecord) -> dict[str, str]:
        return {"plugin": plugin.name, "distribution": plugin.distribution, "version": plugin.version}

    def _prepare_fast_paths(self) -> None:
        """Work out once what per-call paths need, so they cost nothing without plugins."""
        self.observes_lifecycle = any(getattr(self.hook, name).get_hookimpls() for name in _LIFECYCLE_HOOKS)
        self._key_parts = tuple(
            (plugin_id, getattr(impl.function, "__wrapped__", impl.function), bool(impl.argnames))
            for plugin_id, plugin in sorted(self._plugins.items())
            for impl in self.hook.aitune_graph_key_parts.get_hookimpls()
            if impl.plugin is plugin
        )

    def attach(self) -> None:
        """Add the plugins' container types to the process-wide container registry."""
        for cls, container in self._containers.items():
            CONTAINERS.add(cls, container)

    def detach(self) -> None:
        """Take back what :meth:`attach` added."""
        for cls in self._containers:
            CONTAINERS.unregister(cls)

    # ------------------------------------------------------------------ queries
    def records(self) -> list[PluginRecord]:
        """Every plugin found: built-in first, then by distribution name."""
        return list(self._records.values())

    def backend_names(self) -> list[str]:
        return sorted(self._backends)

    def backend_classes(self) -> dict[str, type[Backend]]:
        return {name: cls for name, (cls, _) in sorted(self._backends.items())}

    def backend_origin(self, name: str) -> tuple[str, str] | None:
        """The distribution and version that registered backend ``name``, or None."""
        entry = self._backends.get(name)
        return (entry[1].distribution, entry[1].version) if entry is not None else None

    def backend_plugin(self, name: str) -> PluginRecord:
        """The plugin that registered backend ``name``."""
        self.backend_class(name)
        return self._backends[name][1]

    def backend_class(self, name: str) -> type[Backend]:
        entry = self._backends.get(name)
        if entry is not None:
            return entry[0]
        message = f"unknown backend {name!r}; choose one of: {', '.join(self.backend_names()) or '(none)'}"
        failed = [r for r in self._records.values() if r.status is PluginStatus.FAILED]
        if failed:
            message += "; plugins that failed to load: " + ", ".join(f"{r.distribution} ({r.reason})" for r in failed)
        raise UnknownBackendError(message)

    # ------------------------------------------------------------------ calling hooks, plugin by plugin
    def plugin_callers(self, hook_name: str) -> list[tuple[str, pluggy.HookCaller]]:
        """Each active plugin's own caller of ``hook_name``, in distribution order (for wrappers).

        Wrappers are not guarded (see :meth:`_guard_hooks`): run through ``hook.<name>``,
        one that raises would stop the call, whoever raised. A caller per plugin (pluggy's
        ``subset_hook_caller``, which keeps pluggy's calling convention) tells which
        plugin failed, so the others can go on.
        """
        implementers = {impl.plugin for impl in getattr(self.hook, hook_name).get_hookimpls()}
        everyone = self.get_plugins()
        return [
            (plugin_id, self.subset_hook_caller(hook_name, everyone - {plugin}))
            for plugin_id, plugin in sorted(self._plugins.items())
            if plugin in implementers
        ]

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
            return [] if outcome is None else [_attributed(outcome)]
        return [_attributed(item) for item in outcome]

    def disable(self, plugin_id: str, hook_name: str, error: BaseException) -> None:
        """Take a plugin whose hook raised ``error`` out of every hook, for the rest of the process.

        Its record becomes failed, with the reason, and one error is logged, however many
        threads or modules hit the fault at once. Its backend classes stay registered:
        backends already built from them, and checkpoints naming them, must keep working.
        With ``AITUNE_STRICT_PLUGINS=1`` the error propagates instead, for plugin authors'
        test suites.
        """
        if self.strict:
            raise error
        with self._lock:
            plugin = self._plugins.get(plugin_id)
            if plugin is None:
                return  # disabled already, by another module or thread
            # Replaced, never mutated: calls in other threads iterate the old values.
            self._plugins = {key: value for key, value in self._plugins.items() if key != plugin_id}
            self.unregister(plugin)
            described = _describe_error(error)
            loaded = self._records[plugin_id]
            record = attrs.evolve(
                loaded, status=PluginStatus.FAILED, reason=f"raised {described} in {hook_name}; disabled"
            )
            self._records = {key: record if key == plugin_id else value for key, value in self._records.items()}
            self._backends = {
                name: (cls, record if owner is loaded else owner) for name, (cls, owner) in self._backends.items()
            }
            self._prepare_fast_paths()
        self._log.error(
            "plugin disabled: its hook raised",
            **self._context(record),
            hook=hook_name,
            error=described,
            raised_at=_raised_at(error),
            hint=f"report it to the plugin's authors; until fixed, AITUNE_DISABLED_PLUGINS={record.distribution} "
            "keeps it from loading",
        )

    def default_candidates(self, device: torch.device | str) -> list[Candidate]:
        """Every plugin's proposals for ``device``: highest priority first, then by backend name."""
        device = torch.device(device)
        candidates: list[Candidate] = []
        for plugin_id, proposals in self.each_result("aitune_default_candidates", device=device):
            distribution = self._records[plugin_id].distribution
            if isinstance(proposals, (str, bytes, Candidate)) or not isinstance(proposals, Iterable):
                self._log.warning(
                    "invalid default candidates",
                    distribution=distribution,
                    returned=repr(proposals),
                    hint="aitune_default_candidates must return a list of Candidate, or None",
                )
                continue
            for proposal in proposals:
                if not isinstance(proposal, Candidate) or not isinstance(proposal.backend, Backend):
                    self._log.warning("invalid default candidate", distribution=distribution, candidate=repr(proposal))
                    continue
                registered = self._backends.get(proposal.backend.name)
                if registered is None or registered[0] is not type(proposal.backend):
                    self._log.warning(
                        "default candidate of an unregistered backend class",
                        distribution=distribution,
                        backend=type(proposal.backend).__qualname__,
                        hint="return the class from aitune_register_backends",
                    )
                    continue
                availability = proposal.availability or self._availability(type(proposal.backend), device)
                candidates.append(attrs.evolve(proposal, availability=availability, plugin=distribution))
        return sorted(candidates, key=lambda c: (-c.priority, c.name, c.backend.describe()))

    def choose_strategy(self, module: Any, device: torch.device | str) -> Any | None:
        """The first strategy a plugin chooses for ``module``; an answer that is not a strategy is refused, named."""
        from aitune_core.strategies.base import TuneStrategy  # strategies load the engine: only when one is chosen

        results = self.each_result("aitune_choose_strategy", module=module, device=torch.device(device))
        for plugin_id, strategy in results:
            if isinstance(strategy, TuneStrategy):
                return strategy
            record = self._records.get(plugin_id)
            self._log.warning(
                "invalid strategy from a plugin, ignored",
                distribution=record.distribution if record else plugin_id,
                returned=repr(strategy)[:200],
                hint="aitune_choose_strategy must return a TuneStrategy instance (not a class), or None",
            )
        return None

    def extend_converter(self, converter: Any) -> None:
        """Let plugins add their types to a freshly made cattrs converter.

        A plugin that raises halfway is disabled; what it registered before raising stays,
        since a converter has no way to take registrations back.
        """
        self.each_result("aitune_extend_converter", converter=converter)

    def graph_key_parts(self) -> KeyParts | None:
        """A function adding the plugins' key parts to a call's key, or None when no plugin does.

        It runs on every call of a wrapped module, so it calls the implementations directly,
        with one try block each (free in Python 3.11 until something raises). It reads the
        registry's parts on each call, so a plugin disabled later drops out of modules
        wrapped before; a plugin whose part raises is disabled and the call goes on.
        """
        if not self._key_parts:
            return None
        registry = self

        def key_parts(arguments: dict[str, Any]) -> Hashable | None:
            found = []
            for plugin_id, function, takes_arguments in registry._key_parts:
                try:
                    part = function(arguments) if takes_arguments else function()
                except KeyboardInterrupt:
                    raise
                except BaseException as error:
                    registry.disable(plugin_id, _KEY_PARTS_HOOK, error)
                    continue
                if part is not None:
                    found.append((plugin_id, part))
            return tuple(found) if found else None

        return key_parts


def _attributed(item: Any) -> tuple[str, Any]:
    """``(plugin id, value)``; a value a wrapper put in place of a guarded one is nobody's."""
    return (item.plugin_id, item.value) if isinstance(item, Attributed) else ("", item)
