"""GraphTuneRequest: one graph of one module, as a strategy is asked to tune it.

:meth:`TuneStrategy.start <aitune_core.strategies.base.TuneStrategy.start>`,
:meth:`~aitune_core.strategies.base.TuneStrategy.tune` and
:func:`~aitune_core.strategies.graph_run.run_graph` all take the same eight facts about
the graph; one object carries them, so a fact added later (a thread count, say) is one
field here rather than one more argument in every signature and at every call.

Code written before the object existed calls ``strategy.start(module, name, graph_spec,
data, device, cache_dir, ...)``; :func:`requested` still accepts that call, with a
``DeprecationWarning`` that names the new form.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import attrs
import torch

from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.guard import ModuleGuard


@attrs.frozen(eq=False)
class GraphTuneRequest:
    """What tuning one graph needs: the module and its name, the graph, its samples and where it runs.

    samples: the graph's recorded samples (``tune()`` hands over the module's records).
    cache_dir: where this graph's builds go.
    signature: the module's ``forward`` signature; None reads it from ``module.forward``.
    guard: watches ``module`` around every candidate step; ``tune()`` passes one per
        module so its copy of the weights serves all the module's graphs. None: one for
        this graph only, released when the run ends.
    """

    module: torch.nn.Module
    name: str
    graph: GraphSpec
    samples: list[Sample]
    device: torch.device
    cache_dir: Path
    signature: ForwardSignature | None = None
    guard: ModuleGuard | None = None

    def forward_signature(self) -> ForwardSignature:
        """The signature given, or the one of ``module.forward``."""
        return self.signature if self.signature is not None else ForwardSignature(self.module.forward)


def _tune(
    module: torch.nn.Module,
    name: str,
    graph_spec: GraphSpec,
    data: list[Sample],
    device: torch.device,
    cache_dir: Path,
    signature: ForwardSignature | None = None,
    executor: Any = None,
    guard: ModuleGuard | None = None,
) -> None:
    """What ``TuneStrategy.tune`` took before :class:`GraphTuneRequest`; ``start`` took the same less ``executor``."""


_TUNE = inspect.signature(_tune)
_LEGACY = {
    "start": _TUNE.replace(parameters=[p for p in _TUNE.parameters.values() if p.name != "executor"]),
    "tune": _TUNE,
}


def requested(
    method: str, request: Any, legacy: tuple[Any, ...], legacy_keywords: dict[str, Any]
) -> tuple[GraphTuneRequest, Any]:
    """``(request, executor)`` of a call of ``TuneStrategy.<method>`` ("start" or "tune").

    The request as given, or one made from the old argument-list form (``executor`` is
    only ever given that way; None otherwise). A TypeError, as Python gives, when the
    arguments fit neither form.
    """
    if isinstance(request, GraphTuneRequest):
        if legacy or legacy_keywords:
            extra = [*map(repr, legacy), *legacy_keywords]
            raise TypeError(f"TuneStrategy.{method} takes a GraphTuneRequest and nothing else, got also {extra}")
        return request, None
    try:
        bound = _LEGACY[method].bind(request, *legacy, **legacy_keywords)
    except TypeError as error:
        raise TypeError(f"TuneStrategy.{method} takes a GraphTuneRequest ({error})") from None
    warnings.warn(
        f"TuneStrategy.{method}(module, name, graph_spec, data, device, cache_dir, ...) is deprecated; "
        f"pass a GraphTuneRequest: strategy.{method}(GraphTuneRequest(module, name, graph, samples, device, "
        "cache_dir, signature, guard))",
        DeprecationWarning,
        stacklevel=3,
    )
    given = bound.arguments
    made = GraphTuneRequest(
        module=given["module"],
        name=given["name"],
        graph=given["graph_spec"],
        samples=given["data"],
        device=given["device"],
        cache_dir=given["cache_dir"],
        signature=given.get("signature"),
        guard=given.get("guard"),
    )
    return made, given.get("executor")
