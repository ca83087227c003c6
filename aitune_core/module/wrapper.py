"""``aitune_core.Module``: wrap an ``nn.Module`` to record its calls and route them once tuned.

The wrapper shares its parameter, buffer and submodule dicts with the module it wraps,
so ``state_dict`` keys, ``.to()``, ``named_parameters`` and parent modules see exactly
what they saw before wrapping. Attributes it does not have are read from (and plain
attributes written to) the wrapped module, which stays reachable as ``.module``.

A wrapped module is in one of these states:

* RECORDING: every call runs the original forward and is recorded into a graph;
* TUNED: calls are routed by graph key to that graph's backend (eager for graphs
  without a tuned backend, or calls outside the tuned shapes);
* INACTIVE: backends are released and calls run the original forward, unrecorded.
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Hashable
from typing import Any

import torch
from torch import nn

from aitune_core.config import config
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.log import get_logger
from aitune_core.module.recorder import GraphRecord, GraphRecorder
from aitune_core.module.router import Route, UnseenCalls


class ModuleState(enum.Enum):
    RECORDING = "recording"
    TUNED = "tuned"
    INACTIVE = "inactive"


class UnsupportedCallError(RuntimeError):
    """A tuned module got a call it was not tuned for, and ``config.fallback == "raise"``."""


class ModuleRegistry:
    """Every live wrapped module, by name. Names are unique; dead wrappers free theirs."""

    def __init__(self) -> None:
        self._modules: weakref.WeakValueDictionary[str, Module] = weakref.WeakValueDictionary()

    def add(self, module: Module) -> None:
        existing = self._modules.get(module.name)
        if existing is not None and existing is not module:
            raise ValueError(
                f"an aitune module named {module.name!r} already exists (wrapping "
                f"{type(existing.module).__name__}); give each aitune_core.Module a unique name"
            )
        self._modules[module.name] = module

    def remove(self, module: Module) -> None:
        if self._modules.get(module.name) is module:
            del self._modules[module.name]

    @property
    def modules(self) -> dict[str, Module]:
        return dict(self._modules)

    def __len__(self) -> int:
        return len(self._modules)


MODULE_REGISTRY = ModuleRegistry()

# torch's process-wide hook registries, mutated in place when hooks are registered.
_GLOBAL_FORWARD_HOOKS = torch.nn.modules.module._global_forward_hooks
_GLOBAL_FORWARD_PRE_HOOKS = torch.nn.modules.module._global_forward_pre_hooks
_GLOBAL_BACKWARD_HOOKS = torch.nn.modules.module._global_backward_hooks
_GLOBAL_BACKWARD_PRE_HOOKS = torch.nn.modules.module._global_backward_pre_hooks

_OWN_ATTRIBUTES = frozenset({"training", "name", "strategy"})


class Module(nn.Module):
    """Wrap ``module`` under a unique ``name``; ``strategy`` overrides the one ``tune`` uses."""

    def __init__(self, module: nn.Module, name: str, strategy: Any = None) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"aitune_core.Module wraps a torch.nn.Module, got {type(module).__name__}")
        if isinstance(module, Module):
            raise TypeError(f"{module.name!r} is already an aitune module; wrap the original once")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        super().__init__()
        own = self.__dict__
        # Share the wrapped module's dicts: state_dict keys and .to() behave as before wrapping.
        own["_parameters"] = module._parameters
        own["_buffers"] = module._buffers
        own["_non_persistent_buffers_set"] = module._non_persistent_buffers_set
        own["_modules"] = module._modules
        own["training"] = module.training
        own["name"] = name
        own["strategy"] = strategy
        own["_inner"] = module
        own["_state"] = ModuleState.RECORDING
        own["_signature"] = ForwardSignature(module.forward)
        from aitune_core.plugins.manager import graph_key_parts

        own["_recorder"] = GraphRecorder(name, own["_signature"], graph_key_parts())
        own["_routes"] = {}
        own["_unseen"] = UnseenCalls()
        own["_warned_routes"] = set()
        own["_log"] = get_logger(module=name)
        MODULE_REGISTRY.add(self)

    # ------------------------------------------------------------------ access
    @property
    def module(self) -> nn.Module:
        """The wrapped module itself."""
        return self._inner

    @property
    def state(self) -> ModuleState:
        return self._state

    @property
    def graph_specs(self) -> list[GraphSpec]:
        """The graphs recorded so far, in the order they were first seen."""
        return self._recorder.graph_specs

    @property
    def graphs(self) -> dict[Hashable, GraphRecord]:
        return self._recorder.graphs

    @property
    def signature(self) -> ForwardSignature:
        return self._signature

    @property
    def routes(self) -> dict[Hashable, Route]:
        """Tuned routes by graph key."""
        return dict(self._routes)

    @property
    def backends(self) -> dict[str, Any]:
        """The backend routed to for each tuned graph, by graph name."""
        return {route.graph.name: route.backend for route in self._routes.values()}

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            inner = self.__dict__.get("_inner")
            if inner is None:
                raise
            return getattr(inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            name in _OWN_ATTRIBUTES
            or name.startswith("_")
            or isinstance(value, (nn.Module, nn.Parameter))
            or name in self._parameters
            or name in self._buffers
            or name in self._modules
        ):
            super().__setattr__(name, value)
        else:
            setattr(self._inner, name, value)

    def __delattr__(self, name: str) -> None:
        if name in self.__dict__ or name in self._parameters or name in self._buffers or name in self._modules:
            super().__delattr__(name)
        else:
            delattr(self._inner, name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self._inner)))

    def train(self, mode: bool = True) -> Module:
        super().train(mode)
        self._inner.training = mode
        return self

    def extra_repr(self) -> str:
        return f"name={self.name!r}, state={self._state.name}, wraps={type(self._inner).__name__}"

    # ------------------------------------------------------------------ calls
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # nn.Module.__call__ costs microseconds even without hooks; skip it when no hook is set.
        if (
            self._forward_hooks
            or self._forward_pre_hooks
            or self._backward_hooks
            or self._backward_pre_hooks
            or _GLOBAL_FORWARD_HOOKS
            or _GLOBAL_FORWARD_PRE_HOOKS
            or _GLOBAL_BACKWARD_HOOKS
            or _GLOBAL_BACKWARD_PRE_HOOKS
        ):
            return super().__call__(*args, **kwargs)
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        state = self._state
        if state is ModuleState.TUNED:
            arguments = self._signature.normalize(args, kwargs)
            key = self._recorder.key(arguments, config.strict_mode)
            route = self._routes.get(key)
            if route is not None:
                reason = route.mismatch(arguments)
                if reason is None:
                    if route.eager_up_to is not None and route.runs_eagerly(arguments):
                        return self._inner(*args, **kwargs)
                    return route.call(*args, **kwargs)
                return self._fall_back(args, kwargs, ("shape", route.graph.name), reason)
            return self._fall_back(args, kwargs, key, "this call's graph was not seen while tuning")
        if state is ModuleState.RECORDING:
            return self._recorder.record(self._inner, args, kwargs)
        return self._inner(*args, **kwargs)

    def _fall_back(self, args: tuple[Any, ...], kwargs: dict[str, Any], key: Hashable, reason: str) -> Any:
        released = self.__dict__.get("_weights_released")
        if released:
            raise UnsupportedCallError(f"aitune module `{self.name}`: {reason}, and {released}")
        if config.fallback == "raise":
            raise UnsupportedCallError(
                f"aitune module `{self.name}`: {reason}. Add such calls to the tuning data, "
                "or set aitune_core.config.fallback = 'eager' to run them on the original module"
            )
        if self._unseen.first_time(key):
            self._log.warning(
                "falling back to eager", reason=reason, hint="add such calls to the tuning data to tune them"
            )
        return self._inner(*args, **kwargs)

    # ------------------------------------------------------------------ lifecycle
    def set_routes(self, routes: dict[Hashable, Route]) -> None:
        """Install tuned routes (graph key -> route) and start routing calls."""
        self.__dict__["_routes"] = dict(routes)
        self.__dict__["_unseen"] = UnseenCalls()
        for route in routes.values():
            route.refresh()
        self.__dict__["_state"] = ModuleState.TUNED

    def add_graph(self, spec: GraphSpec, samples: list[Sample]) -> None:
        """Add a graph recorded elsewhere (a checkpoint), keyed by its spec's key."""
        record = GraphRecord(spec)
        record.samples.extend(samples)
        self._recorder.graphs[spec.key] = record

    def release_weights(self, reason: str) -> None:
        """Free the wrapped module's parameters and buffers (they become meta tensors).

        For deployed modules whose backends carry their own weights. Calls the backends
        were not built for can then no longer run eagerly; they raise, naming ``reason``,
        and small batches that eager served go to the backends.
        """
        self._inner.to("meta")
        for route in self._routes.values():
            route.eager_up_to = None
        self.__dict__["_weights_released"] = reason

    def start_recording(self) -> ModuleState:
        """Record calls again (``tune`` does this while gathering); returns the state before.

        Tuned backends are kept until :meth:`drop_routes`, so a module that the gathering
        does not reach can go back to routing with :meth:`restore`.
        """
        previous: ModuleState = self._state
        self.__dict__["_state"] = ModuleState.RECORDING
        return previous

    def restore(self, state: ModuleState) -> None:
        """Go back to a state saved by :meth:`start_recording`."""
        if state is ModuleState.TUNED and self._routes:
            self.activate()
        else:
            self.__dict__["_state"] = state if state is not ModuleState.TUNED else ModuleState.RECORDING

    def drop_routes(self) -> None:
        """Release and forget tuned backends (before tuning anew)."""
        self._release_backends()
        self.__dict__["_routes"] = {}

    @property
    def recorded_calls(self) -> int:
        """How many calls this module has recorded; ``tune`` uses it to see which modules ran."""
        return self._recorder.calls

    def deactivate(self) -> None:
        """Release tuned backends; calls run the original module until :meth:`activate`."""
        self._release_backends()
        self.__dict__["_state"] = ModuleState.INACTIVE

    def activate(self) -> None:
        """Bring tuned backends back; calls are routed again. Without routes, keep recording."""
        if not self._routes:
            self.__dict__["_state"] = ModuleState.RECORDING
            return
        from aitune_core.backends.state import BackendState

        for route in self._routes.values():
            if route.backend.state in (BackendState.INACTIVE, BackendState.CHECKPOINT_LOADED):
                route.backend.activate()
            route.refresh()
        self.__dict__["_state"] = ModuleState.TUNED

    def _release_backends(self) -> None:
        from aitune_core.backends.state import BackendState

        for route in self._routes.values():
            if route.backend.state is BackendState.ACTIVE:
                route.backend.deactivate()
