"""Exporting one graph of a module to an ONNX file: the API other plugins build on.

:func:`export_graph` takes what a backend's build context holds (the module, the graph
spec, its recorded samples and the forward signature) and writes a checked ``.onnx``
file (plus one external data file for large models) whose inputs and outputs are the
graph's tensors, flat, named after their access paths (see :mod:`.names`), with the
graph's batch and dynamic axes symbolic (see :mod:`.dims`). The returned
:class:`ExportedModel` says what the file holds: names, symbolic axes, which exporter
produced it, and the :class:`~aitune_core.plugin_api.exported.IOLayout` that turns a call into the
model's inputs and its outputs back into what the module returns.

The dynamo exporter (``torch.onnx.export(..., dynamo=True)``) is the default. The
TorchScript exporter (``dynamo=False``) can be chosen, and by default is tried when
the dynamo exporter fails; a model whose export fails either way raises
:class:`ExportError` with each exporter's message and the first operator that has no
ONNX translation, if that is what stopped it.

Nothing here imports onnx, onnxscript or onnxruntime at module import time.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import torch

from aitune_core.plugin_api import ForwardSignature, GraphSpec, Sample
from aitune_core.plugin_api.exported import FlatModule, IOLayout, OutputMismatchError, modes_kept, quiet_export
from aitune_core.plugin_api.exported import example_call as _example_call
from aitune_onnx import dims

if TYPE_CHECKING:
    import onnx

EXPORTERS = ("dynamo", "torchscript")
EXTERNAL_DATA = ("auto", "always", "never")
DATA_SUFFIX = ".data"
INLINE_LIMIT = 1536 * 1024 * 1024
"""Weights above this go to an external data file under ``external_data="auto"`` (protobuf stops at 2 GB)."""
INLINE_BYTES = 256
"""Tensors smaller than this stay in the ``.onnx`` file even with external data: shape constants
must, since ONNX Runtime's shape inference cannot read external tensors."""
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_UNSUPPORTED_OP = (
    re.compile(r"No ONNX function found for <OpOverload\(op='([^']+)', overload='([^']+)'\)>"),
    re.compile(r"No ONNX function found for ([\w.:]+)"),
    re.compile(r"Exporting the operator '([^']+)' to ONNX"),
    re.compile(r"unrecognized namespace ([\w:.]+)"),
)


@attrs.frozen
class ExportConfig:
    """How a graph is exported.

    exporter: ``"dynamo"`` (``torch.export`` based, the default) or ``"torchscript"``.
    torchscript_fallback: when the dynamo exporter fails, try the TorchScript exporter.
    opset_version: the ONNX opset to target; None takes the exporter's default.
    optimize: run the dynamo exporter's ONNX optimizer (constant folding, dead code).
    external_data: ``"auto"`` keeps weights in the ``.onnx`` file unless the model is
        over protobuf's 2 GB limit, ``"always"`` writes them to one ``<model>.onnx.data``
        file beside it, ``"never"`` keeps them inline (and fails for models over 2 GB).
    """

    exporter: str = attrs.field(default="dynamo", validator=attrs.validators.in_(EXPORTERS))
    torchscript_fallback: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    opset_version: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(int))
    )
    optimize: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    external_data: str = attrs.field(default="auto", validator=attrs.validators.in_(EXTERNAL_DATA))


@attrs.define(eq=False)
class ExportedModel:
    """An exported graph, checked by ``onnx.checker``.

    path: the ``.onnx`` file. external_data: its weights file, or None when inline.
    layout: the mapping between calls and the model's flat inputs and outputs.
    dynamic_axes: ``onnx name -> {axis: symbol}`` for inputs and outputs.
    exporter: the exporter that produced the file; fallback_reason: why the one
        configured first failed, when another one stepped in.
    unused_inputs: inputs the exporter left out because the model never reads them.
    data_dependent_outputs: outputs whose size is not tied to the input sizes.
    shape_inference: ``"ok"``, or why ONNX shape inference could not run.
    reused_from: the export cache entry the files were taken from, when no export ran
        (see :mod:`aitune_onnx.export_cache`).
    """

    path: Path
    external_data: Path | None
    layout: IOLayout
    dynamic_axes: dict[str, dict[int, str]]
    exporter: str
    opset: int
    fallback_reason: str = ""
    unused_inputs: list[str] = attrs.field(factory=list)
    data_dependent_outputs: list[str] = attrs.field(factory=list)
    shape_inference: str = "ok"
    duration_s: float = 0.0
    reused_from: Path | None = None

    @property
    def input_names(self) -> dict[str, str]:
        """Access path -> ONNX input name, in input order."""
        return self.layout.input_name_map

    @property
    def output_names(self) -> dict[str, str]:
        """Access path -> ONNX output name, in output order."""
        return self.layout.output_name_map

    @property
    def files(self) -> list[Path]:
        return [self.path] if self.external_data is None else [self.path, self.external_data]

    def summary(self) -> dict[str, Any]:
        """Plain values for build reports and logs."""
        info: dict[str, Any] = {
            "exporter": self.exporter,
            "opset": self.opset,
            "export_s": round(self.duration_s, 3),
            "onnx_bytes": sum(path.stat().st_size for path in self.files),
            "inputs": ", ".join(
                f"{name}{_shape_text(self.dynamic_axes.get(name))}" for name in self.layout.input_names
            ),
            "outputs": ", ".join(self.layout.output_names),
            "shape_inference": self.shape_inference,
        }
        if self.fallback_reason:
            info["fallback_reason"] = self.fallback_reason
        if self.unused_inputs:
            info["unused_inputs"] = ", ".join(self.unused_inputs)
        if self.data_dependent_outputs:
            info["data_dependent_outputs"] = ", ".join(self.data_dependent_outputs)
        if self.reused_from is not None:
            info["export_reused"] = str(self.reused_from)
        return info


def _shape_text(axes: dict[int, str] | None) -> str:
    return "" if not axes else "[" + ", ".join(f"{axis}={name}" for axis, name in sorted(axes.items())) + "]"


class ExportError(RuntimeError):
    """No exporter could turn the graph into a valid ONNX model.

    failures: ``(exporter, message)`` for each exporter tried, in order.
    unsupported_op: the first operator reported as having no ONNX translation, if any.
    """

    def __init__(self, message: str, failures: Sequence[tuple[str, str]] = (), unsupported_op: str | None = None):
        super().__init__(message)
        self.failures = list(failures)
        self.unsupported_op = unsupported_op


# ---------------------------------------------------------------------- the export
def export_graph(
    module: torch.nn.Module,
    graph_spec: GraphSpec,
    samples: Sequence[Sample],
    signature: ForwardSignature,
    path: str | Path,
    config: ExportConfig | None = None,
    device: torch.device | str | None = None,
) -> ExportedModel:
    """Export one graph of ``module`` to the ONNX file ``path`` and check it.

    The example call is the first sample resized to the graph's opt shapes (largest
    batch, middle of each dynamic range); the module runs once on it in eager mode to
    learn its output structure. ``device``: where the example runs (default: where the
    module's parameters are). Raises :class:`ExportError` when no exporter succeeds or
    the result fails ``onnx.checker``.
    """
    config = config or ExportConfig()
    path = Path(path)
    arguments, layout = example_call(module, graph_spec, samples, signature, device)
    adapter = FlatModule(module, layout, arguments, signature)
    tensors = tuple(layout.flatten(arguments))

    path.parent.mkdir(parents=True, exist_ok=True)
    order = [config.exporter]
    if config.exporter == "dynamo" and config.torchscript_fallback:
        order.append("torchscript")
    failures: list[tuple[str, str]] = []
    unsupported: str | None = None
    started = time.perf_counter()
    used = None
    for exporter in order:
        _remove_outputs(path)
        try:
            with torch.no_grad(), quiet_export(*_EXPORTER_LOGGERS), modes_kept(module):
                _run_exporter(exporter, adapter, tensors, graph_spec, layout, path, config)
        except Exception as error:
            message, op = describe_failure(exporter, error)
            failures.append((exporter, message))
            unsupported = unsupported or op
            continue
        used = exporter
        break
    if used is None:
        _remove_outputs(path)
        text = "; then ".join(message for _, message in failures)
        if unsupported:
            text += f". First unsupported operator: {unsupported}"
        raise ExportError(f"could not export graph {graph_spec.name} to ONNX: {text}", failures, unsupported)
    duration = time.perf_counter() - started
    data = _arrange_external_data(path, config.external_data)
    exported = _inspect(path, data, layout, used, duration)
    if failures:
        exported.fallback_reason = failures[0][1]
    return exported


def example_call(
    module: torch.nn.Module,
    graph_spec: GraphSpec,
    samples: Sequence[Sample],
    signature: ForwardSignature,
    device: torch.device | str | None = None,
) -> tuple[dict[str, Any], IOLayout]:
    """The call an export traces and its layout (see :func:`aitune_core.plugin_api.exported.example_call`).

    A module that returns other tensors than the graph recorded raises :class:`ExportError`.
    """
    try:
        return _example_call(module, graph_spec, samples, signature, device)
    except OutputMismatchError as error:
        raise ExportError(str(error)) from error


_EXPORTER_LOGGERS = ("torch.onnx._internal.exporter._registration",)
"""Besides the warnings about what aitune handles (axis names shared on purpose, the
TorchScript exporter's deprecation, traced size arithmetic that validation checks at
min, opt and max), the exporter logs on every export that torchvision's operators are
skipped when torchvision is not installed."""


def _run_exporter(
    exporter: str,
    adapter: FlatModule,
    tensors: tuple[torch.Tensor, ...],
    graph: GraphSpec,
    layout: IOLayout,
    path: Path,
    config: ExportConfig,
) -> None:
    """Write ``path`` with one exporter, told the graph's names and symbolic axes each in its own terms."""
    common: dict[str, Any] = {
        "input_names": layout.input_names,
        "output_names": layout.output_names,
        "opset_version": config.opset_version,
    }
    if exporter == "torchscript":
        axes = dims.torchscript_axes(graph, layout)
        torch.onnx.export(adapter, tensors, str(path), dynamo=False, dynamic_axes=axes, **common)
        return
    shapes = dims.dynamo_shapes(graph, layout)
    program = torch.onnx.export(
        adapter, tensors, dynamo=True, dynamic_shapes=shapes, optimize=config.optimize, verbose=False, **common
    )
    assert program is not None
    _save_program(program, graph, layout, path, config)


def _save_program(
    program: torch.onnx.ONNXProgram, graph: GraphSpec, layout: IOLayout, path: Path, config: ExportConfig
) -> None:
    """The dynamo exporter's program on disk, its invented dim names replaced by readable ones."""
    with contextlib.suppress(Exception):  # readable dim names are a nicety, never a failure
        renames = dims.dynamo_renames(graph, layout, list(program.model.graph.inputs))
        if renames:
            program.rename_axes(renames)  # type: ignore[arg-type]
    weights = sum(value.const_value.nbytes for value in program.model.graph.initializers.values() if value.const_value)
    if config.external_data == "always" or (config.external_data == "auto" and weights > INLINE_LIMIT):
        import onnx_ir

        # Not program.save(external_data=True): that moves every tensor out, shape constants
        # included, and ONNX Runtime cannot run shape inference on external shape tensors.
        onnx_ir.save(program.model, str(path), external_data=data_file_name(path), size_threshold_bytes=INLINE_BYTES)
    else:
        program.save(str(path), external_data=False)


def describe_failure(exporter: str, error: BaseException) -> tuple[str, str | None]:
    """One readable message for an exporter's failure, and the first unsupported operator named in it.

    The exporters' own messages open with generic advice ("Next steps: ...") and keep
    the specifics in the chained exceptions; the message keeps the exporter's first
    sentence and the innermost cause.
    """
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and len(chain) < 16 and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    texts = [_ANSI.sub("", str(item)) for item in chain]
    op = None
    for pattern in _UNSUPPORTED_OP:
        for text in texts:
            match = pattern.search(text)
            if match:
                op = ".".join(match.groups())
                break
        if op:
            break
    head = texts[0].split("Next steps:")[0].strip().splitlines()[0] if texts[0].strip() else ""
    message = f"{exporter} exporter raised {type(error).__name__}: {_clip(head)}"
    if len(chain) > 1:
        root = chain[-1]
        message += f" (caused by {type(root).__name__}: {_clip(' '.join(texts[-1].split()))})"
    return message, op


def _clip(text: str, limit: int = 600) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------- files
def data_file_name(path: Path) -> str:
    """The external data file of ``model.onnx``: ``model.onnx.data``, beside it."""
    return path.name + DATA_SUFFIX


def _remove_outputs(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.with_name(data_file_name(path)).unlink(missing_ok=True)


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor a graph stores: initializers and tensor attributes, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _tensors(attribute.g)
            for subgraph in attribute.graphs:
                yield from _tensors(subgraph)


def external_locations(model: onnx.ModelProto) -> set[str]:
    """The external data files a model's tensors point at, relative to the model's folder."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    return {ExternalDataInfo(tensor).location for tensor in _tensors(model.graph) if uses_external_data(tensor)}


def _arrange_external_data(path: Path, mode: str) -> Path | None:
    """Leave the weights where ``mode`` says: one data file beside the model, or inline.

    The TorchScript exporter writes one file per large tensor, and the dynamo exporter
    decides on its own above 2 GB; either way the result is brought to at most one
    ``<model>.onnx.data`` file, which is what checkpoints carry.
    """
    import onnx

    data = path.with_name(data_file_name(path))
    locations = external_locations(onnx.load(str(path), load_external_data=False))
    if not locations and mode != "always":
        return None
    if locations == {data.name} and mode != "never":
        return data
    full = onnx.load(str(path))  # every weight in memory: the old files can go before the new are written
    for stale in {data, *(path.parent / location for location in locations)}:
        stale.unlink(missing_ok=True)  # onnx appends to an existing data file
    if mode == "never":
        try:
            onnx.save_model(full, str(path))
        except (ValueError, OSError) as error:
            raise ExportError(f"the model's weights cannot be kept inside the .onnx file: {error}") from error
        return None
    onnx.save_model(
        full,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=data.name,
        size_threshold=INLINE_BYTES,
    )
    return data if data.is_file() else None  # a model with no tensor of INLINE_BYTES keeps all inline


def _inspect(path: Path, data: Path | None, layout: IOLayout, exporter: str, duration: float) -> ExportedModel:
    """Check the written model and read back what it holds."""
    import onnx

    try:
        onnx.checker.check_model(str(path))  # the path-based check works past 2 GB
    except Exception as error:
        raise ExportError(f"onnx.checker rejected the {exporter} export: {error}") from error
    shape_inference = _run_shape_inference(path)
    model = onnx.load(str(path), load_external_data=False)
    input_dims, output_dims = dims.read_dims(model)
    if list(output_dims) != layout.output_names:
        raise ExportError(
            f"the {exporter} export has outputs {list(output_dims)}, expected {layout.output_names}; "
            "the module may return one tensor twice or return an input unchanged"
        )
    unknown = [name for name in input_dims if name not in layout.input_names]
    if unknown:
        raise ExportError(f"the {exporter} export has inputs {unknown} that the graph does not have")
    opset = next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), 0)
    return ExportedModel(
        path=path,
        external_data=data,
        layout=layout,
        dynamic_axes=dims.symbolic_axes({**input_dims, **output_dims}),
        exporter=exporter,
        opset=opset,
        unused_inputs=[name for name in layout.input_names if name not in input_dims],
        data_dependent_outputs=dims.data_dependent_outputs(input_dims, output_dims),
        shape_inference=shape_inference,
        duration_s=duration,
    )


def _run_shape_inference(path: Path) -> str:
    """Run ONNX's strict shape inference (from the file, so it works past 2 GB)."""
    import onnx

    inferred = path.with_name(path.stem + ".inferred.onnx")
    try:
        onnx.shape_inference.infer_shapes_path(str(path), str(inferred), check_type=True, strict_mode=True)
    except Exception as error:
        return f"not run: {' '.join(str(error).split())[:300]}"
    finally:
        inferred.unlink(missing_ok=True)
    return "ok"
