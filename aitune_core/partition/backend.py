"""PartitionBackend: serves a graph by running the module's own forward with tuned children.

It is what a graph's route holds when no compiled candidate took the whole module but
some of its submodules could be tuned. A call runs the parent's forward on a shell
(:mod:`.shell`) in which each tuned child is a router: a child call goes to that
child graph's backend when it fits the child's tuned shapes, and to the child's own
forward otherwise. Children that could not be tuned are the user's objects, untouched.

The child backends live and die with this one: deactivating it releases them, and
activating it brings them back. A partition below a child (a deeper level) is a
PartitionBackend in that child's route, so the structure is the same at every depth.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.backends.eager import is_plain_eager
from aitune_core.backends.state import BackendState
from aitune_core.config import config
from aitune_core.extensions import slots
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.log import get_logger
from aitune_core.module.recorder import GraphRecord, call_key
from aitune_core.module.router import RUN_EAGERLY, Route
from aitune_core.partition.shell import with_children, with_forward
from aitune_core.reporting.partition_tree import PartitionNode


@attrs.frozen
class PartitionConfig(BackendConfig):
    """A partition has no settings of its own: what it is lies in its parts."""


@attrs.define(eq=False)
class ChildGraph:
    """One graph of a child: what was recorded (spec and samples) and the route that serves it."""

    record: GraphRecord
    route: Route


@attrs.define(eq=False)
class Part:
    """A submodule of the partitioned module and how its calls are served.

    path: dotted, below the partitioned module. share: of the top partitioned module's
    eager time (0..1), None where not measured. graphs: the routed graphs; none when it
    stays eager, with ``reason`` saying why.
    """

    path: str
    module: nn.Module
    signature: ForwardSignature
    parameters: int
    share: float | None
    reason: str = ""
    graphs: list[ChildGraph] = attrs.field(factory=list)

    @property
    def tuned(self) -> bool:
        """Whether any of its calls go somewhere other than its own eager forward."""
        return any(not is_plain_eager(b) for graph in self.graphs for b in graph.route.backends)

    def backends(self) -> list[Backend]:
        return [b for graph in self.graphs for b in graph.route.backends]

    def node(self) -> PartitionNode:
        if not self.tuned:
            return PartitionNode(self.path, f"eager ({self.reason})" if self.reason else "eager", self.share)
        served: list[str] = []
        children: list[PartitionNode] = []
        for graph in self.graphs:
            for backend in graph.route.backends:
                if isinstance(backend, PartitionBackend):
                    served.append("partitioned")
                    children.extend(backend.tree())
                else:
                    served.append("eager" if is_plain_eager(backend) else backend.describe())
            if any(b is None for _, b in graph.route.lower):
                served.append("eager at small batches")
        if len(self.graphs) > 1 and self.reason:
            served.append(f"other calls eager ({self.reason})")
        return PartitionNode(self.path, ", ".join(dict.fromkeys(served)), self.share, children)


class ChildRouter:
    """The forward of a tuned child's shell: the call goes to its graph's backend, or to the child's own forward.

    The same checks as a wrapped module's routing: graph key, tuned shape ranges, batch
    ranges, and no backend for calls that need gradients.
    """

    def __init__(self, part: Part) -> None:
        self._path = part.path
        self._forward = part.module.forward
        self._signature = part.signature
        self._key_parts = slots().graph_key_parts()
        self._routes: dict[Hashable, Route] = {
            graph.record.spec.key: graph.route for graph in part.graphs if not is_plain_eager(graph.route.backend)
        }
        self._warned = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arguments = self._signature.normalize(args, kwargs)
        route = self._routes.get(call_key(arguments, config.strict_mode, self._key_parts))
        if route is None or route.mismatch(arguments) is not None:
            if not self._warned:
                self._warned = True
                get_logger().info("partition child runs eagerly: a call it was not tuned for", child=self._path)
            return self._forward(*args, **kwargs)
        if torch.is_grad_enabled() and route.takes_grad(arguments):
            return self._forward(*args, **kwargs)
        call = route.pick(arguments) if route.lower_calls else route.call
        if call is RUN_EAGERLY:
            return self._forward(*args, **kwargs)
        args, kwargs = self._signature.as_bound(args, kwargs, arguments)
        return call(*args, **kwargs)


class PartitionBackend(Backend):
    """A graph served by its module's own forward with some submodules on their own backends.

    parts: every submodule that the module's forward called, tuned or not.
    fallback: the eager backend of the whole graph, kept for checkpoints (which store
        it as the graph's backend, so a reader that knows nothing of partitions runs eager).
    nested: inside a parent partition, where the child's hooks have already run.
    """

    name = "partition"
    config_class = PartitionConfig
    supported_devices = ("cpu", "cuda", "mps", "xpu", "meta")

    def __init__(self, parts: list[Part], fallback: Backend, nested: bool = False) -> None:
        super().__init__()
        self.parts = parts
        self.fallback = fallback
        self.nested = nested
        self._run: Any = None

    @property
    def is_jit(self) -> bool:
        """It runs the module's own forward, so it needs the module and its weights."""
        return True

    def describe(self) -> str:
        tuned = [part.path for part in self.parts if part.tuned]
        return f"PartitionBackend({len(tuned)} of {len(self.parts)} submodules tuned: {', '.join(tuned)})"

    def tree(self) -> list[PartitionNode]:
        return [part.node() for part in self.parts]

    def child_backends(self) -> list[Backend]:
        return [backend for part in self.parts for backend in part.backends()]

    # ------------------------------------------------------------------ lifecycle
    def _build(self, context: BuildContext) -> None:
        self._assemble(context.module)

    def _activate(self) -> None:
        assert self.context is not None, "a partition keeps the context it was built with"
        for backend in [self.fallback, *self.child_backends()]:
            if backend.state in (BackendState.INACTIVE, BackendState.CHECKPOINT_LOADED):
                backend.activate()
        self._assemble(self.context.module)

    def _deactivate(self) -> None:
        self._run = None
        for backend in [self.fallback, *self.child_backends()]:
            if backend.state is BackendState.ACTIVE:
                backend.deactivate()

    def _deploy(self) -> None:
        if self._run is None:
            self._activate()

    def _assemble(self, module: nn.Module) -> None:
        for part in self.parts:
            for graph in part.graphs:
                graph.route.refresh()
        routed = {part.path: with_forward(part.module, ChildRouter(part)) for part in self.parts if part.tuned}
        shell = with_children(module, routed)
        self._run = shell.forward if self.nested else shell

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        return self._run(*args, **kwargs)

    def inference_callable(self) -> Any:
        return self._run
