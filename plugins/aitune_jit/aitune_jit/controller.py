"""One JIT run: the model it found, the modules it wraps, and each module's way from recording to routed.

Per module (see :class:`~aitune_jit.states.JitState`):

1. RECORDING. The wrapper records every call, as an ``ait.Module`` does, and a hook
   counts them. At ``options.calls`` the hook claims the wrapper (later calls run
   eagerly and are not recorded), starts keeping live samples and queues the tuning.
2. TUNING. The worker thread tunes the recorded graphs as ``tune`` would. Serving goes
   on eagerly meanwhile: the wrapper never waits on the tuning.
3. The winner is run on the live samples and compared with eager's outputs. A match
   swaps the routes in (one dict assignment: calls already running finish where they
   started) and stores the result; a mismatch keeps eager and says why.
4. TUNED, or FAILED: the wrapper is taken off again and the original module serves at
   no cost.

A result stored by an earlier run with the same weights is loaded when the model is
found, before its first call runs: those modules are TUNED from the first call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from torch import nn

from aitune_core.extensions import ensure_plugins, slots
from aitune_core.log import get_logger
from aitune_core.module.router import Route
from aitune_core.module.wrapper import MODULE_REGISTRY, Module, ModuleState
from aitune_core.reporting.console import emit_block
from aitune_core.wrapping import wrap
from aitune_jit.first_call import FirstCallWatch
from aitune_jit.live import LiveSamples, check_routes
from aitune_jit.options import JitOptions
from aitune_jit.root import route_root, unroute
from aitune_jit.selection import ROOT, choose
from aitune_jit.serving import SERVING_CALLS
from aitune_jit.states import JitState, ModuleStatus
from aitune_jit.store import load_result, result_path, store_result, stored
from aitune_jit.trace_gate import TRACE_GATE
from aitune_jit.tuning_run import tune_recorded
from aitune_jit.worker import TuningWorker


class JitModule:
    """One module the JIT wraps: where it sits, its wrapper and where it is on its way."""

    def __init__(self, path: str, wrapper: Module) -> None:
        self.path = path
        self.wrapper = wrapper
        self.state = JitState.RECORDING
        self.detail = ""
        self.calls = 0
        self.stored = ""
        self.live: LiveSamples | None = None
        self.counter: Any = None
        self.log = get_logger(module=wrapper.name)

    @property
    def name(self) -> str:
        return self.wrapper.name

    def status(self) -> ModuleStatus:
        backends = {}
        if self.state is JitState.TUNED:
            backends = {graph: _backend_name(backend) for graph, backend in self.wrapper.backends.items()}
        return ModuleStatus(self.name, self.path, self.state, self.detail, self.calls, backends, self.stored)


class JitRun:
    """The process's JIT: at most one model, found by its first call or given to :meth:`attach`."""

    def __init__(self, options: JitOptions) -> None:
        self.options = options
        self.model: nn.Module | None = None
        self.modules: dict[str, JitModule] = {}
        self.worker = TuningWorker(options.nice, options.switch_interval_s)
        self.watch: FirstCallWatch | None = None
        self.closed = False
        self._target: nn.Module | None = None
        self._location: Path | None = None
        self._strategy: Any = None
        self._lock = threading.Lock()
        self._log = get_logger()

    # ------------------------------------------------------------------ finding the model
    def watch_for_model(self) -> None:
        self.watch = FirstCallWatch(self.attach)
        self.watch.install()

    def attach(self, model: nn.Module) -> None:
        """Wrap ``model``'s chosen modules, load a stored result for them, and start recording the rest."""
        if self.model is not None:
            raise RuntimeError("this JIT run already has its model; call ait.jit.disable() first")
        if isinstance(model, Module):
            raise TypeError(f"{model.name!r} is already an aitune module; give the JIT the model it is part of")
        if model.training:
            raise ValueError(f"{type(model).__name__} is in training mode; call model.eval() before tuning it")
        if self.watch is not None:
            self.watch.remove()
        self.model = model
        paths = choose(model, self.options)
        if not paths:
            self._log.warning(
                "jit: nothing to tune",
                model=type(model).__name__,
                hint="no module matches the options; lower depth or min_params, or shorten exclude",
            )
            return
        self._strategy = self._make_strategy()
        self._location = result_path(model, paths) if self.options.cache else None
        if paths == [ROOT]:
            root = route_root(model, type(model).__name__, strategy=self._strategy)
            assert root is not None
            wrappers = {ROOT: root}
            self._target = root
        else:
            route_root(model, None)  # the model's own calls pass the trace gate while tuning runs
            made = {w.name: w for w in wrap(model, paths, strategy=self._strategy)}
            wrappers = {path: made[path] for path in paths}
            self._target = model
        for path, wrapper in wrappers.items():
            self.modules[wrapper.name] = JitModule(path, wrapper)
        self._load_stored()
        for module in self.modules.values():
            if module.state is JitState.RECORDING:
                module.counter = module.wrapper.register_forward_hook(self._counter_for(module))
        self._log.info("jit: model found", model=type(model).__name__, modules=list(self.modules))

    def _make_strategy(self) -> Any:
        if self.options.strategy is not None or not self.options.backends:
            return self.options.strategy
        from aitune_core.strategies.max_throughput import MaxThroughputStrategy

        return MaxThroughputStrategy([ensure_plugins().backend_class(name)() for name in self.options.backends])

    def _load_stored(self) -> None:
        location, target = self._location, self._target
        if location is None or target is None or not stored(location):
            return
        try:
            load_result(target, location, self.options.trust_native_code)
        except Exception as error:
            self._log.warning(
                "jit: stored result not loaded; tuning again",
                path=str(location),
                error=f"{type(error).__name__}: {error}",
            )
            return
        for module in self.modules.values():
            if module.wrapper.state is ModuleState.TUNED:
                module.state, module.detail, module.stored = JitState.TUNED, "loaded", str(location)
                module.log.info("jit: routed from a stored result", path=str(location))

    # ------------------------------------------------------------------ recording -> tuning
    def _counter_for(self, module: JitModule) -> Any:
        def count(_wrapper: nn.Module, _args: Any, _outputs: Any) -> None:
            module.calls += 1
            if module.calls >= self.options.calls:
                self._start_tuning(module)

        return count

    def _start_tuning(self, module: JitModule) -> None:
        with self._lock:
            if module.state is not JitState.RECORDING or self.closed:
                return
            module.state = JitState.TUNING
        module.counter.remove()
        module.wrapper.start_recording()  # a claim: from here on calls run eagerly, unrecorded
        # On the wrapper, not the module it wraps: the user's module (whose hook dicts the
        # model object shares) gets no hook of ours, and is sent to a worker as it is.
        module.live = LiveSamples(module.wrapper, self.options.live_checks)
        module.log.info("jit: tuning in the background", calls_recorded=module.calls)
        self.worker.submit(lambda: self._tune_apart_from_serving(module))

    def _tune_apart_from_serving(self, module: JitModule) -> None:
        # Serving calls are marked in flight meanwhile: this job's work here goes in the gaps between them.
        with SERVING_CALLS.watch(), TRACE_GATE.guarding():
            self._tune(module)

    def _tune(self, module: JitModule) -> None:
        try:
            tuned = tune_recorded(module.wrapper, self._strategy, self.options.executor)
        except Exception as error:
            self._fail(module, f"tuning raised {type(error).__name__}: {error}")
            return
        emit_block(f"JIT tuning of `{module.name}`", tuned.report.summary(), level=logging.INFO, module=module.name)
        assert module.live is not None
        samples = module.live.wait()
        module.live.close()
        SERVING_CALLS.wait_for_gap()
        check = check_routes(
            module.wrapper.signature, tuned.routes, samples, slots().graph_key_parts(), tuned.tolerances
        )
        if check.problem is not None:
            _release(tuned.routes)
            self._fail(module, f"the winner differs from eager on a live call, eager kept: {check.problem}")
            return
        if not samples:
            _release(tuned.routes)
            self._fail(module, "no live call came to check the winner on before the process ended")
            return
        with self._lock:
            if self.closed:
                _release(tuned.routes)
                return
            module.wrapper.set_routes(tuned.routes)  # one dict swap: running calls finish on the old path
            module.wrapper.__dict__["_threads"] = tuned.threads  # what checkpoints record, as tune()'s
            module.state = JitState.TUNED
        module.detail = f"checked on {check.checked} live calls" if check.checked else "eager kept everywhere"
        module.log.info("jit: routed", backends=module.status().backends, live_calls_checked=check.checked)
        self._store(module)

    def _store(self, module: JitModule) -> None:
        if self._location is None or self._target is None:
            return
        try:
            SERVING_CALLS.wait_for_gap()
            store_result(self._target, self._location)
        except Exception as error:
            module.log.warning("jit: result not stored", error=f"{type(error).__name__}: {error}")
            return
        module.stored = str(self._location)

    def _fail(self, module: JitModule, reason: str) -> None:
        with self._lock:
            module.state, module.detail = JitState.FAILED, reason
        module.log.warning("jit: not tuned, the original module serves", reason=reason)
        if module.live is not None:
            module.live.close()
        self._take_off(module)

    def _take_off(self, module: JitModule) -> None:
        """Put the original module back where the wrapper was: its calls cost nothing more."""
        model = self.model
        if model is None:
            return
        wrapper = module.wrapper
        if module.path == ROOT:
            unroute(model, wrapper)
            return
        parent_path, _, attribute = module.path.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        original = wrapper.module
        if parent._modules.get(attribute) is wrapper:
            parent._modules[attribute] = original
        wrapper.deactivate()
        MODULE_REGISTRY.remove(wrapper)

    # ------------------------------------------------------------------ reporting and ending
    def status(self) -> dict[str, ModuleStatus]:
        return {name: module.status() for name, module in self.modules.items()}

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no tuning is queued or running; False when ``timeout`` came first."""
        return self.worker.wait(timeout)

    def at_exit(self) -> None:
        """Let a tuning in progress finish and be stored, then say where every module ended."""
        for module in self.modules.values():
            if module.live is not None:
                module.live.close()  # no call comes any more: check on the samples there are
        if self.worker.busy and self.options.exit_wait_s > 0:
            self._log.info(
                "jit: waiting for tuning to finish before exit",
                timeout_s=self.options.exit_wait_s,
                hint="AITUNE_JIT_EXIT_WAIT_S=0 exits at once and drops it",
            )
            self.worker.wait(self.options.exit_wait_s)
        for module in self.modules.values():
            module.log.info("jit: at exit", state=str(module.status()))

    def close(self) -> None:
        """Stop: no more tuning, every wrapper taken off, the model as it was."""
        with self._lock:
            self.closed = True
        if self.watch is not None:
            self.watch.remove()
        self.worker.stop()
        for module in self.modules.values():
            if module.counter is not None:
                module.counter.remove()
            if module.live is not None:
                module.live.close()
            self._take_off(module)
        if self.model is not None:
            unroute(self.model)


def _release(routes: dict[Hashable, Route]) -> None:
    from aitune_core.backends.state import BackendState

    for route in routes.values():
        for backend in route.backends:
            if backend.state is BackendState.ACTIVE:
                backend.deactivate()


def _backend_name(backend: Any) -> str:
    return str(getattr(backend, "name", None) or type(backend).__name__)
