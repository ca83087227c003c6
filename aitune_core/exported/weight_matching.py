"""Finding, at build time, which of a module's tensors each constant of its exported graph was made from.

:func:`map_constants` takes the graph's constants (with the tensor name the exporter kept
for one, where it kept any) and the module whose values were exported, and explains each
constant it can: by name when the values agree, else by value, as a copy, a transposed
copy, or a weight or bias with a BatchNorm folded in (:mod:`.weight_map` says how each is
made again). A constant whose values more than one tensor explains as a copy, and which
the tensors' names do not settle, is taken from the first only when the others are equal
to it; they then form a group that must stay equal. One that several folds explain (the
BatchNorms of a freshly initialized model all hold the same values) keeps every fold
as a source: a refit makes it from the first and checks that the others still agree.
Folds are tried along a weight's first axis (its output channels, as convolutions and
``Linear`` weights hold them) before its second. Constants nothing explains are the
graph's own (shapes, masks, scalars) and are kept as exported.

Then the tensors no constant was mapped from: those the graph does not read (BatchNorm's
``num_batches_tracked`` in eval mode, a head another graph uses) are left alone, and those
it reads are ``frozen``, with their fingerprint: folded into something no rule above
explains, so a change to them stops a refit. So are the tensors of a constant that more
than :data:`MAX_ALTERNATIVES` folds explain, or that several unequal tensors copy.
Which tensors the graph reads is found by running the module with them perturbed
(:func:`graph_reads`), with ``torch.func.functional_call``, which leaves the module's own
tensors untouched.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import attrs
import torch

from aitune_core.exported.weight_map import (
    COPY,
    NORM_BIAS,
    NORM_TENSORS,
    NORM_WEIGHT,
    TRANSPOSE,
    ConstantSource,
    FrozenTensor,
    TensorRecord,
    WeightMap,
    fingerprint,
    fold_bias,
    fold_weight,
    named_tensors,
)

SCALE_TENSORS = ("weight", "running_var")
"""What a BatchNorm folded into a weight contributes: its scale, ``weight / sqrt(running_var + eps)``."""
MAX_ALTERNATIVES = 32
"""Sources kept for one constant that several explain; past this many it is left unmapped and its tensors frozen."""
MAX_SINGLE_PROBES = 64
"""Tensors probed one at a time when a probe of all of them together shows the graph reads some;
past this many, the rest are taken as read (frozen), which is safe and only stricter."""
_FOLD_TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-9}
_LOW_PRECISION_TOLERANCE = 4e-3


@attrs.define
class Constant:
    """One constant of an exported graph, as :func:`map_constants` takes it.

    value: its values (any device; compared on the CPU).
    name: the module tensor name the exporter kept for it, if any (``"layer.0.weight"``).
    """

    value: torch.Tensor
    name: str | None = None


Probe = Callable[[Collection[str]], bool]
"""Whether the graph reads any of the named tensors (its outputs change when they do)."""


def map_constants(module: torch.nn.Module, constants: Mapping[str, Constant], reads: Probe | None) -> WeightMap:
    """The :class:`WeightMap` of a graph exported from ``module`` as it is now (see the module docstring).

    reads: tells which unmapped tensors the graph reads; None takes every one as read.
    """
    tensors = named_tensors(module)
    canonical = _canonical_names(tensors)
    matcher = _Matcher(module, tensors)
    for key, constant in constants.items():
        matcher.explain(key, constant)
    claimed = {canonical[name] for name in matcher.read}
    unclaimed = sorted({name for name in canonical.values() if name not in claimed})
    used = _read_by_graph(unclaimed, reads)
    pinned = sorted({canonical[name] for name in matcher.pinned} - set(used))
    frozen = [FrozenTensor(name=name, sha256=fingerprint(tensors[name])) for name in pinned]
    for name in used:
        group = matcher.copy_equal_to(tensors[name])
        if group is not None:
            group.append(name)
            matcher.record(name)
        else:
            frozen.append(FrozenTensor(name=name, sha256=fingerprint(tensors[name])))
    return WeightMap(
        constants=matcher.sources,
        tensors={name: TensorRecord(list(tensors[name].shape), tensors[name].dtype) for name in sorted(matcher.read)},
        equal=[group for group in matcher.groups if len(group) > 1],
        frozen=frozen,
        alternatives=matcher.alternatives,
    )


def _canonical_names(tensors: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """Each name -> the first name of the same tensor (tied weights share one)."""
    first: dict[int, str] = {}
    return {name: first.setdefault(id(tensor), name) for name, tensor in tensors.items()}


def _read_by_graph(names: Sequence[str], reads: Probe | None) -> list[str]:
    if not names:
        return []
    if reads is None or not reads(names):
        return list(names) if reads is None else []
    if len(names) > MAX_SINGLE_PROBES:
        return list(names)
    return [name for name in names if reads([name])]


def _same(tensor: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether ``tensor``, reshaped and cast to the constant's dtype, holds exactly ``value``."""
    if tensor.numel() != value.numel():
        return False
    if tensor.dtype != value.dtype and not (tensor.is_floating_point() and value.is_floating_point()):
        return False
    return torch.equal(tensor.to(value.dtype).reshape(value.shape).cpu(), value)


def _close(folded: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether a fold computed here matches the exporter's, up to the rounding of its own arithmetic."""
    if folded.numel() != value.numel():
        return False
    tolerance = _FOLD_TOLERANCE.get(value.dtype, _LOW_PRECISION_TOLERANCE)
    expected = value.double()
    got = folded.to(value.dtype).reshape(value.shape).cpu().double()
    scale = max(float(expected.abs().max()), 1e-30) if expected.numel() else 1.0
    return bool(torch.allclose(got, expected, rtol=tolerance, atol=tolerance * scale))


class _Matcher:
    """Explains constants one by one, keeping what it has mapped and the equal groups."""

    def __init__(self, module: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
        self.module = module
        self.tensors = tensors
        self.sources: dict[str, ConstantSource] = {}
        self.read: set[str] = set()
        self.groups: list[list[str]] = []
        self.alternatives: dict[str, list[ConstantSource]] = {}
        self.pinned: set[str] = set()
        """Tensors a constant was made from in a way that more than one explanation fits: they must not change."""
        self._group_of: dict[str, list[str]] = {}
        self._by_numel: dict[int, list[str]] = defaultdict(list)
        for name, tensor in tensors.items():
            self._by_numel[tensor.numel()].append(name)
        self._norms = {
            path: norm
            for path, norm in module.named_modules()
            if isinstance(norm, torch.nn.modules.batchnorm._BatchNorm)
            and norm.running_mean is not None
            and norm.running_var is not None
        }
        norm_owned = {f"{path}.{part}" for path in self._norms for part in NORM_TENSORS}
        self._biases = [name for name, tensor in tensors.items() if tensor.dim() == 1 and name not in norm_owned]

    def record(self, name: str) -> None:
        self.read.add(name)

    def copy_equal_to(self, tensor: torch.Tensor) -> list[str] | None:
        """The group of a copied constant's source that ``tensor`` equals (it was deduplicated into it), if any."""
        for source in self.sources.values():
            if source.kind == COPY:
                first = self.tensors[source.tensor]
                if first.shape == tensor.shape and first.dtype == tensor.dtype and torch.equal(first, tensor):
                    return self._group(source.tensor)
        return None

    def _group(self, name: str) -> list[str]:
        group = self._group_of.get(name)
        if group is None:
            group = self._group_of[name] = [name]
            self.groups.append(group)
        return group

    def _add(self, key: str, source: ConstantSource, reads: Sequence[str]) -> None:
        self.sources[key] = source
        self.read.update(reads)

    def explain(self, key: str, constant: Constant) -> None:
        value = constant.value.detach().cpu()
        shape, dtype = list(value.shape), value.dtype
        hint = constant.name if constant.name in self.tensors else None
        if hint is not None and _same(self.tensors[hint], value):
            self._add(key, ConstantSource(COPY, shape, dtype, tensor=hint), [hint])
            self._group(hint)
            return
        if value.numel() < 2:
            return  # one number: a weight cannot be told from the graph's own scalars by value
        for kind, candidates in ((COPY, self._copies(value)), (TRANSPOSE, self._transposes(value))):
            if candidates:
                self._take_equal(key, ConstantSource(kind, shape, dtype, tensor=candidates[0]), candidates)
                return
        if value.is_floating_point():
            self._explain_fold(key, value, hint)

    def _copies(self, value: torch.Tensor) -> list[str]:
        return [name for name in self._by_numel[value.numel()] if _same(self.tensors[name], value)]

    def _transposes(self, value: torch.Tensor) -> list[str]:
        return [
            name
            for name in self._by_numel[value.numel()]
            if self.tensors[name].dim() == 2 and _same(self.tensors[name].t(), value)
        ]

    def _take_equal(self, key: str, source: ConstantSource, candidates: Sequence[str]) -> None:
        """Map ``key`` from the first candidate; the others must then equal it, else nothing is mapped."""
        first = self.tensors[candidates[0]]
        if any(not torch.equal(self.tensors[name], first) for name in candidates[1:]):
            self.pinned.update(candidates)
            return
        group = self._group(candidates[0])
        group.extend(name for name in candidates[1:] if name not in group)
        self._add(key, source, candidates)

    def _explain_fold(self, key: str, value: torch.Tensor, hint: str | None) -> None:
        """A weight or bias with a BatchNorm folded in: every (tensor, norm) pair whose fold gives ``value``."""
        found = self._weight_folds(value, hint) or self._bias_folds(value, hint)
        if not found:
            return
        reads = [name for _, names in found for name in names]
        if len(found) > MAX_ALTERNATIVES:
            self.pinned.update(reads)
            return
        self._add(key, found[0][0], reads)
        if len(found) > 1:
            self.alternatives[key] = [source for source, _ in found[1:]]

    def _weight_folds(self, value: torch.Tensor, hint: str | None) -> list[tuple[ConstantSource, list[str]]]:
        shape, dtype = list(value.shape), value.dtype
        weights = [hint] if hint is not None and self.tensors[hint].dim() >= 2 else self._by_numel[value.numel()]
        weights = [name for name in weights if self.tensors[name].dim() >= 2 and self.tensors[name].is_floating_point()]
        for axis in (0, 1):
            found = []
            for name in weights:
                weight = self.tensors[name]
                for path, norm in self._norms_of(weight.shape[axis]):
                    if _close(fold_weight(weight, norm, axis, norm.eps), value):
                        source = ConstantSource(
                            NORM_WEIGHT, shape, dtype, tensor=name, norm=path, axis=axis, eps=norm.eps
                        )
                        found.append((source, [name, *self._norm_tensors(path, SCALE_TENSORS)]))
            if found:
                return found
        return []

    def _bias_folds(self, value: torch.Tensor, hint: str | None) -> list[tuple[ConstantSource, list[str]]]:
        shape, dtype = list(value.shape), value.dtype
        biases: list[str | None] = [None, *(b for b in self._biases if self.tensors[b].numel() == value.numel())]
        if hint is not None and self.tensors[hint].dim() == 1:
            biases = [hint]
        found = []
        for path, norm in self._norms_of(value.numel()):
            for bias in biases:
                if _close(fold_bias(None if bias is None else self.tensors[bias], norm, norm.eps), value):
                    source = ConstantSource(NORM_BIAS, shape, dtype, tensor=bias or "", norm=path, eps=norm.eps)
                    found.append((source, [*([bias] if bias else []), *self._norm_tensors(path, NORM_TENSORS)]))
        return found

    def _norms_of(self, channels: int) -> list[tuple[str, torch.nn.modules.batchnorm._BatchNorm]]:
        return [(path, norm) for path, norm in self._norms.items() if norm.num_features == channels]

    def _norm_tensors(self, path: str, parts: Sequence[str]) -> list[str]:
        """The BatchNorm's tensors a fold reads: a weight's only its scale, so that a norm whose shift no
        constant holds (an optimizer dropped a bias of zeros) leaves its bias and mean to be frozen."""
        return [f"{path}.{part}" for part in parts if f"{path}.{part}" in self.tensors]


def graph_reads(run: Callable[[dict[str, torch.Tensor]], Sequence[torch.Tensor]], module: torch.nn.Module) -> Probe:
    """A :data:`Probe` from ``run(overrides)``, the graph's flat outputs with some tensors of ``module`` replaced.

    Whether the graph reads a tensor depends on the values around it: after a BatchNorm
    whose weight is zero (as ``zero_init`` leaves a residual block's last one), nothing
    before it reaches the output. So every floating-point tensor is first moved to a
    random point near its value (variances kept positive), where no weight is exactly
    zero; a probed tensor is then perturbed again there (noise for floats, +1 for
    integers, negation for booleans), and the graph reads it when the outputs change, or
    when the run fails. A tensor of another kind is taken as read. Every tensor is passed
    as a copy, so that even a submodule that updates a buffer in place (a BatchNorm left
    in training mode) leaves the module's own untouched.
    """
    tensors = named_tensors(module)
    generator = torch.Generator().manual_seed(0)
    canonical = set(_canonical_names(tensors).values())
    generic: dict[str, torch.Tensor] = {}
    for name in sorted(canonical):
        moved = _generic(name, tensors[name], generator)
        generic[name] = tensors[name].clone() if moved is None else moved  # in-place updates land in copies
    with torch.no_grad():
        baseline = [output.detach() for output in run(generic)]

    def reads(names: Collection[str]) -> bool:
        overrides = dict(generic)
        for name in names:
            perturbed = _perturbed(overrides.get(name, tensors[name]), generator)
            if perturbed is None:
                return True
            overrides[name] = perturbed
        try:
            with torch.no_grad():
                outputs = run(overrides)
        except Exception:
            return True
        return any(_differ(got, want) for got, want in zip(outputs, baseline, strict=True))

    return reads


def _noise(tensor: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(tensor.shape, generator=generator, dtype=torch.float32).to(tensor.device)


def _generic(name: str, tensor: torch.Tensor, generator: torch.Generator) -> torch.Tensor | None:
    """``tensor`` moved to a random point near it: no value exactly zero, a variance still positive."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return None
    values = tensor.float()
    spread = float(values.std()) if tensor.numel() > 1 else 0.0
    noise = _noise(tensor, generator) * (spread + 0.1)
    moved = values.abs() + 0.5 + noise.abs() if name.endswith("running_var") else values + noise
    return moved.to(tensor.dtype)


def _perturbed(tensor: torch.Tensor, generator: torch.Generator) -> torch.Tensor | None:
    if tensor.dtype == torch.bool:
        return ~tensor
    if tensor.is_floating_point():
        scale = float(tensor.float().abs().mean()) + 1.0 if tensor.numel() else 1.0
        return tensor + (_noise(tensor, generator) * scale).to(tensor.dtype)
    if tensor.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
        return tensor + 1
    return None


def _differ(got: Any, want: torch.Tensor) -> bool:
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
        return True
    if got.is_floating_point():
        return not torch.allclose(got, want, rtol=1e-4, atol=1e-6, equal_nan=True)
    return not torch.equal(got, want)


def flat_run(adapter: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> Callable[[dict[str, torch.Tensor]], Any]:
    """``run(overrides)`` for :func:`graph_reads`: the :class:`~aitune_core.exported.flat.FlatModule` ``adapter``
    called on ``inputs`` with the named tensors of the module it wraps replaced, the module itself untouched."""
    inner = tuple(inputs)

    def run(overrides: dict[str, torch.Tensor]) -> Any:
        replaced = {f"module.{name}": tensor for name, tensor in overrides.items()}
        return torch.func.functional_call(adapter, replaced, inner, strict=False, tie_weights=True)

    return run
