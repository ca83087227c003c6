"""Everything ``load`` checks before it changes anything, gathered into a plan.

A checkpoint is data that may come from anywhere. The plan reads and checks all of it
(the manifest and its signature, every file's hash, the plugins that will read it,
the native code it would run, the weights against the model's own shapes, the stored
samples, every backend config) without touching the model. Only a complete plan is
applied, so a checkpoint that fails any check leaves the model exactly as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core.accuracy.record import check_lossy_choices
from aitune_core.backends.base import Backend
from aitune_core.backends.restore import restore_backend
from aitune_core.checkpoint.files import load_tensors, verify
from aitune_core.checkpoint.manifest import (
    BackendEntry,
    CheckpointError,
    GraphEntry,
    Manifest,
    ModuleEntry,
    parse_manifest,
)
from aitune_core.checkpoint.origin import about
from aitune_core.checkpoint.signing import SigningKey, verify_signature
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.graphs.sample_data import decode_samples
from aitune_core.log import get_logger
from aitune_core.module.stored_graph import check_graph, on_device
from aitune_core.module.wrapper import MODULE_REGISTRY, Module

DeviceMap = str | torch.device | dict[str, str | torch.device] | None


@attrs.define(eq=False)
class GraphPlan:
    entry: GraphEntry
    spec: GraphSpec
    samples: list[Sample]
    backend: Backend
    """Restored with ``from_dict`` (config checked, nothing loaded yet); deployed when applied."""
    lower: list[tuple[int, Backend | None]] = attrs.field(factory=list)
    """The lower batch ranges' backends, restored the same way; None is eager."""

    def backends(self) -> list[tuple[BackendEntry, Backend]]:
        """Every stored backend with its manifest entry, the main one first, each once."""
        pairs = [(self.entry.backend, self.backend)]
        for (_, backend), stored in zip(self.lower, self.entry.lower, strict=True):
            if backend is not None and stored.backend is not None and all(backend is not b for _, b in pairs):
                pairs.append((stored.backend, backend))
        return pairs


@attrs.define(eq=False)
class ModulePlan:
    entry: ModuleEntry
    target: nn.Module
    """What sits at the entry's path now: the user's module, or a wrapper already there."""
    device: torch.device
    weights: dict[str, Any] | None
    graphs: list[GraphPlan]

    @property
    def inner(self) -> nn.Module:
        return self.target.module if isinstance(self.target, Module) else self.target


@attrs.define(eq=False)
class LoadPlan:
    root: Path
    manifest: Manifest
    modules: list[ModulePlan]
    trust_native_code: bool = False
    """Given to every backend's context: whether it may load the native code it can do without."""


def plan_load(
    model: nn.Module,
    root: Path,
    manifest_data: bytes,
    device_map: DeviceMap,
    trust_native_code: bool,
    verify_key: SigningKey | None,
) -> LoadPlan:
    """Check the whole checkpoint at ``root`` against ``model``; raise CheckpointError at the first problem."""
    if verify_key is not None:
        verify_signature(root, manifest_data, verify_key)
    manifest = parse_manifest(manifest_data, root)
    for ref in manifest.artifacts():
        verify(root, ref)
    for entry in manifest.modules:
        _check_target(model, entry)
    plans = [_plan_module(model, root, entry, device_map) for entry in manifest.modules]
    _check_native_code(plans, trust_native_code)
    return LoadPlan(root, manifest, plans, trust_native_code)


# --------------------------------------------------------------------------- targets
def find_target(model: nn.Module, entry: ModuleEntry) -> nn.Module:
    if entry.path == "":
        return model
    try:
        return model.get_submodule(entry.path)
    except AttributeError:
        raise CheckpointError(
            f"module `{entry.name}` was tuned at `{entry.path}`, which this model does not have; "
            "load into a model built the same way as the tuned one"
        ) from None


def _check_target(model: nn.Module, entry: ModuleEntry) -> None:
    target = find_target(model, entry)
    if isinstance(target, Module):
        if target.name != entry.name:
            raise CheckpointError(f"`{entry.path}` is already wrapped as `{target.name}`, not `{entry.name}`")
        return
    existing = MODULE_REGISTRY.modules.get(entry.name)
    if existing is not None:
        raise CheckpointError(
            f"an aitune module named {entry.name!r} already exists in this process (wrapping "
            f"{type(existing.module).__name__}); delete it first, or load in a fresh process"
        )


def _device_for(entry: ModuleEntry, target: nn.Module, device_map: DeviceMap) -> torch.device:
    if isinstance(device_map, dict):
        chosen = device_map.get(entry.name)
        if chosen is not None:
            return torch.device(chosen)
    elif device_map is not None:
        return torch.device(device_map)
    parameter = next(iter(target.parameters()), None)
    return parameter.device if parameter is not None else torch.device("cpu")


# --------------------------------------------------------------------------- modules
def _plan_module(model: nn.Module, root: Path, entry: ModuleEntry, device_map: DeviceMap) -> ModulePlan:
    target = find_target(model, entry)
    with about(entry.name):
        device = _device_for(entry, target, device_map)
        inner = target.module if isinstance(target, Module) else target
        weights = None
        if entry.weights is not None:
            weights = load_tensors(root / entry.weights.path, map_location=device)
            check_weights(inner, weights)
    signature = target.signature if isinstance(target, Module) else ForwardSignature(inner.forward)
    graphs = [_plan_graph(root, entry, graph, device, signature, inner) for graph in entry.graphs]
    served = [(graph.spec.name, backend) for graph in graphs for _, backend in graph.backends()]
    check_lossy_choices(entry.name, entry.accuracy, served)  # the measured drop must still describe them
    return ModulePlan(entry, target, device, weights, graphs)


def check_weights(module: nn.Module, weights: Any) -> None:
    """The stored weights must fit ``module`` exactly: same names, same shapes."""
    if not isinstance(weights, dict):
        raise CheckpointError(f"its weights file holds a {type(weights).__name__}, not a state dict")
    expected = module.state_dict()
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    wrong = [
        f"{name} {tuple(weights[name].shape)} (the model has {tuple(tensor.shape)})"
        for name, tensor in expected.items()
        if name in weights
        and isinstance(tensor, torch.Tensor)
        and isinstance(weights[name], torch.Tensor)
        and weights[name].shape != tensor.shape
    ]
    found = {"missing": missing, "unexpected": unexpected, "other shapes:": wrong}
    problems = [
        f"{kind} {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}" for kind, names in found.items() if names
    ]
    if problems:
        raise CheckpointError(
            "its weights do not fit this model (" + "; ".join(problems) + "); build the model with the same "
            "configuration as the tuned one"
        )


# --------------------------------------------------------------------------- graphs
def _plan_graph(
    root: Path,
    module: ModuleEntry,
    graph: GraphEntry,
    device: torch.device,
    signature: ForwardSignature,
    inner: nn.Module,
) -> GraphPlan:
    name = graph.spec.name if isinstance(graph.spec.name, str) else "?"
    with about(module.name, name):
        spec = graph.spec.graph_spec()
        samples: list[Sample] = []
        if graph.samples is not None:
            samples = decode_samples(load_tensors(root / graph.samples.path, map_location="cpu"), graph.sample_trees)
        check_graph(spec, samples, signature)
        spec = on_device(spec, device.type)
    restored: dict[int, Backend] = {}

    def restore(entry: BackendEntry) -> Backend:
        if id(entry) not in restored:
            with about(module.name, name, entry.name):
                backend = _restore_backend(root, entry)
                backend.check_target(inner)  # what it names of the module is there (a partition's submodules)
                restored[id(entry)] = backend
        return restored[id(entry)]

    backend = restore(graph.backend)
    lower: list[tuple[int, Backend | None]] = []
    previous = 0
    for stored in graph.lower:
        if stored.up_to <= previous:
            raise CheckpointError(
                f"module `{module.name}`, graph `{name}`: its batch ranges are not ascending "
                f"({stored.up_to} after {previous})"
            )
        previous = stored.up_to
        lower.append((stored.up_to, None if stored.backend is None else restore(stored.backend)))
    return GraphPlan(graph, spec, samples, backend, lower)


def _restore_backend(root: Path, entry: BackendEntry) -> Backend:
    """The backend of ``entry``, from its installed class: config checked, nothing loaded yet."""
    artifacts = {artifact: str(root / ref.path) for artifact, ref in entry.artifacts.items()}
    data = {"config": entry.config, "artifacts": artifacts, "extra": entry.extra}
    return restore_backend(entry.name, entry.distribution, entry.version, data)


# --------------------------------------------------------------------------- native code
def native_artifacts(plans: list[ModulePlan], optional: bool = False) -> list[str]:
    """``module/graph: backend artifact (path)`` for every file that is native code.

    The installed backend class decides which of its artifacts are native; a mark in
    the manifest adds to that, never takes away. Those the class can do without
    (:meth:`~aitune_core.backends.base.Backend.optional_native_artifacts`, a JIT
    backend's compile cache) are listed with ``optional=True``, the others without.
    """
    found = []
    for module in plans:
        for graph in module.graphs:
            for entry, backend in graph.backends():
                can_skip = backend.optional_native_artifacts()
                declared = backend.native_artifacts() | can_skip
                for name, ref in entry.artifacts.items():
                    if (name in declared or ref.native) and (name in can_skip) == optional:
                        where = f"{module.entry.name}/{graph.spec.name}"
                        found.append(f"{where}: {entry.name} {name} ({ref.path})")
    return found


def _check_native_code(plans: list[ModulePlan], trust_native_code: bool) -> None:
    native = native_artifacts(plans)
    if native and not trust_native_code:
        raise CheckpointError(
            "this checkpoint holds native code that runs when it is loaded: "
            + "; ".join(native)
            + ". Load it with trust_native_code=True only if you trust where it came from "
            "(`aitune inspect` lists what it would run)"
        )
    skipped = native_artifacts(plans, optional=True)
    if skipped and not trust_native_code:
        get_logger().warning(
            "native code left unread (trust_native_code=False): these backends compile again at load instead",
            artifacts=skipped,
        )
