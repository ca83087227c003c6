"""What serving a checkpoint in Python needs, read from its manifest before any replica starts.

A server that rebuilds the user's model and loads the checkpoint in each replica (the
Ray Serve application of aitune-ray) must size itself from what tuning measured, before
it builds anything: how large a batch the tuned routes were built and validated for
(requests are batched up to it), how many threads they were timed at (what a replica
asks for), and whether any graph was tuned on CUDA (a replica then needs a GPU).
:func:`serving_plan` reads that from the manifest alone: no backend is imported, no
tensor loaded, every file's sha256 checked as loading would.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import attrs

from aitune_core.backends.deployable import device_of
from aitune_core.checkpoint.files import verify
from aitune_core.checkpoint.load import read
from aitune_core.checkpoint.manifest import GraphEntry
from aitune_core.deploy.plan import routes_of
from aitune_core.graphs.graph_spec import GraphSpec


@attrs.frozen
class ServedGraph:
    """One tuned graph as a server sees it.

    min_batch, max_batch: the batch range its routes were built and validated for; None
        when the graph has no batch axis.
    batch_first: every batched input has its batch axis first, so that requests can be
        stacked along axis 0 into one call.
    device: ``"cpu"`` or ``"cuda"``, where it was tuned.
    backends: what serves each batch range, as the tuning summary names it (``"eager"`` too).
    """

    module: str
    graph: str
    device: str
    min_batch: int | None
    max_batch: int | None
    batch_first: bool
    backends: tuple[str, ...]


@attrs.frozen
class ServingPlan:
    """What serving ``checkpoint`` needs: see the module docstring."""

    checkpoint: str
    graphs: tuple[ServedGraph, ...]
    threads: int | None
    """The torch thread count its routes were timed at (the most of its modules'); None where not recorded."""
    native_code: bool
    """Whether loading it runs machine code from it (``load(..., trust_native_code=True)`` needed)."""

    @property
    def max_batch(self) -> int | None:
        """The largest batch any graph was tuned for; None when no graph can take requests stacked along axis 0."""
        sizes = [graph.max_batch for graph in self.graphs if graph.max_batch is not None and graph.batch_first]
        return max(sizes) if sizes else None

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(sorted({graph.device for graph in self.graphs}))

    @property
    def needs_gpu(self) -> bool:
        return "cuda" in self.devices

    def describe(self) -> str:
        batch = (
            "no batching (no graph takes a batch along axis 0)"
            if self.max_batch is None
            else (f"batches up to {self.max_batch}")
        )
        threads = "torch's default threads" if self.threads is None else f"{self.threads} thread(s)"
        lines = [f"{self.checkpoint}: {len(self.graphs)} graph(s) on {', '.join(self.devices)}, {batch}, {threads}"]
        lines.extend(f"  {graph.module}/{graph.graph}: {'; '.join(graph.backends)}" for graph in self.graphs)
        return "\n".join(lines)


def serving_plan(checkpoint: str | os.PathLike[str]) -> ServingPlan:
    """Read what serving ``checkpoint`` needs; CheckpointError when it is malformed or altered."""
    root, manifest = read(checkpoint)
    try:
        for ref in manifest.artifacts():
            verify(root, ref)
    finally:
        if root != Path(checkpoint):
            shutil.rmtree(root, ignore_errors=True)  # an archive's files, unpacked for this reading only
    graphs = tuple(_served(module.name, graph) for module in manifest.modules for graph in module.graphs)
    threads = [module.threads for module in manifest.modules if module.threads is not None]
    native = any(ref.native for ref in manifest.artifacts())
    return ServingPlan(str(checkpoint), graphs, max(threads) if threads else None, native)


def _served(module: str, graph: GraphEntry) -> ServedGraph:
    spec = graph.spec.graph_spec()
    low, high = spec.batch_range or (None, None)
    backends = tuple(
        f"{route.describe()}: {route.backend.description if route.backend is not None else 'eager'}"
        for route in routes_of(graph, spec)
    )
    return ServedGraph(module, spec.name, device_of(spec), low, high, _batch_first(spec), backends)


def _batch_first(spec: GraphSpec) -> bool:
    """Whether every input tensor with a batch axis has it first, one item per row."""
    for _, tensor in spec.input_spec.tensor_data:
        axes = tensor.get_batch_axis_multipliers()
        if axes and axes != {0: 1}:
            return False
    return True
