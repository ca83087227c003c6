"""The TensorRT engine a backend serves, described as a standalone artifact for deploy targets.

The serialized engine (``model.plan``) runs in a TensorRT runtime of the version that
built it, on GPUs of the compute capability it was built on, Triton's TensorRT backend
included, with no aitune and none of the model's code. Its bindings are named as the
ONNX export named the graph's flat tensors, and its optimization profiles, in the
engine's order, go with it: a server picks among them as aitune's runner does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aitune_core.plugin_api import GraphSpec
from aitune_core.plugin_api.deploy import (
    Deployable,
    NoDeployable,
    OptimizationProfile,
    ProfileShapes,
    RuntimeOptions,
    flat_io,
)
from aitune_core.plugin_api.exported import IOLayout
from aitune_trt.config import TensorRTBackendConfig
from aitune_trt.profiles import TensorRTProfile

PLAN_FILE = "model.plan"


def tensorrt_deployable(
    owner: str,
    config: TensorRTBackendConfig,
    plan: Path | None,
    profiles: Sequence[TensorRTProfile],
    layout: IOLayout | None,
    graph: GraphSpec,
) -> Deployable | NoDeployable:
    """The engine ``owner`` serves ``graph`` from, with its optimization profiles."""
    if plan is None or not plan.is_file():
        return NoDeployable(f"{owner} has no engine plan; build it or restore it from a checkpoint")
    try:
        inputs, outputs = flat_io(layout, graph)
    except ValueError as error:
        return NoDeployable(f"{owner}: {error}")
    shapes = tuple(
        OptimizationProfile(
            tuple(ProfileShapes(entry.name, entry.min, entry.opt, entry.max) for entry in profile.inputs)
        )
        for profile in profiles
    )
    precision = "tf32" if config.precision == "fp32" and config.tf32 else config.precision
    runtime = RuntimeOptions(device="cuda", precision=precision, profiles=shapes)
    return Deployable("tensorrt_plan", {PLAN_FILE: plan}, PLAN_FILE, inputs, outputs, runtime)
