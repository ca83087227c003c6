"""MaxThroughputStrategy: every candidate, compared at every serving batch size; the fastest serves each range.

The user's batch sizes are where the candidates are compared (see
:meth:`TuneStrategy.route_by_batch`). A bounded search on the original module (see
``profiling.sweep.search_max_batch``) may add one more size: when it finds a batch
larger than any recorded one, the graph's batch range is widened to it, so backends
are built, validated and routed for it too. A declared batch range (``BatchDim``) is
the user's word on what is served: no search goes past it.
"""

from __future__ import annotations

from aitune_core.backends.base import Backend
from aitune_core.evaluate.reuse import recalled_max_batch, remember_max_batch
from aitune_core.evaluate.session import GraphSession
from aitune_core.executors.gate import BUILD_GATE
from aitune_core.graphs.graph_spec import GraphSpec
from aitune_core.profiling.sweep import search_max_batch
from aitune_core.serialization import converter
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.run import GraphRun


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

    def _tune(self, run: GraphRun) -> Backend:
        if run.early is None:
            run.largest_batch = self.largest_batch(run.session)
            results = list(run.evaluate_all(run.candidates()))
        else:  # submitted before the graph's turn (early_candidates)
            results = run.collect()
        return run.route_by_batch(results, run.serving_sizes(run.largest_batch))

    def early_candidates(self, run: GraphRun) -> list[Backend] | None:
        """Every candidate, after the batch-size search that may widen the graph they are built for."""
        if type(self)._tune is not MaxThroughputStrategy._tune:
            return None  # a subclass that tunes its own way evaluates its candidates itself
        run.largest_batch = self.largest_batch(run.session)
        return run.candidates()

    def largest_batch(self, session: GraphSession) -> int | None:
        """The largest batch size to compare at: the recorded one, or a larger one the search finds.

        A larger one widens the graph's batch range, before any candidate is built, so
        that the candidates are built and validated for it too.
        """
        batch = session.batch_range()
        if batch is None or not self.profile_config.max_batch_search or session.graph.declares_batch:
            return batch[1] if batch else None
        settings = converter().unstructure(self.profile_config)
        recalled = recalled_max_batch(session, settings)  # a timed finding, kept so that stored builds match
        if recalled is not None:
            best = recalled
            session.log.info("max batch size recalled from the store", max_batch_size=best)
        else:
            with BUILD_GATE.profiling(f"{session.module_name}/{session.graph.name}"):  # timed: nothing builds meanwhile
                best, measurements = search_max_batch(
                    session.module,
                    lambda size: session.call_at(size)[0],
                    batch[1],
                    session.device,
                    self.profile_config,
                    session.log,
                    session.timer,
                )
            session.log.info(
                "max batch size estimated", max_batch_size=best, tried=[m.batch_size for m in measurements]
            )
            remember_max_batch(session, settings, best)
        if best > batch[1]:
            widen_batch_range(session.graph, best)
        return best
