"""What the core asks plugins, each through pluggy's caller, with every answer checked and attributed.

A plugin whose hook raises is disabled by its guard and left out of the answer
(:mod:`aitune_core.plugins.containment`); an answer of the wrong kind is logged with the
distribution that gave it and left out, so a faulty plugin never breaks a module call or
``tune()``.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable
from functools import partial
from typing import Any, Protocol, cast

import attrs
import pluggy
import torch

from aitune_core.backends.base import Backend
from aitune_core.extensions import DeclaredKeyParts
from aitune_core.log import get_logger
from aitune_core.plugins.containment import attributed, availability_of
from aitune_core.plugins.named import NamedClasses
from aitune_core.plugins.records import Candidate, PluginRecord


class QueriedRegistry(Protocol):
    """What the questions below need of :class:`aitune_core.plugins.registry.PluginRegistry`, which asks them.

    A protocol rather than the class, so that the registry may import this module and
    this module not import the registry.
    """

    @property
    def hook(self) -> pluggy.HookRelay: ...

    @property
    def backends(self) -> NamedClasses: ...

    def record(self, plugin_id: str) -> PluginRecord | None: ...

    def each_result(self, hook_name: str, **kwargs: Any) -> list[tuple[str, Any]]: ...


def _distribution(registry: QueriedRegistry, plugin_id: str) -> str:
    record = registry.record(plugin_id)
    return record.distribution if record is not None else plugin_id


def default_candidates(registry: QueriedRegistry, device: torch.device) -> list[Candidate]:
    """Every plugin's proposals for ``device``: highest priority first, then by backend name."""
    log = get_logger()
    candidates: list[Candidate] = []
    for plugin_id, proposals in registry.each_result("aitune_default_candidates", device=device):
        distribution = _distribution(registry, plugin_id)
        if isinstance(proposals, (str, bytes, Candidate)) or not isinstance(proposals, Iterable):
            log.warning(
                "invalid default candidates",
                distribution=distribution,
                returned=repr(proposals),
                hint="aitune_default_candidates must return a list of Candidate, or None",
            )
            continue
        for proposal in proposals:
            if not isinstance(proposal, Candidate) or not isinstance(proposal.backend, Backend):
                log.warning("invalid default candidate", distribution=distribution, candidate=repr(proposal))
                continue
            if registry.backends.get(proposal.backend.name) is not type(proposal.backend):
                log.warning(
                    "default candidate of an unregistered backend class",
                    distribution=distribution,
                    backend=type(proposal.backend).__qualname__,
                    hint="return the class from aitune_register_backends",
                )
                continue
            availability = proposal.availability or availability_of(type(proposal.backend), device)
            candidates.append(attrs.evolve(proposal, availability=availability, plugin=distribution))
    return sorted(candidates, key=lambda c: (-c.priority, c.name, c.backend.describe()))


def choose_strategy(registry: QueriedRegistry, module: Any, device: torch.device) -> Any | None:
    """The first strategy a plugin chooses for ``module``; an answer that is not a strategy is refused, named."""
    from aitune_core.strategies.base import TuneStrategy  # the strategies package is loaded by tune(), not here

    for plugin_id, strategy in registry.each_result("aitune_choose_strategy", module=module, device=device):
        if isinstance(strategy, TuneStrategy):
            return strategy
        get_logger().warning(
            "invalid strategy from a plugin, ignored",
            distribution=_distribution(registry, plugin_id),
            returned=repr(strategy)[:200],
            hint="aitune_choose_strategy must return a TuneStrategy instance (not a class), or None",
        )
    return None


def extend_converter(registry: QueriedRegistry, converter: Any) -> None:
    """Let plugins add their types to a freshly made cattrs converter.

    A plugin that raises halfway is disabled; what it registered before raising stays,
    since a converter has no way to take registrations back.
    """
    registry.each_result("aitune_extend_converter", converter=converter)


def graph_key_parts(registry: QueriedRegistry) -> DeclaredKeyParts | None:
    """A function adding the plugins' key parts to a call's key, or None when no plugin gives any.

    It runs on every call of a wrapped module. It calls the hook through pluggy on each
    call, so a plugin disabled later drops out of modules wrapped before. Parts are
    ordered by plugin id, as checkpoints store them, whatever order pluggy calls in.
    Its ``keys_lone_tensor`` is asked once per lane; plugins only ever leave a registry,
    so the answer stays right for as long as the lane lives.
    """
    caller = registry.hook.aitune_graph_key_parts
    if not caller.get_hookimpls():
        return None

    def key_parts(arguments: dict[str, Any]) -> Hashable | None:
        found = caller(arguments=arguments)
        if not found:
            return None
        if len(found) == 1:  # the common case, on every call: one plugin gives a part
            return (attributed(found[0]),)
        return tuple(sorted(map(attributed, found), key=_plugin_id))

    # An attribute of the function, not an object with __call__: that costs 600 instructions more a call.
    key_parts.keys_lone_tensor = partial(_keys_lone_tensor, registry, caller)  # type: ignore[attr-defined]
    return cast(DeclaredKeyParts, key_parts)


def _keys_lone_tensor(registry: QueriedRegistry, caller: pluggy.HookCaller, name: str) -> bool:
    """Whether a plugin may key ``model(x)``, ``x`` a plain tensor named ``name``: all may but those that declare.

    A declaration (``aitune_graph_key_reads``) that is not a collection of names is logged and ignored.
    """
    declared = dict(registry.each_result("aitune_graph_key_reads"))
    for implementation in caller.get_hookimpls():
        names = declared.get(implementation.plugin_name)
        if isinstance(names, (str, bytes)) or not isinstance(names, Collection):
            if names is not None:
                get_logger().warning(
                    "invalid graph key reads, ignored",
                    distribution=_distribution(registry, implementation.plugin_name),
                    returned=repr(names)[:200],
                    hint="aitune_graph_key_reads must return a collection of parameter names, or None",
                )
            return True
        if name in names:
            return True
    return False


def _plugin_id(part: tuple[str, Any]) -> str:
    return part[0]
