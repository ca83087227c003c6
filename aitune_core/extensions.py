"""The slots the plugin layer fills, so that the layers below it never import it.

Backends run their lifecycle steps, the converter learns plugin types, modules add
plugin key parts, strategies ask for default candidates: each through a slot here.
Installing a plugin registry (:func:`aitune_core.plugins.manager.install_registry`)
fills the slots with its own functions; until then they hold plain defaults (a step
just runs, nothing is added).

Reading a slot never loads plugins, so a backend built by hand builds, and a converter
converts, with no entry point read. The entry points that need plugins call
:func:`ensure_plugins` first: ``Module()`` (its graph keys include the plugins' parts),
``tune()``, ``load()``, the JIT, the CLI and a candidate's worker process. It runs the
loader that the ``aitune_core`` package set (:func:`set_loader`) once.

The package sets one more function the same way: the refitter (:func:`set_refitter`),
which a tuned module whose weights changed calls to refit its routes in the background
(:mod:`aitune_core.refitting`, far above the module layer).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, Protocol, runtime_checkable

import attrs

KeyParts = Callable[[dict[str, Any]], Hashable | None]


@runtime_checkable
class DeclaredKeyParts(Protocol):
    """Key parts that can tell, as a lane is built, whether ``model(x)`` may get a part (``aitune_graph_key_reads``)."""

    def __call__(self, arguments: dict[str, Any]) -> Hashable | None: ...

    def keys_lone_tensor(self, name: str) -> bool:
        """False where no plugin may give a part to a call whose only argument is a plain tensor named ``name``."""


class UnknownBackendError(LookupError):
    """No loaded plugin registers a backend under the name asked for."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _run(step: str, backend: Any, action: Callable[[], None]) -> None:
    action()


def _unknown(name: str) -> type:
    raise UnknownBackendError(f"unknown backend {name!r}: no plugin registry is installed")


@attrs.define
class Slots:
    """What the plugin layer provides to the layers below it; the defaults stand for "no plugins"."""

    run_step: Callable[[str, Any, Callable[[], None]], None] = _run
    """Runs a backend lifecycle step with the plugins' observers and wrappers around it."""
    extend_converter: Callable[[Any], None] = lambda converter: None
    """Lets plugins teach a fresh cattrs converter their types."""
    graph_key_parts: Callable[[], KeyParts | None] = lambda: None
    """The plugins' part of every call's graph key, or None."""
    default_candidates: Callable[[Any], list[Any]] = lambda device: []
    """The backends plugins propose for a device (``plugins.records.Candidate``)."""
    executor_classes: Callable[[], dict[str, type]] = dict
    """Executor classes registered by plugins, by name."""
    target_classes: Callable[[], dict[str, type]] = dict
    """Deploy target classes registered by plugins (the core's own included), by name."""
    backend_class: Callable[[str], type] = _unknown
    """The backend class registered under a name; raises :class:`UnknownBackendError`."""
    backend_origin: Callable[[str], tuple[str, str] | None] = lambda name: None
    """The distribution and version that registered a backend name, or None for the core."""
    choose_strategy: Callable[[Any, Any], Any | None] = lambda module, device: None
    """A plugin's strategy for a module whose user chose none."""


_slots = Slots()
_filled = False
_loader: Callable[[], None] | None = None
_lock = threading.RLock()


def slots() -> Slots:
    """The installed registry's slots, or the defaults (no plugins) when none is installed; never loads one."""
    return _slots


def ensure_plugins() -> Slots:
    """Load and install the process's plugins unless a registry is installed, and return the slots.

    For the entry points that need plugins (see the module docstring), never for the
    layers below them, which read :func:`slots`.
    """
    if not _filled and _loader is not None:
        with _lock:
            if not _filled:
                _loader()
    return _slots


def fill(filled: Slots | None) -> None:
    """Install ``filled`` (a registry's functions); None puts the defaults back and loads again on next use."""
    global _slots, _filled
    with _lock:
        _slots = filled if filled is not None else Slots()
        _filled = filled is not None


def set_loader(loader: Callable[[], None]) -> None:
    """What loads and installs the plugins on first use: set once, by the ``aitune_core`` package."""
    global _loader
    _loader = loader


_refitter: Callable[[Any], None] | None = None


def set_refitter(refitter: Callable[[Any], None]) -> None:
    """What starts a background refit of a wrapped module (:mod:`aitune_core.refitting`): set once, by the package."""
    global _refitter
    _refitter = refitter


def request_refit(module: Any) -> None:
    """Ask for ``module``'s routes to be refitted in the background; a wrapper whose weights changed calls it."""
    if _refitter is not None:
        _refitter(module)
