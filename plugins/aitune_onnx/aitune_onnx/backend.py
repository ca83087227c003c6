"""ONNXRuntimeBackend: the graph exported to ONNX and run by an ONNX Runtime session.

The ``.onnx`` file (and its external data file, for large models) is the artifact: a
checkpoint carries it, and a backend restored from one loads it straight into a
session, with no export and without the model's code at hand. What a restored backend
needs besides the file (the input and output layout, see :mod:`.layout`) is saved as
plain JSON next to the config.

ONNX models are built for ranges, but ONNX Runtime does not check the graph's tuned
upper bounds on each call; aitune's routing sends calls outside the tuned range to
eager before they reach the backend.

A built backend takes new weights without exporting again (:meth:`ONNXRuntimeBackend.refit`):
the build records which of the module's tensors each initializer holds, and a refit writes
the model again with them and opens a new session (see :mod:`aitune_onnx.refit`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aitune_core.plugin_api import Availability, BuildContext, GraphSpec, RefitError, get_logger
from aitune_core.plugin_api.deploy import Deployable, NoDeployable
from aitune_core.plugin_api.exported import (
    IOLayout,
    RefitFolders,
    WeightMap,
    check_layout_fits_graph,
    constant_values,
    weight_map_from_data,
    weight_map_to_data,
)
from aitune_onnx.config import ONNXRuntimeBackendConfig
from aitune_onnx.deployable import onnx_deployable
from aitune_onnx.export import data_file_name
from aitune_onnx.export_cache import link_or_copy
from aitune_onnx.exported_graph import ONNXExportedGraphBackend
from aitune_onnx.refit import describe_map, prepare, save_model, write_refitted
from aitune_onnx.session import PROVIDER_DEVICES, OrtRunner, default_provider, provider_availability

_FALSE_TEXT = ("0", "false", "False")
"""How provider options say off (see :class:`aitune_core.backends.safe_options.BoolRule`)."""

MODEL_ARTIFACT = "model"
DATA_ARTIFACT = "external_data"
MODEL_FILE = "model.onnx"
DATA_LOCATION_KEY = "external_data_location"
REFIT_KEY = "refit"
NO_MAP = "the backend was stored without a map of its weights (before refit existed)"
MAX_FILE_NAME_BYTES = 255


class _ConfiguredAvailability:
    """``availability(device)`` that knows the provider when asked on an instance.

    On the class (as the plugin registry asks) it answers for the provider a device
    gets by default; on an instance (as strategies ask their blueprints) it answers for
    the configured one, so ``ONNXRuntimeBackend(provider="tensorrt")`` is skipped with
    the TensorRT provider's reason rather than failing mid-build.
    """

    def __get__(
        self, instance: ONNXRuntimeBackend | None, owner: type[ONNXRuntimeBackend]
    ) -> Callable[[torch.device | str], Availability]:
        def availability(device: torch.device | str) -> Availability:
            device = torch.device(device)
            if device.type not in owner.supported_devices:
                return Availability.no(
                    f"{owner.__name__} runs on {', '.join(owner.supported_devices)}, not {device.type}"
                )
            provider = instance.config.provider if instance is not None else default_provider(device)
            return provider_availability(provider, device)

        return availability


class ONNXRuntimeBackend(ONNXExportedGraphBackend):
    """The graph exported with its dims (see :func:`aitune_onnx.export.export_graph`), run by ONNX Runtime."""

    name = "onnxruntime"
    config_class = ONNXRuntimeBackendConfig
    supported_devices = ("cpu", "cuda")
    availability = _ConfiguredAvailability()  # type: ignore[assignment, unused-ignore]
    config: ONNXRuntimeBackendConfig
    required_artifacts = (MODEL_ARTIFACT,)
    kept_extra = ("export",)

    def __init__(self, config: ONNXRuntimeBackendConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._model_path: Path | None = None
        self._data_path: Path | None = None
        self._data_location: str | None = None
        self._runner: OrtRunner | None = None
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        self._weight_map: WeightMap | None = None
        self._no_refit = NO_MAP
        self._refit_folders = RefitFolders("aitune-onnx-refit-")

    @property
    def lossy(self) -> bool:
        """Whether the provider computes float32 in less than float32.

        The CPU provider computes as eager does. The CUDA provider uses TF32 for float32
        matmuls and convolutions unless ``use_tf32`` is off; TensorRT does too, and so does
        the CUDA provider it falls back to, besides any fp16/bf16/int8 switch.
        """
        config = self.config
        if config.provider == "cpu":
            return False
        if config.provider == "tensorrt":
            return True
        return (config.provider_options or {}).get("use_tf32", "1") not in _FALSE_TEXT

    @property
    def model_path(self) -> Path | None:
        return self._model_path

    @property
    def session(self) -> Any:
        """The live ``onnxruntime.InferenceSession``, or None while inactive."""
        return None if self._runner is None else self._runner.session

    # ------------------------------------------------------------------ building
    def _build(self, context: BuildContext) -> None:
        self._check_available(context.device)
        # Candidates that differ in provider or session options share one export (see export_cache).
        exported = self._export(context, MODEL_FILE)
        self._adopt(exported, context)
        self._model_path = exported.path
        self._data_path = exported.external_data
        self._data_location = None if exported.external_data is None else exported.external_data.name
        rewrites = self._prepare_refit(context)
        self._load()
        assert self._runner is not None
        self.build_info = {
            **exported.summary(),
            "providers": ", ".join(self._runner.providers),
            **describe_map(self._weight_map, self._no_refit),
        }
        if rewrites:
            self.build_info["refit_rewrites"] = rewrites

    def _prepare_refit(self, context: BuildContext) -> str:
        """Record which tensors each initializer holds, serving the model rewritten for it where the map asks.

        Without a map the backend cannot refit, and says why; the exported model then serves as it is.
        """
        assert self._model_path is not None
        try:
            prepared = prepare(self._model_file(), context)
            if prepared.model is not None:
                external = self._data_path is not None
                folder = context.cache_dir / f"refittable-{uuid.uuid4().hex}"
                self._model_path, self._data_path = save_model(prepared.model, folder, MODEL_FILE, external)
                self._data_location = None if self._data_path is None else self._data_path.name
        except Exception as error:
            self._weight_map = None
            self._no_refit = f"its weights could not be mapped ({type(error).__name__}: {error})"
            get_logger().warning("refit unavailable", backend=self.describe(), reason=self._no_refit)
            return ""
        self._weight_map = prepared.weight_map
        return prepared.rewrites

    def _load(self) -> None:
        """Create the session from the files; this never exports."""
        self._file_to_load(self._model_path, "ONNX model")
        layout, _ = self._call_layout()
        device = (
            self.context.device if self.context is not None else torch.device(PROVIDER_DEVICES[self.config.provider])
        )
        runner = OrtRunner(self._model_file(), self.config, device, layout.input_names, layout.output_names)
        check_layout_names(self.describe(), layout, runner.session)
        if self.context is not None:
            check_layout_fits_graph(self.describe(), layout, self.context.graph_spec)
        self._runner = runner

    def _model_file(self) -> Path:
        """The model path to open, with its external data beside it under the name it expects.

        A checkpoint stores each artifact in a folder of its own, and copies may be
        renamed, but ONNX Runtime looks for external data by the file name recorded in
        the model, next to the model. When that does not hold, both files are linked
        (or copied, across file systems) into a fresh folder that only this process
        writes to; nothing outside it is created, and nothing is ever removed but that
        folder, so a name taken from a checkpoint cannot reach any other file.
        """
        assert self._model_path is not None
        if self._data_path is None or self._data_location is None:
            return self._model_path
        location = plain_file_name(DATA_LOCATION_KEY, self._data_location)
        expected = self._model_path.parent / location
        if expected.exists() and os.path.samefile(expected, self._data_path):
            return self._model_path
        folder = self._new_scratch()
        for source, name in ((self._model_path, MODEL_FILE), (self._data_path, location)):
            target = folder / name
            if target.resolve().parent != folder.resolve():
                raise ValueError(f"{self.describe()}: {name!r} does not stay inside the private folder {folder}")
            link_or_copy(source, target)
        return folder / MODEL_FILE

    def _new_scratch(self) -> Path:
        """A fresh private folder (mode 0700) under the build's cache folder, or the temp folder."""
        self._drop_scratch()
        parent = None
        if self.context is not None:
            self.context.cache_dir.mkdir(parents=True, exist_ok=True)
            parent = self.context.cache_dir
        self._scratch = tempfile.TemporaryDirectory(prefix="aitune-onnx-", dir=parent, ignore_cleanup_errors=True)
        return Path(self._scratch.name)

    def _drop_scratch(self) -> None:
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None

    # ------------------------------------------------------------------ refit
    def can_refit(self) -> bool:
        """Whether the build (or the checkpoint) recorded which tensors the model's initializers hold."""
        return self._weight_map is not None

    @property
    def refit_refusal(self) -> str:
        """Why :meth:`can_refit` is False ("" when it is True)."""
        return "" if self._weight_map is not None else self._no_refit

    def _refit(self, module: torch.nn.Module) -> None:
        """Write the model again with ``module``'s weights, into a folder of its own, and open a session on it.

        Nothing changes when this fails: the old files and session stay, and RefitError says why.
        """
        assert self._weight_map is not None and self._model_path is not None
        values = constant_values(self._weight_map, module, self.describe())
        folder = self._refit_folders.new(self.context.cache_dir if self.context is not None else None)
        previous = (self._model_path, self._data_path, self._data_location, self._runner)
        try:
            model, data = write_refitted(self._model_file(), values, folder, MODEL_FILE)
            del values
            self._model_path, self._data_path = model, data if data.stat().st_size else None
            self._data_location = None if self._data_path is None else data.name
            self._load()
        except Exception as error:
            self._model_path, self._data_path, self._data_location, self._runner = previous
            shutil.rmtree(folder, ignore_errors=True)
            reason = f"{type(error).__name__}: {error}"
            raise RefitError(f"{self.describe()} could not take the new weights: {reason}") from error
        self._refit_folders.serve(folder)

    # ------------------------------------------------------------------ persistence
    def _artifact_paths(self) -> dict[str, Path | None]:
        return {MODEL_ARTIFACT: self._model_path, DATA_ARTIFACT: self._data_path}

    def native_artifacts(self) -> frozenset[str]:
        """None: the model and its weights are data that ONNX Runtime's own kernels run.

        Custom-op libraries would be native code, but the session registers none
        (``SessionOptions.register_custom_ops_library`` is never called), and provider
        options that load libraries are refused (:mod:`aitune_onnx.provider_options`).
        """
        return frozenset()

    def _extra_state(self) -> dict[str, Any]:
        extra = {**super()._extra_state(), DATA_LOCATION_KEY: self._data_location}
        extra[REFIT_KEY] = None if self._weight_map is None else weight_map_to_data(self._weight_map)
        if self._exported is not None:
            extra["export"] = {
                "exporter": self._exported.exporter,
                "opset": self._exported.opset,
                "dynamic_axes": {
                    name: {str(axis): symbol for axis, symbol in axes.items()}
                    for name, axes in self._exported.dynamic_axes.items()
                },
            }
        return extra

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        super()._restore(artifacts, extra)
        self._model_path = Path(artifacts[MODEL_ARTIFACT])
        data = artifacts.get(DATA_ARTIFACT)
        self._data_path = None if data is None else Path(data)
        location = extra.get(DATA_LOCATION_KEY)
        if location is not None:
            self._data_location = plain_file_name(DATA_LOCATION_KEY, location)
        else:
            self._data_location = None if data is None else data_file_name(Path(MODEL_FILE))
        stored = extra.get(REFIT_KEY)
        self._weight_map = None if stored is None else weight_map_from_data(stored)

    # ------------------------------------------------------------------ lifecycle
    def _deactivate(self) -> None:
        self._runner = None
        self._drop_scratch()

    # ------------------------------------------------------------------ inference
    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        layout = self._layout
        runner = self._runner
        assert layout is not None and runner is not None
        return layout.rebuild(runner.run(self._flatten_call(args, kwargs)))

    def _one_tensor_call(self, output: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
        return None if self._runner is None else self._runner.one_tensor_call(output)

    # ------------------------------------------------------------------ deploying
    def deployable(self, graph: GraphSpec) -> Deployable | NoDeployable:
        """The ``.onnx`` file and its external data, for deploy targets (see :mod:`aitune_onnx.deployable`)."""
        data = None
        if self._data_path is not None:
            data = (self._data_path, self._data_location or data_file_name(Path(MODEL_FILE)))
        return onnx_deployable(self.describe(), self.config, self._model_path, data, self.layout, graph)


def plain_file_name(key: str, value: Any) -> str:
    """``value`` when it is a bare file name; a ValueError naming ``key`` otherwise.

    Such names come from a checkpoint's manifest, which anyone may edit: a path in
    one (absolute, ``..``, or with a folder) would make loading write where it points.
    """
    problem = None
    if not isinstance(value, str) or not value:
        problem = "is not a file name"
    elif value in (".", "..") or any(separator in value for separator in "/\\:"):
        problem = "is a path (or names a drive), not a bare file name"
    elif "\x00" in value or not value.isprintable():
        problem = "holds control characters"
    elif len(value.encode(errors="replace")) > MAX_FILE_NAME_BYTES:
        problem = f"is longer than {MAX_FILE_NAME_BYTES} bytes"
    elif value == MODEL_FILE:
        problem = f"is the model's own file name, {MODEL_FILE!r}"
    if problem is not None:
        raise ValueError(
            f"refusing {key}={value!r}: it {problem}; the external data file sits next to the model, so this must "
            f"be a plain file name such as {data_file_name(Path(MODEL_FILE))!r} (export the model again, or restore "
            "the checkpoint's manifest)"
        )
    return value


def check_layout_names(owner: str, layout: IOLayout, session: Any) -> None:
    """The layout must name the model's own inputs and outputs.

    A restored layout comes from the checkpoint's manifest; a name the model lacks
    would otherwise fail only at the first call, after loading had reported success.
    """
    inputs = [value.name for value in session.get_inputs()]
    outputs = {value.name for value in session.get_outputs()}
    not_fed = [name for name in inputs if name not in layout.input_names]
    unknown = [name for name in layout.output_names if name not in outputs]
    if not_fed or unknown:
        raise ValueError(
            f"{owner}: the stored input/output layout does not fit the ONNX model (model inputs it does not feed: "
            f"{not_fed}; outputs the model does not have: {unknown}); export the model again, or restore the "
            "checkpoint's manifest"
        )
