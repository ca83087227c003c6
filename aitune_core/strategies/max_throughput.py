"""MaxThroughputStrategy: estimate the best batch size, then pick the candidate with the highest throughput.

The batch-size search runs on the original module and is bounded (see
``profiling.sweep.search_max_batch``). When it finds a batch larger than any recorded
one, the graph's batch range is widened to it, so backends are built, validated and
routed for the batch size that serves best.
"""

from __future__ import annotations

from pathlib import Path

import torch

from aitune_core.backends.base import Backend
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.profiling.sweep import search_max_batch
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.candidates import CandidateResult


def widen_batch_range(graph: GraphSpec, max_batch: int) -> None:
    """Raise the max of every batch axis (inputs and outputs) to ``max_batch``."""
    for metadata in (graph.input_spec, graph.output_spec):
        for _, spec in metadata.tensor_data:
            for axis, multiplier in spec.get_batch_axis_multipliers().items():
                spec.max_shape[axis] = max(spec.max_shape[axis], multiplier * max_batch)


class MaxThroughputStrategy(TuneStrategy):
    name = "Max Throughput Strategy"
    description = "evaluate all backends, return backend with maximum throughput"
    parallel_candidates = True

    max_batch_size: int | None = None

    def _pre_tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: list[Sample],
        device: torch.device,
        cache_dir: Path,
    ) -> None:
        assert self.session is not None
        session = self.session
        batch = session.batch_range()
        self.max_batch_size = batch[1] if batch else None
        if batch is None or not self.profile_config.max_batch_search:
            return
        best, measurements = search_max_batch(
            module, lambda size: session.call_at(size)[0], batch[1], device, self.profile_config, session.log
        )
        session.log.info("max batch size estimated", max_batch_size=best, tried=[m.batch_size for m in measurements])
        if best > batch[1]:
            widen_batch_range(graph_spec, best)
            # Eager timings taken during the search are reused as the baseline.
            for measurement in measurements:
                session._eager_timings.setdefault(measurement.batch_size, measurement)
        self.max_batch_size = best

    def _tune(
        self,
        module: torch.nn.Module,
        name: str,
        graph_spec: GraphSpec,
        data: list[Sample],
        device: torch.device,
        cache_dir: Path,
    ) -> Backend:
        assert self.session is not None
        profile_at = (
            self.session.sweep_sizes(self.max_batch_size) if self.profile_config.sweep else [self.max_batch_size]
        )
        best: CandidateResult | None = None
        for result in self.evaluate_all(self.candidates(device), profile_at):
            if result.status != "passed" or result.measurement is None:
                continue
            at_max = _at_batch(result, self.max_batch_size)
            if best is None or at_max > _at_batch(best, self.max_batch_size):
                if best is not None:
                    best.status = "passed"
                    self.discard(best)
                best = result
            else:
                self.discard(result)
        if best is None:
            return self.eager_fallback("no candidate built and validated")
        best.measurement = _measurement_at(best, self.max_batch_size)
        if not self.passes_gate(best, best.measurement):
            self.discard(best)
            return self.eager_fallback(best.reason)
        return self.select(best)


def _measurement_at(result: CandidateResult, batch_size: int | None):
    for measurement in result.sweep:
        if measurement.batch_size == batch_size:
            return measurement
    return result.measurement


def _at_batch(result: CandidateResult, batch_size: int | None) -> float:
    measurement = _measurement_at(result, batch_size)
    return measurement.throughput if measurement is not None else 0.0
