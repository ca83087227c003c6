"""A stored partition as the same tree the tuning summary draws, for ``aitune inspect``."""

from __future__ import annotations

from aitune_core.checkpoint.manifest import PartitionEntry
from aitune_core.reporting.partition_tree import PartitionNode


def partition_nodes(partition: PartitionEntry) -> list[PartitionNode]:
    """One node per stored submodule: the backends its graphs name, ``partitioned``, or ``eager (why)``."""
    nodes = []
    for part in partition.parts:
        served: list[str] = []
        children: list[PartitionNode] = []
        for graph in part.graphs:
            if graph.partition is not None:
                served.append("partitioned")
                children.extend(partition_nodes(graph.partition))
                continue
            served.extend("eager" if b.name == "eager" else b.description for b in graph.backend_entries())
            if any(r.backend is None for r in graph.lower):
                served.append("eager at small batches")
        tuned = [s for s in served if s != "eager"]
        if not tuned:
            nodes.append(PartitionNode(part.path, f"eager ({part.reason})" if part.reason else "eager", part.share))
        else:
            nodes.append(PartitionNode(part.path, ", ".join(dict.fromkeys(tuned)), part.share, children))
    return nodes
