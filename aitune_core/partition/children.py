"""A module's children, and what they were called with on the module's own recorded samples.

The parent's stored samples are replayed through a shell of the parent (see
:mod:`.shell`) whose children record their calls into graphs, exactly as a wrapped
module records its own: the children are tuned from the very calls the parent made.
A second, plain replay times each child's forward against the parent's, for the share
of eager time shown in the summary.

Containers without a forward of their own (``nn.ModuleList``, ``nn.ModuleDict``) are
not candidates: their children are, under a dotted path (``layers.0``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core.context import BATCH_SIZE_KEY, global_context
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import Sample
from aitune_core.metadata.copies import owned_copy
from aitune_core.module.recorder import GraphRecord, GraphRecorder
from aitune_core.module.wrapper import Module
from aitune_core.partition.shell import with_children, with_forward


@attrs.define(eq=False)
class Child:
    """A candidate submodule and what the replays saw of it."""

    path: str
    module: nn.Module
    signature: ForwardSignature
    recorder: GraphRecorder
    first_call: int | None = None
    """The position of its first call among all children's calls; None: never called."""
    seconds: float = 0.0
    """Eager time spent in its forward during the timed replay."""

    @property
    def graphs(self) -> list[GraphRecord]:
        return list(self.recorder.graphs.values())

    @property
    def parameters(self) -> int:
        return sum(parameter.numel() for parameter in self.module.parameters())


def candidate_children(module: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """``(dotted path, submodule)`` for each child that could be tuned on its own.

    Wrapped modules are left out: they are tuned as themselves.
    """
    for name, child in module.named_children():
        if child is None or isinstance(child, Module):
            continue
        if type(child).forward is nn.Module.forward:  # a container: its children are called instead
            for path, grandchild in candidate_children(child):
                yield f"{name}.{path}", grandchild
        else:
            yield name, child


@attrs.define(eq=False)
class Replayed:
    """The children that the replays called, in the order of their first call, and the parent's eager time."""

    children: list[Child]
    parent_seconds: float

    def share(self, child: Child) -> float | None:
        if self.parent_seconds <= 0:
            return None
        return min(child.seconds / self.parent_seconds, 1.0)


def replay_children(
    module: nn.Module,
    module_name: str,
    signature: ForwardSignature,
    samples: list[Sample],
    device: torch.device,
    key_parts: Callable[[dict[str, Any]], Any] | None = None,
) -> Replayed:
    """Record and time the children of ``module`` on its ``samples`` (normalised argument dicts)."""
    children = []
    for path, submodule in candidate_children(module):
        child_signature = ForwardSignature(submodule.forward)
        recorder = GraphRecorder(f"{module_name}.{path}", child_signature, key_parts)
        children.append(Child(path, submodule, child_signature, recorder))
    calls = iter(range(1 << 62))

    def recording(child: Child) -> Callable[..., Any]:
        forward = child.module.forward

        def record(*args: Any, **kwargs: Any) -> Any:
            if child.first_call is None:
                child.first_call = next(calls)
            return child.recorder.record(forward, args, kwargs)

        return record

    def timing(child: Child) -> Callable[..., Any]:
        forward = child.module.forward

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return forward(*args, **kwargs)
            finally:
                child.seconds += time.perf_counter() - started

        return timed

    recorded = with_children(module, {c.path: with_forward(c.module, recording(c)) for c in children})
    _replay(recorded, signature, samples, device)
    timed = with_children(module, {c.path: with_forward(c.module, timing(c)) for c in children})
    parent_seconds = _replay(timed, signature, samples, device)
    called = sorted((c for c in children if c.first_call is not None), key=lambda c: c.first_call or 0)
    return Replayed(called, parent_seconds)


def _replay(shell: nn.Module, signature: ForwardSignature, samples: list[Sample], device: torch.device) -> float:
    """Run every sample through ``shell`` as eager would, each on a fresh copy; returns the time in the forwards."""
    total = 0.0
    for sample in samples:
        args, kwargs = signature.bind(owned_copy(sample.arguments, device))
        with torch.no_grad(), global_context:
            global_context.set(BATCH_SIZE_KEY, sample.batch_size)
            started = time.perf_counter()
            shell(*args, **kwargs)
            total += time.perf_counter() - started
    return total
