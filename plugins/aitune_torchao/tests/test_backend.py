"""Building, the lifecycle and the stored quantized weights, on a small recorded MLP."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core.plugin_api import BuildContext
from aitune_core.testing.models import SmallMLP
from aitune_torchao import TorchAOBackend
from aitune_torchao.serialization import WEIGHTS_FILE, is_quantized, load_state


def inputs(context: BuildContext, batch: int = 5) -> torch.Tensor:
    return torch.randn(batch, 32, generator=torch.Generator().manual_seed(batch))


def quantized_weights(module: torch.nn.Module | dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    state = module if isinstance(module, dict) else module.state_dict()
    return {name: value for name, value in state.items() if is_quantized(value)}


def assert_same_quantized(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Same torchao tensors: int8 values and scales alike."""
    assert a.keys() == b.keys() and a
    for name in a:
        assert type(a[name]) is type(b[name])
        assert torch.equal(a[name].qdata, b[name].qdata), name
        assert torch.equal(a[name].scale, b[name].scale), name


def test_build_quantizes_a_copy_and_leaves_the_users_weights_alone(mlp_context: BuildContext) -> None:
    before = {name: value.clone() for name, value in mlp_context.module.state_dict().items()}
    backend = TorchAOBackend(preset="int8wo").build(mlp_context)
    after = mlp_context.module.state_dict()
    assert before.keys() == after.keys()
    for name, value in after.items():
        assert type(value) is torch.Tensor, f"{name} of the user's module was replaced by {type(value).__name__}"
        assert torch.equal(value, before[name]), f"{name} of the user's module changed"
    assert all(type(p) is torch.nn.Parameter for p in mlp_context.module.parameters())
    assert backend._module is not mlp_context.module
    assert sorted(quantized_weights(backend._module)) == ["down.weight", "up.weight"]


def test_build_reports_the_quantization_error(mlp_context: BuildContext) -> None:
    backend = TorchAOBackend(preset="int8wo").build(mlp_context)
    info = backend.build_info
    assert info["recipe"] == "int8wo" and info["quantized_modules"] == 2
    assert 0 < info["quant_max_abs_error"] < 5e-2, info
    assert info["quant_max_rel_error"] > 0
    x = inputs(mlp_context)
    with torch.no_grad():
        error = (backend(x) - mlp_context.module(x)).abs().max().item()
    assert 0 < error < 5e-2


def test_module_filter_chooses_what_is_quantized(mlp_context: BuildContext) -> None:
    backend = TorchAOBackend(preset="int8wo", modules={"exclude": ["down"]}).build(mlp_context)
    assert sorted(quantized_weights(backend._module)) == ["up.weight"]
    assert backend.build_info["quantized_modules"] == 1


def test_a_filter_that_selects_nothing_fails_the_build(mlp_context: BuildContext) -> None:
    with pytest.raises(ValueError, match=r"selects no module of SmallMLP; nothing would be quantized"):
        TorchAOBackend(preset="int8wo", modules={"include": ["decoder.*"]}).build(mlp_context)


def test_deactivate_releases_and_activate_restores_the_same_outputs(mlp_context: BuildContext) -> None:
    backend = TorchAOBackend(preset="int8dq").build(mlp_context)
    x = inputs(mlp_context)
    with torch.no_grad():
        expected = backend(x)
    backend.deactivate()
    assert backend._module is None and backend._runner is None
    backend.activate(mlp_context)
    with torch.no_grad():
        assert torch.equal(backend(x), expected)


def test_loading_swaps_in_the_stored_weights_without_quantizing_again(
    mlp_context: BuildContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The restored backend gets a model whose own weights differ: the outputs must not."""
    backend = TorchAOBackend(preset="int8wo").build(mlp_context)
    x = inputs(mlp_context)
    with torch.no_grad():
        expected = backend(x)
    data = backend.to_dict()
    stored = Path(data["artifacts"]["weights"])
    assert stored.name == WEIGHTS_FILE and stored.is_file()

    torch.manual_seed(1234)
    other = SmallMLP().eval()
    context = copy.copy(mlp_context)
    context.module = other

    import torchao.quantization

    def no_quantizing(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("deploying from stored weights must not quantize")

    monkeypatch.setattr(torchao.quantization, "quantize_", no_quantizing)
    restored = TorchAOBackend.from_dict(data)
    assert restored.state is ait.BackendState.CHECKPOINT_LOADED
    restored.deploy(context)
    assert restored.state is ait.BackendState.DEPLOYED
    assert_same_quantized(quantized_weights(restored._module), quantized_weights(load_state(stored)))
    assert_same_quantized(quantized_weights(restored._module), quantized_weights(backend._module))
    with torch.no_grad():
        assert torch.equal(restored(x), expected)
        assert not torch.allclose(other(x), expected, atol=1e-2), "the fresh model really is different"


def test_stored_weights_fail_clearly_on_another_architecture(mlp_context: BuildContext, tmp_path: Path) -> None:
    data = TorchAOBackend(preset="int8wo").build(mlp_context).to_dict()
    context = copy.copy(mlp_context)
    context.module = SmallMLP(width=32, hidden=48)
    restored = TorchAOBackend.from_dict(data)
    with pytest.raises(ValueError, match="do not fit this SmallMLP; load into a model built the same way"):
        restored.deploy(context)


class _Payload:
    """Stands for anything a crafted weights file could ask the unpickler to build."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path, ("/tmp/owned",))


def test_a_weights_file_naming_other_globals_is_refused(tmp_path: Path) -> None:
    path = tmp_path / WEIGHTS_FILE
    torch.save({"up.weight": torch.zeros(2), "extra": _Payload()}, path)
    with pytest.raises(ait.CheckpointError, match=r"refusing to load torchao-weights.pt: it names pathlib\."):
        load_state(path)
    torch.save({"up.weight": torch.zeros(2), "extra": _Payload()}, path, pickle_protocol=pickle.HIGHEST_PROTOCOL)
    with pytest.raises(ait.CheckpointError, match=r"cannot read torchao-weights.pt"):
        load_state(path)


def test_compile_runs_the_quantized_module_under_torch_compile(mlp_context: BuildContext) -> None:
    backend = TorchAOBackend(preset="int8wo", compile=True).build(mlp_context)
    assert backend._runner is not backend._module
    plain = TorchAOBackend(preset="int8wo").build(mlp_context)
    x = inputs(mlp_context, batch=4)
    with torch.no_grad():
        torch.testing.assert_close(backend(x), plain(x), atol=1e-5, rtol=1e-4)


def test_rebuilding_by_quantizing_the_structure_first(mlp_context: BuildContext) -> None:
    """The path for torchao configs that replace modules: quantize a copy, then swap the stored tensors in."""
    from aitune_torchao.quantize import quantized_copy, rebuild

    config = TorchAOBackend(preset="int8dq").config
    built = quantized_copy(mlp_context.module, config)
    assert built.restore == "swap", "int8 presets only replace weights"
    other = SmallMLP().eval()
    for mode in ("swap", "quantize"):
        restored = rebuild(other, config, built.module.state_dict(), mode, built.quantized)
        assert_same_quantized(quantized_weights(restored), quantized_weights(built.module))
        assert all(type(p) is torch.nn.Parameter for p in other.parameters()), "the fresh module stays as it was"
        x = inputs(mlp_context)
        with torch.no_grad():
            assert torch.equal(restored(x), built.module(x))
