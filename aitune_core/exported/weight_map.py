"""Which of a module's tensors each constant of an exported graph was made from, and making it again from new ones.

Exporters do not keep weights as they found them. The ONNX optimizer and OpenVINO's
converter fold a BatchNorm into the convolution or matmul before it, a Linear's weight
is stored transposed, equal tensors become one constant, biases are reshaped, and a
gather of an embedding at fixed positions becomes a constant of its own. A backend that
takes new weights without exporting again (``Backend.refit``) needs, for each constant of
its graph, where its values come from: a :class:`WeightMap`, found once at build time
(:func:`aitune_core.exported.weight_matching.map_constants`) while the module still holds
the exported values, and kept in checkpoints as plain data.

:func:`constant_values` makes every mapped constant from the module's tensors now, after
checking that the refit can be exact: the tensors have the shapes and dtypes they had,
tensors that were exported as one constant are still equal, a constant that more than one
source explained when exported is still made alike by all of them, and tensors the graph
reads in a form no constant can be remade from (``frozen``) have not changed. Anything else
raises :class:`~aitune_core.backends.base.RefitError` naming the tensor and why, and the
caller rebuilds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import attrs
import torch

from aitune_core.backends.base import RefitError
from aitune_core.serialization import converter, structure_config

COPY = "copy"
TRANSPOSE = "transpose"
NORM_WEIGHT = "norm_weight"
NORM_BIAS = "norm_bias"
KINDS = (COPY, TRANSPOSE, NORM_WEIGHT, NORM_BIAS)
NORM_TENSORS = ("weight", "bias", "running_mean", "running_var")
"""A BatchNorm's tensors that a fold reads (weight and bias are absent without ``affine``)."""


def _shape(_instance: object, attribute: attrs.Attribute[list[int]], value: list[int]) -> None:
    if not all(isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in value):
        raise ValueError(f"{attribute.name} must be a list of sizes >= 0, got {value!r}")


@attrs.frozen
class ConstantSource:
    """How one constant is made from the module's tensors.

    kind: ``"copy"`` (``tensor`` itself), ``"transpose"`` (the 2-D ``tensor`` transposed),
        ``"norm_weight"`` (``tensor`` scaled along ``axis`` by the BatchNorm ``norm``:
        ``weight / sqrt(running_var + eps)``), ``"norm_bias"`` (``(tensor - running_mean)``
        times that scale, plus the BatchNorm's bias; ``tensor`` is empty where the layer
        before it had no bias). Each is reshaped to ``shape`` and cast to ``dtype``.
    """

    kind: str = attrs.field(validator=attrs.validators.in_(KINDS))
    shape: list[int] = attrs.field(validator=_shape)
    dtype: torch.dtype
    tensor: str = ""
    norm: str = ""
    axis: int = 0
    eps: float = 0.0


@attrs.frozen
class TensorRecord:
    """A tensor as it was exported: the refit checks that it still is this shape and dtype."""

    shape: list[int] = attrs.field(validator=_shape)
    dtype: torch.dtype


@attrs.frozen
class FrozenTensor:
    """A tensor the graph reads in a form no constant can be made again from, and its sha256 when exported."""

    name: str
    sha256: str


@attrs.frozen
class WeightMap:
    """Where each constant of an exported graph comes from (see the module docstring).

    constants: constant name (the runtime's own) -> its source.
    tensors: each tensor a source reads -> its shape and dtype when exported.
    equal: groups of tensors that were equal when exported and reach the graph through one
        constant; they must still be equal for a refit.
    frozen: tensors the graph reads that no mapped constant stands for; they must not change.
    alternatives: constant name -> the other sources that explained it when exported (a
        BatchNorm folded into a weight, where several BatchNorms held the same values);
        they must still make the same constant as the one in ``constants``.
    """

    constants: dict[str, ConstantSource] = attrs.field(factory=dict)
    tensors: dict[str, TensorRecord] = attrs.field(factory=dict)
    equal: list[list[str]] = attrs.field(factory=list)
    frozen: list[FrozenTensor] = attrs.field(factory=list)
    alternatives: dict[str, list[ConstantSource]] = attrs.field(factory=dict)

    def summary(self) -> str:
        """One line for build reports: what a refit replaces and what it must find unchanged."""
        text = f"{len(self.constants)} constants from {len(self.tensors)} tensors"
        folded = sum(source.kind in (NORM_WEIGHT, NORM_BIAS) for source in self.constants.values())
        if folded:
            text += f", {folded} with a BatchNorm folded in"
        if self.equal:
            text += f"; {sum(len(group) for group in self.equal)} tensors in {len(self.equal)} groups must stay equal"
        if self.alternatives:
            text += f"; {len(self.alternatives)} constants have more than one source, which must stay alike"
        if self.frozen:
            names = ", ".join(item.name for item in self.frozen[:4]) + (", ..." if len(self.frozen) > 4 else "")
            text += f"; {len(self.frozen)} must not change ({names})"
        return text


def named_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``module`` by qualified name, tied ones under each of their names."""
    tensors: dict[str, torch.Tensor] = dict(module.named_parameters(remove_duplicate=False))
    tensors.update(module.named_buffers(remove_duplicate=False))
    return {name: tensor.detach() for name, tensor in tensors.items()}


def fingerprint(tensor: torch.Tensor) -> str:
    """The sha256 of a tensor's bytes (its dtype and shape are checked apart)."""
    data = tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8)
    return hashlib.sha256(data.numpy().tobytes()).hexdigest()


def batch_norm(module: torch.nn.Module, path: str) -> torch.nn.modules.batchnorm._BatchNorm | None:
    """The BatchNorm at ``path`` when it normalizes with running statistics (what export folds), else None."""
    try:
        found = module.get_submodule(path)
    except AttributeError:
        return None
    if not isinstance(found, torch.nn.modules.batchnorm._BatchNorm):
        return None
    if found.running_mean is None or found.running_var is None:
        return None
    return found


def norm_scale(norm: torch.nn.modules.batchnorm._BatchNorm, eps: float) -> torch.Tensor:
    """``weight / sqrt(running_var + eps)``, the factor a folded BatchNorm multiplies the layer before it by."""
    assert norm.running_var is not None
    variance = norm.running_var.detach()
    scale = torch.rsqrt(variance + eps)
    return scale if norm.weight is None else norm.weight.detach() * scale


def fold_weight(
    weight: torch.Tensor, norm: torch.nn.modules.batchnorm._BatchNorm, axis: int, eps: float
) -> torch.Tensor:
    """The weight of a layer with the BatchNorm after it folded in, its output channels along ``axis``."""
    shape = [1] * weight.dim()
    shape[axis] = -1
    return weight.detach() * norm_scale(norm, eps).reshape(shape)


def fold_bias(bias: torch.Tensor | None, norm: torch.nn.modules.batchnorm._BatchNorm, eps: float) -> torch.Tensor:
    """The bias of a layer with the BatchNorm after it folded in (``bias`` None: the layer had none)."""
    assert norm.running_mean is not None
    mean = norm.running_mean.detach()
    shifted = -mean if bias is None else bias.detach() - mean
    folded = shifted * norm_scale(norm, eps)
    return folded if norm.bias is None else folded + norm.bias.detach()


def make_constant(source: ConstantSource, tensors: Mapping[str, torch.Tensor], module: torch.nn.Module) -> torch.Tensor:
    """One constant from the module's tensors as ``source`` says; None-free, contiguous, on the CPU."""
    if source.kind in (NORM_WEIGHT, NORM_BIAS):
        norm = batch_norm(module, source.norm)
        assert norm is not None  # checked by check_refit
        if source.kind == NORM_WEIGHT:
            value = fold_weight(tensors[source.tensor], norm, source.axis, source.eps)
        else:
            value = fold_bias(tensors[source.tensor] if source.tensor else None, norm, source.eps)
    else:
        value = tensors[source.tensor]
        if source.kind == TRANSPOSE:
            value = value.t()
    return value.reshape(source.shape).to(device="cpu", dtype=source.dtype).contiguous()


def check_refit(weight_map: WeightMap, module: torch.nn.Module, owner: str) -> dict[str, torch.Tensor]:
    """The module's tensors by name, once a refit from them is known to be exact; RefitError naming why not."""
    tensors = named_tensors(module)
    problems = []
    for name, record in weight_map.tensors.items():
        tensor = tensors.get(name)
        if tensor is None:
            problems.append(f"the module has no tensor {name} any more")
        elif list(tensor.shape) != record.shape or tensor.dtype != record.dtype:
            problems.append(
                f"{name} is {tuple(tensor.shape)} {tensor.dtype}, it was {tuple(record.shape)} {record.dtype} "
                "when exported"
            )
    sources = [*weight_map.constants.values(), *(item for items in weight_map.alternatives.values() for item in items)]
    for source in sources:
        if source.kind in (NORM_WEIGHT, NORM_BIAS):
            norm = batch_norm(module, source.norm)
            if norm is None:
                problems.append(f"{source.norm} is no longer a BatchNorm with running statistics")
            elif norm.eps != source.eps:
                problems.append(f"{source.norm}.eps is {norm.eps}, it was {source.eps} when exported")
    if problems:
        raise RefitError(f"{owner} cannot take these weights: {'; '.join(sorted(set(problems)))}; rebuild it")
    for group in weight_map.equal:
        first = tensors[group[0]]
        differ = [name for name in group[1:] if not torch.equal(tensors[name], first)]
        if differ:
            problems.append(
                f"{group[0]} and {', '.join(differ)} were equal when exported and reach the graph as one "
                "constant, but now differ"
            )
    for item in weight_map.frozen:
        tensor = tensors.get(item.name)
        if tensor is None or fingerprint(tensor) != item.sha256:
            problems.append(
                f"{item.name} changed, but the exported graph holds it only folded into other constants, "
                "which a refit cannot make again"
            )
    if problems:
        raise RefitError(f"{owner} cannot take these weights: {'; '.join(problems)}; rebuild it")
    return tensors


def constant_values(weight_map: WeightMap, module: torch.nn.Module, owner: str) -> dict[str, torch.Tensor]:
    """Every mapped constant made from ``module``'s tensors now (see the module docstring)."""
    tensors = check_refit(weight_map, module, owner)
    with torch.no_grad():
        values = {name: make_constant(source, tensors, module) for name, source in weight_map.constants.items()}
        disagree = [
            name
            for name, others in weight_map.alternatives.items()
            if any(not torch.equal(make_constant(other, tensors, module), values[name]) for other in others)
        ]
    if disagree:
        raise RefitError(
            f"{owner} cannot take these weights: {', '.join(disagree[:4])}{', ...' if len(disagree) > 4 else ''} "
            "could be made from more than one set of tensors when exported (equal then, such as BatchNorms at "
            "their initial values), and those now make different values; rebuild it"
        )
    return values


def weight_map_to_data(weight_map: WeightMap) -> dict[str, object]:
    """The map as JSON data, for a backend's extra state in checkpoints."""
    data: dict[str, object] = converter().unstructure(weight_map)
    return data


def weight_map_from_data(data: object) -> WeightMap:
    """A map stored by :func:`weight_map_to_data`; a ValueError naming the field when the data is not one."""
    return structure_config(data, WeightMap)
