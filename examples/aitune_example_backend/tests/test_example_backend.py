"""The example backend: aitune's conformance suite, plus what this backend itself promises."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from aitune_example_backend import FxFuseBackend

import aitune_core
from aitune_core.testing import BackendConformance
from aitune_core.testing.engine import PluginStatus


def small_convnet() -> torch.nn.Module:
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
    )
    for layer in model:
        if isinstance(layer, torch.nn.BatchNorm2d):  # non-trivial statistics, so folding changes the weights
            layer.running_mean.uniform_(-1, 1)
            layer.running_var.uniform_(0.5, 2)
            layer.weight.data.uniform_(0.5, 1.5)
            layer.bias.data.uniform_(-0.5, 0.5)
    return model.eval()


class TestFxFuseConformance(BackendConformance):
    batch_sizes = (1, 3, 8)
    rtol = 1e-4
    atol = 1e-5

    def make_backend(self) -> FxFuseBackend:
        return FxFuseBackend()

    def make_other_backend(self) -> FxFuseBackend:
        return FxFuseBackend(channels_last=True)

    def make_model(self) -> torch.nn.Module:
        return small_convnet()

    def make_inputs(self, batch_size: int) -> tuple[torch.Tensor]:
        return (torch.randn(batch_size, 3, 16, 16),)


class TestFxFuseChannelsLastConformance(TestFxFuseConformance):
    def make_backend(self) -> FxFuseBackend:
        return FxFuseBackend(channels_last=True)

    def make_other_backend(self) -> FxFuseBackend:
        return FxFuseBackend(fuse_conv_bn=False)


def test_batchnorm_is_folded_away() -> None:
    model = small_convnet()
    compiled = FxFuseBackend()._transform(model)
    assert not any(isinstance(layer, torch.nn.BatchNorm2d) for layer in compiled.modules())
    assert any(isinstance(layer, torch.nn.BatchNorm2d) for layer in model.modules()), "the original is untouched"
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


def test_channels_last_leaves_the_original_alone() -> None:
    model = small_convnet()
    compiled = FxFuseBackend(fuse_conv_bn=False, channels_last=True)._transform(model)
    conv = next(layer for layer in compiled.modules() if isinstance(layer, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert model[0].weight.is_contiguous()


def test_training_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="eval mode"):
        FxFuseBackend()._transform(small_convnet().train())


def test_discovered_through_its_entry_point(aitune_fake_dist: Any, aitune_isolated_plugins: Any) -> None:
    # The same metadata pyproject.toml declares, pointed at the importable package.
    dist = aitune_fake_dist(
        "aitune-example-backend",
        module="aitune_example_backend",
        entry_points={"example_fx_fuse": "aitune_example_backend"},
    )
    aitune_isolated_plugins.load(dist)
    record = aitune_core.plugins()[1]
    assert (record.name, record.distribution, record.status) == (
        "example_fx_fuse",
        "aitune-example-backend",
        PluginStatus.LOADED,
    )
    assert record.backends == ("example_fx_fuse",)
    assert aitune_core.plugins.get_backend_class("example_fx_fuse") is FxFuseBackend
    assert [c.name for c in aitune_core.plugins.default_candidates("cpu")] == ["example_fx_fuse", "eager"]
