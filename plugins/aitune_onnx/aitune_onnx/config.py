"""The ONNX Runtime backend's config: how to export, and how to run the session.

One flat attrs class, so that users write ``ONNXRuntimeBackend(provider="cuda",
intra_op_num_threads=4)`` and checkpoints store plain values. The export settings come
from :class:`~aitune_onnx.exported_graph.ExportedGraphConfig`, which the TensorRT
backend's config shares, and are handed to :func:`aitune_onnx.export.export_graph`.
"""

from __future__ import annotations

from typing import Any

import attrs

from aitune_core.plugin_api import allowed_options
from aitune_onnx.exported_graph import ExportedGraphConfig
from aitune_onnx.provider_options import provider_allow_list

PROVIDERS = ("cpu", "cuda", "tensorrt")
OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "layout", "all")
EXECUTION_MODES = ("sequential", "parallel")


def _string_dict(value: dict[str, Any] | None) -> dict[str, str] | None:
    """Provider options as ONNX Runtime takes them (strings), sorted so that keys stay stable."""
    if value is None:
        return None
    return {str(key): str(value[key]) for key in sorted(value)}


def _non_negative(_instance: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"{attribute.name} must be a whole number >= 0, got {value!r}")


@attrs.frozen
class ONNXRuntimeBackendConfig(ExportedGraphConfig):
    """Settings of :class:`~aitune_onnx.ONNXRuntimeBackend`.

    provider: the execution provider: ``"cpu"``, ``"cuda"`` or ``"tensorrt"`` (the
        latter two need ``onnxruntime-gpu`` and a CUDA device; TensorRT falls back to
        CUDA, and both to the CPU, for nodes they do not take).
    provider_options: options of that provider, as ONNX Runtime documents them; only
        those in :mod:`aitune_onnx.provider_options` unless the config is made with
        ``unsafe_options=True`` (never stored in checkpoints).
    graph_optimization_level: ``"disable"``, ``"basic"``, ``"extended"``, ``"layout"``
        or ``"all"`` (ONNX Runtime's ``GraphOptimizationLevel``).
    intra_op_num_threads: threads inside one operator; None uses as many as torch
        does (``torch.get_num_threads()``), so that the comparison with eager is fair;
        0 leaves the choice to ONNX Runtime.
    inter_op_num_threads: threads across operators (parallel mode only); 0 is ONNX Runtime's default.
    execution_mode: ``"sequential"`` or ``"parallel"``.
    allow_spinning: let idle ONNX Runtime threads spin, waiting for work; off hands the
        cores back to the rest of the program between calls, at some latency.
    spin_between_runs: keep the thread pool spinning after a run returns (ONNX Runtime's
        default). Off (the default here) sets ``session.force_spinning_stop``: the pool still
        spins within a run, where it pays, but stops when the run returns. Left spinning, at
        two threads on two cores its worker held a whole core for about 30 ms after every
        run, so torch code called next (eager parts of the pipeline, another graph's
        backend, eager itself while profiling) ran on one core and took about twice as long:
        ONNX Runtime looked about 2x faster than eager while tuning and served at eager's
        speed afterwards.
    io_binding: bind the torch tensors' memory as inputs and take the outputs without a
        copy (always on a GPU). None (the default) binds on the CPU only where numpy
        cannot hold an input or output (bfloat16, 8-bit floats): otherwise ``session.run``
        on numpy views is the cheaper call there (about 15 us less per call, measured on
        the demo MLP at batch 1, and no slower at batch 64). True binds on the CPU too.
    exporter, torchscript_fallback, opset_version, optimize, external_data: how the
        graph is exported; see :class:`~aitune_onnx.exported_graph.ExportedGraphConfig`.
    """

    provider: str = attrs.field(default="cpu", validator=attrs.validators.in_(PROVIDERS))
    provider_options: dict[str, str] | None = attrs.field(
        default=None, converter=_string_dict, validator=allowed_options(provider_allow_list)
    )
    graph_optimization_level: str = attrs.field(default="all", validator=attrs.validators.in_(OPTIMIZATION_LEVELS))
    intra_op_num_threads: int | None = attrs.field(default=None, validator=_non_negative)
    inter_op_num_threads: int = attrs.field(default=0, validator=_non_negative)
    execution_mode: str = attrs.field(default="sequential", validator=attrs.validators.in_(EXECUTION_MODES))
    allow_spinning: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    spin_between_runs: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    io_binding: bool | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(bool))
    )
