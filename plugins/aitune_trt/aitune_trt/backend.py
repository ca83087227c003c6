"""TensorRTBackend: the graph exported to ONNX, built into a TensorRT engine, run through its profiles.

Building goes: optimization profiles from the recorded shapes (:mod:`.profiles`), an
ONNX export through aitune-onnx's :func:`~aitune_onnx.export_graph` (names from access
paths, batch and dynamic axes symbolic), the precision plan for the installed TensorRT
(:mod:`.precision`), then TensorRT's parser and builder (:mod:`.engine`), with a timing
cache kept in the build's cache folder. The engine plan and the profiles (JSON) are
the artifacts: a checkpoint carries them, and a restored backend deserializes the plan
without exporting or building anything.

The three steps that need TensorRT (reading its capabilities, building a plan, opening
an engine) are the methods ``_capabilities``, ``_build_plan`` and ``_open_engine``, and
the only ones importing :mod:`aitune_trt.engine`; everything else runs, and is tested,
without TensorRT.

An engine built with ``refittable=True`` takes new weights without a rebuild
(:meth:`TensorRTBackend.refit`): the build records which of the module's tensors each
ONNX initializer was made from (:mod:`aitune_trt.weights`; TensorRT names weights after
the initializers), and a refit makes them again from the
module, hands them to a ``trt.Refitter`` and writes the plan again, so that checkpoints
carry the new weights.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any, cast

import torch

from aitune_core.plugin_api import (
    Availability,
    BuildContext,
    GraphSpec,
    Locator,
    RefitError,
    Tolerances,
    dtype_from_str,
    get_logger,
)
from aitune_core.plugin_api.deploy import Deployable, NoDeployable
from aitune_core.plugin_api.exported import (
    IOLayout,
    WeightMap,
    constant_values,
    weight_map_from_data,
    weight_map_to_data,
)
from aitune_onnx.export import ExportedModel
from aitune_onnx.exported_graph import ONNXExportedGraphBackend
from aitune_trt.availability import tensorrt_availability
from aitune_trt.config import TensorRTBackendConfig
from aitune_trt.deployable import tensorrt_deployable
from aitune_trt.options import BuildOptions, BuildResult
from aitune_trt.precision import Capabilities, CastModule, PrecisionPlan, plan_precision, tolerances_for
from aitune_trt.profiles import TensorRTProfile, profiles_from_json, profiles_to_json, resolve_profiles
from aitune_trt.runner import EngineSession, RefittableSession, TensorRTRunner
from aitune_trt.weights import engine_weight_map

ENGINE_ARTIFACT = "engine"
PROFILES_ARTIFACT = "profiles"
MODEL_FILE = "model.onnx"
PLAN_FILE = "engine.plan"
PROFILES_FILE = "profiles.json"
TIMING_CACHE_FILE = "timing.cache"
REFIT_KEY = "refit"
NOT_REFITTABLE = "the engine was built without refittable=True"


class TensorRTBackend(ONNXExportedGraphBackend):
    """One graph as a TensorRT engine with an optimization profile per shape range it serves."""

    name = "tensorrt"
    config_class = TensorRTBackendConfig
    supported_devices = ("cuda",)
    config: TensorRTBackendConfig
    required_artifacts = (ENGINE_ARTIFACT, PROFILES_ARTIFACT)
    kept_extra = ("precision", "tensorrt")

    def __init__(self, config: TensorRTBackendConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._plan_path: Path | None = None
        self._profiles_path: Path | None = None
        self._profiles: list[TensorRTProfile] = []
        self._output_dtypes: list[torch.dtype | None] | None = None
        self._precision: PrecisionPlan | None = None
        self._session: EngineSession | None = None
        self._runner: TensorRTRunner | None = None
        self._weight_map: WeightMap | None = None
        self._no_refit = NOT_REFITTABLE
        self._refitted_plan: Path | None = None

    # ------------------------------------------------------------------ identity
    @classmethod
    def availability(cls, device: torch.device | str) -> Availability:
        return tensorrt_availability(device)

    def default_tolerances(self) -> Tolerances:
        return tolerances_for(self.config.precision, self.config.tf32)

    @property
    def lossy(self) -> bool:
        """Half-precision kernels, or TF32 matmuls for float32 layers, round more than eager does."""
        return self.config.precision in ("fp16", "bf16") or self.config.tf32

    @property
    def profiles(self) -> list[TensorRTProfile]:
        """The engine's optimization profiles, in the engine's order (empty before a build or restore)."""
        return list(self._profiles)

    @property
    def plan_path(self) -> Path | None:
        return self._plan_path

    @property
    def runner(self) -> TensorRTRunner | None:
        return self._runner

    # ------------------------------------------------------------------ the TensorRT steps
    def _capabilities(self) -> Capabilities:
        from aitune_trt import engine

        return engine.capabilities()

    def _build_plan(self, onnx_path: Path, options: BuildOptions) -> BuildResult:
        from aitune_trt import engine

        return engine.build_serialized_engine(onnx_path, options)

    def _open_engine(self, plan_path: Path, device: torch.device) -> EngineSession:
        from aitune_trt import engine

        return engine.open_engine(plan_path, device, self.config.cuda_graphs)

    def _build_options(
        self, profiles: list[TensorRTProfile], precision: PrecisionPlan, timing_cache: Path
    ) -> BuildOptions:
        return BuildOptions(
            tuple(profiles),
            precision,
            self.config.workspace_bytes,
            self.config.optimization_level,
            timing_cache,
            self.config.refittable,
        )

    # ------------------------------------------------------------------ building
    def _build(self, context: BuildContext) -> None:
        self._check_available(context.device)
        config = self.config
        graph = context.graph_spec
        profiles = resolve_profiles(
            config.resolved_profile_source,
            graph,
            context.samples,
            config.profiles,
            config.cover_tuned_range,
            config.max_sample_profiles,
        )
        precision = plan_precision(config.precision, config.strongly_typed, config.tf32, self._capabilities())
        started = time.perf_counter()
        exported = self._export_cast(context, precision)
        exported_at = time.perf_counter()
        profiles = [profile.renamed(exported.input_names) for profile in profiles]
        result = self._build_plan(
            exported.path, self._build_options(profiles, precision, context.cache_dir / TIMING_CACHE_FILE)
        )
        built_at = time.perf_counter()
        self._plan_path = _write_atomically(context.cache_dir / PLAN_FILE, result.plan)
        self._profiles_path = _write_atomically(context.cache_dir / PROFILES_FILE, profiles_to_json(profiles).encode())
        self._profiles = profiles
        self._adopt(exported, context)
        self._output_dtypes = _output_dtypes(graph, exported.layout)
        self._precision = precision
        self._load()
        self._map_weights(exported, precision, context)
        warnings = [text for severity, text in result.messages if severity == "WARNING"]
        self.build_info = {
            **exported.summary(),
            "tensorrt": result.version,
            "precision": precision.describe(),
            "profiles": "; ".join(f"{i}: {profile.describe()}" for i, profile in enumerate(profiles)),
            "export_s": round(exported_at - started, 3),
            "engine_build_s": round(built_at - exported_at, 3),
            "plan_bytes": len(result.plan),
            "builder_warnings": len(warnings),
            "refit": self._weight_map.summary() if self._weight_map is not None else f"no: {self._no_refit}",
        }

    def _map_weights(self, exported: ExportedModel, precision: PrecisionPlan, context: BuildContext) -> None:
        """For a refittable engine, which of the module's tensors each weight was made from."""
        self._weight_map = None
        if not self.config.refittable:
            self._no_refit = NOT_REFITTABLE
            return
        if precision.export_dtype is not None:
            self._no_refit = f"the engine was built from the model cast to {precision.export_dtype}"
            return
        try:
            self._weight_map = engine_weight_map(exported.path, context)
        except Exception as error:
            self._no_refit = f"its weights could not be mapped ({type(error).__name__}: {error})"
            get_logger().warning("refit unavailable", backend=self.describe(), reason=self._no_refit)

    def _export_cast(self, context: BuildContext, precision: PrecisionPlan) -> ExportedModel:
        """``model.onnx``, in the precision a strongly typed engine is built in: the module as it is
        when there is no cast, so shared with ONNX Runtime candidates and other TensorRT configs."""
        if precision.export_dtype is None:
            return self._export(context, MODEL_FILE)
        dtypes = {locator: spec.dtype for locator, spec in context.graph_spec.output_spec.tensor_data}
        module = CastModule(context.module, precision.export_dtype, dtypes)
        return self._export(context, MODEL_FILE, module, f"cast to {precision.export_dtype}")

    # ------------------------------------------------------------------ loading
    def _load(self) -> None:
        """Open the engine from the plan file; this never exports or builds."""
        plan = self._file_to_load(self._plan_path, "engine plan")
        layout, signature = self._call_layout()
        device = self.context.device if self.context is not None else torch.device("cuda")
        session = self._open_engine(plan, device)
        self._runner = TensorRTRunner(layout, signature, self._profiles, session, self._output_dtypes)
        self._session = session

    # ------------------------------------------------------------------ persistence
    def _artifact_paths(self) -> dict[str, Path | None]:
        return {ENGINE_ARTIFACT: self._plan_path, PROFILES_ARTIFACT: self._profiles_path}

    def native_artifacts(self) -> frozenset[str]:
        """None today: the engine plan is deserialized by TensorRT, and no plugin library is loaded.

        An engine that used plugins would be native code (their libraries run in this
        process), as would one carrying host code (a version-compatible plan with its
        lean runtime or serialized plugin libraries); the runtime here loads no plugin
        libraries and leaves ``engine_host_code_allowed`` at its default (off), so
        TensorRT refuses such plans. Return ``{ENGINE_ARTIFACT}`` once either changes.
        """
        return frozenset()

    def _extra_state(self) -> dict[str, Any]:
        extra = super()._extra_state()
        if self._weight_map is not None:
            extra[REFIT_KEY] = weight_map_to_data(self._weight_map)
        extra["output_dtypes"] = (
            None if self._output_dtypes is None else [None if d is None else str(d) for d in self._output_dtypes]
        )
        if self._precision is not None:
            extra["precision"] = self._precision.describe()
            extra["tensorrt"] = self.build_info.get("tensorrt")
        return extra

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        super()._restore(artifacts, extra)
        self._plan_path = Path(artifacts[ENGINE_ARTIFACT])
        self._profiles_path = Path(artifacts[PROFILES_ARTIFACT])
        self._profiles = profiles_from_json(self._profiles_path.read_text())
        dtypes = extra.get("output_dtypes")
        self._output_dtypes = None if dtypes is None else [None if d is None else dtype_from_str(d) for d in dtypes]
        stored = extra.get(REFIT_KEY)
        self._weight_map = None if stored is None else weight_map_from_data(stored)
        if stored is None and self.config.refittable:
            self._no_refit = "the backend was stored without a map of its weights"

    # ------------------------------------------------------------------ new weights
    @property
    def refit_refusal(self) -> str:
        """Why :meth:`refit` cannot take new weights (empty when it can)."""
        return "" if self._weight_map is not None else self._no_refit

    def can_refit(self) -> bool:
        return self._weight_map is not None

    def _refit(self, module: torch.nn.Module) -> None:
        """Make the engine's weights again from ``module``, refit the engine, and write its plan again.

        A refit TensorRT refuses leaves the engine as it was (it applies weights only in
        ``refit_cuda_engine``), and raises RefitError naming why.
        """
        assert self._weight_map is not None
        session = self._session
        if session is None or not hasattr(session, "refit") or self.context is None:
            raise RefitError(f"{self.describe()} has no engine loaded that can take new weights")
        values = constant_values(self._weight_map, module, self.describe())
        engine = cast(RefittableSession, session)
        try:
            engine.refit(values)
            plan = engine.serialize()
        except RuntimeError as error:
            raise RefitError(f"{self.describe()} could not take the new weights: {error}") from error
        written = _write_atomically(self.context.cache_dir / f"engine-refit-{uuid.uuid4().hex}.plan", plan)
        previous, self._refitted_plan = self._refitted_plan, written
        self._plan_path = written
        if previous is not None:
            previous.unlink(missing_ok=True)

    # ------------------------------------------------------------------ deploying
    def deployable(self, graph: GraphSpec) -> Deployable | NoDeployable:
        """The engine plan and its profiles, for deploy targets (see :mod:`aitune_trt.deployable`)."""
        return tensorrt_deployable(self.describe(), self.config, self._plan_path, self._profiles, self.layout, graph)

    # ------------------------------------------------------------------ lifecycle
    def _deactivate(self) -> None:
        self._runner = None
        self._session = None

    # ------------------------------------------------------------------ inference
    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        runner = self._runner
        assert runner is not None, "an ACTIVE TensorRT backend has a runner"
        return runner(*args, **kwargs)


def _output_dtypes(graph: GraphSpec, layout: IOLayout) -> list[torch.dtype | None]:
    recorded: dict[Locator, torch.dtype] = {locator: spec.dtype for locator, spec in graph.output_spec.tensor_data}
    return [recorded.get(locator) for locator in layout.outputs]


def _write_atomically(path: Path, data: bytes) -> Path:
    """Write under a unique name and move into place, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    try:
        partial.write_bytes(data)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path
