"""The graph being tuned, and what all of its candidates share.

One session per graph: its samples, device and signature, the tolerances and
profiling settings, the guard around the user's module, and eager's reference
outputs, computed once for every candidate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import torch

from aitune_core.backends import build_folders, folder_lifetime
from aitune_core.backends.base import Backend, BuildContext
from aitune_core.backends.tolerances import Tolerances
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.guard import ModuleGuard
from aitune_core.profiling.measurement import Measurement, ProfileConfig
from aitune_core.profiling.timer import Timer, WallClock
from aitune_core.store.store import ArtifactStore
from aitune_core.validation.inputs import CallInputs, batch_call, validation_calls
from aitune_core.validation.points import validation_points
from aitune_core.validation.reference import EagerReference


@attrs.define(eq=False)
class GraphSession:
    """The graph being tuned and what is shared by all of its candidates.

    The eager reference outputs are computed once, lazily, and then reused for every
    candidate. ``guard`` watches the module around every candidate
    step; ``tune()`` shares one between a module's graphs, so that its copy of the
    weights is made once per module.
    """

    module: torch.nn.Module
    module_name: str
    graph: GraphSpec
    samples: list[Sample]
    device: torch.device
    cache_dir: Path
    signature: ForwardSignature
    tolerances: Tolerances
    profile_config: ProfileConfig
    log: Any
    timer: Timer = attrs.field(factory=WallClock)
    eager_sweep: list[Measurement] = attrs.field(factory=list)
    """Eager's measurements from the comparisons, one per batch size compared."""
    store: ArtifactStore | None = attrs.field(factory=ArtifactStore.from_config)
    """Where passed builds are kept and looked up (None: ``config.store`` is off); a worker gets its parent's."""
    _reference: EagerReference | None = None
    guard: ModuleGuard = attrs.field(
        default=attrs.Factory(lambda self: ModuleGuard(self.module, self.module_name, log=self.log), takes_self=True)
    )

    @property
    def reference(self) -> EagerReference:
        if self._reference is None:
            points = validation_points(self.graph, self.samples)
            graph = f"graph {self.graph.name} of module `{self.module_name}`"
            self._reference = EagerReference(self.module, points, self.signature, self.device, graph)
            for note in self._reference.skipped:
                self.log.info("validation point skipped", note=note)
            for note in self._reference.notes:
                self.log.warning("weak validation reference", note=note)
        return self._reference

    # ------------------------------------------------------------------ batches
    def batch_range(self) -> tuple[int, int] | None:
        return self.graph.batch_range

    def call_at(self, batch_size: int | None) -> tuple[CallInputs, int]:
        """Inputs for one timed call, and the number of samples it carries."""
        sample = self.samples[0]
        if batch_size is None or self.batch_range() is None:
            call = validation_calls(self.graph, [sample], self.signature, self.device)[0]
            return call, sample.batch_size or 1
        return batch_call(self.graph, sample, self.signature, self.device, batch_size), batch_size

    def context(self, backend: Backend) -> BuildContext:
        """A build context whose ``cache_dir`` is a new folder that only this build writes to.

        See :mod:`aitune_core.backends.build_folders`: the folder is named after the
        module's weights, the graph and the backend key, with a unique last part, and is
        removed once the context is gone (the candidate lost, or the tuned module went).
        """
        weights = build_folders.weights_fingerprint(self.module, scope=self.guard)
        identity = build_folders.build_identity(weights, self.graph, backend.key())
        context = BuildContext(
            module=self.module,
            module_name=self.module_name,
            graph_spec=self.graph,
            samples=self.samples,
            device=self.device,
            cache_dir=build_folders.claim_build_folder(build_folders.builds_root(self.cache_dir), identity),
            signature=self.signature,
        )
        folder_lifetime.hold(context, context.cache_dir)  # the folder goes with the last backend that uses it
        return context
