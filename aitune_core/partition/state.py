"""A partition as stored data: its submodules, their graphs, and the backends that serve them.

A partition is stored the way every backend is: ``to_dict()`` gives its config and its
artifacts, ``from_dict`` takes them back, and a checkpoint copies, hashes and checks
them as it does any backend's. The config (:class:`PartitionConfig`) holds each
submodule's path, parameter count, share and reason, and each of its graphs: the spec,
the structure of its samples, and every backend serving it, as that backend's own
stored config. The artifacts are the children's files and the samples' tensor files,
each named ``<part path>/<graph index>/...``; a child that is a partition itself nests
the same way. Each child comes back through its installed class
(:func:`~aitune_core.backends.restore.restore_backend`), as a checkpoint's top-level
backends do.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core.backends.base import Backend, BackendConfig
from aitune_core.backends.persistable import check_persistable
from aitune_core.backends.restore import StoredStateError, backend_origin, restore_backend
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.graphs.sample_data import decode_samples, encode_samples
from aitune_core.graphs.spec_data import GraphSpecData
from aitune_core.reporting.partition_tree import PartitionNode
from aitune_core.serialization import structure_config

PARTITION = "partition"
"""The registered name of the partition backend, as stored."""

MAX_DEPTH = 8
"""Partitions nest at most this deep in stored data (tuning descends ``config.partition_max_depth``, 2 by default)."""

SAMPLES = "samples"
"""The last part of the name of a graph's samples artifact."""


@attrs.frozen
class StoredBackend:
    """A backend serving a child graph, as its ``to_dict()`` gave it, with where its class comes from."""

    name: str
    distribution: str
    version: str
    description: str
    config: dict[str, Any] = attrs.field(factory=dict)
    artifacts: dict[str, str] = attrs.field(factory=dict)
    """Each of its artifacts, by its own name, to the name of the partition's artifact that holds it."""
    extra: dict[str, Any] = attrs.field(factory=dict)

    @property
    def plain_eager(self) -> bool:
        return self.name == "eager" and not self.config.get("autocast_enabled")


@attrs.frozen
class StoredRange:
    """Batches up to ``up_to`` (above the previous range) go to ``backend``; None is the child's own forward."""

    up_to: int
    backend: StoredBackend | None


@attrs.frozen
class StoredGraph:
    spec: GraphSpecData
    backend: StoredBackend
    lower: list[StoredRange] = attrs.field(factory=list)
    samples: str | None = None
    """The partition's artifact holding the samples' tensors; None where they could not be stored."""
    sample_trees: list[dict[str, Any]] = attrs.field(factory=list)
    samples_note: str = ""

    def backends(self) -> list[StoredBackend]:
        return [self.backend, *(r.backend for r in self.lower if r.backend is not None)]


def _fraction(_instance: Any, _attribute: Any, value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and 0 <= value <= 1):
        raise ValueError(f"a share of {value}, not a fraction")


@attrs.frozen
class StoredPart:
    """A submodule of the partitioned module; with no graphs, it runs eagerly (``reason`` says why)."""

    path: str
    """Dotted, below the partitioned module (``block1``, ``layers.0``)."""
    parameters: int
    share: float | None = attrs.field(default=None, validator=_fraction)
    """Its share of the wrapped module's eager time when tuned (0..1), for the tree."""
    reason: str = ""
    graphs: list[StoredGraph] = attrs.field(factory=list)

    @property
    def tuned(self) -> bool:
        return any(not backend.plain_eager for graph in self.graphs for backend in graph.backends())


@attrs.frozen
class PartitionConfig(BackendConfig):
    """What a partition is made of: its parts, each graph of each part, and what serves it."""

    parts: list[StoredPart] = attrs.field(factory=list)


# --------------------------------------------------------------------------- live -> stored
@attrs.define(eq=False)
class LiveGraph:
    """One graph of a part as tuning or loading left it: spec, samples, and the backends routed to."""

    spec: GraphSpec
    samples: list[Sample]
    backend: Backend
    lower: list[tuple[int, Backend | None]] = attrs.field(factory=list)


def stored_graph(graph: LiveGraph, prefix: str, folder: Path, files: dict[str, Path]) -> StoredGraph:
    """``graph`` as data; its samples' tensors are written under ``folder`` and named in ``files``."""
    written: dict[int, StoredBackend] = {}

    def entry(backend: Backend, where: str) -> StoredBackend:
        if id(backend) not in written:
            data = check_persistable(backend)
            distribution, version = backend_origin(type(backend).name)
            written[id(backend)] = StoredBackend(
                name=type(backend).name,
                distribution=distribution,
                version=version,
                description=backend.describe(),
                config=data.get("config", {}),
                artifacts={name: f"{where}/{name}" for name in data.get("artifacts", {})},
                extra=data.get("extra", {}),
            )
        return written[id(backend)]

    main = entry(graph.backend, f"{prefix}/backend")
    lower = [
        StoredRange(up_to, None if backend is None else entry(backend, f"{prefix}/range{index}"))
        for index, (up_to, backend) in enumerate(graph.lower)
    ]
    stored = StoredGraph(GraphSpecData.of(graph.spec), main, lower)
    encoded = encode_samples(graph.samples)
    if isinstance(encoded, str):
        return attrs.evolve(stored, samples_note=encoded)
    tensors, trees = encoded
    name = f"{prefix}/{SAMPLES}"
    path = folder / f"{prefix}.{SAMPLES}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(tensors, path)
    files[name] = path
    return attrs.evolve(stored, samples=name, sample_trees=trees)


def child_artifacts(stored: StoredBackend, backend: Backend, where: str) -> dict[str, Path]:
    """The partition's artifacts that ``backend`` holds, by the names ``stored`` gives them."""
    own = backend.to_dict().get("artifacts", {})
    if set(own) != set(stored.artifacts):
        raise StoredStateError(
            f"{where}: {stored.description} now declares artifacts {sorted(own)}, but the partition was made "
            f"with {sorted(stored.artifacts)}; a backend must not change its artifacts once it serves"
        )
    return {stored.artifacts[name]: Path(path) for name, path in own.items()}


# --------------------------------------------------------------------------- stored -> live
def check_depth(config: Any) -> None:
    """Refuse a stored partition (its config as data) nested deeper than :data:`MAX_DEPTH`, before restoring any."""
    level = [config]
    for _ in range(MAX_DEPTH):
        below = [
            _get(backend, "config")
            for data in level
            for part in _as_list(_get(data, "parts"))
            for graph in _as_list(_get(part, "graphs"))
            for backend in [_get(graph, "backend"), *(_get(r, "backend") for r in _as_list(_get(graph, "lower")))]
            if _get(backend, "name") == PARTITION
        ]
        if not below:
            return
        level = below
    raise StoredStateError(f"its partition nests deeper than {MAX_DEPTH} levels; the checkpoint is damaged")


def _get(data: Any, key: str) -> Any:
    return data.get(key) if isinstance(data, dict) else None


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def restored_graph(graph: StoredGraph, artifacts: dict[str, Path], where: str) -> LiveGraph:
    """A stored graph with its backends restored by their installed classes (nothing loaded yet) and its samples."""
    restored: dict[int, Backend] = {}

    def restore(entry: StoredBackend) -> Backend:
        if id(entry) not in restored:
            with about(f"{where}, backend `{entry.name}`"):
                missing = sorted(set(entry.artifacts.values()) - set(artifacts))
                if missing:
                    raise StoredStateError(f"it names artifacts {missing}, which the partition does not carry")
                files = {name: str(artifacts[held]) for name, held in entry.artifacts.items()}
                data = {"config": entry.config, "artifacts": files, "extra": entry.extra}
                restored[id(entry)] = restore_backend(entry.name, entry.distribution, entry.version, data)
        return restored[id(entry)]

    with about(where):
        spec = graph.spec.graph_spec()
        samples: list[Sample] = []
        if graph.samples is not None:
            if graph.samples not in artifacts:
                raise StoredStateError(f"its samples name artifact {graph.samples!r}, not one the partition carries")
            samples = decode_samples(_tensors(artifacts[graph.samples]), graph.sample_trees)
    lower: list[tuple[int, Backend | None]] = []
    previous = 0
    for stored in graph.lower:
        if stored.up_to <= previous:
            raise StoredStateError(f"{where}: its batch ranges are not ascending ({stored.up_to} after {previous})")
        previous = stored.up_to
        lower.append((stored.up_to, None if stored.backend is None else restore(stored.backend)))
    return LiveGraph(spec, samples, restore(graph.backend), lower)


def _tensors(path: Path) -> Any:
    """Read tensors with ``weights_only=True``: a crafted file cannot run code."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise StoredStateError(f"refusing to load {path.name}: it is not plain tensor data ({error})") from error


def submodule(module: nn.Module, path: str) -> nn.Module:
    """The submodule at ``path``, looked up in the module dicts only: no attribute of the user's classes is read."""
    found: nn.Module | None = module
    for atom in path.split(".") if path else [""]:
        children = found._modules if found is not None else {}
        found = children.get(atom) if atom else None
        if found is None:
            raise StoredStateError(
                f"its partition names `{path}`, which is not a submodule of this module; "
                "load into a model built the same way as the tuned one"
            )
    assert found is not None
    return found


def check_part(part: StoredPart, found: nn.Module) -> None:
    count = sum(parameter.numel() for parameter in found.parameters())
    if part.parameters != count:
        raise StoredStateError(
            f"partition part `{part.path}` was tuned with {part.parameters} parameters, but this model's has "
            f"{count}; load into a model built the same way as the tuned one"
        )


@contextlib.contextmanager
def about(where: str) -> Iterator[None]:
    """Any error inside, as a StoredStateError that says which part, graph and backend it concerns."""
    try:
        yield
    except StoredStateError as error:
        raise StoredStateError(f"{where}: {error}") from error
    except Exception as error:
        raise StoredStateError(f"{where}: {type(error).__name__}: {error}") from error


# --------------------------------------------------------------------------- the tree, from data alone
def stored_tree(config: PartitionConfig) -> list[PartitionNode]:
    """One node per stored submodule, as the tuning summary draws it, read from the config alone."""
    nodes = []
    for part in config.parts:
        served: list[str] = []
        children: list[PartitionNode] = []
        for graph in part.graphs:
            for backend in graph.backends():
                if backend.name == PARTITION:
                    served.append("partitioned")
                    with contextlib.suppress(Exception):  # a nested config that does not read draws no branch
                        children.extend(stored_tree(_nested(backend)))
                else:
                    served.append("eager" if backend.plain_eager else backend.description)
            if any(r.backend is None for r in graph.lower):
                served.append("eager at small batches")
        if not part.tuned:
            nodes.append(PartitionNode(part.path, f"eager ({part.reason})" if part.reason else "eager", part.share))
            continue
        if len(part.graphs) > 1 and part.reason:
            served.append(f"other calls eager ({part.reason})")
        tuned = [s for s in dict.fromkeys(served) if s != "eager"]
        nodes.append(PartitionNode(part.path, ", ".join(tuned), part.share, children))
    return nodes


def _nested(backend: StoredBackend) -> PartitionConfig:
    return structure_config(backend.config, PartitionConfig)
