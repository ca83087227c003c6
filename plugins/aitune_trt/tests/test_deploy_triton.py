"""A TensorRT engine as deploy targets see it: its plan, its bindings' names and its optimization profiles.

Built with ONNX Runtime standing in for TensorRT (:mod:`aitune_trt.testing`), restored as a
checkpoint restores it, and written into a Triton repository whose ``config.pbtxt`` is
parsed into Triton's ``ModelConfig``: the platform, the GPU instance group offered every
profile of the engine, and the batching its profiles allow. Running the plan needs
TensorRT and a GPU, which a Triton server has; see docs/deploy.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aitune_core.plugin_api import BuildContext
from aitune_core.plugin_api.deploy import Deployable, DeployModel
from aitune_core.testing.triton import read_config, write_models
from aitune_trt.testing import OrtTensorRTBackend

pytestmark = pytest.mark.slow


def test_the_engine_is_described_with_its_profiles_and_triton_offers_them_all(
    tmp_path: Path, mlp_context: BuildContext
) -> None:
    pytest.importorskip("tritonclient.grpc", reason="the configs are parsed by Triton's ModelConfig")
    context = BuildContext(
        mlp_context.module,
        mlp_context.module_name,
        mlp_context.graph_spec,
        mlp_context.samples,
        mlp_context.device,
        tmp_path / "build",
        mlp_context.signature,
    )
    built = OrtTensorRTBackend(profile_source="samples", precision="fp16").build(context)
    restored = OrtTensorRTBackend.from_dict(built.to_dict())  # as a checkpoint restores it: no build, no context
    found = restored.deployable(mlp_context.graph_spec)
    assert isinstance(found, Deployable), found
    assert (found.format, found.entry, found.runtime.device, found.runtime.precision) == (
        "tensorrt_plan",
        "model.plan",
        "cuda",
        "fp16",
    )
    assert [(t.name, t.min_shape, t.max_shape, t.batch_axis) for t in found.inputs] == [("x", (2, 8), (8, 8), 0)]
    profiles = [[(p.name, p.min, p.opt, p.max) for p in profile.inputs] for profile in found.runtime.profiles]
    assert profiles == [
        [("x", (2, 8), (2, 8), (2, 8))],
        [("x", (4, 8), (4, 8), (4, 8))],
        [("x", (8, 8), (8, 8), (8, 8))],
        [("x", (2, 8), (8, 8), (8, 8))],  # the graph's own, covering the tuned range
    ]

    model = DeployModel("mlp", "mlp", "0", restored.describe(), found, (2, 4, 8), 2, 8)
    write_models([model], tmp_path / "repo")
    config = read_config(tmp_path / "repo" / "mlp")
    assert (config.platform, config.max_batch_size) == ("tensorrt_plan", 8)
    (group,) = config.instance_group
    assert (group.kind, list(group.profile)) == (1, ["0", "1", "2", "3"])  # KIND_GPU, every profile
    assert sorted(path.name for path in (tmp_path / "repo" / "mlp" / "1").iterdir()) == ["model.plan"]
