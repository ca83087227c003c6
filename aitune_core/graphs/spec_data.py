"""Graph specs and graph keys as plain data, for manifests.

Metadata is written as what it is (paths, shape ranges, dtypes, strict values), never
pickled; reading it back builds the same objects, so a loaded model routes exactly as
the tuned one did.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import attrs
import torch

from aitune_core.graphs.declared_dims import DeclaredRange
from aitune_core.graphs.graph_spec import GraphSpec
from aitune_core.metadata.locator import Locator
from aitune_core.metadata.sample_metadata import SampleMetadata
from aitune_core.metadata.tensor_spec import TensorSpec
from aitune_core.serialization import dtype_from_str

_PLAIN = (str, int, float, bool, type(None))


@attrs.define
class PathData:
    root: str | None
    keys: list[Any]
    kinds: list[str]

    @classmethod
    def of(cls, locator: Locator) -> PathData:
        return cls(locator.root, [encode_key(k) for k in locator.keys], list(locator.kinds))

    def locator(self) -> Locator:
        return Locator(self.root, tuple(decode_key(k) for k in self.keys), tuple(self.kinds))  # type: ignore[arg-type]


@attrs.define
class TensorData:
    path: PathData
    min_shape: list[int]
    max_shape: list[int]
    dtype: str
    axis_refs: list[list[int] | None]
    opt: list[int | None] | None = None


@attrs.define
class OtherData:
    path: PathData
    value: Any


@attrs.define
class MetadataData:
    tensors: list[TensorData]
    others: list[OtherData] = attrs.field(factory=list)
    strict: bool = False
    is_output: bool = False

    @classmethod
    def of(cls, metadata: SampleMetadata) -> MetadataData:
        return cls(
            tensors=[
                TensorData(
                    PathData.of(loc),
                    list(spec.min_shape),
                    list(spec.max_shape),
                    str(spec.dtype),
                    [list(ref) if ref is not None else None for ref in spec.axis_refs],
                    None if spec.opt_sizes is None else list(spec.opt_sizes),
                )
                for loc, spec in metadata.tensor_data
            ],
            others=[OtherData(PathData.of(loc), encode_key(value)) for loc, value in metadata.other_data],
            strict=metadata.strict,
            is_output=metadata.is_output,
        )

    def metadata(self) -> SampleMetadata:
        tensors = [
            (
                t.path.locator(),
                TensorSpec(
                    list(t.min_shape),
                    list(t.max_shape),
                    dtype_from_str(t.dtype),
                    [(ref[0], ref[1]) if ref is not None else None for ref in t.axis_refs],
                    _checked_opt(t),
                ),
            )
            for t in self.tensors
        ]
        others = [(o.path.locator(), decode_key(o.value)) for o in self.others]
        return SampleMetadata(tensors, others, self.strict, None, self.is_output)


@attrs.define
class GraphSpecData:
    name: str
    key: Any
    input_spec: MetadataData
    output_spec: MetadataData
    declared: list[DeclaredRange] = attrs.field(factory=list)

    @classmethod
    def of(cls, graph: GraphSpec) -> GraphSpecData:
        return cls(
            graph.name,
            encode_key(graph.key),
            MetadataData.of(graph.input_spec),
            MetadataData.of(graph.output_spec),
            list(graph.declared),
        )

    def graph_spec(self) -> GraphSpec:
        return GraphSpec(
            self.name,
            self.input_spec.metadata(),
            self.output_spec.metadata(),
            decode_key(self.key),
            list(self.declared),
        )


def _checked_opt(tensor: TensorData) -> list[int | None] | None:
    """The declared opt sizes, which must lie within the stored range (TensorRT profiles take them)."""
    if tensor.opt is None:
        return None
    ranges = zip(tensor.opt, tensor.min_shape, tensor.max_shape, strict=False)
    if len(tensor.opt) != len(tensor.min_shape) or any(o is not None and not lo <= o <= hi for o, lo, hi in ranges):
        raise ValueError(f"opt sizes {tensor.opt} do not fit the range {tensor.min_shape}..{tensor.max_shape}")
    return list(tensor.opt)


def encode_key(value: Hashable) -> Any:
    """JSON-ready form of a graph key part: tuples and dtypes are tagged so they come back as such."""
    if isinstance(value, tuple):
        return {"tuple": [encode_key(item) for item in value]}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value)}
    if isinstance(value, float) and value != value:
        return {"float": "nan"}
    if isinstance(value, _PLAIN):
        return value
    return {"repr": repr(value)}


def decode_key(value: Any) -> Any:
    if isinstance(value, dict):
        if "tuple" in value:
            return tuple(decode_key(item) for item in value["tuple"])
        if "dtype" in value:
            return dtype_from_str(value["dtype"])
        if "float" in value:
            return float(value["float"])
        if "repr" in value:
            return value["repr"]
        raise ValueError(f"unknown key part {value!r}")
    if isinstance(value, list):
        raise ValueError(f"graph key parts are tuples, not lists: {value!r}")
    return value
