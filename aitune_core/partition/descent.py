"""The descent: below a graph that no compiled candidate took, tune the largest submodules that do build and validate.

Each child the module's forward called is recorded from the graph's own samples and
tuned graph by graph with the module's strategy, executor and guard, exactly as the
module's graphs are. A child whose graphs all fall back because no compiled candidate
passed is descended into in turn, down to ``config.partition_max_depth`` levels below
the wrapped module. Children below the minimum size (``partition_min_params``,
``partition_min_time_share``) are not tried. Whatever cannot be tuned stays eager.

Only a graph whose candidates all failed (to build, to validate, or declined) is
partitioned: one whose compiled candidate passed but was not faster than eager is not,
since its parts would not be faster either.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core.backends import build_folders, folder_lifetime
from aitune_core.backends.base import Backend, BuildContext
from aitune_core.backends.eager import is_plain_eager
from aitune_core.backends.persistable import NotPersistableError
from aitune_core.backends.restore import StoredStateError
from aitune_core.config import config
from aitune_core.evaluate.candidate import DECLINED_STAGE, release
from aitune_core.evaluate.result import CandidateResult
from aitune_core.executors.base import Executor
from aitune_core.extensions import slots
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.guard import ModuleGuard
from aitune_core.log import get_logger
from aitune_core.module.recorder import GraphRecord
from aitune_core.module.router import Route
from aitune_core.partition.backend import ChildGraph, Part, PartitionBackend, seal_partition
from aitune_core.partition.children import Child, replay_children
from aitune_core.reporting.summary import GraphReport, TuneReport
from aitune_core.strategies.base import TuneStrategy
from aitune_core.strategies.graph_run import run_graph
from aitune_core.strategies.request import GraphTuneRequest
from aitune_core.strategies.run import GraphRun


@attrs.frozen
class Limits:
    """How deep the descent goes and which children are worth a build of their own."""

    max_depth: int
    min_parameters: int
    min_time_share: float

    @classmethod
    def from_config(cls) -> Limits:
        return cls(config.partition_max_depth, config.partition_min_params, config.partition_min_time_share)


def serves_eagerly(backend: Backend, lower: Sequence[tuple[int, Backend | None]]) -> bool:
    """Whether a graph's route would run the module eagerly at every batch size (the fallback, or eager winning)."""
    return is_plain_eager(backend) and all(part is None or is_plain_eager(part) for _, part in lower)


def compiled_candidate_passed(candidates: list[CandidateResult]) -> bool:
    """Whether a candidate other than plain eager built and validated (whatever its speed)."""
    for candidate in candidates:
        validated = candidate.status in ("selected", "passed") or (
            candidate.status == "rejected" and candidate.stage == "performance"
        )
        if validated and not is_plain_eager(candidate.instance or candidate.blueprint):
            return True
    return False


def eager_reason(report: GraphReport) -> str:
    """Why a child graph stays eager, in a few words: a decline first, else the first failure."""
    for candidate in report.candidates:
        if candidate.stage == DECLINED_STAGE:
            return "declined: " + candidate.reason
    for candidate in report.candidates:
        if candidate.status in ("failed", "rejected"):
            return f"{candidate.backend} {candidate.status}: {candidate.reason}"
    selected = report.selected
    return selected.reason if selected is not None else "not tuned"


@attrs.define(eq=False)
class Descent:
    """One module's partitioning: the tuning machinery it shares with the module's own graphs."""

    strategy: TuneStrategy
    device: torch.device
    executor: Executor
    guard: ModuleGuard
    report: TuneReport
    limits: Limits = attrs.field(factory=Limits.from_config)

    def partition(
        self,
        module: nn.Module,
        name: str,
        signature: ForwardSignature,
        record: GraphRecord,
        cache_dir: Path,
        depth: int = 1,
        scale: float | None = 1.0,
    ) -> PartitionBackend | None:
        """A partition of ``record``'s graph of ``module``, or None when no child could be tuned.

        depth: the level of ``module``'s children below the wrapped module (1: its own).
        scale: ``module``'s share of the wrapped module's eager time.
        """
        log = get_logger(module=name, graph=record.spec.name)
        log.info("partitioning", depth=depth, max_depth=self.limits.max_depth)
        try:
            replayed = replay_children(module, name, signature, record.samples, self.device, slots().graph_key_parts())
        except Exception as error:  # eager ran these samples while gathering; a failure here ends the descent only
            log.warning("partitioning stopped: replaying the samples failed", reason=f"{type(error).__name__}: {error}")
            return None
        if not replayed.children:
            log.info("nothing to partition: the forward calls no submodule")
            return None
        log.info("children recorded", children=[child.path for child in replayed.children])
        parts = []
        for child in replayed.children:
            share = replayed.share(child)
            absolute = share * scale if share is not None and scale is not None else None
            parts.append(self._part(name, child, absolute, depth, cache_dir))
        if not any(part.tuned for part in parts):
            self._release(parts)
            log.info("partition found nothing to tune: the module stays eager")
            return None
        backend = PartitionBackend(parts=parts, nested=depth > 1)
        weights = build_folders.weights_fingerprint(module, scope=self.guard)
        identity = build_folders.build_identity(weights, record.spec, PartitionBackend.name)
        context = BuildContext(
            module=module,
            module_name=name,
            graph_spec=record.spec,
            samples=record.samples,
            device=self.device,
            cache_dir=build_folders.claim_build_folder(build_folders.builds_root(cache_dir), identity),
            signature=signature,
        )
        folder_lifetime.hold(context, context.cache_dir)
        try:
            with self.guard.step("build"):
                backend.build(context)
            seal_partition(backend)  # what save may write: each child's files as that child passed
        except (NotPersistableError, StoredStateError) as error:  # a child whose state no longer stores
            self._release(parts)
            log.warning("partitioning stopped: the partition cannot be stored", reason=str(error))
            return None
        log.info(
            "partitioned",
            tuned=[part.path for part in parts if part.tuned],
            eager=[part.path for part in parts if not part.tuned],
        )
        return backend

    def _release(self, parts: list[Part]) -> None:
        for part in parts:
            for backend in part.backends():
                release(backend, self.guard)

    def _part(self, name: str, child: Child, share: float | None, depth: int, cache_dir: Path) -> Part:
        part = Part(child.path, child.module, child.signature, child.parameters, share)
        child_name = f"{name}.{child.path}"
        log = get_logger(module=child_name)
        limits = self.limits
        if part.parameters < limits.min_parameters:
            part.reason = f"too small: {part.parameters} parameters, partition_min_params is {limits.min_parameters}"
        elif share is not None and share < limits.min_time_share:
            part.reason = (
                f"too small: {share:.1%} of eager time, partition_min_time_share is {limits.min_time_share:.1%}"
            )
        if part.reason:
            log.info("partition child left eager", reason=part.reason)
            return part
        reasons = []
        for record in child.graphs:
            graph_cache = cache_dir / "partition" / child.path / record.spec.name
            run, report = self._tune_graph(child.module, child_name, child.signature, record, graph_cache)
            assert run.backend is not None, "a run ends with a backend, tuned or eager"
            backend, lower = run.backend, list(run.lower)
            selected = report.selected
            failed = selected is not None and serves_eagerly(backend, lower)
            if failed and not compiled_candidate_passed(report.candidates):
                nested = None
                if depth < limits.max_depth:
                    nested = self.partition(
                        child.module, child_name, child.signature, record, graph_cache, depth + 1, share
                    )
                if nested is not None:
                    release(backend, self.guard)  # the eager fallback: the nested partition serves instead
                    backend, lower = nested, []
                    mark_partitioned(report, nested)
                else:
                    reasons.append(eager_reason(report))
            elif failed and selected is not None:
                reasons.append(f"eager was fastest: {selected.reason}")
            part.graphs.append(ChildGraph(record, Route(record.spec, backend, lower)))
        part.reason = "; ".join(dict.fromkeys(reasons))
        if not part.tuned:
            for graph in part.graphs:
                for backend in graph.route.backends:
                    release(backend, self.guard)
            part.graphs = []
        log.info("partition child", tuned=part.tuned, **({"reason": part.reason} if part.reason else {}))
        return part

    def _tune_graph(
        self, module: nn.Module, name: str, signature: ForwardSignature, record: GraphRecord, cache_dir: Path
    ) -> tuple[GraphRun, GraphReport]:
        """Tune one child graph as ``tune`` tunes a module's graph; its rows join the report."""
        graph = record.spec
        log = get_logger(module=name)
        log.info("tuning graph", graph=graph.name, samples=len(record.samples))
        request = GraphTuneRequest(module, name, graph, record.samples, self.device, cache_dir, signature, self.guard)
        run, report = run_graph(self.strategy, request, self.executor, log)
        self.report.graphs.append(report)
        return run, report


def mark_partitioned(report: GraphReport, backend: PartitionBackend) -> None:
    """The graph's eager fallback row becomes the partition's: what serves the graph now."""
    fallback = next((c for c in report.candidates if c.status == "fallback"), None)
    for candidate in report.candidates:
        if candidate.status == "selected" and is_plain_eager(candidate.instance or candidate.blueprint):
            candidate.status, candidate.reason = "passed", "eager: the partition serves the graph instead"
            candidate.serves = []
    row = CandidateResult(
        backend.describe(),
        "selected",
        reason="no compiled candidate passed for the whole module; its submodules are tuned (see the partition tree)",
        key=backend.key(),
        instance=backend,
        serves=list(fallback.serves) if fallback is not None and fallback.serves else [(None, None)],
    )
    if fallback is not None:
        report.candidates[report.candidates.index(fallback)] = row
    else:
        report.candidates.append(row)


def partition_fallback(
    wrapper: Any,
    record: GraphRecord,
    backend: Backend,
    report: GraphReport,
    strategy: TuneStrategy,
    device: torch.device,
    executor: Executor,
    guard: ModuleGuard,
    tune_report: TuneReport,
) -> Backend:
    """The hook ``tune`` calls for a graph that fell back: a partition where one helps, else ``backend`` as it is."""
    if compiled_candidate_passed(report.candidates):
        get_logger(module=wrapper.name, graph=record.spec.name).info(
            "not partitioning: a compiled candidate passed for the whole module but was not faster than eager"
        )
        return backend
    descent = Descent(strategy, device, executor, guard, tune_report)
    cache_dir = config.cache_dir / wrapper.name / record.spec.name
    partition = descent.partition(wrapper.module, wrapper.name, wrapper.signature, record, cache_dir)
    if partition is None:
        return backend
    release(backend, guard)  # the eager fallback: the partition serves the graph instead
    mark_partitioned(report, partition)
    report.partition = partition.tree()
    return partition
