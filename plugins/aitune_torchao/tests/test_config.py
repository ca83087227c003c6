"""The config: presets, explicit torchao configs stored without pickle, the module filter, tolerances."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

import aitune_core as ait
from aitune_core.testing.engine import converter
from aitune_torchao import PRESETS, ModuleFilter, NotCheckpointableError, TorchAOBackend, TorchAOBackendConfig
from aitune_torchao.quantize import torchao_config


def round_trip(config: TorchAOBackendConfig) -> TorchAOBackendConfig:
    """Through JSON text, as a checkpoint manifest stores it."""
    text = json.dumps(converter().unstructure(config))
    return converter().structure(json.loads(text), TorchAOBackendConfig)


def test_default_is_int8_weight_only() -> None:
    backend = TorchAOBackend()
    assert backend.config.preset == "int8wo"
    assert backend.describe() == "TorchAOBackend(preset='int8wo')"
    assert backend.key() == TorchAOBackend(preset="int8wo").key()
    assert backend.name == "torchao"
    assert backend.is_jit is False


def test_describe_shows_what_differs() -> None:
    backend = TorchAOBackend(
        preset="int8dq", modules={"exclude": ["head"]}, compile=True, compile_mode="max-autotune", atol=0.1
    )
    assert backend.describe() == (
        "TorchAOBackend(preset='int8dq',modules=ModuleFilter(exclude=('head',)),compile=True,"
        "compile_mode='max-autotune',atol=0.1)"
    )


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_names_a_class_of_the_installed_torchao(name: str) -> None:
    """The preset table is checked against torchao itself, not against what the docs said."""
    module, _, class_name = PRESETS[name].config_class.partition(":")
    if PRESETS[name].prototype:
        pytest.importorskip(module, reason="torchao's MX/NVFP4 prototype needs numpy")
    made = torchao_config(TorchAOBackendConfig(preset=name))
    assert type(made).__name__ == class_name
    assert type(made).__module__.startswith(module.rsplit(".", 1)[0])
    if hasattr(made, "set_inductor_config"):
        assert made.set_inductor_config is False, "presets must not change Inductor's global settings"


def test_configs_survive_json() -> None:
    config = TorchAOBackendConfig(
        preset="int8dq", modules=ModuleFilter(types=("Linear", "Conv2d"), include=("enc.*",)), atol=0.2
    )
    assert round_trip(config) == config
    assert round_trip(TorchAOBackendConfig()) == TorchAOBackendConfig()


def test_explicit_torchao_config_is_stored_as_torchaos_json() -> None:
    from torchao.quantization import Int8WeightOnlyConfig, PerTensor

    explicit = Int8WeightOnlyConfig(granularity=PerTensor(), set_inductor_config=False)
    backend = TorchAOBackend(ao_config=explicit)
    config = backend.config
    assert config.preset is None
    assert config.ao_config is not None and config.ao_config["_type"] == "Int8WeightOnlyConfig"
    restored = round_trip(config)
    assert restored == config
    assert torchao_config(restored) == explicit
    assert backend.describe().startswith("TorchAOBackend(ao_config=Int8WeightOnlyConfig(granularity=PerTensor()")
    assert backend.key() != TorchAOBackend(preset="int8wo").key()


def test_a_config_holding_a_tensor_is_refused_as_not_checkpointable() -> None:
    from torchao.quantization import Int8StaticActivationInt8WeightConfig

    with pytest.raises(NotCheckpointableError, match="Int8StaticActivationInt8WeightConfig cannot be stored"):
        TorchAOBackend(ao_config=Int8StaticActivationInt8WeightConfig(act_quant_scale=torch.tensor([0.1])))


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"preset": "int3"}, "unknown torchao preset 'int3'; choose one of: int8wo, int8dq"),
        ({"preset": "int8wo", "ao_config": {"_type": "Int8WeightOnlyConfig", "_data": {}}}, "either a preset"),
        ({"compile_mode": "max-autotune"}, "set compile=True"),
        ({"compile": True, "compile_mode": "fastest"}, "compile_mode must be None or one of"),
        ({"atol": -1.0}, "atol must be a non-negative number"),
        ({"ao_config": object()}, "ao_config takes a torchao config object"),
        ({"ao_config": {"type": "x"}}, "'_type' and '_data'"),
        ({"modules": {"types": []}}, "needs at least one module type name"),
    ],
)
def test_invalid_configs_are_refused(overrides: dict[str, Any], error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=error.replace("(", r"\(")):
        TorchAOBackend(**overrides)


def test_module_filter() -> None:
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 4),
        torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Conv1d(2, 2, 1)),
        torch.nn.MultiheadAttention(4, 1),
    )
    modules = dict(model.named_modules())

    def selected(rule: ModuleFilter) -> list[str]:
        return [name for name, module in modules.items() if rule.matches(module, name)]

    assert selected(ModuleFilter()) == ["0", "1.0"], "attention's out_proj is left alone, as torchao does"
    assert selected(ModuleFilter(types=("Linear", "Conv1d"))) == ["0", "1.0", "1.1"]
    assert selected(ModuleFilter(include=("1.*",))) == ["1.0"]
    assert selected(ModuleFilter(exclude=("0",))) == ["1.0"]
    assert selected(ModuleFilter(types="torch.nn.modules.linear.Linear")) == ["0", "1.0"]
    assert selected(ModuleFilter(types="NonDynamicallyQuantizableLinear")) == ["2.out_proj"]


def test_tolerances_widen_with_the_preset_and_yield_to_the_config_and_the_strategy() -> None:
    int8 = TorchAOBackend(preset="int8wo").default_tolerances()
    assert int8.for_dtype(torch.float32) == ait.Tolerance(atol=5e-2, rtol=5e-2)
    assert int8.for_dtype(torch.bfloat16) == ait.Tolerance(atol=5e-2, rtol=5e-2)
    assert TorchAOBackend(preset="fp8dq").default_tolerances().for_dtype(torch.float16).atol == 1e-1
    tight = TorchAOBackend(preset="int8wo", atol=1e-6, rtol=0.0).default_tolerances()
    assert tight.for_dtype(torch.float32) == ait.Tolerance(atol=1e-6, rtol=0.0)
    strategy = ait.Tolerances({torch.float32: ait.Tolerance(1e-3, 1e-3)})
    assert int8.merged(strategy).for_dtype(torch.float32) == ait.Tolerance(1e-3, 1e-3)


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"compile": 1}, "'compile' must be <class 'bool'>"),
        ({"preset": 8}, "'preset' must be <class 'str'>"),
        ({"atol": float("inf")}, "atol must be a non-negative number"),
        ({"rtol": True}, "rtol must be a non-negative number"),
        ({"ao_config": {"_type": "quantize_", "_data": {}}}, "must name a class of torchao's config modules"),
        ({"ao_config": {"_type": "PerTensor", "_data": {}}}, "must name a torchao AOBaseConfig class"),
        (
            {"ao_config": {"_type": "Int8WeightOnlyConfig", "_data": {"granularity": {"_type": "torch", "_data": {}}}}},
            r"ao_config\['_data'\]\['granularity'\]\['_type'\] must name a class",
        ),
        (
            {
                "ao_config": {
                    "_type": "Int8WeightOnlyConfig",
                    "_data": {"dtype": {"_type": "torch.dtype", "_data": "load"}},
                }
            },
            "must name a torch dtype, got 'load'",
        ),
    ],
)
def test_fields_and_stored_torchao_configs_are_checked(overrides: dict[str, Any], error: str) -> None:
    """A stored ``_type`` is looked up on torchao's modules and called, so it must name a config class."""
    with pytest.raises((ValueError, TypeError), match=error):
        TorchAOBackendConfig(**overrides)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"compile": "false"}, "expected true or false, got str 'false' @ config.compile"),
        ({"atol": "0.1"}, "expected a number, got str '0.1' @ config.atol"),
        ({"modules": {"types": "Linear"}}, "expected a list, got str 'Linear' @ config.modules.types"),
        ({"modules": {"include": [3]}}, r"expected a string, got int 3 @ config.modules.include\[0\]"),
        ({"preset": None, "ao_config": {"_type": "compute_error", "_data": {}}}, "must name a class"),
    ],
)
def test_stored_configs_of_the_wrong_type_are_refused(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TorchAOBackend.from_dict({"config": data, "artifacts": {}, "extra": {}})


def test_stored_configs_read_whole_numbers_as_tolerances() -> None:
    assert converter().structure({"atol": 1}, TorchAOBackendConfig).atol == 1.0
