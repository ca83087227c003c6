"""Reading format version 3, where a partitioned graph kept its partition in a field of its own.

Version 3 stored eager as such a graph's backend and the partition beside it
(``partition.parts[].graphs[]``, each a graph entry with its backends and files). From
version 4 a partition is stored as any backend is: the graph's backend is a
``partition`` entry whose config holds the parts and their graphs and whose artifacts
are the children's files (see :mod:`aitune_core.partition.state`). This step rewrites
the one into the other; the files stay where they are, only the manifest's view of
them moves. Everything else is left for the schema and the load checks to judge, so
a version-3 checkpoint is checked exactly as a version-4 one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PARTITION = "partition"


def v3_to_v4(data: dict[str, Any]) -> dict[str, Any]:
    """Each graph's ``partition`` field becomes its backend, a ``partition`` entry; ValueError if it cannot."""
    for module in _dicts(data.get("modules")):
        for graph in _dicts(module.get("graphs")):
            _convert(graph)
    return data


def _convert(graph: dict[str, Any]) -> None:
    partition = graph.pop("partition", None)
    if partition is None:
        return
    eager = graph.get("backend")
    if not isinstance(eager, dict) or eager.get("name") != "eager" or graph.get("lower"):
        stored = eager.get("name") if isinstance(eager, dict) else eager
        ranges = " and batch ranges" if graph.get("lower") else ""
        raise ValueError(
            f"graph `{_name(graph)}`: a partitioned graph must store eager as its backend, with no batch ranges "
            f"(it stores `{stored}`{ranges})"
        )
    artifacts: dict[str, Any] = {}
    stored_parts = partition.get("parts") if isinstance(partition, dict) else partition
    parts = _each(stored_parts, lambda index, part: _part(part, f"part{index}", artifacts))
    tuned = [part.get("path") for part in _dicts(parts) if _tuned(part)]
    graph["backend"] = {
        "name": PARTITION,
        "distribution": eager.get("distribution"),
        "version": eager.get("version"),
        "config": {"parts": parts},
        "state": eager.get("state"),
        "is_jit": True,
        "description": f"PartitionBackend({len(tuned)} of {len(_dicts(parts))} submodules tuned: "
        f"{', '.join(map(str, tuned))})",
        "artifacts": artifacts,
        "extra": {},
    }


def _part(part: Any, prefix: str, artifacts: dict[str, Any]) -> Any:
    """A version-3 part; its files are named after its place, which no edit of its path can make collide."""
    if not isinstance(part, dict):
        return part
    graphs = _each(part.get("graphs", []), lambda index, child: _graph(child, f"{prefix}/{index}", artifacts))
    return {**part, "graphs": graphs}


def _graph(graph: Any, prefix: str, artifacts: dict[str, Any]) -> Any:
    """A version-3 part graph as a stored graph of the partition; its files become the partition's artifacts."""
    if not isinstance(graph, dict):
        return graph
    _convert(graph)  # a nested partition first becomes its graph's backend
    stored = {key: graph[key] for key in ("spec", "sample_trees", "samples_note") if key in graph}
    stored["backend"] = _backend(graph.get("backend"), f"{prefix}/backend", artifacts)

    def ranged(index: int, stored_range: Any) -> Any:
        if not isinstance(stored_range, dict):
            return stored_range
        return {**stored_range, "backend": _backend(stored_range.get("backend"), f"{prefix}/range{index}", artifacts)}

    stored["lower"] = _each(graph.get("lower", []), ranged)
    if graph.get("samples") is not None:
        stored["samples"] = f"{prefix}/samples"
        artifacts[stored["samples"]] = graph["samples"]
    return stored


def _backend(entry: Any, prefix: str, artifacts: dict[str, Any]) -> Any:
    """A backend entry as a stored child of the partition: its files held by the partition, under ``prefix``."""
    if not isinstance(entry, dict):
        return entry
    files = entry.get("artifacts")
    held = {}
    for name, ref in files.items() if isinstance(files, dict) else ():
        held[name] = f"{prefix}/{name}"
        artifacts[held[name]] = ref
    kept = ("name", "distribution", "version", "description", "config", "extra")
    return {**{key: entry[key] for key in kept if key in entry}, "artifacts": held}


def _tuned(part: dict[str, Any]) -> bool:
    for graph in _dicts(part.get("graphs")):
        backends = [graph.get("backend"), *(r.get("backend") for r in _dicts(graph.get("lower")))]
        if any(isinstance(b, dict) and b.get("name") != "eager" for b in backends):
            return True
    return False


def _name(graph: dict[str, Any]) -> Any:
    spec = graph.get("spec")
    return spec.get("name") if isinstance(spec, dict) else "?"


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _each(value: Any, convert: Callable[[int, Any], Any]) -> Any:
    """Each item of a list converted; anything but a list is left as it is, for the schema to refuse."""
    return [convert(index, item) for index, item in enumerate(value)] if isinstance(value, list) else value
