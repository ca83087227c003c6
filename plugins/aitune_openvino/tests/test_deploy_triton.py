"""An OpenVINO winner exported to a Triton model repository, and run from it by OpenVINO alone.

The ``config.pbtxt`` is parsed into Triton's ``ModelConfig``; the folder's ``model.xml`` and
``model.bin`` are compiled by a plain ``openvino.Core`` (no aitune, no model code), fed by
the configuration's names, dtypes and shapes, and must give what the checkpoint loaded
into a fresh model gives. The compile pins f32 inference as the backend did when it was
validated (Triton's OpenVINO backend has no parameter for that; docs/deploy.md says so).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.timing import FAST_PROFILE
from aitune_core.testing.triton import demo_cnn, feeds, fits, read_config
from aitune_openvino import OpenVINOBackend

pytestmark = pytest.mark.slow
pytest.importorskip("tritonclient.grpc", reason="the configs are parsed by Triton's ModelConfig (tritonclient[grpc])")


def run_from_repository(model_folder: Path, config: Any, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(model_folder / "1" / "model.xml"))
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1})
    result = compiled({name: value.numpy() for name, value in feeds(config, inputs).items()})
    outputs = [torch.from_numpy(result[compiled.output(tensor.name)].copy()) for tensor in config.output]
    for tensor, value in zip(config.output, outputs, strict=True):
        assert fits(config, tensor, value), (tensor.name, value.shape)
    return outputs


def test_the_demo_cnn_runs_from_its_triton_repository_as_the_checkpoint_does(
    tmp_path: Path, unique_name: Callable[..., str]
) -> None:
    name = unique_name("cnn")
    model, images = demo_cnn()
    wrapped = ait.Module(model, name)
    strategy = ait.OneBackendStrategy(OpenVINOBackend(num_threads=1), profile=FAST_PROFILE)
    ait.tune(wrapped, images, batch_sizes=[1, 2, 4], strategy=strategy)
    ait.save(wrapped, tmp_path / "ckpt")
    del wrapped
    gc.collect()  # the name is free again for the fresh model the checkpoint loads into

    summary = ait.export(tmp_path / "ckpt", "triton", tmp_path / "repo")
    (model,) = summary.models
    folder = tmp_path / "repo" / model.name
    config = read_config(folder)
    assert (config.backend, config.platform, config.max_batch_size) == ("openvino", "", 4)
    assert sorted(path.name for path in (folder / "1").iterdir()) == ["model.bin", "model.xml"]
    assert [(t.name, list(t.dims)) for t in config.input] == [("images", [3, 32, 32])]
    assert list(config.dynamic_batching.preferred_batch_size) == [1, 2, 4]
    parameters = {key: value.string_value for key, value in config.parameters.items()}
    assert parameters == {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": "1"}

    loaded = ait.load(demo_cnn()[0], tmp_path / "ckpt")
    for batch in (1, 3, 4):
        batch_images = torch.randn(batch, 3, 32, 32)
        (served,) = run_from_repository(folder, config, [batch_images])
        with torch.no_grad():
            torch.testing.assert_close(served, loaded(batch_images), rtol=1e-4, atol=1e-5)
