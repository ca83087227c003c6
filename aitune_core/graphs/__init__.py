"""Graphs: call normalisation, graph keys and graph specs."""

from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.graphs.keying import graph_key

__all__ = ["ForwardSignature", "GraphSpec", "Sample", "graph_key"]
