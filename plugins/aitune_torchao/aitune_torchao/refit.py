"""New float weights into a quantized copy, without quantizing the whole model again.

The served module is a deep copy whose selected modules hold torchao tensors. For new
weights, each of those modules alone is copied from the user's module and quantized
with the stored config, and the quantized tensor it gets is copied into the served one
in place (torchao's tensors implement ``copy_`` for tensors of the same layout). The
other parameters and buffers (biases, norms) are copied as they are. Nothing the served
module holds is replaced, so code compiled for it (``compile=True``) stays valid.

Quantizing one module gives the same tensors as quantizing the model, for configs that
look at each module alone (weight-only and dynamic-activation configs, which the
presets are). Configs that choose modules by name, or that replace modules rather than
their weights, are not refitted: they say so, and the caller rebuilds.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from aitune_core.plugin_api import RefitError
from aitune_torchao.config import TorchAOBackendConfig
from aitune_torchao.quantize import _FQN_CONFIGS, RestoreMode, torchao_config
from aitune_torchao.serialization import is_quantized


def refit_blocker(config: TorchAOBackendConfig, restore: RestoreMode) -> str:
    """Why a quantized copy made with ``config`` cannot take new weights in place; empty when it can."""
    if config.ao_config is not None and config.ao_config.get("_type") in _FQN_CONFIGS:
        return f"{config.ao_config['_type']} chooses modules by name, so its modules are not quantized one by one"
    if restore == "quantize":
        return f"torchao ({config.recipe}) replaced modules, not only their weights"
    return ""


def _tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = dict(module.named_buffers(remove_duplicate=False))
    tensors.update(module.named_parameters(remove_duplicate=False))
    return tensors


def _weight_name(module_name: str) -> str:
    return f"{module_name}.weight" if module_name else "weight"


def take_weights(
    served: torch.nn.Module, module: torch.nn.Module, config: TorchAOBackendConfig, quantized: list[str]
) -> int:
    """Copy ``module``'s weights into ``served``, quantizing those of the ``quantized`` modules; returns how many.

    Everything is checked, and every new weight quantized, before anything is written,
    so a RefitError leaves ``served`` as it was.
    """
    targets, sources = _tensors(served), _tensors(module)
    quantized_names = {_weight_name(name): name for name in quantized}
    for name, target in targets.items():
        source = sources.get(name)
        if source is None:
            raise RefitError(f"the module has no parameter or buffer {name}, which the quantized copy holds")
        if tuple(source.shape) != tuple(target.shape):
            raise RefitError(f"{name} has shape {tuple(source.shape)}, the quantized copy {tuple(target.shape)}")
        if name not in quantized_names and (source.dtype != target.dtype or is_quantized(target)):
            if any(target is targets[other] for other in quantized_names):
                continue  # tied to a quantized weight: written under that name
            raise RefitError(f"{name} is {source.dtype}, the quantized copy holds a {_kind(target)}")
    ao_config = torchao_config(config)
    new = {name: _quantized_weight(module.get_submodule(owner), ao_config) for name, owner in quantized_names.items()}
    for name, tensor in new.items():
        if not _same_layout(tensor, targets[name]):
            raise RefitError(
                f"the new {name} quantizes to another layout ({_kind(tensor)}) than the served one "
                f"({_kind(targets[name])})"
            )
    written = 0
    with torch.no_grad():
        for name, target in targets.items():
            if name in new:
                target.copy_(new[name])
            elif not is_quantized(target):
                target.copy_(sources[name])
            else:
                continue
            written += 1
    return written


def _kind(tensor: torch.Tensor) -> str:
    return f"{type(tensor).__name__} {tensor.dtype} {tuple(tensor.shape)}"


def _same_layout(new: Any, served: Any) -> bool:
    """Whether ``new`` can be copied into ``served`` in place: same class, shape, and inner tensors alike."""
    if type(new) is not type(served) or new.shape != served.shape or new.dtype != served.dtype:
        return False
    flatten = getattr(new, "__tensor_flatten__", None)
    if flatten is None:
        return True
    try:
        (names, context), (served_names, served_context) = flatten(), served.__tensor_flatten__()
        if list(names) != list(served_names) or bool(context != served_context):
            return False
    except (RuntimeError, TypeError, ValueError):  # metadata that does not compare plainly
        return False
    return all(_same_layout(getattr(new, name), getattr(served, name)) for name in names)


def _quantized_weight(child: torch.nn.Module, ao_config: Any) -> torch.Tensor:
    """``child``'s weight quantized with ``ao_config``, from a copy of ``child`` alone."""
    from torchao.quantization import quantize_

    holder = torch.nn.Module()
    target = copy.deepcopy(child)
    holder.add_module("child", target)
    quantize_(holder, ao_config, filter_fn=lambda candidate, _fqn: candidate is target)
    weight = getattr(holder.get_submodule("child"), "weight", None)
    if not isinstance(weight, torch.Tensor):
        raise RefitError(f"torchao left {type(child).__name__} without a weight tensor")
    return weight
