"""ONNX Runtime sessions: which execution provider, with which options, and the per-call path.

Availability is decided here, before anything is exported: a CUDA provider that the
installed onnxruntime build lacks, or a machine without a CUDA device, is reported
with that reason so that strategies skip the backend instead of spending an export on
it. A session that ONNX Runtime quietly created on the CPU instead of the provider
asked for is refused too, since its timings would be the CPU's.

Calls go through IOBinding: inputs are bound where the torch tensors' memory already
is (no copy, no numpy), ONNX Runtime allocates each output at its real size (which is
what makes data-dependent output shapes work) and the outputs become torch tensors
through DLPack, again without a copy.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from aitune_core.plugin_api import Availability
from aitune_onnx.config import ONNXRuntimeBackendConfig

if TYPE_CHECKING:
    import onnxruntime

PROVIDER_CHAINS: dict[str, tuple[str, ...]] = {
    "cpu": ("CPUExecutionProvider",),
    "cuda": ("CUDAExecutionProvider", "CPUExecutionProvider"),
    "tensorrt": ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"),
}
"""The providers a session is given for each choice, best first; ONNX Runtime places each
node on the first one that takes it."""

PROVIDER_DEVICES = {"cpu": "cpu", "cuda": "cuda", "tensorrt": "cuda"}
_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",
    "all": "ORT_ENABLE_ALL",
}
ONNX_TYPES: dict[torch.dtype, int] = {
    torch.float32: 1,
    torch.uint8: 2,
    torch.int8: 3,
    torch.uint16: 4,
    torch.int16: 5,
    torch.int32: 6,
    torch.int64: 7,
    torch.bool: 9,
    torch.float16: 10,
    torch.float64: 11,
    torch.uint32: 12,
    torch.uint64: 13,
    torch.bfloat16: 16,
}
"""torch dtype -> ``onnx.TensorProto`` element type, which ``bind_input`` takes as an int."""


def default_provider(device: torch.device | str) -> str:
    """The provider a device gets when none is configured."""
    return "cuda" if torch.device(device).type == "cuda" else "cpu"


def provider_availability(provider: str, device: torch.device | str) -> Availability:
    """Whether ``provider`` can run on ``device`` here, and if not, every reason why.

    The CPU provider is part of every onnxruntime build, so checking that onnx,
    onnxscript and onnxruntime are installed is enough and imports none of them.
    """
    device = torch.device(device)
    wanted = PROVIDER_DEVICES[provider]
    if device.type != wanted:
        return Availability.no(f"the {provider} execution provider runs on {wanted}, not {device.type}")
    missing = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]
    if missing:
        return Availability.no(f"{', '.join(missing)} not importable; pip install onnx onnxscript onnxruntime")
    if provider == "cpu":
        return Availability.yes()
    try:
        import onnxruntime
    except Exception as error:  # a broken install is as good as none
        return Availability.no(f"onnxruntime not importable ({type(error).__name__}: {error})")
    reasons = []
    name = PROVIDER_CHAINS[provider][0]
    available = onnxruntime.get_available_providers()
    if name not in available:
        package = "onnxruntime-gpu built with TensorRT" if provider == "tensorrt" else "onnxruntime-gpu"
        reasons.append(
            f"{name} is not in this onnxruntime build ({onnxruntime.__version__}, which has "
            f"{', '.join(available)}); install {package} instead of onnxruntime"
        )
    if not torch.cuda.is_available():
        reasons.append("no CUDA device")
    return Availability.no("; ".join(reasons)) if reasons else Availability.yes()


def session_options(config: ONNXRuntimeBackendConfig) -> onnxruntime.SessionOptions:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    level = getattr(onnxruntime.GraphOptimizationLevel, _LEVELS[config.graph_optimization_level], None)
    if level is None:
        raise ValueError(
            f"graph_optimization_level={config.graph_optimization_level!r} needs a newer onnxruntime "
            f"than {onnxruntime.__version__}"
        )
    options.graph_optimization_level = level
    threads = config.intra_op_num_threads
    options.intra_op_num_threads = torch.get_num_threads() if threads is None else threads
    options.inter_op_num_threads = config.inter_op_num_threads
    options.execution_mode = (
        onnxruntime.ExecutionMode.ORT_PARALLEL
        if config.execution_mode == "parallel"
        else onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    )
    if not config.allow_spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if not config.spin_between_runs:
        options.add_session_config_entry("session.force_spinning_stop", "1")
    options.log_severity_level = 3  # errors only: shape and placement notes are not the user's concern
    return options


def _providers(config: ONNXRuntimeBackendConfig, device: torch.device) -> list[Any]:
    """The provider chain with options: the configured ones for the first, and every GPU
    provider (the CUDA fallback of TensorRT included) on the backend's device."""
    chain: list[Any] = []
    for position, name in enumerate(PROVIDER_CHAINS[config.provider]):
        options = dict(config.provider_options or {}) if position == 0 else {}
        if device.type == "cuda" and name != "CPUExecutionProvider":
            options.setdefault("device_id", str(device.index if device.index is not None else 0))
        chain.append((name, options) if options else name)
    return chain


NUMPY_LACKS = ("bfloat16", "float8", "float4", "int4")
"""Element types numpy has no dtype for: a session with one of them in or out is called with IO binding."""


def numpy_holds(session: Any) -> bool:
    """Whether every input and output of ``session`` has an element type numpy can hold."""
    types = [value.type for value in (*session.get_inputs(), *session.get_outputs())]
    return not any(lacking in str(type_) for type_ in types for lacking in NUMPY_LACKS)


def _to_torch(value: Any) -> torch.Tensor:
    if hasattr(value, "__dlpack__"):
        return torch.from_dlpack(value)
    return torch.from_numpy(value.numpy())  # onnxruntime without DLPack on OrtValue


class OrtRunner:
    """One ONNX Runtime session and the cheapest way to call it with torch tensors.

    input_names: the model's inputs in the order calls provide tensors; names the model
        does not have (inputs an exporter dropped as unused) are skipped.
    output_names: the outputs to return, in order.
    """

    def __init__(
        self,
        model_path: Path,
        config: ONNXRuntimeBackendConfig,
        device: torch.device,
        input_names: Sequence[str],
        output_names: Sequence[str],
    ) -> None:
        import onnxruntime

        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.config = config
        self.session = onnxruntime.InferenceSession(
            str(model_path), session_options(config), providers=_providers(config, device)
        )
        wanted = PROVIDER_CHAINS[config.provider][0]
        placed = self.session.get_providers()
        if not placed or placed[0] != wanted:
            raise RuntimeError(
                f"onnxruntime did not create the {wanted} (the session has {placed}); check that the "
                "provider's libraries (CUDA, cuDNN, TensorRT) are installed and match this onnxruntime build"
            )
        present = {value.name for value in self.session.get_inputs()}
        self._inputs = [(index, name) for index, name in enumerate(input_names) if name in present]
        self._outputs = list(output_names)
        self._device_type = device.type
        self._device_id = device.index or 0
        self._io_binding = (
            config.io_binding or device.type != "cpu" or (config.io_binding is None and not numpy_holds(self.session))
        )

    @property
    def providers(self) -> list[str]:
        return list(self.session.get_providers())

    def one_tensor_call(self, output: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """:meth:`run` for a model of one input, returning output ``output`` alone; None where IO binding is used.

        The same session call with the layers of lists and loops taken out: at batch 1 a
        small model's whole call is 0.1-0.2 ms, and they cost a tenth of it.
        """
        if self._io_binding or len(self._inputs) != 1 or self._inputs[0][0] != 0:
            return None
        run, (_, name), wanted = self.session.run, self._inputs[0], [self._outputs[output]]
        from_numpy = torch.from_numpy

        def call(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.requires_grad:  # a detach on every call costs a tensor object; numpy() refuses only these
                tensor = tensor.detach()
            return from_numpy(run(wanted, {name: tensor.contiguous().numpy()})[0])

        return call

    def run(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Run the model on ``tensors`` (one per input name given at construction)."""
        if not self._io_binding:
            feed = {name: tensors[index].detach().contiguous().numpy() for index, name in self._inputs}
            return [torch.from_numpy(array) for array in self.session.run(self._outputs, feed)]
        device, device_type, device_id = self.device, self._device_type, self._device_id
        binding = self.session.io_binding()
        held = []  # the bound memory must stay alive until the run ends
        for index, name in self._inputs:
            tensor = tensors[index]
            if tensor.device != device:
                tensor = tensor.to(device)
            if not tensor.is_contiguous():
                tensor = tensor.contiguous()
            held.append(tensor)
            binding.bind_input(
                name, device_type, device_id, ONNX_TYPES[tensor.dtype], tuple(tensor.shape), tensor.data_ptr()
            )
        for name in self._outputs:
            binding.bind_output(name, device_type, device_id)
        if device_type == "cuda":
            # ONNX Runtime runs on its own stream; the inputs may still be written on torch's.
            torch.cuda.current_stream(device).synchronize()
        self.session.run_with_iobinding(binding)
        return [_to_torch(value) for value in binding.get_outputs()]
