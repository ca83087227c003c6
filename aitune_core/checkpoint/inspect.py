"""``aitune inspect CHECKPOINT``: a checkpoint's manifest as people read it."""

from __future__ import annotations

import os

from aitune_core.checkpoint.load import read
from aitune_core.metadata.tables import render_table


def _size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def describe_checkpoint(path: str | os.PathLike[str]) -> str:
    _, manifest = read(path)
    total = sum(ref.size for ref in manifest.artifacts())
    lines = [
        f"Checkpoint {path}",
        f"  format version {manifest.format_version}, written by aitune-core {manifest.aitune_core_version} "
        f"on {manifest.created}, {_size(total)} in {len(manifest.artifacts())} files",
        "  plugins: " + (", ".join(f"{p.distribution} {p.version}" for p in manifest.plugins) or "none"),
    ]
    for module in manifest.modules:
        where = module.path or "(the model itself)"
        weights = _size(module.weights.size) if module.weights else "not stored"
        lines.append("")
        lines.append(f"Module `{module.name}` at {where}, weights {weights}")
        rows = []
        for graph in module.graphs:
            artifacts = ", ".join(f"{name} ({_size(ref.size)})" for name, ref in graph.backend.artifacts.items())
            rows.append(
                [
                    graph.spec.name,
                    graph.backend.description,
                    f"{graph.backend.distribution} {graph.backend.version}",
                    "JIT" if graph.backend.is_jit else "AOT",
                    artifacts or "-",
                    graph.samples_note or (f"{len(graph.sample_trees)} stored" if graph.samples else "-"),
                ]
            )
        lines.append(render_table(rows, ["Graph", "Backend", "Plugin", "Kind", "Artifacts", "Samples"], "simple"))
        for graph in module.graphs:
            lines.append("")
            lines.append(f"Graph {graph.spec.name}:")
            lines.append(graph.spec.graph_spec().describe())
    return "\n".join(lines)
