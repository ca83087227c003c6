"""Compiling an IR for the CPU, and the per-call path.

Compiling reads the IR from its two files (``Core.read_model(xml, bin)``), never from
a model still in memory, so what runs is exactly what a checkpoint carries. The
properties (``INFERENCE_PRECISION_HINT``, ``PERFORMANCE_HINT``,
``INFERENCE_NUM_THREADS``, and no dynamic quantization while lossless) come from the
config, and the compiled model is asked back for its inference precision: a build that
asked for f32 and got anything else is refused.

Calls are zero-copy both ways where OpenVINO allows it. Inputs are the torch tensors'
own memory, as ``ov.Tensor``s over numpy views (``shared_memory=True``; a non-contiguous
tensor is made contiguous first), set on the request one by one. Outputs are written
by OpenVINO straight into tensors allocated for this call and handed to torch as they
are: before each call every output port gets a fresh ``ov.Tensor``, which the CPU
plugin resizes to the output's real shape (data-dependent sizes included) and fills,
so no output is ever copied and none is shared with a later call. Each thread gets
its own infer request, since a request runs one call at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from aitune_openvino.config import OpenVINOConfig

if TYPE_CHECKING:
    import openvino

_HINTS = {"latency": "LATENCY", "throughput": "THROUGHPUT"}
_core: Any = None
_core_lock = threading.Lock()


def ov_core() -> openvino.Core:
    """One ``ov.Core`` for the process: it holds the device plugins, loaded once."""
    global _core
    with _core_lock:
        if _core is None:
            import openvino as ov

            _core = ov.Core()
        return _core


def resolve_hint(config: OpenVINOConfig, max_batch: int | None) -> str:
    """The performance hint for a graph whose largest batch is ``max_batch`` (None: no batch axis)."""
    if config.performance_hint != "auto":
        return config.performance_hint
    return "throughput" if max_batch is not None and max_batch > 1 else "latency"


def resolve_threads(config: OpenVINOConfig) -> int:
    """``INFERENCE_NUM_THREADS``: the config's, or torch's thread count now."""
    return torch.get_num_threads() if config.num_threads is None else config.num_threads


def compile_properties(config: OpenVINOConfig, hint: str, threads: int) -> dict[Any, Any]:
    import openvino as ov
    import openvino.properties as props
    import openvino.properties.hint as hints

    properties: dict[Any, Any] = {
        hints.inference_precision(): getattr(ov.Type, config.inference_precision),
        hints.performance_mode(): getattr(hints.PerformanceMode, _HINTS[hint]),
        props.inference_num_threads(): threads,
    }
    if not config.lossy:
        properties[hints.dynamic_quantization_group_size()] = 0
    return properties


class CompiledIR:
    """An IR compiled for the CPU, and how its calls run (see the module docstring)."""

    def __init__(self, xml: Path, weights: Path, config: OpenVINOConfig, hint: str) -> None:
        import openvino as ov
        import openvino.properties.hint as hints

        self.threads = resolve_threads(config)
        self.hint = hint
        core = ov_core()
        model = core.read_model(model=str(xml), weights=str(weights))
        self.compiled = core.compile_model(model, "CPU", compile_properties(config, hint, self.threads))
        self.precision = self.compiled.get_property(hints.inference_precision()).get_type_name()
        if config.inference_precision == "f32" and self.precision != "f32":
            raise RuntimeError(
                f"OpenVINO compiled the model with inference precision {self.precision} although f32 was asked for; "
                "its results would not be float32's"
            )
        self.input_count = len(self.compiled.inputs)
        self._outputs = [
            (port.get_element_type(), ov.Shape(_start_shape(port.get_partial_shape())))
            for port in self.compiled.outputs
        ]
        self._ov_tensor = ov.Tensor
        self._local = threading.local()

    @property
    def output_count(self) -> int:
        return len(self._outputs)

    def _request(self) -> Any:
        request = getattr(self._local, "request", None)
        if request is None:
            request = self._local.request = self.compiled.create_infer_request()
        return request

    def run(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """The outputs of one call on ``tensors`` (CPU tensors, in the IR's input order)."""
        request = self._request()
        ov_tensor = self._ov_tensor
        # Inputs set one by one, as tensors over the arrays' memory: infer() given a list of
        # arrays goes through OpenVINO's data dispatcher, which cost 45-65 us per call more
        # on the demo MLP and transformer (docs/benchmarks.md, "OpenVINO per call").
        # The arrays are held until the call returns: an ov.Tensor over shared memory does not
        # keep it alive, and a contiguous copy made for this call has no other owner.
        arrays = [_as_array(tensor) for tensor in tensors]
        for index, array in enumerate(arrays):
            request.set_input_tensor(index, ov_tensor(array, shared_memory=True))
        for index, (element_type, shape) in enumerate(self._outputs):
            request.set_output_tensor(index, ov_tensor(element_type, shape))
        request.infer()
        del arrays
        return [torch.from_numpy(request.get_output_tensor(index).data) for index in range(len(self._outputs))]

    def one_tensor_call(self, output: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """:meth:`run` for an IR of one input, returning output ``output`` alone; None for other IRs.

        The same request calls with the lists and loops around them taken out, for the
        calls where they show (a small model at batch 1 runs in 0.1-0.3 ms).
        """
        if self.input_count != 1:
            return None
        request_for, ov_tensor, outputs, from_numpy = self._request, self._ov_tensor, self._outputs, torch.from_numpy

        def call(tensor: torch.Tensor) -> torch.Tensor:
            request = request_for()
            array = _as_array(tensor)  # held until the call returns, as in run()
            request.set_input_tensor(0, ov_tensor(array, shared_memory=True))
            for index, (element_type, shape) in enumerate(outputs):
                request.set_output_tensor(index, ov_tensor(element_type, shape))
            request.infer()
            return from_numpy(request.get_output_tensor(output).data)

        return call


def _as_array(tensor: torch.Tensor) -> Any:
    if tensor.requires_grad:  # numpy() refuses only these; a detach on every call costs a tensor object
        tensor = tensor.detach()
    return tensor.contiguous().numpy()


def _start_shape(shape: openvino.PartialShape) -> list[int]:
    """The shape an output tensor is allocated with before a call: its own where static, else empty.

    The CPU plugin sets a dynamic output's real shape on the tensor it is given (growing
    its memory), so an empty one costs nothing until the call fills it.
    """
    return [dim.get_length() if dim.is_static else 0 for dim in shape] if shape.rank.is_static else [0]
