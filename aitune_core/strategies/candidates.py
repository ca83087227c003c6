"""Trying one candidate on one graph: build, validate, profile, and a record of how it went.

Every strategy runs candidates the same way; they differ only in which they try and
how they choose. Keeping the steps here means every strategy reports failures with
the same reasons and timings, which is what the summary table shows.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Literal

import attrs
import torch

from aitune_core.backends.base import Backend, BuildContext
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.profiling.measurement import Measurement, ProfileConfig, measure
from aitune_core.profiling.sweep import sweep_batch_sizes
from aitune_core.validation.inputs import CallInputs, batch_call, validation_calls
from aitune_core.validation.reference import EagerReference
from aitune_core.validation.tolerances import Tolerances

Status = Literal["selected", "passed", "rejected", "failed", "skipped", "fallback"]


@attrs.define(eq=False)
class CandidateResult:
    """How one candidate fared on one graph; one row of the summary table."""

    backend: str
    status: Status
    stage: str = ""
    reason: str = ""
    key: str = ""
    build_s: float = 0.0
    validate_s: float = 0.0
    profile_s: float = 0.0
    measurement: Measurement | None = None
    sweep: list[Measurement] = attrs.field(factory=list)
    speedup: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    instance: Backend | None = attrs.field(default=None, repr=False)


class CandidateRejectedError(RuntimeError):
    """A candidate built but gave wrong outputs; ``result`` holds the reason and the error measured."""

    def __init__(self, result: CandidateResult) -> None:
        super().__init__(result.reason)
        self.result = result


@attrs.define(eq=False)
class GraphSession:
    """The graph being tuned and what is shared by all of its candidates.

    The eager reference outputs and eager timings are computed once, lazily, and then
    reused for every candidate.
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
    _reference: EagerReference | None = None
    _eager_timings: dict[int, Measurement] = attrs.field(factory=dict)

    @property
    def reference(self) -> EagerReference:
        if self._reference is None:
            calls = validation_calls(self.graph, self.samples, self.signature, self.device)
            self._reference = EagerReference(self.module, calls)
            for note in self._reference.skipped:
                self.log.info("validation point skipped", note=note)
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

    def profile(self, fn: Any, batch_size: int | None) -> Measurement:
        call, samples = self.call_at(batch_size)
        return measure(fn, call, self.profile_config, samples)

    def eager_timing(self, batch_size: int | None) -> Measurement:
        key = batch_size or 0
        if key not in self._eager_timings:
            self._eager_timings[key] = self.profile(self.module, batch_size)
        return self._eager_timings[key]

    def sweep_sizes(self, up_to: int | None = None) -> list[int | None]:
        batch_range = self.batch_range()
        if batch_range is None:
            return [None]
        low, high = batch_range
        return list(sweep_batch_sizes(low, max(high, up_to or high)))

    def context(self, backend: Backend) -> BuildContext:
        return BuildContext(
            module=self.module,
            module_name=self.module_name,
            graph_spec=self.graph,
            samples=self.samples,
            device=self.device,
            cache_dir=self.cache_dir / backend.key(),
            signature=self.signature,
        )


def build_candidate(session: GraphSession, blueprint: Backend, result: CandidateResult) -> Backend:
    """Build a fresh copy of ``blueprint``; the blueprint itself is never built."""
    backend = blueprint.blueprint()
    context = session.context(backend)
    context.cache_dir.mkdir(parents=True, exist_ok=True)
    session.log.info("build started", backend=result.backend)
    start = time.perf_counter()
    try:
        backend.build(context)
    finally:
        result.build_s = time.perf_counter() - start
    session.log.info(
        "build finished",
        backend=result.backend,
        duration_s=round(result.build_s, 3),
        **{k: v for k, v in backend.build_info.items() if isinstance(v, (int, float, str, bool))},
    )
    return backend


def release(backend: Backend | None) -> None:
    """Free a candidate that lost, so only winners hold memory; a failed release is not fatal."""
    from aitune_core.backends.state import BackendState

    if backend is not None and backend.state is BackendState.ACTIVE:
        with contextlib.suppress(Exception):
            backend.deactivate()
