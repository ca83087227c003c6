"""Timing every submodule of a model while a workload runs, with forward pre- and post-hooks.

A pre-hook notes the start of a call and a post-hook its end, so a module's time
includes its children's, as users read a profile (the encoder's time holds its
layers'). On CUDA, kernels run asynchronously: each hook synchronises the device
first, so a call is charged for the kernels it launched rather than for its
parent's. The hooks also key each call as ``tune`` would (graph keys, plugin key
parts), so the report can say how many graphs a module would be tuned as.

Hooks are removed when timing ends, whatever happens; nothing else about the model
is touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core.config import config
from aitune_core.extensions import slots
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.module.recorder import call_key


@attrs.define
class ModuleTiming:
    """What was seen of one module: its calls, their total time and the graph keys they had."""

    path: str
    type_name: str
    depth: int
    parameters: int
    calls: int = 0
    total_s: float = 0.0
    keys: set[Hashable] = attrs.field(factory=set)
    unkeyed: str = ""
    """Why calls could not be keyed (an argument the signature does not take), if so."""


class ModuleTimer:
    """Hooks on every module of ``root`` down to ``max_depth`` (the root is depth 0)."""

    def __init__(
        self, root: nn.Module, max_depth: int, root_name: str = "", clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.root = root
        self._clock = clock
        self.timings: dict[int, ModuleTiming] = {}
        self._modules: dict[int, nn.Module] = {}
        self._starts: dict[int, list[tuple[float, float]]] = {}
        self.overhead_s = 0.0
        """Time spent in these hooks (keying calls), taken out of every enclosing module's time."""
        self._signatures: dict[int, ForwardSignature | None] = {}
        self._sync = _synchronizer(root)

        self._key_parts = slots().graph_key_parts()
        for path, module in root.named_modules(remove_duplicate=True):
            depth = 0 if not path else path.count(".") + 1
            if depth > max_depth:
                continue
            shown = path or root_name
            self._modules[id(module)] = module
            self.timings[id(module)] = ModuleTiming(
                shown, type(module).__name__, depth, sum(p.numel() for p in module.parameters())
            )

    @contextmanager
    def hooked(self) -> Iterator[None]:
        handles = []
        try:
            for module in self._modules.values():
                handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
                handles.append(module.register_forward_hook(self._post, always_call=True))
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _pre(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        entered = self._clock()
        timing = self.timings[id(module)]
        self._key(module, timing, args, kwargs)
        self._sync()
        start = self._clock()
        self.overhead_s += start - entered
        self._starts.setdefault(id(module), []).append((start, self.overhead_s))

    def _post(self, module: nn.Module, _args: Any, _output: Any) -> None:
        self._sync()
        end = self._clock()
        starts = self._starts.get(id(module))
        if not starts:
            return
        start, overhead_then = starts.pop()
        timing = self.timings[id(module)]
        timing.calls += 1
        # The children's hooks ran inside this call: their time is not the module's.
        timing.total_s += end - start - (self.overhead_s - overhead_then)

    def _key(self, module: nn.Module, timing: ModuleTiming, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        key = id(module)
        if key not in self._signatures:
            try:
                self._signatures[key] = ForwardSignature(module.forward)
            except (TypeError, ValueError) as error:
                self._signatures[key] = None
                timing.unkeyed = f"forward's signature cannot be read: {error}"
        signature = self._signatures[key]
        if signature is None:
            return
        try:
            arguments = signature.normalize(args, kwargs)
        except TypeError as error:
            timing.unkeyed = str(error)
            return
        timing.keys.add(call_key(arguments, config.strict_mode, self._key_parts))


def _synchronizer(root: nn.Module) -> Callable[[], None]:
    """``torch.cuda.synchronize`` when the model runs on CUDA, else nothing."""
    parameter = next(iter(root.parameters()), None)
    if parameter is not None and parameter.device.type == "cuda":
        device = parameter.device
        return lambda: torch.cuda.synchronize(device)
    return lambda: None
