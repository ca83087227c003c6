"""Containing a plugin's faults: pluggy calls a guarded proxy of each plugin, never the plugin itself.

A plugin is foreign code running inside the host, and a hook that raises must not fail the
call it is part of (a module call, a backend build, ``tune()``). So the registry never
registers a plugin's own module with pluggy. It registers a :class:`GuardedPlugin`'s
namespace: one function per hook implementation of the plugin, carrying the plugin's own
``hookimpl`` options (``tryfirst``, ``trylast``, ``wrapper``, ``specname`` ...), so pluggy
orders and calls them exactly as it would the plugin's. Each function calls the plugin's:

* a result comes back tagged with the plugin that gave it (:class:`Attributed`), so the
  registry can check every result and name the plugin of a bad one;
* an exception (anything but ``KeyboardInterrupt``, which is the user asking to stop) is
  handed to the fault handler, which disables the plugin, and the call goes on as if the
  plugin had returned ``None``: a ``firstresult`` hook asks the next plugin;
* a wrapper that raises before its ``yield`` still lets the call run; one that raises
  after it leaves the call's own outcome (result or error) as it was.

Until its plugin has loaded (:attr:`GuardedPlugin.contained` is false) a guard lets the
error through instead, so loading refuses the plugin with it.

pluggy reads an implementation's argument names from its signature, which follows
``__wrapped__`` (set by :func:`functools.wraps`), so each proxy function takes exactly the
arguments the plugin's takes, and pluggy checks them against the hook spec as usual. Only
public pluggy API is used: ``HookimplMarker`` marks the proxies and
``PluginManager.parse_hookimpl_opts`` reads the plugin's options.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable, Generator
from typing import Any, NamedTuple

import attrs
import pluggy
import torch

from aitune_core.backends.base import Availability, Backend
from aitune_core.plugins.api import PROJECT_NAME

FaultHandler = Callable[[str, str, BaseException], None]
"""Told ``(plugin id, hook name, error)`` when a committed plugin's hook raises."""

_MARK = pluggy.HookimplMarker(PROJECT_NAME)


class Attributed(NamedTuple):
    """A hook result and the plugin that returned it (what guarded implementations return).

    A named tuple, not an attrs class: a graph-key part is one on every call of a wrapped
    module, and a tuple is made in a fraction of the time.
    """

    plugin_id: str
    value: Any


def attributed(item: Any) -> tuple[str, Any]:
    """``(plugin id, value)``; a value a wrapper put in place of a guarded one is nobody's."""
    return (item.plugin_id, item.value) if isinstance(item, Attributed) else ("", item)


@attrs.frozen
class Implementation:
    """One hook implementation of a plugin: the attribute that holds it, its options and the function."""

    attribute: str
    options: dict[str, Any]
    function: Callable[..., Any]

    @property
    def hook(self) -> str:
        return str(self.options.get("specname") or self.attribute)

    @property
    def wraps(self) -> bool:
        return bool(self.options.get("wrapper") or self.options.get("hookwrapper"))


def implementations(manager: pluggy.PluginManager, plugin: Any) -> list[Implementation]:
    """The hook implementations of ``plugin``, found the way ``manager.register`` finds them."""
    found = []
    for attribute in dir(plugin):
        options = manager.parse_hookimpl_opts(plugin, attribute)
        if options is not None:
            found.append(Implementation(attribute, dict(options), getattr(plugin, attribute)))
    return found


class HookNamespace:
    """The object pluggy sees for one plugin: its guarded implementations, as attributes."""

    def __init__(self, plugin_id: str) -> None:
        self.__dict__["_aitune_plugin_id"] = plugin_id

    def __repr__(self) -> str:
        return f"<guarded hooks of aitune plugin {self.__dict__['_aitune_plugin_id']!r}>"


class GuardedPlugin:
    """One loaded plugin: the plugin object, and the guarded namespace registered for it."""

    def __init__(self, plugin_id: str, plugin: Any, found: list[Implementation], on_fault: FaultHandler) -> None:
        self.plugin_id = plugin_id
        self.plugin = plugin
        self.implementations = tuple(found)
        self.contained = False
        """Whether a fault is handed to ``on_fault`` (once loaded) or raised (while loading)."""
        self._on_fault = on_fault
        self.namespace = HookNamespace(plugin_id)
        for implementation in found:
            setattr(
                self.namespace,
                implementation.attribute,
                _MARK(self._guard(implementation), **_marker_options(implementation)),
            )

    def fault(self, hook: str, error: BaseException) -> None:
        """A hook of this plugin raised ``error`` (never a KeyboardInterrupt)."""
        if not self.contained:
            raise error
        self._on_fault(self.plugin_id, hook, error)

    def _guard(self, implementation: Implementation) -> Callable[..., Any]:
        if implementation.options.get("wrapper"):
            return self._guard_wrapper(implementation)
        if implementation.options.get("hookwrapper"):
            return self._guard_old_style_wrapper(implementation)
        return self._guard_call(implementation)

    def _guard_call(self, implementation: Implementation) -> Callable[..., Any]:
        function, hook, plugin_id = implementation.function, implementation.hook, self.plugin_id

        @functools.wraps(function)
        def guarded(*args: Any) -> Any:
            try:
                value = function(*args)
            except KeyboardInterrupt:
                raise
            except BaseException as error:
                self.fault(hook, error)
                return None
            return None if value is None else Attributed(plugin_id, value)

        return guarded

    def _guard_wrapper(self, implementation: Implementation) -> Callable[..., Any]:
        """A new-style wrapper (``wrapper=True``): the yield gives the inner result, or raises the inner error."""
        function, hook = implementation.function, implementation.hook

        @functools.wraps(function)
        def guarded(*args: Any) -> Generator[None, Any, Any]:
            teardown = function(*args)
            setup = _step(lambda: next(teardown))
            if setup.raised is not None or setup.finished:
                self._setup_fault(hook, setup)
                return (yield)
            inner: BaseException | None = None
            result: Any = None
            try:
                result = yield
            except BaseException as raised:
                inner = raised
            if inner is not None:
                after = _step(functools.partial(teardown.throw, inner))
                if after.finished:
                    return after.value  # the wrapper handled the error, as pluggy lets it
                if after.raised is inner or isinstance(after.raised, KeyboardInterrupt):
                    raise after.raised
                self._teardown_fault(hook, teardown, after)
                raise inner
            after = _step(functools.partial(teardown.send, result))
            if after.finished:
                return after.value
            if isinstance(after.raised, KeyboardInterrupt):
                raise after.raised
            self._teardown_fault(hook, teardown, after)
            return result

        return guarded

    def _guard_old_style_wrapper(self, implementation: Implementation) -> Callable[..., Any]:
        """An old-style wrapper (``hookwrapper=True``): the yield gives pluggy's ``Result``, passed on as it is."""
        function, hook = implementation.function, implementation.hook

        @functools.wraps(function)
        def guarded(*args: Any) -> Generator[None, Any, None]:
            teardown = function(*args)
            setup = _step(lambda: next(teardown))
            if setup.raised is not None or setup.finished:
                self._setup_fault(hook, setup)
                yield
                return
            outcome = yield
            after = _step(functools.partial(teardown.send, outcome))
            if after.finished:
                return
            if isinstance(after.raised, KeyboardInterrupt):
                raise after.raised
            self._teardown_fault(hook, teardown, after)

        return guarded

    def _setup_fault(self, hook: str, setup: _Step) -> None:
        if isinstance(setup.raised, KeyboardInterrupt):
            raise setup.raised
        self.fault(hook, setup.raised or RuntimeError(f"{hook} returned without yielding"))

    def _teardown_fault(self, hook: str, teardown: Generator[Any, Any, Any], after: _Step) -> None:
        if after.raised is None:
            teardown.close()
        self.fault(hook, after.raised or RuntimeError(f"{hook} yielded more than once"))


def _marker_options(implementation: Implementation) -> dict[str, Any]:
    """The options ``HookimplMarker`` takes, as the plugin gave them."""
    keys = ("wrapper", "hookwrapper", "optionalhook", "tryfirst", "trylast", "specname")
    return {key: implementation.options[key] for key in keys if key in implementation.options}


@attrs.frozen
class _Step:
    """How one step of a plugin's wrapper generator ended: yielded, finished with a value, or raised."""

    finished: bool = False
    value: Any = None
    raised: BaseException | None = None


def _step(advance: Callable[[], Any]) -> _Step:
    """Run one step of a wrapper generator, catching how it ends (the caller decides what is a fault)."""
    try:
        advance()
    except StopIteration as stop:
        return _Step(finished=True, value=stop.value)
    except BaseException as error:
        return _Step(raised=error)
    return _Step()


def availability_of(cls: type[Backend], device: torch.device) -> Availability:
    """A backend class's availability; its check is plugin code too, and one that raises means unavailable."""
    try:
        return cls.availability(device)
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        return Availability.no(f"availability check failed: {describe_error(error)}")


def describe_error(error: BaseException, limit: int = 400) -> str:
    """One line for tables and logs: the type and the message with its line breaks folded."""
    text = " ".join(str(error).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def raised_at(error: BaseException) -> str:
    """Where ``error`` was raised (file:line), so a plugin author can find it from one log line."""
    frames = traceback.extract_tb(error.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
