"""Checking a partitioned graph of a checkpoint against the model, before anything is loaded.

A partition names submodules by path and stores their graphs. All of it is data from
somewhere else, so before the plan is complete each path must name a real submodule
of the partitioned module (found through the module dicts alone: no attribute of the
user's classes is read, so no property runs), no path may repeat or contain another,
the stored parameter count must be the submodule's, the share must be a fraction, the
partitioned graph must keep eager as its stored backend, and the nesting is bounded.
Each submodule's graphs are then checked as any graph is (``plan_graph``), against
that submodule's own forward.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Generic, TypeVar

import attrs
from torch import nn

from aitune_core.checkpoint.manifest import CheckpointError, GraphEntry, PartEntry
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.module.wrapper import Module
from aitune_core.wrapping import overlaps

MAX_DEPTH = 8
"""Partitions nest at most this deep in a checkpoint (tuning descends ``config.partition_max_depth``, 2 by default)."""

P = TypeVar("P")
"""A graph's plan, as ``load_plan`` makes it: parts hold their graphs' plans without this module importing that one."""

PlanGraph = Callable[[str, GraphEntry, ForwardSignature, nn.Module], P]
"""``plan_graph(name, entry, signature, submodule)``: one graph of a submodule, checked as any graph is."""


@attrs.define(eq=False)
class PartPlan(Generic[P]):
    entry: PartEntry
    module: nn.Module
    """The submodule at ``entry.path``, below the partitioned module."""
    signature: ForwardSignature
    graphs: list[P]


def plan_parts(
    name: str, graph: GraphEntry, module: nn.Module, depth: int, plan_graph: PlanGraph[P]
) -> list[PartPlan[P]]:
    """The checked parts of ``graph``'s partition of ``module`` (none when it is not partitioned)."""
    partition = graph.partition
    if partition is None:
        return []
    where = f"module `{name}`, graph `{graph.spec.name}`"
    if depth > MAX_DEPTH:
        raise CheckpointError(f"{where}: its partition nests deeper than {MAX_DEPTH} levels; the checkpoint is damaged")
    if graph.backend.name != "eager" or graph.lower:
        raise CheckpointError(
            f"{where}: a partitioned graph must store eager as its backend, with no batch ranges "
            f"(it stores `{graph.backend.name}`{' and batch ranges' if graph.lower else ''})"
        )
    plans: list[PartPlan[P]] = []
    for part in partition.parts:
        submodule = _submodule(module, part.path, where)
        for other in plans:
            if overlaps(other.entry.path, part.path):
                raise CheckpointError(f"{where}: partition parts `{other.entry.path}` and `{part.path}` overlap")
        _check_numbers(part, submodule, where)
        signature = ForwardSignature(submodule.forward)
        graphs = [plan_graph(f"{name}.{part.path}", child, signature, submodule) for child in part.graphs]
        plans.append(PartPlan(part, submodule, signature, graphs))
    return plans


def _submodule(module: nn.Module, path: str, where: str) -> nn.Module:
    """The submodule at ``path``, looked up in the module dicts only."""
    found: nn.Module | None = module
    for atom in path.split(".") if path else [""]:
        children = found._modules if found is not None else {}
        found = children.get(atom) if atom else None
        if found is None:
            raise CheckpointError(
                f"{where}: its partition names `{path}`, which is not a submodule of this module; "
                "load into a model built the same way as the tuned one"
            )
    assert found is not None
    if isinstance(found, Module):
        raise CheckpointError(f"{where}: its partition names `{path}`, which is a wrapped aitune module of its own")
    return found


def _check_numbers(part: PartEntry, submodule: nn.Module, where: str) -> None:
    count = sum(parameter.numel() for parameter in submodule.parameters())
    if part.parameters != count:
        raise CheckpointError(
            f"{where}: partition part `{part.path}` was tuned with {part.parameters} parameters, but this model's "
            f"has {count}; load into a model built the same way as the tuned one"
        )
    if part.share is not None and not (math.isfinite(part.share) and 0 <= part.share <= 1):
        raise CheckpointError(f"{where}: partition part `{part.path}` has a share of {part.share}, not a fraction")
