"""Graphs: call normalisation, graph keys, graph specs and the ranges users declare for them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aitune_core.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    "BatchDim": "aitune_core.graphs.declared_dims",
    "DynamicDim": "aitune_core.graphs.declared_dims",
    "DeclarationError": "aitune_core.graphs.declared_graph",
    "ForwardSignature": "aitune_core.graphs.forward_signature",
    "GraphSpec": "aitune_core.graphs.graph_spec",
    "Sample": "aitune_core.graphs.graph_spec",
    "graph_key": "aitune_core.graphs.keying",
}

__all__ = ["BatchDim", "DeclarationError", "DynamicDim", "ForwardSignature", "GraphSpec", "Sample", "graph_key"]

__getattr__, __dir__ = lazy_exports(
    globals(), _EXPORTS, lambda name: f"module 'aitune_core.graphs' has no attribute {name!r}"
)

if TYPE_CHECKING:
    from aitune_core.graphs.declared_dims import BatchDim, DynamicDim
    from aitune_core.graphs.declared_graph import DeclarationError
    from aitune_core.graphs.forward_signature import ForwardSignature
    from aitune_core.graphs.graph_spec import GraphSpec, Sample
    from aitune_core.graphs.keying import graph_key
