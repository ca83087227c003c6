"""PartitionBackend: serves a graph by running the module's own forward with tuned children.

It is what a graph's route holds when no compiled candidate took the whole module but
some of its submodules could be tuned. A call runs the parent's forward on a shell
(:mod:`.shell`) in which each tuned child is a router: a child call goes to that
child graph's backend when it fits the child's tuned shapes, and to the child's own
forward otherwise. Children that could not be tuned are the user's objects, untouched.

The child backends live and die with this one: deactivating it releases them, and
activating it brings them back. A partition below a child (a deeper level) is a
PartitionBackend in that child's route, so the structure is the same at every depth.

It is stored as every backend is (:mod:`.state`): its config is its parts and their
graphs, its artifacts its children's files and samples. Restored, it meets the module
it serves when loading checks it (:meth:`PartitionBackend.check_target`) and when it
is deployed, where each child is deployed with its submodule.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core.backends.artifacts import ArtifactSeal, seal, seal_of
from aitune_core.backends.base import Backend, BuildContext
from aitune_core.backends.eager import is_plain_eager
from aitune_core.backends.restore import StoredStateError
from aitune_core.backends.state import BackendState
from aitune_core.config import config
from aitune_core.extensions import slots
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.log import get_logger
from aitune_core.module.recorder import GraphRecord, call_key
from aitune_core.module.router import RUN_EAGERLY, Route
from aitune_core.module.stored_graph import check_graph, on_device
from aitune_core.module.wrapper import Module
from aitune_core.partition.shell import with_children, with_forward
from aitune_core.partition.state import (
    PARTITION,
    LiveGraph,
    PartitionConfig,
    StoredBackend,
    StoredPart,
    about,
    check_depth,
    check_part,
    child_artifacts,
    restored_graph,
    stored_graph,
    stored_tree,
    submodule,
)
from aitune_core.reporting.partition_tree import PartitionNode
from aitune_core.wrapping import overlaps


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

    parts: every submodule that the module's forward called, tuned or not; none for a
        partition restored from a checkpoint until it is deployed with its module.
    nested: inside a parent partition, where the child's hooks have already run.
    """

    name = PARTITION
    config_class = PartitionConfig
    supported_devices = ("cpu", "cuda", "mps", "xpu", "meta")

    def __init__(
        self, config: PartitionConfig | None = None, *, parts: list[Part] | None = None, nested: bool = False
    ) -> None:
        super().__init__(config)
        self.parts = parts or []
        self.nested = nested
        self._run: Any = None
        self._bound = parts is not None
        self._graphs: list[list[LiveGraph]] = []
        """Each stored part's graphs with their live backends, in the config's order."""
        self._files: dict[str, Path] = {}
        """The samples files among its artifacts, by artifact name."""

    @property
    def is_jit(self) -> bool:
        """It runs the module's own forward, so it needs the module and its weights."""
        return True

    @property
    def stored(self) -> PartitionConfig:
        """Its config: what it is made of, as stored (empty until it is built from its parts)."""
        assert isinstance(self.config, PartitionConfig)
        return self.config

    def declines(self, context: BuildContext) -> str | None:
        if self._bound:
            return None
        return "a partition is made from the module's submodules by tune(..., partition=True), not tried as a candidate"

    def describe(self) -> str:
        parts: list[Part] | list[StoredPart] = self.parts if self._bound else self.stored.parts
        tuned = [part.path for part in parts if part.tuned]
        return f"PartitionBackend({len(tuned)} of {len(parts)} submodules tuned: {', '.join(tuned)})"

    def tree(self) -> list[PartitionNode]:
        return [part.node() for part in self.parts] if self._bound else stored_tree(self.stored)

    def child_backends(self) -> list[Backend]:
        if not self._bound:
            return [backend for graphs in self._graphs for graph in graphs for backend in _backends(graph)]
        return [backend for part in self.parts for backend in part.backends()]

    # ------------------------------------------------------------------ lifecycle
    def _build(self, context: BuildContext) -> None:
        self._graphs = [
            [LiveGraph(g.route.graph, list(g.record.samples), g.route.backend, list(g.route.lower)) for g in p.graphs]
            for p in self.parts
        ]
        self._files = {}
        stored = []
        for part, graphs in zip(self.parts, self._graphs, strict=True):
            made = [
                stored_graph(graph, f"{part.path}/{index}", context.cache_dir, self._files)
                for index, graph in enumerate(graphs)
            ]
            stored.append(StoredPart(part.path, part.parameters, part.share, part.reason, made))
        self.config = PartitionConfig(parts=stored)
        self._assemble(context.module)

    def _activate(self) -> None:
        self._start("activate")

    def _deactivate(self) -> None:
        self._run = None
        for backend in self.child_backends():
            if backend.state is BackendState.ACTIVE:
                backend.deactivate()

    def _deploy(self) -> None:
        if self._run is None:
            self._start("deploy" if self.state is BackendState.CHECKPOINT_LOADED else "activate")

    def _start(self, step: str) -> None:
        """Bring the children up (a restored partition's with their submodules first) and assemble the shell."""
        context = self.context
        assert context is not None, "a partition keeps the context it was built or deployed with"
        if not self._bound:
            self.parts = self._bind(context.module, context.device.type)
            self._bound = True
            for i, part in enumerate(self.parts):
                for j, graph in enumerate(part.graphs):
                    for k, backend in enumerate(graph.route.backends):
                        child = BuildContext(
                            module=part.module,
                            module_name=f"{context.module_name}.{part.path}",
                            graph_spec=graph.route.graph,
                            samples=graph.record.samples,
                            device=context.device,
                            cache_dir=context.cache_dir / "parts" / str(i) / str(j) / str(k),
                            signature=part.signature,
                            trust_native_code=context.trust_native_code,
                        )
                        child.cache_dir.mkdir(parents=True, exist_ok=True)
                        if step == "deploy":
                            backend.deploy(child)
                        else:
                            backend.activate(child)
        else:
            for backend in self.child_backends():
                if backend.state in (BackendState.INACTIVE, BackendState.CHECKPOINT_LOADED):
                    backend.activate()
        self._assemble(context.module)

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

    # ------------------------------------------------------------------ persistence
    def _artifacts(self) -> dict[str, Path]:
        found = dict(self._files)
        for where, stored, backend in self._children():
            found.update(child_artifacts(stored, backend, where))
        return found

    def native_artifacts(self) -> frozenset[str]:
        """Its artifacts that are native code to the child backend holding them (that class decides)."""
        return frozenset(
            stored.artifacts[name]
            for _, stored, backend in self._children()
            for name in backend.native_artifacts()
            if name in stored.artifacts
        )

    def optional_native_artifacts(self) -> frozenset[str]:
        """Its native artifacts that the child backend holding them can do without (that class decides)."""
        return frozenset(
            stored.artifacts[name]
            for _, stored, backend in self._children()
            for name in backend.optional_native_artifacts()
            if name in stored.artifacts
        )

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        check_depth(self.config_dict())
        parts = self.stored.parts
        self._graphs = [
            [restored_graph(graph, artifacts, _where(part, index)) for index, graph in enumerate(part.graphs)]
            for part in parts
        ]
        self._files = {g.samples: artifacts[g.samples] for p in parts for g in p.graphs if g.samples is not None}
        for backend in self.child_backends():
            if isinstance(backend, PartitionBackend):
                backend.nested = True

    def check_target(self, module: nn.Module) -> None:
        """Its parts must be this module's submodules, as tuned, and their graphs calls of their forwards."""
        if not self._bound:
            self._bind(module, None)

    def _bind(self, module: nn.Module, device_type: str | None) -> list[Part]:
        """The stored parts as parts of ``module``, checked; graph keys retargeted to ``device_type`` when given."""
        parts: list[Part] = []
        for stored, graphs in zip(self.stored.parts, self._graphs, strict=True):
            found = submodule(module, stored.path)
            if isinstance(found, Module):
                raise StoredStateError(f"its partition names `{stored.path}`, a wrapped aitune module of its own")
            for other in parts:
                if overlaps(other.path, stored.path):
                    raise StoredStateError(f"partition parts `{other.path}` and `{stored.path}` overlap")
            check_part(stored, found)
            signature = ForwardSignature(found.forward)
            routed = []
            for index, graph in enumerate(graphs):
                with about(_where(stored, index)):
                    check_graph(graph.spec, graph.samples, signature)
                    for backend in _backends(graph):
                        backend.check_target(found)
                spec = on_device(graph.spec, device_type) if device_type is not None else graph.spec
                record = GraphRecord(spec)
                record.samples.extend(graph.samples)
                routed.append(ChildGraph(record, Route(spec, graph.backend, graph.lower)))
            parts.append(Part(stored.path, found, signature, stored.parameters, stored.share, stored.reason, routed))
        return parts

    def _children(self) -> Iterator[tuple[str, StoredBackend, Backend]]:
        """Each stored child backend with its live one, in the config's order."""
        for part, graphs in zip(self.stored.parts, self._graphs, strict=True):
            for index, (stored, graph) in enumerate(zip(part.graphs, graphs, strict=True)):
                where = _where(part, index)
                yield where, stored.backend, graph.backend
                for stored_range, (_, backend) in zip(stored.lower, graph.lower, strict=True):
                    if stored_range.backend is not None and backend is not None:
                        yield where, stored_range.backend, backend


def seal_partition(partition: PartitionBackend) -> None:
    """Seal a partition's artifacts as its children were sealed when they passed, its samples as they are now.

    ``save`` then copies a child's file only if it still holds what that child was
    validated with, as it does for a backend saved on its own.
    """
    sealed = {}
    for _, stored, backend in partition._children():
        own = seal_of(backend)
        for name, artifact in (own.artifacts if own is not None else {}).items():
            if name in stored.artifacts:
                sealed[stored.artifacts[name]] = artifact
    rest = {name: path for name, path in partition.to_dict()["artifacts"].items() if name not in sealed}
    seal(partition, ArtifactSeal({**sealed, **ArtifactSeal.of(rest).artifacts}))


def _backends(graph: LiveGraph) -> list[Backend]:
    found = [graph.backend]
    for _, backend in graph.lower:
        if backend is not None and all(backend is not seen for seen in found):
            found.append(backend)
    return found


def _where(part: StoredPart, index: int) -> str:
    return f"partition part `{part.path}`, graph {index}"
