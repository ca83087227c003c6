"""One graph converted to an OpenVINO IR (``model.xml`` + ``model.bin``) in the build's folder.

The graph is seen flat (:func:`aitune_core.plugin_api.flat_inputs`: the module's
nested arguments and outputs as flat tensors, in the layout's order) and converted by
``ov.convert_model``:

* ``"export"``: from the graph's ``torch.export`` program, exported with its batch and
  dynamic axes as ``torch.export`` dims. OpenVINO does not read those ranges from the
  program (its inputs come out fully dynamic), so each input's shape is also given as
  an ``ov.PartialShape`` of ``ov.Dimension(min, max)`` for ranged axes and fixed sizes
  for the others: the CPU plugin plans its memory for the bounds.
* ``"trace"``: the flat module traced by ``torch.jit.trace`` inside ``ov.convert_model``,
  with the same input shapes. This is the fallback when the export or the conversion
  of its program fails, and the result says why it was needed.

The IR is written with ``ov.save_model``; its ``compress_to_fp16`` is the config's (off
by default: ``save_model`` would otherwise store float16 weights). Nothing here imports
OpenVINO at module import time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import torch

from aitune_core.plugin_api import ForwardSignature, GraphSpec, Sample
from aitune_core.plugin_api.exported import IOLayout, flat_dynamic_shapes, flat_inputs, modes_kept, quiet_export
from aitune_openvino.config import OpenVINOConfig

if TYPE_CHECKING:
    import openvino

XML_FILE = "model.xml"
BIN_FILE = "model.bin"
_REASON_LIMIT = 400


class ConversionError(RuntimeError):
    """Neither route could convert the graph; the message gives each route's reason."""


@attrs.define(eq=False)
class ConvertedIR:
    """An IR written for one graph, and how it was made.

    converter: ``"export"`` or ``"trace"``, the route that produced the files.
    fallback_reason: why the configured route failed, when the other one stepped in.
    input_shapes: each flat input's shape as given to OpenVINO (``[1..8,2..512]``).
    """

    xml: Path
    bin: Path
    layout: IOLayout
    converter: str
    fallback_reason: str = ""
    input_shapes: list[str] = attrs.field(factory=list)
    duration_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        """Plain values for build reports, logs and the checkpoint's extra state."""
        info: dict[str, Any] = {
            "converter": self.converter,
            "convert_s": round(self.duration_s, 3),
            "ir_bytes": self.xml.stat().st_size + self.bin.stat().st_size,
            "inputs": ", ".join(
                f"{name}{shape}" for name, shape in zip(self.layout.input_names, self.input_shapes, strict=True)
            ),
        }
        if self.fallback_reason:
            info["fallback_reason"] = self.fallback_reason
        return info


def convert_graph(
    module: torch.nn.Module,
    graph: GraphSpec,
    samples: Sequence[Sample],
    signature: ForwardSignature,
    config: OpenVINOConfig,
    folder: Path,
) -> ConvertedIR:
    """Write ``folder/model.xml`` and ``model.bin`` for one graph of ``module``, on the CPU."""
    import openvino as ov

    started = time.perf_counter()
    adapter, tensors, _, layout = flat_inputs(module, graph, samples, signature, torch.device("cpu"))
    shapes = input_shapes(graph, layout)
    specs = [(shape, ov_type(tensor.dtype)) for shape, tensor in zip(shapes, tensors, strict=True)]
    routes = [config.converter]
    if config.converter == "export" and config.trace_fallback:
        routes.append("trace")
    failures: list[str] = []
    model = None
    for route in routes:
        try:
            with torch.no_grad(), modes_kept(module), quiet_export("torch._export"):
                if route == "export":
                    dims = flat_dynamic_shapes(graph, layout)
                    program = torch.export.export(adapter, tensors, dynamic_shapes=dims, strict=False)
                    model = ov.convert_model(program, input=specs)
                else:
                    model = ov.convert_model(adapter, example_input=tensors, input=specs)
            _check_ports(model, layout, route)
        except Exception as error:
            failures.append(f"{route}: {describe_failure(error)}")
            model = None
            continue
        break
    if model is None:
        raise ConversionError(f"could not convert graph {graph.name} to OpenVINO: {'; then '.join(failures)}")
    _name_ports(model, layout)
    folder.mkdir(parents=True, exist_ok=True)
    xml = folder / XML_FILE
    ov.save_model(model, str(xml), compress_to_fp16=config.compress_to_fp16)
    converted = ConvertedIR(
        xml=xml,
        bin=folder / BIN_FILE,
        layout=layout,
        converter=routes[len(failures)],
        fallback_reason=failures[0] if failures else "",
        input_shapes=[str(shape) for shape in shapes],
        duration_s=time.perf_counter() - started,
    )
    if not converted.bin.is_file():
        raise ConversionError(f"ov.save_model wrote {xml} but no {BIN_FILE} beside it")
    return converted


def input_shapes(graph: GraphSpec, layout: IOLayout) -> list[openvino.PartialShape]:
    """Each flat input's shape for OpenVINO: a fixed size, or ``Dimension(min, max)`` where the graph ranges."""
    import openvino as ov

    shapes = []
    for locator in layout.inputs:
        spec = graph.input_spec.spec(locator)
        dims = [
            ov.Dimension(low) if low == high else ov.Dimension(low, high)
            for low, high in zip(spec.min_shape, spec.max_shape, strict=True)
        ]
        shapes.append(ov.PartialShape(dims))
    return shapes


_TYPES = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "boolean",
}
"""torch dtype -> the name of OpenVINO's element type (``ov.Type.<name>``)."""


def ov_type(dtype: torch.dtype) -> openvino.Type:
    import openvino as ov

    try:
        return getattr(ov.Type, _TYPES[dtype])
    except KeyError:
        raise ConversionError(f"OpenVINO has no element type for {dtype}") from None


def _check_ports(model: openvino.Model, layout: IOLayout, route: str) -> None:
    """The converted model must take the flat inputs and give the flat outputs, in number."""
    if len(model.inputs) != len(layout.inputs) or len(model.outputs) != len(layout.outputs):
        raise ConversionError(
            f"the {route} conversion has {len(model.inputs)} inputs and {len(model.outputs)} outputs, "
            f"the graph {len(layout.inputs)} and {len(layout.outputs)}"
        )


def _name_ports(model: openvino.Model, layout: IOLayout) -> None:
    """Name the IR's inputs and outputs after their access paths, for anyone reading the IR."""
    for port, name in zip(model.inputs, layout.input_names, strict=True):
        port.get_tensor().set_names({name})
    for port, name in zip(model.outputs, layout.output_names, strict=True):
        port.get_tensor().set_names({name})


def describe_failure(error: BaseException) -> str:
    """The error's type and first line, and its innermost cause's, clipped."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(chain) < 16 and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    text = f"{type(error).__name__}: {_first_line(error)}"
    if len(chain) > 1:
        root = chain[-1]
        text += f" (caused by {type(root).__name__}: {_first_line(root)})"
    return text if len(text) <= _REASON_LIMIT else text[: _REASON_LIMIT - 3] + "..."


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[0] if lines else ""
