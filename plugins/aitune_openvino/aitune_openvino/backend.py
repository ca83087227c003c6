"""OpenVINOBackend: the graph converted to an OpenVINO IR and run by OpenVINO's CPU plugin.

The IR (``model.xml``, the graph, and ``model.bin``, its weights) is the artifact: a
checkpoint carries both, sealed with their sha256, and a backend restored from one
compiles them directly, without converting again and without the model's code at
hand. An IR is data that OpenVINO's own kernels run, not native code, so loading it
needs no ``trust_native_code``. What a restored backend needs besides the files (how
a call maps onto the IR's flat inputs and back) is aitune's exported-graph layout,
kept by :class:`aitune_core.plugin_api.ExportedGraphBackend`, which the ONNX Runtime
and TensorRT backends share.

A built backend takes new weights without converting again (:meth:`OpenVINOBackend.refit`):
the build records what each of the IR's constants was made from, and a refit writes the
IR again with constants made from the module's tensors and compiles it (see
:mod:`aitune_openvino.refit`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aitune_core.plugin_api import Availability, BuildContext, GraphSpec, RefitError, Tolerances, get_logger
from aitune_core.plugin_api.deploy import Deployable, NoDeployable
from aitune_core.plugin_api.exported import (
    ExportedGraphBackend,
    RefitFolders,
    WeightMap,
    check_layout_fits_graph,
    constant_values,
    weight_map_from_data,
    weight_map_to_data,
)
from aitune_openvino.availability import openvino_availability
from aitune_openvino.config import OpenVINOConfig
from aitune_openvino.convert import convert_graph
from aitune_openvino.deployable import openvino_deployable
from aitune_openvino.refit import weight_map_for, write_refitted
from aitune_openvino.runtime import CompiledIR, resolve_hint

XML_ARTIFACT = "ir_xml"
BIN_ARTIFACT = "ir_bin"
CONVERSION_KEY = "conversion"
REFIT_KEY = "refit"
NO_MAP = "the backend was stored without a map of its weights (before refit existed)"
MAX_XML_BYTES = 256 * 1024 * 1024
"""An IR's XML holds the graph, not its weights (those are in the ``.bin``): a larger
one is refused before OpenVINO reads it into memory."""
_NUMPY_LESS = (torch.bfloat16,)
"""Input dtypes OpenVINO's Python API cannot take as numpy arrays, so not without a copy and a cast."""
LOSSY_TOLERANCES = {"bf16": 5e-2, "f16": 1e-2}
"""atol and rtol for float outputs at each reduced inference precision."""


class OpenVINOBackend(ExportedGraphBackend):
    """The graph converted with its dims (see :mod:`aitune_openvino.convert`), run by OpenVINO on the CPU."""

    name = "openvino"  # checkpoints store this name: never change it once released
    config_class = OpenVINOConfig
    supported_devices = ("cpu",)
    config: OpenVINOConfig
    required_artifacts = (XML_ARTIFACT, BIN_ARTIFACT)
    kept_extra = (CONVERSION_KEY,)

    def __init__(self, config: OpenVINOConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._xml: Path | None = None
        self._bin: Path | None = None
        self._conversion: dict[str, Any] | None = None
        self._compiled: CompiledIR | None = None
        self._weight_map: WeightMap | None = None
        self._no_refit = NO_MAP
        self._refit_folders = RefitFolders("aitune-ov-refit-")

    @classmethod
    def availability(cls, device: torch.device | str) -> Availability:
        """CPUs, where the ``openvino`` package is installed; it is looked for, not imported."""
        return openvino_availability(device)

    @property
    def lossy(self) -> bool:
        """bf16 or f16 inference, or float16 weights in the IR: numbers that differ from eager's on purpose."""
        return self.config.lossy

    def default_tolerances(self) -> Tolerances:
        if self.config.inference_precision in LOSSY_TOLERANCES:
            limit = LOSSY_TOLERANCES[self.config.inference_precision]
            return Tolerances.uniform(atol=limit, rtol=limit)
        if self.config.compress_to_fp16:
            return Tolerances.uniform(atol=1e-2, rtol=1e-2)
        return Tolerances()

    @property
    def compiled(self) -> CompiledIR | None:
        """The compiled IR while active (its hint, threads and inference precision), else None."""
        return self._compiled

    # ------------------------------------------------------------------ building
    def declines(self, context: BuildContext) -> str | None:
        """Python decisions on the data (see the base class), and input dtypes numpy has no type for."""
        reason = super().declines(context)
        if reason is not None:
            return reason
        for locator, spec in context.graph_spec.input_spec.tensor_data:
            if spec.dtype in _NUMPY_LESS:
                return f"input {locator.display_path} is {spec.dtype}, which OpenVINO's Python API cannot take"
        return None

    def _build(self, context: BuildContext) -> None:
        self._check_available(context.device)
        converted = convert_graph(
            context.module, context.graph_spec, context.samples, context.signature, self.config, context.cache_dir
        )
        self._adopt_layout(converted.layout, context)
        self._xml, self._bin = converted.xml, converted.bin
        self._conversion = {
            "converter": converted.converter,
            "fallback_reason": converted.fallback_reason,
            "input_shapes": converted.input_shapes,
        }
        if converted.fallback_reason:
            self.build_note = f"converted by tracing: {converted.fallback_reason}"
        self._load()
        assert self._compiled is not None
        self._map_weights(context)
        self.build_info = {
            **converted.summary(),
            "hint": self._compiled.hint,
            "threads": self._compiled.threads,
            "inference_precision": self._compiled.precision,
            "refit": self._weight_map.summary() if self._weight_map is not None else f"no: {self._no_refit}",
        }

    def _map_weights(self, context: BuildContext) -> None:
        """Record what each constant of the IR was made from; without it the backend cannot refit, and says why."""
        assert self._xml is not None and self._bin is not None
        try:
            self._weight_map = weight_map_for(self._xml, self._bin, context)
        except Exception as error:
            self._weight_map = None
            self._no_refit = f"its weights could not be mapped ({type(error).__name__}: {error})"
            get_logger().warning("refit unavailable", backend=self.describe(), reason=self._no_refit)

    # ------------------------------------------------------------------ loading
    def _load(self) -> None:
        """Compile the IR from its two files; this never converts."""
        xml = self._file_to_load(self._xml, "IR graph (.xml)")
        weights = self._file_to_load(self._bin, "IR weights (.bin)")
        size = xml.stat().st_size
        if size > MAX_XML_BYTES:
            raise ValueError(
                f"{self.describe()}: refusing IR graph {xml.name} of {size} bytes, over {MAX_XML_BYTES}: an IR's XML "
                "holds the graph, its weights are in the .bin; convert the model again, or restore the checkpoint"
            )
        layout, _ = self._call_layout()
        max_batch = None
        if self.context is not None:
            check_layout_fits_graph(self.describe(), layout, self.context.graph_spec)
            batch_range = self.context.graph_spec.batch_range
            max_batch = None if batch_range is None else batch_range[1]
        compiled = CompiledIR(xml, weights, self.config, resolve_hint(self.config, max_batch))
        if compiled.input_count != len(layout.inputs) or compiled.output_count != len(layout.outputs):
            raise ValueError(
                f"{self.describe()}: the IR has {compiled.input_count} inputs and {compiled.output_count} outputs, "
                f"its stored layout {len(layout.inputs)} and {len(layout.outputs)}; convert the model again, or "
                "restore the checkpoint's manifest"
            )
        self._compiled = compiled

    def _deactivate(self) -> None:
        self._compiled = None

    # ------------------------------------------------------------------ inference
    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        layout, compiled = self._layout, self._compiled
        assert layout is not None and compiled is not None
        return layout.rebuild(compiled.run(self._flatten_call(args, kwargs)))

    def _one_tensor_call(self, output: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
        return None if self._compiled is None else self._compiled.one_tensor_call(output)

    # ------------------------------------------------------------------ refit
    def can_refit(self) -> bool:
        """Whether the build (or the checkpoint) recorded what the IR's constants were made from."""
        return self._weight_map is not None

    @property
    def refit_refusal(self) -> str:
        """Why :meth:`can_refit` is False ("" when it is True)."""
        return "" if self._weight_map is not None else self._no_refit

    def _refit(self, module: torch.nn.Module) -> None:
        """Write the IR again with constants made from ``module``'s weights, into a folder of its own, and compile it.

        Nothing changes when this fails: the old files and compiled model stay, and RefitError says why.
        """
        assert self._weight_map is not None and self._xml is not None and self._bin is not None
        values = constant_values(self._weight_map, module, self.describe())
        folder = self._refit_folders.new(self.context.cache_dir if self.context is not None else None)
        previous = (self._xml, self._bin, self._compiled)
        try:
            self._xml, self._bin = write_refitted(self._xml, self._bin, values, folder)
            del values
            self._load()
        except Exception as error:
            self._xml, self._bin, self._compiled = previous
            shutil.rmtree(folder, ignore_errors=True)
            reason = f"{type(error).__name__}: {error}"
            raise RefitError(f"{self.describe()} could not take the new weights: {reason}") from error
        self._refit_folders.serve(folder)

    # ------------------------------------------------------------------ deploying
    def deployable(self, graph: GraphSpec) -> Deployable | NoDeployable:
        """The IR's two files, for deploy targets (see :mod:`aitune_openvino.deployable`)."""
        return openvino_deployable(self.describe(), self.config, (self._xml, self._bin), self.layout, graph)

    # ------------------------------------------------------------------ persistence
    def _artifact_paths(self) -> dict[str, Path | None]:
        return {XML_ARTIFACT: self._xml, BIN_ARTIFACT: self._bin}

    def native_artifacts(self) -> frozenset[str]:
        """None: the IR is a graph and its weights, run by OpenVINO's own kernels (no extension library is loaded)."""
        return frozenset()

    def _extra_state(self) -> dict[str, Any]:
        extra = super()._extra_state()
        if self._conversion is not None:
            extra[CONVERSION_KEY] = self._conversion
        extra[REFIT_KEY] = None if self._weight_map is None else weight_map_to_data(self._weight_map)
        return extra

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        super()._restore(artifacts, extra)
        conversion = extra.get(CONVERSION_KEY)
        if conversion is not None and not isinstance(conversion, dict):
            raise ValueError(f"{type(self).__name__} checkpoint data: {CONVERSION_KEY!r} is not a mapping")
        self._xml = Path(artifacts[XML_ARTIFACT])
        self._bin = Path(artifacts[BIN_ARTIFACT])
        stored = extra.get(REFIT_KEY)
        self._weight_map = None if stored is None else weight_map_from_data(stored)
