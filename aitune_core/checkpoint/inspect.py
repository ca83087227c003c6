"""``aitune inspect CHECKPOINT``: a checkpoint's manifest as people read it.

Inspecting checks what loading would check about the files (every sha256, paths
inside the checkpoint) and says what loading would run: native-code artifacts and
the backends that compile again. It never imports a backend or loads a tensor.
"""

from __future__ import annotations

import os
from typing import Any

from aitune_core.checkpoint.files import verify
from aitune_core.checkpoint.load import read
from aitune_core.checkpoint.manifest import GraphEntry, Manifest
from aitune_core.checkpoint.signing import is_signed
from aitune_core.metadata.tables import render_table
from aitune_core.partition.state import PARTITION, PartitionConfig, stored_tree
from aitune_core.reporting.partition_tree import render_partition
from aitune_core.serialization import ConfigDataError, structure_config


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def describe_checkpoint(path: str | os.PathLike[str], verify_hashes: bool = True) -> str:
    """The checkpoint as text; raises CheckpointError when it is malformed or (``verify_hashes``) altered."""
    root, manifest = read(path)
    if verify_hashes:
        for ref in manifest.artifacts():
            verify(root, ref)
    total = sum(ref.size for ref in manifest.artifacts())
    checked = "every file's sha256 checked" if verify_hashes else "hashes not checked (--no-verify)"
    lines = [
        f"Checkpoint {path}",
        f"  format version {manifest.format_version}, written by aitune-core {manifest.aitune_core_version} "
        f"on {manifest.created}, {_size(total)} in {len(manifest.artifacts())} files; {checked}",
        "  signed: " + ("yes (verify with load(..., verify_key=...))" if is_signed(root) else "no"),
        "  plugins: " + (", ".join(f"{p.distribution} {p.version}" for p in manifest.plugins) or "none"),
        *_would_run(manifest),
    ]
    for module in manifest.modules:
        where = module.path or "(the model itself)"
        weights = _size(module.weights.size) if module.weights else "not stored"
        lines.append("")
        lines.append(f"Module `{module.name}` at {where}, weights {weights}")
        if module.accuracy is not None:
            lines.append(module.accuracy.describe())
        rows = []
        for graph in module.graphs:
            for serves, backend in _served(graph):
                stored = backend.artifacts.items() if backend is not None else ()
                artifacts = ", ".join(f"{name} ({_size(ref.size)})" for name, ref in stored)
                rows.append(
                    [
                        graph.spec.name,
                        serves,
                        backend.description if backend is not None else "eager",
                        f"{backend.distribution} {backend.version}" if backend else "-",
                        ("JIT" if backend.is_jit else "AOT") if backend else "-",
                        artifacts or "-",
                        graph.samples_note or (f"{len(graph.sample_trees)} stored" if graph.samples else "-"),
                    ]
                )
        lines.append(
            render_table(rows, ["Graph", "Serves", "Backend", "Plugin", "Kind", "Artifacts", "Samples"], "simple")
        )
        for graph in module.graphs:
            lines.extend(_partitions(graph))
        for graph in module.graphs:
            lines.append("")
            lines.append(f"Graph {graph.spec.name}:")
            spec = graph.spec.graph_spec()
            if spec.declared:
                lines.append("declared: " + "; ".join(declared.describe() for declared in spec.declared))
            lines.append(spec.describe())
    return "\n".join(lines)


_COMPILE_CACHE = (
    "; compiled kernels of a JIT backend: without trust_native_code=True they are not loaded, the graph compiles again"
)


def _is_compile_cache(backend: Any) -> bool:
    """Whether the writer stored this JIT backend's native artifacts as a cache of its compile.

    A JIT backend compiles from the module's own code, so its native artifacts can only
    be kernels it could compile again (the installed class, not the manifest, decides at
    load). A partition is JIT too, but its native artifacts are its children's, which may
    not be optional.
    """
    return bool(backend.is_jit) and backend.name != PARTITION


def _would_run(manifest: Manifest) -> list[str]:
    """What loading executes besides reading data: native code it loads, and compilers it starts."""
    native = [
        f"    {module.name}/{graph.spec.name}: {backend.name} {name} ({ref.path}, {_size(ref.size)})"
        + (_COMPILE_CACHE if _is_compile_cache(backend) else "")
        for module in manifest.modules
        for graph in module.graphs
        for backend in graph.backend_entries()
        for name, ref in backend.artifacts.items()
        if ref.native
    ]
    at_load: set[str] = set()
    first_call: set[str] = set()
    for module in manifest.modules:
        for graph in module.graphs:
            for backend in graph.backend_entries():
                if backend.is_jit:
                    where = f"{module.name}/{graph.spec.name}: {backend.description}"
                    (at_load if graph.samples is not None else first_call).add(where)
    lines = ["  native code: " + ("none" if not native else "loading runs these (needs trust_native_code=True):")]
    lines.extend(native)
    if at_load:
        lines.append("  compiled again at load from the stored samples: " + ", ".join(sorted(at_load)))
    if first_call:
        lines.append(
            "  compiled on the first call after load (no samples could be stored): " + ", ".join(sorted(first_call))
        )
    return lines


def _served(graph: GraphEntry) -> list[tuple[str, Any]]:
    """``(batch range, backend entry or None for eager)`` for each range of the graph, lowest first."""
    found: list[tuple[str, Any]] = []
    batch_range = graph.spec.graph_spec().batch_range if graph.lower else None
    low = batch_range[0] if batch_range else 1
    for stored in graph.lower:
        found.append((f"batch {low}-{stored.up_to}" if low != stored.up_to else f"batch {low}", stored.backend))
        low = stored.up_to + 1
    found.append(("every call" if not graph.lower else f"batch {low}+", graph.backend))
    return found


def _partitions(graph: GraphEntry) -> list[str]:
    """The tree of each partition serving ``graph``, drawn from its stored config as the tuning summary draws it."""
    lines = []
    for backend in graph.backend_entries():
        if backend.name != PARTITION:
            continue
        title = f"Graph {graph.spec.name} is partitioned; its submodules run on:"
        try:
            lines.append(render_partition(title, stored_tree(structure_config(backend.config, PartitionConfig))))
        except ConfigDataError as error:
            lines.append(f"{title} (its stored partition does not read: {error})")
    return lines
