"""Classes plugins register by name, backends, executors and deploy targets alike, checked one way as plugins load.

A name must mean one class whatever order plugins were found in, since checkpoints and
settings store names. So one policy holds for every kind:

* each class is checked when its plugin loads (a concrete subclass of the kind's base
  class with a valid name, and what the kind needs besides); a class that fails refuses
  its plugin, with the reason;
* a name the core owns (one its built-in plugin registers, or one it defines itself,
  such as the ``subprocess`` executor) cannot be taken: the newcomer is refused;
* a name two plugins register refuses both: keeping "the first one" would make the class
  depend on which distribution sorted first.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from aitune_core.backends.base import Backend, BackendConfig
from aitune_core.deploy.target import DeployTarget
from aitune_core.executors.base import Executor
from aitune_core.executors.registry import BUILTIN_EXECUTORS
from aitune_core.names import NAME_RULE, is_valid_name
from aitune_core.plugins.records import Refused


def _backend_problem(cls: type) -> str | None:
    config_class = getattr(cls, "config_class", None)
    if not (isinstance(config_class, type) and issubclass(config_class, BackendConfig) and attrs.has(config_class)):
        return f"{cls.__qualname__}.config_class must be an attrs subclass of BackendConfig"
    return None


def _target_problem(cls: type) -> str | None:
    if not attrs.has(getattr(cls, "options_class", None)):  # type: ignore[arg-type]
        return f"{cls.__qualname__}.options_class must be an attrs class (its fields are the target's options)"
    return None


def _executor_base() -> type:
    return Executor


def _core_executors() -> Mapping[str, str]:
    return dict.fromkeys(BUILTIN_EXECUTORS, "aitune-core")


@attrs.frozen
class Kind:
    """One kind of named class: the hook that registers it and what each class must be."""

    noun: str
    hook: str
    example: str
    base: Callable[[], type]
    """The base class every registered class subclasses (a function, so it is imported only when needed)."""
    reserved: Callable[[], Mapping[str, str]] = dict
    """Names the core defines without registering them, and who owns each."""
    problem: Callable[[type], str | None] = lambda cls: None
    """What else is wrong with a class of this kind, or None."""

    def check(self, results: Iterable[Any]) -> list[type]:
        """The classes in ``results`` (one plugin's hook results); Refused names the first problem."""
        classes: list[type] = []
        for result in results:
            if isinstance(result, (str, bytes)) or not isinstance(result, Iterable):
                raise Refused(f"{self.hook} must return a list of {self.base().__name__} classes, got {result!r}")
            for cls in result:
                name = self._check_class(cls)
                if any(other.name == name for other in classes):  # type: ignore[attr-defined]
                    raise Refused(f"it registers the {self.noun} name {name!r} twice")
                classes.append(cls)
        return classes

    def _check_class(self, cls: Any) -> str:
        base = self.base()
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise Refused(f"{self.hook} returned {cls!r}, which is not a subclass of {base.__name__}")
        name = getattr(cls, "name", None)
        if not is_valid_name(name):
            raise Refused(
                f"{cls.__qualname__}.name must be a lowercase name such as {self.example!r} ({NAME_RULE}), got {name!r}"
            )
        problem = self.problem(cls)
        if problem is not None:
            raise Refused(problem)
        if inspect.isabstract(cls):
            missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
            raise Refused(f"{cls.__qualname__} is abstract (missing {missing})")
        return str(name)


BACKENDS = Kind("backend", "aitune_register_backends", "my_backend", lambda: Backend, problem=_backend_problem)
EXECUTORS = Kind("executor", "aitune_register_executors", "my_cluster", _executor_base, reserved=_core_executors)
TARGETS = Kind("target", "aitune_register_targets", "my_server", lambda: DeployTarget, problem=_target_problem)
KINDS = (BACKENDS, EXECUTORS, TARGETS)


@attrs.frozen
class Claim:
    """The classes of one kind that one plugin registers."""

    plugin_id: str
    distribution: str
    builtin: bool
    classes: Sequence[type]


def conflicts(kind: Kind, claims: Sequence[Claim]) -> dict[str, str]:
    """Plugins refused over a name of ``kind``: the reason, by plugin id."""
    owners: dict[str, list[Claim]] = {}
    for claim in claims:
        for cls in claim.classes:
            owners.setdefault(cls.name, []).append(claim)  # type: ignore[attr-defined]
    reserved = kind.reserved() if owners else {}
    refused: dict[str, str] = {}
    for name, claimants in sorted(owners.items()):
        builtin = next((claim for claim in claimants if claim.builtin), None)
        owner = f"the built-in plugin of {builtin.distribution}" if builtin is not None else reserved.get(name)
        if owner is None and len(claimants) < 2:
            continue
        for claim in claimants:
            if claim is builtin or claim.plugin_id in refused:
                continue
            if owner is not None:
                refused[claim.plugin_id] = f"{kind.noun} name {name!r} is taken by {owner}"
            else:
                both = " and ".join(other.distribution for other in claimants)
                refused[claim.plugin_id] = (
                    f"{kind.noun} name {name!r} is registered by both {both}; neither is loaded "
                    "(disable one with AITUNE_DISABLED_PLUGINS)"
                )
    return refused


class NamedClasses:
    """The classes of one kind that loaded plugins registered, by name, with the plugin of each.

    Filled once, while plugins load, and never changed after: a plugin disabled later keeps
    its classes registered, so what was built from them, and checkpoints naming them, work.
    """

    def __init__(self, kind: Kind, claims: Iterable[Claim] = ()) -> None:
        self.kind = kind
        self._entries: dict[str, tuple[type, str]] = {
            cls.name: (cls, claim.plugin_id)  # type: ignore[attr-defined]
            for claim in claims
            for cls in claim.classes
        }

    def get(self, name: str) -> type | None:
        entry = self._entries.get(name)
        return entry[0] if entry is not None else None

    def owner(self, name: str) -> str | None:
        """The id of the plugin that registered ``name``, or None."""
        entry = self._entries.get(name)
        return entry[1] if entry is not None else None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def classes(self) -> dict[str, type]:
        return {name: cls for name, (cls, _) in sorted(self._entries.items())}
