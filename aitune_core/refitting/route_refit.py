"""One pass over a tuned module's routes: each backend refitted, rebuilt or left to eager, and the routes they make.

Each route is rebuilt as tuning made it (its graph, its batch ranges, its tolerances),
with each backend replaced by what :func:`~aitune_core.refitting.backend_refit.refit_backend`
returns for it. Ranges the original module served stay its own, and so do the ranges of
a backend that a spot check dropped: refitting never brings back a backend found wrong
while serving. A backend that failed everything gives its ranges to the original module;
where that is the range above all others, an eager backend stands in for it, as it
would in a route tuned to eager, so that checkpoints store what serves.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import attrs
import torch

from aitune_core.accuracy.candidates import UNBOUNDED
from aitune_core.backends.base import Backend, BuildContext
from aitune_core.backends.eager import TorchEagerBackend, is_plain_eager
from aitune_core.backends.tolerances import Tolerances
from aitune_core.config import config
from aitune_core.evaluate.result import describe_range
from aitune_core.evaluate.session import GraphSession
from aitune_core.graphs.graph_spec import Sample
from aitune_core.guard import ModuleGuard
from aitune_core.module.router import Route
from aitune_core.module.wrapper import Module
from aitune_core.profiling.measurement import ProfileConfig
from aitune_core.refitting.backend_refit import discard, refit_backend
from aitune_core.refitting.report import RouteRefit
from aitune_core.store.store import ArtifactStore


@attrs.define(eq=False)
class Attempt:
    """One pass over ``wrapper``'s routes, for the weights the module holds while it runs.

    routes: the new routes, by graph key. built: backends this pass made (rebuilds, eager
    stand-ins), released should the pass be discarded. sessions: one per graph, for that.
    """

    wrapper: Module
    guard: ModuleGuard
    store: ArtifactStore | None
    log: Any
    routes: dict[Hashable, Route] = attrs.field(factory=dict)
    rows: list[RouteRefit] = attrs.field(factory=list)
    unchanged: list[str] = attrs.field(factory=list)
    built: list[tuple[Backend, GraphSession]] = attrs.field(factory=list)

    def run(self) -> None:
        for key, route in self.wrapper.routes.items():
            self.routes[key] = self._route(key, route)

    def discard(self) -> None:
        """Release what this pass built: its routes will not serve."""
        for backend, session in self.built:
            discard(backend, session)
        self.built.clear()

    def _route(self, key: Hashable, route: Route) -> Route:
        wrapper = self.wrapper
        session = GraphSession(
            module=wrapper.module,
            module_name=wrapper.name,
            graph=route.graph,
            samples=_samples(wrapper, key, route),
            device=_device(route, wrapper.module),
            cache_dir=config.cache_dir / wrapper.name / route.graph.name,
            signature=wrapper.signature,
            tolerances=Tolerances(),
            profile_config=ProfileConfig(),
            log=self.log.bind(graph=route.graph.name),
            store=self.store,
            guard=self.guard,
        )
        serves = _serves(route)
        replaced: dict[int, Backend | None] = {}
        for backend in route.backends:
            if is_plain_eager(backend) or any(backend is dropped for dropped in route.dropped):
                replaced[id(backend)] = None  # the original module serves these batches, as it did
                self.unchanged.append(f"`{wrapper.name}` graph {route.graph.name}, {serves[id(backend)]}")
                continue
            new, row = refit_backend(session, backend, serves[id(backend)], _tolerances(wrapper, route, backend))
            self.rows.append(row)
            replaced[id(backend)] = new
            if new is not None and new is not backend:
                self.built.append((new, session))
        main = replaced[id(route.backend)]
        if main is None:
            main = route.backend if is_plain_eager(route.backend) else self._eager(session)
        lower = [(up_to, None if backend is None else replaced[id(backend)]) for up_to, backend in route.lower]
        return Route(route.graph, main, lower, route.tolerances)

    def _eager(self, session: GraphSession) -> Backend:
        """The original module, as the backend of a range above all others that nothing else passed for."""
        eager = TorchEagerBackend()
        context = BuildContext(
            module=session.module,
            module_name=session.module_name,
            graph_spec=session.graph,
            samples=session.samples,
            device=session.device,
            cache_dir=session.cache_dir,
            signature=session.signature,
        )
        eager.build(context)
        self.built.append((eager, session))
        return eager


def _samples(wrapper: Module, key: Hashable, route: Route) -> list[Sample]:
    """The graph's stored samples: recorded while tuning, or loaded with a checkpoint."""
    record = wrapper.graphs.get(key)
    if record is not None and record.samples:
        return list(record.samples)
    for backend in route.backends:
        if backend.context is not None and backend.context.samples:
            return list(backend.context.samples)
    return []


def _device(route: Route, module: torch.nn.Module) -> torch.device:
    for backend in route.backends:
        if backend.context is not None:
            return torch.device(backend.context.device)
    parameter = next(iter(module.parameters()), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _serves(route: Route) -> dict[int, str]:
    """The batch ranges each backend of ``route`` serves, in words, by ``id``."""
    batch_range = route.graph.batch_range
    if batch_range is None:
        return {id(backend): describe_range(None, None) for backend in route.backends}
    found: dict[int, list[str]] = {}
    for low, high, backend in route.ranges(*batch_range):
        if backend is not None:
            found.setdefault(id(backend), []).append(describe_range(low, high))
    return {id(backend): ", ".join(found.get(id(backend), ["no batch"])) for backend in route.backends}


def _tolerances(wrapper: Module, route: Route, backend: Backend) -> Tolerances | None:
    """What tuning judged ``backend`` with, on top of its own tolerances.

    A lossy backend chosen under an accuracy budget was judged by the budget's metric on
    the whole pipeline, and by tensor tolerances not at all: its outputs' structure and
    finiteness are checked here, and the metric is not measured again (a new tune does).
    """
    if wrapper.accuracy is not None and backend.lossy:
        return UNBOUNDED
    return route.tolerances
