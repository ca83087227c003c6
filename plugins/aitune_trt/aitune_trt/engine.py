"""The TensorRT calls themselves: build a plan from an ONNX file, load it and execute it.

This is the only module of aitune-trt that imports ``tensorrt``, and it is imported
only when an engine is built or loaded, so that installing, importing and listing the
plugin never needs TensorRT. It is kept to the TensorRT API and nothing else; which
profile a call takes, how its tensors are laid out and how outputs are put back are
decided in :mod:`aitune_trt.runner` and :mod:`aitune_trt.profiles`.

Written against TensorRT's Python API (10.x, with the 8.6 and 11.x differences noted
where they matter): ``Builder.create_network`` (with ``STRONGLY_TYPED`` where asked),
``OnnxParser.parse_from_file``, ``IBuilderConfig.set_memory_pool_limit``,
``builder_optimization_level``, ``set_flag``/``clear_flag``, optimization profiles
(``create_optimization_profile``, ``set_shape``), the timing cache
(``create_timing_cache``, ``set_timing_cache``, ``get_timing_cache().serialize()``) and
``build_serialized_network``; at run time ``Runtime.deserialize_cuda_engine``,
``IExecutionContext.set_optimization_profile_async``, ``set_input_shape``,
``set_tensor_address``, ``set_output_allocator`` with an ``IOutputAllocator`` (which
makes outputs with data-dependent shapes work) and ``execute_async_v3`` on the current
torch CUDA stream; for new weights, ``BuilderFlag.REFIT`` at build and a ``trt.Refitter``
(``get_all_weights``, ``get_weights_prototype``, ``set_named_weights`` with
``TensorLocation.DEVICE``, ``get_missing_weights``, ``refit_cuda_engine``), then
``ICudaEngine.serialize``. This module has not run on this project's CPU test machines; the
README says which paths have run against a real TensorRT.
"""

from __future__ import annotations

import os
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import tensorrt as trt
import torch

from aitune_trt.errors import ParserIssue, TensorRTBuildError
from aitune_trt.options import BuildOptions, BuildResult
from aitune_trt.precision import Capabilities, PrecisionPlan
from aitune_trt.runner import torch_dtype, trt_dtype_name

MIN_VERSION = (8, 6)
"""Name-based I/O (``set_input_shape``, ``execute_async_v3``), output allocators and
``builder_optimization_level`` all exist from TensorRT 8.6 on."""

_KEPT_SEVERITIES = ("INTERNAL_ERROR", "ERROR", "WARNING")


def version() -> str:
    return str(trt.__version__)


def _check_version() -> None:
    parts = tuple(int(part) for part in version().split(".")[:2] if part.isdigit())
    if parts < MIN_VERSION:
        raise RuntimeError(f"aitune-trt needs TensorRT >= {'.'.join(map(str, MIN_VERSION))}, found {version()}")


def capabilities() -> Capabilities:
    """The builder and network flags this TensorRT has, for :func:`aitune_trt.precision.plan_precision`."""
    return Capabilities(
        version=version(),
        builder_flags=frozenset(name for name in ("FP16", "BF16", "TF32") if hasattr(trt.BuilderFlag, name)),
        network_flags=frozenset(
            name for name in ("STRONGLY_TYPED", "EXPLICIT_BATCH") if hasattr(trt.NetworkDefinitionCreationFlag, name)
        ),
    )


def _severity_name(severity: Any) -> str:
    name = getattr(severity, "name", None)
    return str(name) if name else str(severity).rsplit(".", 1)[-1]


class CapturingLogger(trt.ILogger):
    """Keeps what TensorRT logs at warning level and above, for error reports and build info.

    TensorRT's own ``trt.Logger`` prints to stderr and keeps nothing, so a failed build
    would only say "returned None". ``echo`` also prints them, for debugging.
    """

    def __init__(self, echo: bool = False) -> None:
        trt.ILogger.__init__(self)
        self.messages: list[tuple[str, str]] = []
        self.echo = echo

    def log(self, severity: Any, msg: str) -> None:
        name = _severity_name(severity)
        if name in _KEPT_SEVERITIES:
            self.messages.append((name, str(msg)))
            if self.echo:
                print(f"[TensorRT {name}] {msg}")


def _parser_issue(error: Any) -> ParserIssue:
    def call(name: str, default: Any) -> Any:
        method = getattr(error, name, None)
        try:
            return method() if callable(method) else default
        except Exception:  # an older parser without this accessor
            return default

    code = call("code", "")
    return ParserIssue(
        description=str(call("desc", str(error))),
        code=_severity_name(code) if code != "" else "",
        node_index=int(call("node", -1)),
        node_name=str(call("node_name", "") or ""),
        node_operator=str(call("node_operator", "") or ""),
    )


def _network_flags(plan: PrecisionPlan) -> int:
    flags = 0
    names = trt.NetworkDefinitionCreationFlag
    if plan.strongly_typed and hasattr(names, "STRONGLY_TYPED"):
        flags |= 1 << int(names.STRONGLY_TYPED)
    if hasattr(names, "EXPLICIT_BATCH") and int(version().split(".")[0]) < 10:
        flags |= 1 << int(names.EXPLICIT_BATCH)  # implicit batch is the default before TensorRT 10
    return flags


def _load_timing_cache(config: Any, path: Path | None) -> Any:
    if path is None:
        return None
    data = path.read_bytes() if path.is_file() else b""
    try:
        cache = config.create_timing_cache(data)
    except Exception:  # written by another TensorRT version or device: start afresh
        cache = config.create_timing_cache(b"")
    config.set_timing_cache(cache, False)
    return cache


def _save_timing_cache(config: Any, path: Path) -> None:
    serialized = config.get_timing_cache().serialize()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    try:
        partial.write_bytes(bytes(memoryview(serialized)))
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def build_serialized_engine(onnx_path: Path, options: BuildOptions, echo: bool = False) -> BuildResult:
    """Parse ``onnx_path`` and build a serialized engine (a *plan*) with ``options``.

    Raises :class:`TensorRTBuildError` with the parser's errors or the builder's
    messages when TensorRT refuses the model.
    """
    _check_version()
    logger = CapturingLogger(echo)
    builder = trt.Builder(logger)
    network = builder.create_network(_network_flags(options.precision))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        issues = [_parser_issue(parser.get_error(index)) for index in range(parser.num_errors)]
        raise TensorRTBuildError("parse", f"TensorRT's ONNX parser rejected {onnx_path.name}", issues, logger.messages)

    config = builder.create_builder_config()
    if options.workspace_bytes is not None:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(options.workspace_bytes))
    if options.optimization_level is not None:
        config.builder_optimization_level = int(options.optimization_level)
    for name in options.precision.set_flags:
        config.set_flag(getattr(trt.BuilderFlag, name))
    for name in options.precision.clear_flags:
        config.clear_flag(getattr(trt.BuilderFlag, name))
    if options.refittable:
        config.set_flag(trt.BuilderFlag.REFIT)

    inputs = [network.get_input(index) for index in range(network.num_inputs)]
    shape_inputs = [tensor.name for tensor in inputs if getattr(tensor, "is_shape_tensor", False)]
    if shape_inputs:
        raise TensorRTBuildError("profile", f"inputs {shape_inputs} are shape tensors, which aitune-trt does not feed")
    for number, profile in enumerate(options.profiles):
        trt_profile = builder.create_optimization_profile()
        for tensor in inputs:
            try:
                entry = profile.entry(tensor.name)
            except KeyError:
                raise TensorRTBuildError(
                    "profile", f"network input {tensor.name!r} has no shapes in profile {number}"
                ) from None
            trt_profile.set_shape(tensor.name, entry.min, entry.opt, entry.max)
        if config.add_optimization_profile(trt_profile) < 0:
            raise TensorRTBuildError(
                "profile", f"TensorRT refused profile {number} ({profile.describe()})", messages=logger.messages
            )

    _load_timing_cache(config, options.timing_cache)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise TensorRTBuildError("build", "TensorRT could not build the engine", messages=logger.messages)
    if options.timing_cache is not None:
        _save_timing_cache(config, options.timing_cache)
    return BuildResult(bytes(memoryview(serialized)), tuple(logger.messages), version())


# ---------------------------------------------------------------------- running
class _OutputAllocator(trt.IOutputAllocator):
    """Gives TensorRT fresh torch memory for each output once its size is known.

    TensorRT calls ``reallocate_output_async`` (``reallocate_output`` before 10.0)
    during ``execute_async_v3`` with the bytes an output needs, which for outputs with
    data-dependent shapes (``nonzero``) it only knows then, and ``notify_shape`` with
    the final shape. Memory comes from torch's caching allocator on the current
    stream, and every call gets new buffers, so outputs handed to the caller are never
    overwritten by the next call.
    """

    def __init__(self, device: torch.device) -> None:
        trt.IOutputAllocator.__init__(self)
        self.device = device
        self.buffers: dict[str, tuple[torch.Tensor, int]] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}

    def reset(self) -> None:
        self.buffers = {}
        self.shapes = {}

    def _allocate(self, name: str, size: int, alignment: int) -> int:
        alignment = max(int(alignment), 1)
        buffer = torch.empty(max(int(size), 1) + alignment, dtype=torch.uint8, device=self.device)
        offset = (-buffer.data_ptr()) % alignment
        self.buffers[name] = (buffer, offset)
        return buffer.data_ptr() + offset

    def reallocate_output(self, tensor_name: str, memory: Any, size: int, alignment: int) -> int:
        return self._allocate(tensor_name, size, alignment)

    def reallocate_output_async(self, tensor_name: str, memory: Any, size: int, alignment: int, stream: Any) -> int:
        return self._allocate(tensor_name, size, alignment)

    def notify_shape(self, tensor_name: str, shape: Any) -> None:
        self.shapes[tensor_name] = tuple(int(size) for size in shape)

    def take(self, name: str, dtype: torch.dtype) -> torch.Tensor:
        if name not in self.buffers or name not in self.shapes:
            raise RuntimeError(f"TensorRT did not allocate or shape output {name!r} during execution")
        buffer, offset = self.buffers[name]
        shape = self.shapes[name]
        count = 1
        for size in shape:
            count *= size
        nbytes = count * torch.empty((), dtype=dtype).element_size()
        return buffer[offset : offset + nbytes].view(dtype).view(shape)


@attrs.define(eq=False)
class _Graph:
    """One captured CUDA graph: its own execution context, static inputs and outputs."""

    context: Any
    graph: torch.cuda.CUDAGraph
    inputs: dict[str, torch.Tensor]
    outputs: dict[str, torch.Tensor]


class TensorRTEngine:
    """A deserialized engine and what runs it; implements :class:`aitune_trt.runner.EngineSession`.

    One execution context serves every profile: switching profile
    (``set_optimization_profile_async``) happens only when a call needs another one
    than the last. With ``cuda_graphs``, each (profile, input shapes) gets its own
    execution context and captured graph (a graph fixes shapes, addresses and the
    context's internal state); at most ``max_graphs`` are kept, least recently used
    first out. CUDA graphs need output shapes that follow from the input shapes, so an
    engine with data-dependent outputs refuses them.
    """

    def __init__(self, plan: bytes, device: torch.device, cuda_graphs: bool = False, max_graphs: int = 8) -> None:
        _check_version()
        if device.type != "cuda":
            raise ValueError(f"TensorRT engines run on CUDA devices, not {device}")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.logger = CapturingLogger()
        with torch.cuda.device(device):
            torch.cuda.current_stream(device)  # make sure the CUDA context exists before TensorRT uses it
            self.runtime = trt.Runtime(self.logger)
            self.engine = self.runtime.deserialize_cuda_engine(plan)
            if self.engine is None:
                said = "; ".join(text for _, text in self.logger.messages[-5:])
                raise RuntimeError(f"TensorRT could not load the engine plan: {said or 'no message'}")
            self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(index) for index in range(self.engine.num_io_tensors)]
        self.input_names = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.output_names = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        shape_inputs = [n for n in self.input_names if self.engine.is_shape_inference_io(n)]
        if shape_inputs:
            raise RuntimeError(f"engine inputs {shape_inputs} are shape tensors, which aitune-trt does not feed")
        self.input_dtypes = {n: torch_dtype(self.engine.get_tensor_dtype(n).name, n) for n in self.input_names}
        self.output_dtypes = {n: torch_dtype(self.engine.get_tensor_dtype(n).name, n) for n in self.output_names}
        self.cuda_graphs = cuda_graphs
        self.max_graphs = max_graphs
        self._graphs: OrderedDict[tuple[Any, ...], _Graph] = OrderedDict()
        self._profile = 0  # a new context starts with profile 0
        self._allocator = _OutputAllocator(device)
        if not cuda_graphs:
            for name in self.output_names:
                if not self.context.set_output_allocator(name, self._allocator):
                    raise RuntimeError(f"TensorRT refused an output allocator for {name!r}")

    @property
    def num_profiles(self) -> int:
        return int(self.engine.num_optimization_profiles)

    def profile_shapes(self, name: str, index: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        low, opt, high = self.engine.get_tensor_profile_shape(name, index)
        return tuple(low), tuple(opt), tuple(high)

    def _stream(self) -> torch.cuda.Stream:
        return torch.cuda.current_stream(self.device)

    def run(self, profile: int, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with torch.cuda.device(self.device):
            if self.cuda_graphs:
                return self._run_graph(profile, inputs)
            return self._run(profile, inputs)

    def _run(self, profile: int, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        stream = self._stream()
        context = self.context
        if profile != self._profile:
            if not context.set_optimization_profile_async(profile, stream.cuda_stream):
                raise RuntimeError(f"TensorRT could not switch to optimization profile {profile}")
            self._profile = profile
        _bind_inputs(context, inputs)
        self._allocator.reset()
        for name in self.output_names:  # an allocator stays set, but setting it is cheap and explicit
            context.set_output_allocator(name, self._allocator)
        if not context.execute_async_v3(stream.cuda_stream):
            raise RuntimeError(f"TensorRT execution failed: {self._last_message()}")
        return {name: self._allocator.take(name, self.output_dtypes[name]) for name in self.output_names}

    def _run_graph(self, profile: int, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        key = (profile, *(tuple(inputs[name].shape) for name in self.input_names))
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._capture(profile, inputs)
            self._graphs[key] = entry
            while len(self._graphs) > self.max_graphs:
                _, evicted = self._graphs.popitem(last=False)
                evicted.graph.reset()
        else:
            self._graphs.move_to_end(key)
            for name in self.input_names:
                entry.inputs[name].copy_(inputs[name])
        entry.graph.replay()
        return {name: tensor.clone() for name, tensor in entry.outputs.items()}

    def _capture(self, profile: int, inputs: Mapping[str, torch.Tensor]) -> _Graph:
        stream = self._stream()
        context = self.engine.create_execution_context()
        if not context.set_optimization_profile_async(profile, stream.cuda_stream):
            raise RuntimeError(f"TensorRT could not switch to optimization profile {profile}")
        static_inputs = {name: inputs[name].clone() for name in self.input_names}
        _bind_inputs(context, static_inputs)
        outputs = {}
        for name in self.output_names:
            shape = tuple(context.get_tensor_shape(name))
            if any(size < 0 for size in shape):
                raise RuntimeError(
                    f"output {name!r} has a data-dependent shape {shape}; CUDA graphs need shapes known from the "
                    "inputs, so build this graph with cuda_graphs=False"
                )
            outputs[name] = torch.empty(shape, dtype=self.output_dtypes[name], device=self.device)
            context.set_tensor_address(name, outputs[name].data_ptr())
        # One ordinary run first: TensorRT applies shape changes lazily, and the deferred
        # work must not end up inside the captured graph.
        if not context.execute_async_v3(stream.cuda_stream):
            raise RuntimeError(f"TensorRT execution failed: {self._last_message()}")
        graph = torch.cuda.CUDAGraph()
        capture_stream = torch.cuda.Stream(self.device)
        capture_stream.wait_stream(stream)
        with torch.cuda.graph(graph, stream=capture_stream):
            if not context.execute_async_v3(capture_stream.cuda_stream):
                raise RuntimeError(f"TensorRT execution failed while capturing: {self._last_message()}")
        stream.wait_stream(capture_stream)
        return _Graph(context, graph, static_inputs, outputs)

    def _last_message(self) -> str:
        return self.logger.messages[-1][1] if self.logger.messages else "no message"

    # ------------------------------------------------------------------ new weights
    def refit(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Replace the engine's weights by name (the ONNX initializers' names) with ``weights``.

        Only weights the engine lists as refittable are set; TensorRT then names any it
        also needs (weights it combined with those given), and the refit fails naming them.
        Captured CUDA graphs are dropped: they are captured again on their next call.
        """
        held = []
        with torch.cuda.device(self.device):
            refitter = trt.Refitter(self.engine, self.logger)
            refittable = set(refitter.get_all_weights())
            for name, value in weights.items():
                if name not in refittable:
                    continue  # folded by TensorRT into something it refits under other names, or not a weight
                tensor = value.to(self.device).contiguous()
                prototype = refitter.get_weights_prototype(name) if hasattr(refitter, "get_weights_prototype") else None
                if prototype is not None and (prototype.dtype.name, prototype.size) != (
                    trt_dtype_name(tensor.dtype),
                    tensor.numel(),
                ):
                    raise RuntimeError(
                        f"weights {name!r} are {tensor.numel()} {tensor.dtype}, the engine holds "
                        f"{prototype.size} {prototype.dtype.name}"
                    )
                held.append(tensor)
                given = trt.Weights(
                    getattr(trt.DataType, trt_dtype_name(tensor.dtype)), tensor.data_ptr(), tensor.numel()
                )
                if not refitter.set_named_weights(name, given, trt.TensorLocation.DEVICE):
                    raise RuntimeError(f"TensorRT refused the new weights {name!r}: {self._last_message()}")
            missing = list(refitter.get_missing_weights())
            if missing:
                raise RuntimeError(f"TensorRT also needs weights the module does not give: {', '.join(missing[:8])}")
            torch.cuda.current_stream(self.device).synchronize()  # the copies above are done before TensorRT reads
            if not refitter.refit_cuda_engine():
                raise RuntimeError(f"TensorRT could not refit the engine: {self._last_message()}")
        del held
        for graph in self._graphs.values():
            graph.graph.reset()
        self._graphs.clear()

    def serialize(self) -> bytes:
        """The engine as a plan, with the weights it holds now."""
        return bytes(memoryview(self.engine.serialize()))


def _bind_inputs(context: Any, inputs: Mapping[str, torch.Tensor]) -> None:
    for name, tensor in inputs.items():
        if not context.set_input_shape(name, tuple(tensor.shape)):
            raise RuntimeError(f"TensorRT refused shape {list(tensor.shape)} for input {name!r}")
        if not context.set_tensor_address(name, tensor.data_ptr()):
            raise RuntimeError(f"TensorRT refused the address of input {name!r}")


def open_engine(plan_path: Path, device: torch.device, cuda_graphs: bool = False) -> TensorRTEngine:
    """Load a plan file; this never builds."""
    return TensorRTEngine(plan_path.read_bytes(), device, cuda_graphs)
