"""New float weights quantized into the served copy in place, as a fresh build would quantize them."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from aitune_core.plugin_api import BuildContext, RefitError
from aitune_core.testing.models import SmallMLP
from aitune_core.testing.recording import at_shape
from aitune_torchao import TorchAOBackend
from aitune_torchao.serialization import WEIGHTS_FILE, is_quantized, load_state


def other_weights(seed: int = 1) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return SmallMLP().state_dict()


def served_tensors(backend: TorchAOBackend) -> dict[str, torch.Tensor]:
    assert backend._module is not None
    return dict(backend._module.state_dict())


def assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Same tensors: torchao's by their int8 values and scales, the others by value."""
    assert a.keys() == b.keys()
    for name in a:
        assert type(a[name]) is type(b[name]), name
        if is_quantized(a[name]):
            assert torch.equal(a[name].qdata, b[name].qdata) and torch.equal(a[name].scale, b[name].scale), name
        else:
            assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("preset", ["int8wo", "int8dq"])
def test_refit_quantizes_the_new_weights_as_a_fresh_build_does(mlp_context: BuildContext, preset: str) -> None:
    backend = TorchAOBackend(preset=preset).build(mlp_context)
    assert backend._module is not None
    held = dict(backend._module.named_parameters())
    new = other_weights()
    mlp_context.module.load_state_dict(new)
    assert backend.can_refit() and backend.refit_refusal == ""
    backend.refit(mlp_context.module)

    fresh = TorchAOBackend(preset=preset).build(mlp_context)
    assert_same(served_tensors(backend), served_tensors(fresh))
    assert all(held[name] is tensor for name, tensor in backend._module.named_parameters())  # written in place
    args, kwargs = at_shape(mlp_context, "max")
    with torch.no_grad():
        torch.testing.assert_close(backend(*args, **kwargs), fresh(*args, **kwargs), rtol=0, atol=0)
        expected = mlp_context.module(*args, **kwargs)
    tolerance = backend.default_tolerances().for_dtype(torch.float32)
    torch.testing.assert_close(backend(*args, **kwargs), expected, atol=tolerance.atol, rtol=tolerance.rtol)
    for name, tensor in mlp_context.module.state_dict().items():  # the user's module: as loaded, float
        assert type(tensor) is torch.Tensor and torch.equal(tensor, new[name]), name


def test_a_checkpoint_after_refit_holds_the_new_weights(mlp_context: BuildContext) -> None:
    backend = TorchAOBackend(preset="int8wo").build(mlp_context)
    backend.to_dict()  # the stored quantized weights of the first ones
    mlp_context.module.load_state_dict(other_weights())
    backend.refit(mlp_context.module)
    stored = backend.to_dict()["artifacts"]["weights"]
    assert stored == mlp_context.cache_dir / WEIGHTS_FILE
    assert_same(
        {k: v for k, v in load_state(stored).items() if is_quantized(v)},
        {k: v for k, v in served_tensors(backend).items() if is_quantized(v)},
    )


def test_a_shape_change_is_refused_and_changes_nothing(mlp_context: BuildContext) -> None:
    backend = TorchAOBackend(preset="int8wo").build(mlp_context)
    before = {name: tensor.clone() for name, tensor in served_tensors(backend).items()}
    mlp_context.module.down = torch.nn.Linear(64, 16)
    with pytest.raises(RefitError, match=r"down\.(weight|bias) has shape \(16"):
        backend.refit(mlp_context.module)
    assert_same(served_tensors(backend), before)


def test_a_config_that_replaces_modules_cannot_refit(mlp_context: BuildContext) -> None:
    backend = TorchAOBackend(preset="int8wo").build(mlp_context)
    backend._restore_mode = "quantize"  # what the build records for a config that swaps modules
    assert not backend.can_refit() and "replaced modules" in backend.refit_refusal
    with pytest.raises(RefitError, match="cannot take new weights"):
        backend.refit(mlp_context.module)


@pytest.mark.slow
def test_compiled_code_serves_the_new_weights_without_compiling_again(mlp_context: BuildContext) -> None:
    from torch._dynamo.utils import counters

    backend = TorchAOBackend(preset="int8wo", compile=True).build(mlp_context)
    args, kwargs = at_shape(mlp_context, "max")
    with torch.no_grad():
        backend(*args, **kwargs)
    compiled = dict(counters["stats"])
    mlp_context.module.load_state_dict(other_weights())
    backend.refit(mlp_context.module)
    with torch.no_grad():
        refitted = backend(*args, **kwargs)
    assert dict(counters["stats"]) == compiled  # no new frame compiled
    fresh = TorchAOBackend(preset="int8wo").build(mlp_context)
    with torch.no_grad():
        torch.testing.assert_close(refitted, fresh(*args, **kwargs))
