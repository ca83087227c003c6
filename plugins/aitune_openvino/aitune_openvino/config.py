"""OpenVINOConfig: how the graph is converted, compiled and stored.

One flat attrs class, so that users write ``OpenVINOBackend(inference_precision="bf16")``
and checkpoints store plain values. What is lossless by default, and why:

* OpenVINO's CPU plugin runs float32 models in bfloat16 on CPUs that have it (AMX,
  AVX512-BF16; ``INFERENCE_PRECISION_HINT`` defaults to ``bf16`` there) and may quantize
  activations dynamically. The default pins ``f32`` and turns dynamic quantization off,
  and the build checks that the compiled model kept ``f32``.
* ``ov.save_model`` compresses weights to float16 unless told not to. The default keeps
  float32 weights (``compress_to_fp16=False``), so the IR a checkpoint carries computes
  what was validated.

``inference_precision="bf16"`` or ``"f16"``, or ``compress_to_fp16=True``, change the
numbers on purpose: the backend is then ``lossy`` and is tried only when the user opts
in (``ait.config.allow_lossy``, or naming it).
"""

from __future__ import annotations

from typing import Any

import attrs

from aitune_core.plugin_api import BackendConfig

PRECISIONS = ("f32", "bf16", "f16")
PERFORMANCE_HINTS = ("auto", "latency", "throughput")
CONVERTERS = ("export", "trace")


def _threads(_instance: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{attribute.name} must be None or a whole number >= 0, got {value!r}")


def _in(choices: tuple[str, ...]) -> Any:
    return [attrs.validators.instance_of(str), attrs.validators.in_(choices)]


@attrs.frozen
class OpenVINOConfig(BackendConfig):
    """Settings of :class:`~aitune_openvino.OpenVINOBackend`.

    performance_hint: OpenVINO's ``PERFORMANCE_HINT``: ``"latency"`` (all threads on
        one request), ``"throughput"`` (threads split into streams, for several requests
        at once), or ``"auto"``: latency for a graph that serves batch 1 only (or has
        no batch axis), throughput for larger batches. aitune calls a backend one
        request at a time, where latency measured faster (see the plugin's README), so
        latency is the default.
    inference_precision: ``INFERENCE_PRECISION_HINT``: ``"f32"`` (lossless, the default),
        ``"bf16"`` or ``"f16"`` (lossy; where the CPU lacks the type, OpenVINO computes
        in f32 and the build info says so).
    num_threads: ``INFERENCE_NUM_THREADS``; None takes ``torch.get_num_threads()`` when
        the model is compiled, so that OpenVINO uses what torch (and the comparison with
        eager) uses; 0 leaves the choice to OpenVINO.
    converter: ``"export"`` converts the graph's ``torch.export`` program, with its
        batch and dynamic axes as ``ov.Dimension(min, max)``; ``"trace"`` converts the
        module by tracing it (``torch.jit.trace`` inside ``ov.convert_model``).
    trace_fallback: when ``torch.export`` or the conversion of its program fails,
        convert by tracing instead; the candidate's row says so, with the reason.
    compress_to_fp16: store the IR's weights as float16 (``ov.save_model``'s default,
        off here): half the size, and lossy.
    """

    performance_hint: str = attrs.field(default="latency", validator=_in(PERFORMANCE_HINTS))
    inference_precision: str = attrs.field(default="f32", validator=_in(PRECISIONS))
    num_threads: int | None = attrs.field(default=None, validator=_threads)
    converter: str = attrs.field(default="export", validator=_in(CONVERTERS))
    trace_fallback: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    compress_to_fp16: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))

    @property
    def lossy(self) -> bool:
        """Whether this config computes in, or stores weights in, less than float32."""
        return self.inference_precision != "f32" or self.compress_to_fp16
