"""``aitune_core.Module``: wrap an ``nn.Module`` to record its calls and route them once tuned.

The wrapper shares its parameter, buffer and submodule dicts with the module it wraps,
so ``state_dict`` keys, ``.to()``, ``named_parameters`` and parent modules see exactly
what they saw before wrapping. Attributes it does not have are read from (and plain
attributes written to) the wrapped module, which stays reachable as ``.module``.

A wrapped module is in one of these states:

* RECORDING: every call runs the original forward and is recorded into a graph;
* TUNED: calls are routed by graph key to that graph's backend (eager for graphs
  without a tuned backend, calls outside the tuned shapes, and calls the backends no
  longer fit because the module changed: :mod:`aitune_core.module.staleness`), some
  of them checked against eager on the way (:mod:`aitune_core.module.spot_check`);
* INACTIVE: backends are released and calls run the original forward, unrecorded.

Whatever the state, calls made inside a recording session (``tune`` gathers in one,
:func:`recording_session`) are recorded. While a tuning run has claimed a module
(:meth:`Module.start_recording`), calls from outside its session are not recorded: they
run the module, or its routes if it has them, so another thread's traffic never becomes
tuning data. Calls recorded outside any session are kept apart from the sessions', which
are what ``tune`` tunes from (:mod:`aitune_core.module.recordings`).
"""

from __future__ import annotations

import contextlib
import enum
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

import torch
from torch import nn

from aitune_core.backends.state import BackendState
from aitune_core.config import config
from aitune_core.extensions import ensure_plugins
from aitune_core.graphs.declared_dims import DynamicShapes
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.log import get_logger
from aitune_core.module.lane import single_tensor_lane
from aitune_core.module.new_weights import respond
from aitune_core.module.recorder import GraphRecord
from aitune_core.module.recordings import Recordings
from aitune_core.module.registry import ModuleRegistry
from aitune_core.module.router import RUN_EAGERLY, Route, UnseenCalls
from aitune_core.module.session import current_session, open_session, sessions_open
from aitune_core.module.spot_check import SpotChecks, spot_checked
from aitune_core.module.staleness import GRAD_CHANGE, Baseline, Change, Watch


class ModuleState(enum.Enum):
    RECORDING = "recording"
    TUNED = "tuned"
    INACTIVE = "inactive"


# Read on every call: a module global is found in a few ns, an Enum member through its class in about 60.
_TUNED = ModuleState.TUNED


class UnsupportedCallError(RuntimeError):
    """A tuned module got a call it was not tuned for, and ``config.fallback == "raise"``."""


MODULE_REGISTRY: ModuleRegistry[Module] = ModuleRegistry()

# torch's process-wide hook registries, mutated in place when hooks are registered.
_GLOBAL_FORWARD_HOOKS = torch.nn.modules.module._global_forward_hooks
_GLOBAL_FORWARD_PRE_HOOKS = torch.nn.modules.module._global_forward_pre_hooks
_GLOBAL_BACKWARD_HOOKS = torch.nn.modules.module._global_backward_hooks
_GLOBAL_BACKWARD_PRE_HOOKS = torch.nn.modules.module._global_backward_pre_hooks

_OWN_ATTRIBUTES = frozenset({"training", "name", "strategy", "dynamic_shapes"})

_grad_enabled = torch.is_grad_enabled


@contextlib.contextmanager
def recording_session() -> Iterator[None]:
    """Record the calls this thread (or task) makes to wrapped modules until the block ends.

    ``tune`` gathers inside one. Every wrapper's watch is alarmed, so that tuned modules,
    which do not look for sessions on their routed path, record this context's calls.
    """
    with open_session(_alarm_all):
        yield


def _alarm_all() -> None:
    for module in MODULE_REGISTRY.modules.values():
        module._watch.alarm = True


class Module(nn.Module):
    """Wrap ``module`` under a unique ``name``; ``strategy`` overrides the one ``tune`` uses.

    dynamic_shapes: the ranges calls will span, beyond what the tuning data shows:
        ``{path: {axis: DynamicDim | BatchDim}}`` keyed by forward-parameter path (see
        :mod:`aitune_core.graphs.declared_dims`). Backends are built, validated and
        routed for the declared ranges.
    """

    def __init__(
        self, module: nn.Module, name: str, strategy: Any = None, dynamic_shapes: dict[Any, Any] | None = None
    ) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"aitune_core.Module wraps a torch.nn.Module, got {type(module).__name__}")
        if isinstance(module, Module):
            raise TypeError(f"{module.name!r} is already an aitune module; wrap the original once")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        declared = DynamicShapes.parse(dynamic_shapes)
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
        own["dynamic_shapes"] = declared
        own["_inner"] = module
        own["_state"] = ModuleState.RECORDING
        own["_signature"] = ForwardSignature(module.forward)
        # A module's graph keys include the plugins' parts, fixed here: so wrapping loads the plugins.
        own["_recordings"] = recordings = Recordings(name, own["_signature"], ensure_plugins().graph_key_parts())
        own["_recorder"] = recordings.tuning  # keys every call; holds the tuning data
        own["_routes"] = {}
        own["_lane"] = None
        own["_unseen"] = UnseenCalls()
        own["_warned_routes"] = set()
        own["_log"] = get_logger(module=name)
        own["_watch"] = Watch(module)
        own["_spot_checks"] = SpotChecks()
        own["_claims"] = set()  # threads whose tuning run has this module, see start_recording
        own["_suspended_by"] = None  # the thread whose tuning run deactivated the routes
        MODULE_REGISTRY.add(self)
        self.register_load_state_dict_post_hook(own["_watch"].hook())

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
        return self._recordings.shown.graph_specs

    @property
    def graphs(self) -> dict[Hashable, GraphRecord]:
        return self._recordings.shown.graphs

    @property
    def signature(self) -> ForwardSignature:
        return self._signature

    @property
    def routes(self) -> dict[Hashable, Route]:
        """Tuned routes by graph key."""
        return dict(self._routes)

    @property
    def accuracy(self) -> Any:
        """The accuracy budget these routes were chosen under (``tune(..., accuracy=...)``), or None.

        An :class:`~aitune_core.accuracy.record.AccuracyRecord`: the metric, the budget, the
        drop measured and which backends serve lossy; checkpoints store it.
        """
        return self.__dict__.get("_accuracy")

    @property
    def threads(self) -> int | None:
        """The torch thread count these routes were timed at (``tune(..., threads=)``); checkpoints store it."""
        return self.__dict__.get("_threads")

    @property
    def backends(self) -> dict[str, Any]:
        """The backend routed to for each tuned graph, by graph name (the one serving its largest batches)."""
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
        held = name in self._parameters or name in self._buffers or name in self._modules
        if name in _OWN_ATTRIBUTES or name.startswith("_") or isinstance(value, (nn.Module, nn.Parameter)) or held:
            super().__setattr__(name, value)
            if held or isinstance(value, (nn.Module, torch.Tensor)):
                self._touch()
        else:
            setattr(self._inner, name, value)

    def __delattr__(self, name: str) -> None:
        held = name in self._parameters or name in self._buffers or name in self._modules
        if name in self.__dict__ or held:
            super().__delattr__(name)
            if held:
                self._touch()
        else:
            delattr(self._inner, name)

    def _touch(self) -> None:
        watch = self.__dict__.get("_watch")
        if watch is not None:
            watch.touch()

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self._inner)))

    def train(self, mode: bool = True) -> Module:
        super().train(mode)
        self._inner.training = mode
        self._touch()
        return self

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> Module:
        # .to(), .half(), .cuda() through this wrapper or a parent: the backends may no longer fit.
        super()._apply(fn, recurse)
        self._touch()
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
        lane = self._lane
        if lane is not None and len(args) == 1 and not kwargs and self._state is _TUNED:
            # forward's routed model(x), one frame shorter: at batch 1 each frame shows.
            call = lane.call_for(args[0])
            if call is not None:
                watch = self._watch
                if watch.alarm or next(watch.tick) or watch.inner.training is not watch.training:
                    return self._checked(args, kwargs)
                if call is RUN_EAGERLY:
                    return self._inner(*args)
                return spot_checked(self, call, args, {}) if config.spot_check_every else call(*args)
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._state is not _TUNED:
            return self._unrouted(args, kwargs)
        watch = self._watch
        if watch.alarm or next(watch.tick) or watch.inner.training is not watch.training:
            return self._checked(args, kwargs)
        return self._routed(args, kwargs, None)

    def _checked(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call that the staleness watch flagged: look at the module, then route it or bypass."""
        watch = self._watch
        alarmed = watch.alarm
        watch.alarm = False  # cleared before looking, so an alarm raised meanwhile stays raised
        if sessions_open():
            watch.alarm = True
            if current_session() is not None:
                return self._recorder.record(self._inner, args, kwargs)
        return self._routed(args, kwargs, watch.check(walk=not alarmed or next(watch.tick)))

    def _routed(self, args: tuple[Any, ...], kwargs: dict[str, Any], change: Change | None) -> Any:
        lane = self._lane
        if lane is not None and change is None and len(args) == 1 and not kwargs:
            call = lane.call_for(args[0])
            if call is not None:
                if call is RUN_EAGERLY:
                    return self._inner(*args)
                return spot_checked(self, call, args, {}) if config.spot_check_every else call(*args)
        arguments = self._signature.normalize(args, kwargs)
        key = self._recorder.key(arguments, config.strict_mode)
        route = self._routes.get(key)
        if route is not None:
            reason = route.mismatch(arguments)
            if reason is None:
                call = route.pick(arguments) if route.lower_calls else route.call
                if call is RUN_EAGERLY:
                    return self._inner(*args, **kwargs)
                if change is None or (change.kind == Change.WEIGHTS and route.follows_weights):
                    if not _grad_enabled() or not route.takes_grad(arguments):
                        args, kwargs = self._signature.as_bound(args, kwargs, arguments)
                        if config.spot_check_every:
                            return spot_checked(self, call, args, kwargs)
                        return call(*args, **kwargs)
                    change = GRAD_CHANGE
                return self._bypass(change, args, kwargs)
            return self._fall_back(args, kwargs, ("shape", route.graph.name), reason)
        return self._fall_back(args, kwargs, key, "this call's graph was not seen while tuning")

    def _unrouted(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call to a module that is not routing: tuning data in a session, else recorded apart or just run."""
        own = self._state is ModuleState.RECORDING and not self._claims
        return self._recordings.unrouted(self._inner, args, kwargs, own)

    def _bypass(self, change: Change, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run a call on the original module because the backends no longer fit it; warn once per kind."""
        released = self.__dict__.get("_weights_released")
        if released:
            raise UnsupportedCallError(
                f"aitune module `{self.name}`: {change.detail}, so the call needs the original module, and "
                f"{released}; {change.hint}"
            )
        if change.kind == Change.WEIGHTS:
            change = respond(self, change)  # config.on_weight_change: refit in the background, raise, or just this
        watch = self._watch
        if change.kind not in watch.warned:
            watch.warned.add(change.kind)
            self._log.warning(
                "tuned backends bypassed, running the original module", change=change.detail, hint=change.hint
            )
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
    def set_routes(self, routes: dict[Hashable, Route], baseline: Baseline | None = None) -> None:
        """Install tuned routes (graph key -> route) and start routing calls.

        The module as it is now (or as ``baseline`` found it: a refit's) is what the routes are built for, and every
        tuning run's claim ends. After :meth:`drop_routes` the backends of the routes
        replaced are released; otherwise (a checkpoint loaded into the wrapper) they are
        left as they are, so that a failed load can put them back still running.
        """
        replaced = self._routes if self.__dict__.pop("_replacing", False) else {}
        self._route_by(routes)
        self.__dict__["_unseen"] = UnseenCalls()
        for route in routes.values():
            route.refresh()
        self._claims.clear()
        self.__dict__["_suspended_by"] = None
        self._watch.reset(baseline)
        self.__dict__["_state"] = ModuleState.TUNED
        kept = {id(backend) for route in routes.values() for backend in route.backends}
        self._release_backends(replaced.values(), keep=kept)

    @contextlib.contextmanager
    def trial_routes(self, routes: dict[Hashable, Route]) -> Iterator[None]:
        """Route calls to ``routes`` for the duration, then serve exactly as before; nothing is released.

        For measuring a whole pipeline with candidate routes before any is installed (an
        accuracy budget's search): the tuning run's claim, the routes and the state stay.
        """
        own = self.__dict__
        saved = own["_routes"], own["_state"], own["_unseen"]
        self._route_by(routes)
        own["_unseen"] = UnseenCalls()
        for route in routes.values():
            route.refresh()
        self._watch.reset()  # the module as it is now is what these routes were built for
        own["_state"] = ModuleState.TUNED if routes else saved[1]
        try:
            yield
        finally:
            self._route_by(saved[0])
            own["_state"], own["_unseen"] = saved[1], saved[2]

    def _route_by(self, routes: dict[Hashable, Route]) -> None:
        own = self.__dict__
        own["_routes"] = dict(routes)
        own["_lane"] = single_tensor_lane(own["_routes"], self._signature, self._recorder.key_parts)

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
            route.without_eager_ranges()
        self.__dict__["_weights_released"] = reason
        self._watch.reset()  # the backends carry the weights; meta ones are what they are built for now

    def start_recording(self) -> ModuleState:
        """Claim the module for a tuning run in this thread; returns its state, which stays as it is.

        The run records the calls made in its :func:`recording_session`. While the claim
        lasts, calls from elsewhere are not recorded: they run the module, or its routes,
        which keep serving until :meth:`set_routes` replaces them. The claim ends with
        :meth:`set_routes` or :meth:`restore`.
        """
        self._claims.add(threading.get_ident())
        return self._state

    def restore(self, state: ModuleState) -> None:
        """End this thread's claim without new routes (nothing gathered, a dry run, a failed run).

        ``state`` is what :meth:`start_recording` returned. Routes that this run deactivated
        (while tuning other modules) serve again; nothing else changes, so a run ending
        here never undoes what another thread's run installed.
        """
        me = threading.get_ident()
        self._claims.discard(me)
        self.__dict__.pop("_replacing", None)  # the routes drop_routes announced are not coming
        if self._suspended_by != me:
            return
        self.__dict__["_suspended_by"] = None
        if state is ModuleState.TUNED:
            self.activate()
        else:
            self.__dict__["_state"] = state

    def drop_routes(self) -> None:
        """Announce that new routes are coming; the current ones keep serving until then.

        They are released by :meth:`set_routes` once the new ones are installed, so a
        re-tune that fails or is interrupted leaves the module routed as it was.
        """
        self.__dict__["_replacing"] = True

    @property
    def recorded_calls(self) -> int:
        """Calls this thread recorded in sessions; ``tune`` compares it around gathering to see which modules ran.

        Counted per thread, so a tuning run in another thread does not make this module
        look like part of this one.
        """
        return self._recorder.thread_calls

    def deactivate(self) -> None:
        """Release tuned backends; calls run the original module until :meth:`activate`.

        A tuning run deactivates the modules it claimed while it tunes another one; its
        :meth:`restore` brings them back.
        """
        me = threading.get_ident()
        if me in self._claims:
            self.__dict__["_suspended_by"] = me
        self._release_backends(self._routes.values())
        self.__dict__["_state"] = ModuleState.INACTIVE

    def activate(self) -> None:
        """Bring tuned backends back; calls are routed again. Without routes, keep recording."""
        if not self._routes:
            self.__dict__["_state"] = ModuleState.RECORDING
            return

        for route in self._routes.values():
            for backend in route.backends:
                if backend.state in (BackendState.INACTIVE, BackendState.CHECKPOINT_LOADED):
                    backend.activate()
            route.refresh()
        self.__dict__["_suspended_by"] = None
        self._watch.touch()  # in-place edits made while inactive fired no hook
        self.__dict__["_state"] = ModuleState.TUNED

    @staticmethod
    def _release_backends(routes: Iterable[Route], keep: set[int] | None = None) -> None:
        """Deactivate the routes' backends, except those whose ``id`` is in ``keep``."""
        for route in routes:
            for backend in route.backends:
                if backend.state is BackendState.ACTIVE and id(backend) not in (keep or ()):
                    backend.deactivate()
