"""What a checkpoint deploys as: one model per graph, or per route, with what tuning measured.

A checkpoint stores, for each graph of each tuned module, its batch ranges and the
backend measured fastest in each (eager included). A server serves a model for the
whole batch range it is given, so a graph whose ranges went to two backends is
deployed one of two ways, both stated in the export's summary:

* ``"widest"`` (the default): the route whose batch range is widest, among those with a
  standalone artifact the target serves, takes the graph's whole range. Every candidate
  was built and validated for the whole range, so it serves the other routes' sizes
  correctly, at the speed tuning measured for it there, not the winners'.
* ``"each"``: every route with such an artifact is a model of its own, serving the
  batches it won, named after its backend; the client sends each request to the model
  of its batch size.

A graph with no route that has a standalone artifact (served by eager, by a JIT
compiler, by a partition of submodules) is refused with its fix; so is the whole export,
before anything is written.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs

from aitune_core.backends.base import Backend, NoDeployable
from aitune_core.backends.deployable import Deployable
from aitune_core.backends.restore import restore_backend
from aitune_core.checkpoint.files import resolve
from aitune_core.checkpoint.manifest import BackendEntry, GraphEntry, Manifest, ModuleEntry
from aitune_core.deploy.target import DeployError, DeployModel, DeployTarget
from aitune_core.graphs.batch_sizes import sweep_batch_sizes
from aitune_core.graphs.graph_spec import GraphSpec

RANGE_POLICIES = ("widest", "each")
FIX = (
    "tune it again with a strategy whose backends write one (e.g. MaxThroughputStrategy(backends=["
    "ONNXRuntimeBackend(), TorchInductorAotBackend(weights_in_package=True), TorchEagerBackend()]), leaving the "
    "JIT out), or serve the "
    "checkpoint in Python with the Ray Serve target (aitune serve CKPT --factory pkg.mod:build)"
)
"""What to do about a graph with no standalone artifact."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@attrs.frozen
class Route:
    """Batches ``low`` to ``high`` of a graph, served by ``backend`` (None: eager); bounds None: every call."""

    low: int | None
    high: int | None
    backend: BackendEntry | None

    @property
    def width(self) -> int:
        return 0 if self.low is None or self.high is None else self.high - self.low + 1

    def holds(self, size: int) -> bool:
        return self.low is not None and self.high is not None and self.low <= size <= self.high

    def describe(self) -> str:
        if self.low is None:
            return "every call"
        return f"batch {self.low}" if self.low == self.high else f"batch {self.low}-{self.high}"


@attrs.define
class ExportPlan:
    """The models an export writes, what its summary says besides, and the graphs it refuses."""

    models: list[DeployModel] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)
    refused: list[str] = attrs.field(factory=list)


def plan_export(root: Path, manifest: Manifest, target: DeployTarget, ranges: str = "widest") -> ExportPlan:
    """The models to write for every graph of the checkpoint at ``root``; DeployError when any graph cannot go."""
    if ranges not in RANGE_POLICIES:
        raise ValueError(f"ranges must be one of {', '.join(RANGE_POLICIES)}, got {ranges!r}")
    plan = ExportPlan()
    names: set[str] = set()
    for module in manifest.modules:
        for graph in module.graphs:
            _plan_graph(root, module, graph, target, ranges, plan, names)
    if plan.refused:
        raise DeployError(
            f"cannot export to {target.name}: " + "; ".join(plan.refused) + f". To export such a graph, {FIX}"
        )
    return plan


def routes_of(graph: GraphEntry, spec: GraphSpec) -> list[Route]:
    """The graph's batch ranges, lowest first, with the backend entry of each (None: eager)."""
    if spec.batch_range is None:
        return [Route(None, None, graph.backend)]
    low, high = spec.batch_range
    routes = []
    for stored in graph.lower:
        routes.append(Route(low, min(stored.up_to, high), stored.backend))
        low = stored.up_to + 1
    if low <= high or not routes:
        routes.append(Route(low, high, graph.backend))
    return routes


def _plan_graph(
    root: Path,
    module: ModuleEntry,
    graph: GraphEntry,
    target: DeployTarget,
    ranges: str,
    plan: ExportPlan,
    names: set[str],
) -> None:
    spec = graph.spec.graph_spec()
    where = f"module `{module.name}`, graph `{spec.name}`"
    routes = routes_of(graph, spec)
    artifacts: dict[int, Deployable | str] = {}
    for route in routes:
        if route.backend is not None and id(route.backend) not in artifacts:
            artifacts[id(route.backend)] = _artifact(root, route.backend, spec, target, module.threads)
    served = [route for route in routes if isinstance(artifacts.get(id(route.backend)), Deployable)]
    if not served:
        reasons = "; ".join(f"{route.describe()}: {_reason(route, artifacts)}" for route in routes)
        plan.refused.append(f"{where} has no standalone artifact ({reasons})")
        return
    if ranges == "widest":
        groups = [(max(served, key=lambda route: (route.width, route.high or 0)), routes)]
    else:
        groups = _each(served)
        plan.notes.extend(
            f"{where}: {route.describe()} is not exported ({_reason(route, artifacts)})"
            for route in routes
            if route not in served
        )
    base = _model_name(module, spec.name)
    sizes = sweep_batch_sizes(*spec.batch_range) if spec.batch_range is not None else []
    for lead, covered in groups:
        entry = lead.backend
        deployable = artifacts[id(entry)]
        assert entry is not None and isinstance(deployable, Deployable)
        notes = [
            f"{other.describe()}: {_reason(other, artifacts)} won there; served here by {entry.name}"
            for other in covered
            if other.backend is not entry
        ]
        if len(groups) > 1:
            notes.append(f"one of {len(groups)} models of graph `{spec.name}`: send {_span(covered)} here")
        bounded = [route for route in covered if route.low is not None and route.high is not None]
        plan.models.append(
            DeployModel(
                name=_unique(f"{base}_{entry.name}" if len(groups) > 1 else base, names),
                module=module.name,
                graph=spec.name,
                backend=entry.description,
                deployable=deployable,
                batch_sizes=[size for size in sizes if any(r.holds(size) and r.backend is entry for r in routes)],
                min_batch=min(route.low for route in bounded if route.low is not None) if bounded else None,
                max_batch=max(route.high for route in bounded if route.high is not None) if bounded else None,
                notes=notes,
            )
        )


def _each(served: list[Route]) -> list[tuple[Route, list[Route]]]:
    """One model per backend: its first route stands for it, with every route it serves."""
    by_backend: dict[int, list[Route]] = {}
    for route in served:
        by_backend.setdefault(id(route.backend), []).append(route)
    return [(group[0], group) for group in by_backend.values()]


def _span(routes: list[Route]) -> str:
    return ", ".join(route.describe() for route in routes)


def _artifact(
    root: Path, entry: BackendEntry, spec: GraphSpec, target: DeployTarget, threads: int | None
) -> Deployable | str:
    """The artifact of one stored backend, or why there is none the target serves.

    An artifact that ran at torch's thread count gets the count the checkpoint says it was tuned at.
    """
    files = {name: str(resolve(root, ref)) for name, ref in entry.artifacts.items()}
    backend: Backend = restore_backend(
        entry.name,
        entry.distribution,
        entry.version,
        {"config": entry.config, "artifacts": files, "extra": entry.extra},
    )
    found = backend.deployable(spec)
    if isinstance(found, NoDeployable):
        return found.reason
    if found.format not in target.formats:
        return f"{entry.description} writes {found.format}, which {target.name} does not serve"
    if found.runtime.threads is None and threads is not None:
        found = attrs.evolve(found, runtime=attrs.evolve(found.runtime, threads=threads))
    return found


def _reason(route: Route, artifacts: dict[int, Deployable | str]) -> str:
    if route.backend is None:
        return "eager (runs the module's own Python code)"
    found = artifacts[id(route.backend)]
    return route.backend.description if isinstance(found, Deployable) else str(found)


def _model_name(module: ModuleEntry, graph: str) -> str:
    name = module.name if len(module.graphs) == 1 else f"{module.name}_{graph}"
    return _UNSAFE.sub("_", name).strip("._") or "model"


def _unique(name: str, taken: set[str]) -> str:
    candidate, counter = name, 2
    while candidate in taken:
        candidate = f"{name}_{counter}"
        counter += 1
    taken.add(candidate)
    return candidate
