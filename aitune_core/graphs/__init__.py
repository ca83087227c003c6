"""Graphs: call normalisation, graph keys, graph specs and the ranges users declare for them."""

from aitune_core.graphs.declared_dims import BatchDim, DynamicDim
from aitune_core.graphs.declared_graph import DeclarationError
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.graphs.keying import graph_key

__all__ = ["BatchDim", "DeclarationError", "DynamicDim", "ForwardSignature", "GraphSpec", "Sample", "graph_key"]
