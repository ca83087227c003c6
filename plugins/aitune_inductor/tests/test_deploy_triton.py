"""The Inductor backends as deploy targets see them: an AOT package named as Triton names its call, or why not.

The naming and refusals are checked on backends restored from stored data (no compile);
one slow test compiles the demo CNN with its weights in the package, exports it to a
Triton repository and runs ``model.pt2`` from there with ``torch._inductor.aoti_load_package``
alone, fed by the configuration's names, against the checkpoint loaded into a fresh model.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core.plugin_api import BuildContext
from aitune_core.plugin_api.deploy import Deployable, NoDeployable
from aitune_core.testing.timing import FAST_PROFILE
from aitune_core.testing.triton import demo_cnn, feeds, fits, read_config
from aitune_inductor import TorchInductorAotBackend, TorchInductorJitBackend
from aitune_inductor.aot_weights import PackageWeights
from aitune_inductor.call_layout import CallLayout


def restored_aot(tmp_path: Path, context: BuildContext, in_package: bool, keywords: bool = False) -> Any:
    """An AOT backend as a checkpoint restores it, its package a stand-in file (nothing loads it here)."""
    package = tmp_path / "stand-in.pt2"
    package.write_bytes(b"not loaded")
    arguments = context.samples[0].arguments
    args, kwargs = context.signature.bind(arguments)
    if keywords:
        args, kwargs = (), dict(arguments)
    layout = CallLayout.of_call(context.signature, args, kwargs)
    weights = PackageWeights(in_package=in_package, constants=())
    extra = {"layout": layout.to_dict(), "weights": weights.to_dict()}
    return TorchInductorAotBackend.from_dict({"config": {}, "artifacts": {"package": str(package)}, "extra": extra})


def test_a_package_is_named_as_triton_names_its_call(tmp_path: Path, two_inputs_context: BuildContext) -> None:
    found = restored_aot(tmp_path, two_inputs_context, in_package=True).deployable(two_inputs_context.graph_spec)
    assert isinstance(found, Deployable), found
    assert (found.format, found.entry, sorted(found.files)) == ("aoti_pt2", "model.pt2", ["model.pt2"])
    assert [(t.name, t.min_shape, t.max_shape, t.batch_axis) for t in found.inputs] == [
        ("ARGS[0]", (2, 8), (8, 8), 0),
        ("ARGS[1]", (4, 3), (16, 3), None),  # two rows a sample: ranged, but no batch axis a server stacks on
    ]
    assert [t.name for t in found.outputs] == ["RESULT[hidden]", "RESULT[extra][0]", "RESULT[extra][1]"]
    by_keyword = restored_aot(tmp_path, two_inputs_context, in_package=True, keywords=True)
    assert [t.name for t in by_keyword.deployable(two_inputs_context.graph_spec).inputs] == ["KWARGS[x]", "KWARGS[y]"]


def test_what_does_not_stand_alone_says_why(
    tmp_path: Path, two_inputs_context: BuildContext, nested_context: BuildContext
) -> None:
    weightless = restored_aot(tmp_path, two_inputs_context, in_package=False).deployable(two_inputs_context.graph_spec)
    assert isinstance(weightless, NoDeployable)
    assert "reads its weights from the module" in weightless.reason and "weights_in_package=True" in weightless.reason
    baked = restored_aot(tmp_path, nested_context, in_package=True).deployable(nested_context.graph_spec)
    assert isinstance(baked, NoDeployable) and "non-tensor arguments baked in" in baked.reason, baked
    jit = TorchInductorJitBackend().deployable(two_inputs_context.graph_spec)
    assert isinstance(jit, NoDeployable) and "compiles the module's own Python code" in jit.reason


@pytest.mark.slow
@pytest.mark.skipif(not TorchInductorAotBackend.availability("cpu").available, reason="AOT Inductor unavailable")
def test_the_demo_cnn_package_runs_from_its_triton_repository_as_the_checkpoint_does(
    tmp_path: Path, unique_name: Callable[..., str]
) -> None:
    pytest.importorskip("tritonclient.grpc", reason="the configs are parsed by Triton's ModelConfig")
    from torch._inductor import aoti_load_package

    name = unique_name("cnn")
    model, images = demo_cnn()
    wrapped = ait.Module(model, name)
    strategy = ait.OneBackendStrategy(TorchInductorAotBackend(weights_in_package=True), profile=FAST_PROFILE)
    ait.tune(wrapped, images, batch_sizes=[1, 2, 4], strategy=strategy, threads=1)
    ait.save(wrapped, tmp_path / "ckpt")
    del wrapped
    gc.collect()  # the name is free again for the fresh model the checkpoint loads into

    summary = ait.export(tmp_path / "ckpt", "triton", tmp_path / "repo")
    (model,) = summary.models
    folder = tmp_path / "repo" / model.name
    config = read_config(folder)
    assert (config.platform, config.backend, config.max_batch_size) == ("torch_aoti", "pytorch", 0)
    assert [(t.name, list(t.dims)) for t in config.input] == [("ARGS[0]", [-1, 3, 32, 32])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("RESULT", [-1, 10])]
    assert not config.HasField("dynamic_batching")
    assert config.parameters["INTRA_OP_THREAD_COUNT"].string_value == "1"
    assert any("max_batch_size 0 (Triton's torch_aoti" in note for note in summary.notes), summary.notes

    package = aoti_load_package(str(folder / "1" / "model.pt2"))
    loaded = ait.load(demo_cnn()[0], tmp_path / "ckpt", trust_native_code=True)
    for batch in (1, 3, 4):
        batch_images = torch.randn(batch, 3, 32, 32)
        named = feeds(config, [batch_images])
        served = package(*(named[f"ARGS[{index}]"] for index in range(len(named))))
        assert fits(config, config.output[0], served)
        with torch.no_grad():
            torch.testing.assert_close(served, loaded(batch_images), rtol=1e-4, atol=1e-5)
