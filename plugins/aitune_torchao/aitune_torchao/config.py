"""TorchAOBackendConfig: a preset name or an explicit torchao config, plus compile and module-filter options.

Configs are attrs classes written to checkpoint manifests with cattrs, so every field
is plain data. An explicit torchao config object (a dataclass deriving from
``torchao.core.config.AOBaseConfig``) is stored in torchao's own JSON form,
``torchao.core.config.config_to_dict``: ``{"_type": class name, "_version": ..., "_data":
fields}``. torchao reads it back with ``config_from_dict``, which only looks classes up
in its own modules (``ALLOWED_AO_MODULES``), so a manifest cannot name arbitrary code.
A config that does not survive that round trip (one holding a tensor, such as a static
activation scale) is refused when the backend is created, not when a checkpoint is
written hours later.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from typing import Any

import attrs

from aitune_core.plugin_api import BackendConfig
from aitune_torchao.filters import ModuleFilter
from aitune_torchao.presets import DEFAULT_PRESET, get_preset

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""The ``torch.compile`` modes a config accepts."""


class NotCheckpointableError(ValueError):
    """An explicit torchao config that cannot be written to a checkpoint safely."""


def encode_ao_config(value: Any) -> dict[str, Any] | None:
    """A torchao config object (or its stored form) as checkpointable data; ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        stored = dict(value)
        if not isinstance(stored.get("_type"), str) or not isinstance(stored.get("_data"), dict):
            raise ValueError(
                f"a stored torchao config is a dict with '_type' and '_data' (torchao's config_to_dict), got {stored!r}"
            )
        check_stored_ao_config(stored)
        return stored
    if not type(value).__module__.startswith("torchao."):
        raise TypeError(
            f"ao_config takes a torchao config object (such as torchao.quantization.Int8WeightOnlyConfig()), "
            f"got {type(value).__name__}"
        )
    # The object's own module is loaded, so this import costs nothing more.
    from torchao.core.config import AOBaseConfig, config_from_dict, config_to_dict

    if not isinstance(value, AOBaseConfig):
        raise TypeError(f"ao_config takes a torchao AOBaseConfig, got {type(value).__name__}")
    name = type(value).__name__
    try:
        data: dict[str, Any] = config_to_dict(value)
        json.dumps(data)
        restored = config_from_dict(data)
    except Exception as error:
        raise NotCheckpointableError(
            f"{name} cannot be stored in a checkpoint: torchao's config_to_dict/config_from_dict fail on it "
            f"({type(error).__name__}: {error}); aitune never pickles configs. Use a preset, or a config whose "
            "fields are plain values, enums, dtypes and torchao granularities"
        ) from error
    if restored != value:
        raise NotCheckpointableError(
            f"{name} does not survive torchao's config_to_dict/config_from_dict round trip "
            f"(stored {data['_data']!r}); aitune never pickles configs, so it cannot be checkpointed"
        )
    return data


def check_stored_ao_config(data: Mapping[str, Any]) -> None:
    """Refuse stored data whose ``_type`` names anything but a torchao config class.

    ``config_from_dict`` looks ``_type`` up with ``getattr`` on torchao's modules and
    calls what it finds, and those modules also hold functions (``quantize_``) and
    imported modules. Stored data comes from checkpoints, so every ``_type`` in it must
    name a class (an ``AOBaseConfig`` at the top), or ``torch.dtype`` with a dtype's name.
    """
    from torchao.core.config import AOBaseConfig

    top = _stored_class(data["_type"], "ao_config['_type']")
    if not issubclass(top, AOBaseConfig):
        raise ValueError(f"ao_config['_type'] must name a torchao AOBaseConfig class, got {data['_type']!r}")
    _check_nested(data["_data"], "ao_config['_data']")


def _stored_class(name: object, where: str) -> type:
    import importlib

    from torchao.core.config import ALLOWED_AO_MODULES

    if isinstance(name, str) and name.isidentifier():
        for module_name in ALLOWED_AO_MODULES:  # the search config_from_dict makes: the first hit wins
            try:
                found = getattr(importlib.import_module(module_name), name)
            except (ImportError, AttributeError):
                continue
            if isinstance(found, type):
                return found
            break
    raise ValueError(f"{where} must name a class of torchao's config modules, got {name!r}")


def _check_nested(value: Any, where: str) -> None:
    if isinstance(value, Mapping) and "_type" in value and "_data" in value:
        if value["_type"] == "torch.dtype":
            import torch

            if not isinstance(value["_data"], str) or not isinstance(getattr(torch, value["_data"], None), torch.dtype):
                raise ValueError(f"{where} must name a torch dtype, got {value['_data']!r}")
            return
        _stored_class(value["_type"], f"{where}['_type']")
        _check_nested(value["_data"], f"{where}['_data']")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _check_nested(item, f"{where}[{key!r}]")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_nested(item, f"{where}[{index}]")


def decode_ao_config(data: Mapping[str, Any]) -> Any:
    """The torchao config object that :func:`encode_ao_config` stored (imports torchao)."""
    from torchao.core.config import config_from_dict

    return config_from_dict(dict(data))


def render_ao_config(data: Mapping[str, Any]) -> str:
    """A stored torchao config as short text, with the fields that differ from the class's defaults:
    ``Int8WeightOnlyConfig(granularity=PerTensor())``."""
    return _render_short(json.dumps(dict(data), sort_keys=True))


@functools.lru_cache(maxsize=64)
def _render_short(text: str) -> str:
    data = json.loads(text)
    try:
        from torchao.core.config import config_from_dict, config_to_dict

        empty = {"_type": data["_type"], "_version": data.get("_version", 1), "_data": {}}
        defaults = config_to_dict(config_from_dict(empty))["_data"]
    except Exception:  # an unknown class or required fields: show every field
        return _render(data)
    changed = {key: value for key, value in data["_data"].items() if defaults.get(key, ...) != value}
    return _render({**data, "_data": changed})


def _render(value: Any) -> str:
    if isinstance(value, dict) and "_type" in value and "_data" in value:
        kind, fields = value["_type"], value["_data"]
        if kind == "torch.dtype":
            return f"torch.{fields}"
        if not isinstance(fields, dict):
            return f"{kind}.{fields}"  # an enum member
        shown = [f"{key}={_render(item)}" for key, item in fields.items() if item is not None]
        return f"{kind}({','.join(shown)})"
    if isinstance(value, list):
        return "[" + ",".join(_render(item) for item in value) + "]"
    return repr(value)


def _module_filter(value: ModuleFilter | Mapping[str, Any]) -> ModuleFilter:
    """A ModuleFilter, or the same as a dict: ``{"include": ["encoder.*"]}``."""
    if isinstance(value, Mapping):
        return ModuleFilter(**value)
    if not isinstance(value, ModuleFilter):
        raise TypeError(f"modules must be a ModuleFilter or a dict of its fields, got {type(value).__name__}")
    return value


def _compile_mode(_instance: object, _attribute: object, value: str | None) -> None:
    if value is not None and value not in COMPILE_MODES:
        raise ValueError(f"compile_mode must be None or one of {', '.join(COMPILE_MODES)}, got {value!r}")


def _tolerance(_instance: object, attribute: attrs.Attribute[float | None], value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValueError(f"{attribute.name} must be a non-negative number (and finite), got {value!r}")


@attrs.frozen
class TorchAOBackendConfig(BackendConfig):
    """How to quantize.

    preset: a name from :data:`aitune_torchao.presets.PRESETS` ("int8wo", "int8dq",
        "int4wo", "fp8wo", "fp8dq", "mxfp8", "mxfp4", "nvfp4", "nvfp4wo"). With neither
        ``preset`` nor ``ao_config`` given, "int8wo".
    ao_config: an explicit torchao config object instead of a preset; stored as
        torchao's ``config_to_dict`` form (see the module docstring).
    modules: which modules to quantize (by default every ``Linear``); a
        :class:`ModuleFilter` or a dict of its fields.
    compile: run the quantized module under ``torch.compile`` (``compile_mode`` is its mode).
    atol, rtol: tolerances against eager, for every floating dtype; ``None`` keeps the
        preset's (5e-2 for the int8 presets). A strategy's ``tolerances`` still override them.
    """

    preset: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.instance_of(str))
    )
    ao_config: dict[str, Any] | None = attrs.field(default=None, converter=encode_ao_config)
    modules: ModuleFilter = attrs.field(factory=ModuleFilter, converter=_module_filter)
    compile: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    compile_mode: str | None = attrs.field(default=None, validator=_compile_mode)
    atol: float | None = attrs.field(default=None, validator=_tolerance)
    rtol: float | None = attrs.field(default=None, validator=_tolerance)

    def __attrs_post_init__(self) -> None:
        if self.preset is not None and self.ao_config is not None:
            raise ValueError("give either a preset or an explicit ao_config, not both")
        if self.preset is None and self.ao_config is None:
            object.__setattr__(self, "preset", DEFAULT_PRESET)
        if self.preset is not None:
            get_preset(self.preset)
        if self.compile_mode is not None and not self.compile:
            raise ValueError("compile_mode is a torch.compile mode; set compile=True as well")

    @property
    def recipe(self) -> str:
        """The preset name, or the explicit config's class name."""
        if self.preset is not None:
            return self.preset
        assert self.ao_config is not None
        return str(self.ao_config["_type"])
