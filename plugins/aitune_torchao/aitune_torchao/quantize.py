"""Quantizing a copy of a module, and rebuilding a quantized module from stored weights.

``torchao.quantize_`` changes a module in place. The module aitune is given belongs
to the user (and is eager's reference), so quantization always works on a deep copy.

A quantized module is rebuilt from a checkpoint without quantizing again: a copy of
the freshly built module gets the stored quantized tensors swapped in with
``load_state_dict(assign=True)``. That restores exactly the weights that were
validated, whatever the fresh module's own weights are. When a torchao config also
replaced modules (not only weights), the copy is quantized first so that its
structure matches, and the stored tensors then replace what that produced.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Literal

import attrs
import torch

from aitune_torchao.config import TorchAOBackendConfig, decode_ao_config
from aitune_torchao.presets import get_preset
from aitune_torchao.serialization import is_quantized

RestoreMode = Literal["swap", "quantize"]
"""How to rebuild from stored weights: swap them into a plain copy, or quantize the copy first."""

_FQN_CONFIGS = ("FqnToConfig", "ModuleFqnToConfig")
"""torchao configs that choose modules themselves; quantize_ refuses a filter with them."""


@attrs.define
class Quantized:
    """A quantized copy and what it took."""

    module: torch.nn.Module
    quantized: list[str]
    restore: RestoreMode
    seconds: float


def torchao_config(config: TorchAOBackendConfig) -> Any:
    """The torchao config object to quantize with (imports torchao)."""
    if config.preset is not None:
        return get_preset(config.preset).make()
    assert config.ao_config is not None
    return decode_ao_config(config.ao_config)


def _quantize_in_place(module: torch.nn.Module, config: TorchAOBackendConfig) -> list[str]:
    """Run ``quantize_`` on ``module`` with the config's filter; the names it selected."""
    from torchao.quantization import quantize_

    ao_config = torchao_config(config)
    selected: list[str] = []
    if type(ao_config).__name__ in _FQN_CONFIGS:
        quantize_(module, ao_config, filter_fn=None)
        return [name for name, child in module.named_modules() if is_quantized(getattr(child, "weight", None))]

    def select(child: torch.nn.Module, fqn: str) -> bool:
        if config.modules.matches(child, fqn):
            selected.append(fqn)
            return True
        return False

    quantize_(module, ao_config, filter_fn=select)
    return selected


def _layout(module: torch.nn.Module) -> tuple[list[tuple[str, type]], list[str]]:
    return [(name, type(child)) for name, child in module.named_modules()], list(module.state_dict())


def quantized_copy(module: torch.nn.Module, config: TorchAOBackendConfig) -> Quantized:
    """Quantize a deep copy of ``module``; ``module`` itself is left as it was."""
    start = time.perf_counter()
    target = copy.deepcopy(module)
    before = _layout(target)
    selected = _quantize_in_place(target, config)
    if not selected:
        raise ValueError(
            f"the module filter {config.modules.describe()} selects no module of {type(module).__name__}; "
            "nothing would be quantized"
        )
    quantized = [name for name, child in target.named_modules() if is_quantized(getattr(child, "weight", None))]
    if not quantized:
        raise ValueError(
            f"torchao ({config.recipe}) left all {len(selected)} selected modules unquantized "
            f"({', '.join(selected[:5])}); their weight shapes or dtypes do not suit it"
        )
    restore: RestoreMode = "swap" if _layout(target) == before else "quantize"
    return Quantized(target, quantized, restore, time.perf_counter() - start)


def _structure_copy(module: torch.nn.Module, replaced: set[str]) -> torch.nn.Module:
    """A deep copy whose tensors named in ``replaced`` are empty ``meta`` placeholders.

    Those are about to be replaced by stored ones, so copying their data would only
    cost time and, for a large model on a GPU, a second full-precision copy of it.
    Non-persistent buffers are not in a state dict and are copied for real.
    """
    memo: dict[int, Any] = {}
    named = [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]
    for name, tensor in named:
        if name in replaced and id(tensor) not in memo:
            placeholder = torch.empty_like(tensor, device="meta")
            if isinstance(tensor, torch.nn.Parameter):
                placeholder = torch.nn.Parameter(placeholder, requires_grad=False)
            memo[id(tensor)] = placeholder
    return copy.deepcopy(module, memo)


def rebuild(
    module: torch.nn.Module,
    config: TorchAOBackendConfig,
    state: dict[str, torch.Tensor],
    restore: RestoreMode,
    expected: list[str],
) -> torch.nn.Module:
    """A copy of ``module`` holding the stored quantized ``state``; ``module`` is left as it was.

    expected: the modules that were quantized at build; each must hold a quantized
        weight again afterwards, or the stored state does not belong to this model.
    """
    if restore == "quantize":
        target = copy.deepcopy(module)
        _quantize_in_place(target, config)
    else:
        target = _structure_copy(module, set(state))
    for parameter in target.parameters():
        parameter.requires_grad_(False)
    try:
        target.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as error:
        raise ValueError(
            f"the stored quantized weights do not fit this {type(module).__name__}; load into a model built "
            f"the same way as the tuned one ({' '.join(str(error).split())[:300]})"
        ) from error
    missing = [name for name in expected if not is_quantized(getattr(target.get_submodule(name), "weight", None))]
    if missing:
        raise ValueError(f"the stored weights of {', '.join(missing[:5])} are not quantized")
    return target
