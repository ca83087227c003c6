"""Refit for ONNX Runtime: the exported model with new weights, and a session made from it, without exporting again.

At build time :func:`prepare` reads the exported model's initializers and finds
which of the module's tensors each was made from (the core's
:func:`~aitune_core.plugin_api.exported.map_constants`). The dynamo exporter names an
initializer after its tensor (``module.<name>``, the flat adapter's prefix) where it
keeps it as is, and keeps the name when its optimizer folds a BatchNorm into the
convolution or Gemm before it; other initializers (a Linear's weight transposed for a
MatMul, tensors equal to another and exported as one) are found by value. Where the
optimizer kept one initializer for several equal tensors or dropped a bias of zeros, the
model is rewritten first, computing the same values (:mod:`aitune_onnx.refittable`).

A refit (:func:`write_refitted`) writes the model again with the initializers made from
the module's tensors now, all weights in one external data file beside it, into a folder
of its own; a new session is created from those files, as after a build. What the files
hold is then what serves, so checkpoints saved after a refit carry the new weights.

Why not ``SessionOptions.add_initializer`` with the live tensors, which ONNX Runtime
uses in place, without a copy: its graph optimizations (Conv+BatchNorm fusion, constant
folding) run on the values in the model file before the added initializers are bound,
so a session given new BatchNorm statistics that way computed with the old ones (3.9
off on a conv+bn model at level "basic" and above, exact only with optimizations off).
``add_external_initializers`` injects before the optimizations and is exact, but copies
the values, and only replaces initializers stored as external data. Neither keeps one
copy of the weights with optimizations on: fused and pre-packed kernels hold their own.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import torch

from aitune_core.plugin_api import BuildContext
from aitune_core.plugin_api.exported import (
    Constant,
    WeightMap,
    flat_inputs,
    flat_run,
    graph_reads,
    map_constants,
    named_tensors,
)
from aitune_onnx.export import INLINE_BYTES, data_file_name
from aitune_onnx.refittable import MODULE_PREFIX, restore_biases, separate_shared, settle_folds
from aitune_onnx.session import ONNX_TYPES

if TYPE_CHECKING:
    import onnx

_PAGE = 4096
_LARGE = 1024 * 1024
"""Tensors this large start on a page in the data file, smaller ones on 64 bytes (as ``onnx`` aligns them)."""
_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data", "raw_data")
_TORCH_TYPES = {code: dtype for dtype, code in ONNX_TYPES.items()}


@attrs.define
class Prepared:
    """What a build records for refit: the weight map, and the model rewritten to fit it (None: the export as is)."""

    weight_map: WeightMap
    model: onnx.ModelProto | None
    rewrites: str


def weight_map_for(model_path: Path, context: BuildContext) -> WeightMap:
    """Which tensors of the context's module each initializer of the exported model, as it is, holds."""
    return prepare(model_path, context, rewrite=False).weight_map


def prepare(model_path: Path, context: BuildContext, rewrite: bool = True) -> Prepared:
    """Which tensors of the context's module each initializer of the exported model holds.

    With ``rewrite``, where the optimizer kept one initializer for several equal tensors,
    or dropped a bias of zeros, the model is rewritten so that each tensor has its own
    initializer (:mod:`aitune_onnx.refittable`); the rewritten model computes the same values.
    """
    import onnx

    model = onnx.load(str(model_path))  # with its external data, read from beside it
    tensors = named_tensors(context.module)
    values = {}
    for initializer in model.graph.initializer:
        value = initializer_tensor(initializer)
        if value is not None:
            values[initializer.name] = value
    separated = separate_shared(model, tensors, values) if rewrite else {}
    values.update({new: values[old] for new, old in separated.items()})
    constants = {name: Constant(value, _tensor_name(name, set(tensors))) for name, value in values.items()}
    del values
    adapter, inputs, _, _ = flat_inputs(
        context.module, context.graph_spec, context.samples, context.signature, context.device
    )
    reads = graph_reads(flat_run(adapter, inputs), context.module)
    weight_map = map_constants(context.module, constants, reads)
    weight_map, settled = settle_folds(model, weight_map)
    restored = 0
    if rewrite:
        weight_map, restored = restore_biases(model, weight_map, tensors)
    rewrites = []
    if separated:
        rewrites.append(f"{len(separated)} initializers shared by equal tensors separated")
    if restored:
        rewrites.append(f"{restored} dropped biases of zeros restored")
    if settled:
        rewrites.append(f"{settled} folds settled by the scope of their node")
    return Prepared(weight_map, model if separated or restored else None, "; ".join(rewrites))


def save_model(model: onnx.ModelProto, folder: Path, model_file: str, external: bool) -> tuple[Path, Path | None]:
    """``folder/model_file``, with its weights in one data file beside it when ``external``."""
    import onnx

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / model_file
    if not external:
        onnx.save_model(model, str(path))
        return path, None
    data = folder / data_file_name(path)
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=data.name,
        size_threshold=INLINE_BYTES,
    )
    return path, data if data.is_file() else None


def _tensor_name(initializer: str, names: set[str]) -> str | None:
    name = initializer.removeprefix(MODULE_PREFIX)
    return name if name in names else None


def initializer_tensor(initializer: onnx.TensorProto) -> torch.Tensor | None:
    """An initializer's values as a torch tensor (its data loaded); None for types torch has none of."""
    from onnx import numpy_helper

    dtype = _TORCH_TYPES.get(initializer.data_type)
    if dtype is None:
        return None
    shape = tuple(initializer.dims)
    raw = initializer.raw_data  # a bytes object of its own: the tensor below keeps it alive
    if raw:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # not writable: the values are only compared and copied
            return torch.frombuffer(raw, dtype=dtype).reshape(shape)
    try:
        return torch.from_numpy(numpy_helper.to_array(initializer).copy()).to(dtype).reshape(shape)
    except (TypeError, ValueError):
        return None


def write_refitted(source: Path, values: dict[str, torch.Tensor], folder: Path, model_file: str) -> tuple[Path, Path]:
    """``folder/model_file`` and its data file: ``source`` with the named initializers replaced by ``values``.

    ``source``'s own external data must sit beside it. Every initializer of INLINE_BYTES or
    more, replaced or not, goes to the one data file (aligned, as ``onnx`` aligns large
    tensors); smaller ones stay in the model, where ONNX Runtime's shape inference reads them.
    """
    import onnx
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    model = onnx.load(str(source), load_external_data=False)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / model_file
    data = folder / data_file_name(path)
    missing = set(values) - {initializer.name for initializer in model.graph.initializer}
    if missing:
        raise ValueError(f"the model {source} has no initializers {sorted(missing)}")
    with data.open("xb") as writing:
        for initializer in model.graph.initializer:
            replaced = values.get(initializer.name)
            payload: Any
            if replaced is not None:
                payload = replaced.reshape(-1).view(torch.uint8).numpy()
            elif uses_external_data(initializer):
                load_external_data_for_tensor(initializer, str(source.parent))
                payload = initializer.raw_data
            else:
                continue
            for field in _TYPED_FIELDS:
                initializer.ClearField(field)
            size = len(payload)
            if size < INLINE_BYTES:
                initializer.data_location = onnx.TensorProto.DEFAULT
                del initializer.external_data[:]
                initializer.raw_data = bytes(payload)
                continue
            offset = writing.tell()
            offset += -offset % (_PAGE if size >= _LARGE else 64)
            writing.seek(offset)
            writing.write(memoryview(payload))
            del initializer.external_data[:]
            for key, text in (("location", data.name), ("offset", str(offset)), ("length", str(size))):
                entry = initializer.external_data.add()
                entry.key, entry.value = key, text
            initializer.data_location = onnx.TensorProto.EXTERNAL
    onnx.save_model(model, str(path))
    return path, data


def describe_map(weight_map: WeightMap | None, refusal: str) -> dict[str, Any]:
    """What build info says of refit."""
    return {"refit": weight_map.summary() if weight_map is not None else f"no: {refusal}"}
