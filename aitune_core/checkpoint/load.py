"""``load(model, path)``: put tuned modules back into a freshly built model, ready to serve.

Loading never runs code from the checkpoint: the manifest is JSON, tensors are read
with ``weights_only=True``, every file's sha256 is checked before use, and backends
are created from classes registered by installed plugins, found by name.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_core.backends.base import Backend, BuildContext
from aitune_core.checkpoint.archive import is_archive, unpack
from aitune_core.checkpoint.files import load_tensors, sha256_of, verify
from aitune_core.checkpoint.manifest import CheckpointError, GraphEntry, Manifest, ModuleEntry, read_manifest
from aitune_core.checkpoint.samples import decode_samples
from aitune_core.config import config
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.log import get_logger
from aitune_core.module.router import Route
from aitune_core.module.wrapper import Module

DeviceMap = str | torch.device | dict[str, str | torch.device] | None


def load(
    model: nn.Module, path: str | os.PathLike[str], device_map: DeviceMap = None, release_weights: bool = False
) -> nn.Module:
    """Restore the checkpoint at ``path`` into ``model`` and deploy its backends.

    model: freshly built, with the same structure as the tuned one (its weights are
        replaced by the checkpoint's).
    device_map: one device for every module, or ``{module name: device}``; by default
        each module stays where its parameters are.
    release_weights: for modules whose backends all carry their own weights (AOT
        packages, ONNX files, engines, quantized tensors), do not keep the original
        weights in memory. Calls outside the tuned graphs then raise instead of running
        eagerly, since there are no weights to run them with.
    Returns ``model``, or the new wrapper when the model itself was the tuned module.
    """
    root = _open(Path(path))
    manifest = read_manifest(root)
    # Check everything before changing anything: a load that fails leaves the model as it was.
    for ref in manifest.artifacts():
        verify(root, ref)
    classes = {graph.backend.name: _backend_class(graph) for entry in manifest.modules for graph in entry.graphs}
    for entry in manifest.modules:
        _check_target(model, entry)
    result = model
    for entry in manifest.modules:
        wrapper = _restore_module(model, entry, root, _device_for(entry, model, device_map), classes)
        if release_weights and entry.graphs and not any(graph.backend.is_jit for graph in entry.graphs):
            wrapper.release_weights(
                "the original weights were released at load (release_weights=True); load without it to keep "
                "eager fallback for such calls"
            )
        if entry.path == "":
            result = wrapper
    get_logger().info("checkpoint loaded", path=str(path), modules=[m.name for m in manifest.modules])
    return result


def _open(path: Path) -> Path:
    if path.is_dir():
        return path
    if is_archive(path):
        folder = config.cache_dir / "checkpoints" / sha256_of(path)[:16]
        if not (folder / "manifest.json").is_file():
            staging = folder.with_name(folder.name + f".unpacking-{os.getpid()}")
            unpack(path, staging)
            if folder.exists():
                shutil.rmtree(staging, ignore_errors=True)
            else:
                os.replace(staging, folder)
        return folder
    raise CheckpointError(f"no checkpoint at {path}: it is neither a checkpoint folder nor an archive")


def _device_for(entry: ModuleEntry, model: nn.Module, device_map: DeviceMap) -> torch.device:
    if isinstance(device_map, dict):
        chosen = device_map.get(entry.name)
        if chosen is not None:
            return torch.device(chosen)
    elif device_map is not None:
        return torch.device(device_map)
    target = model if entry.path == "" else _find(model, entry)
    parameter = next(iter(target.parameters()), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _find(model: nn.Module, entry: ModuleEntry) -> nn.Module:
    try:
        return model.get_submodule(entry.path)
    except AttributeError:
        raise CheckpointError(
            f"module `{entry.name}` was tuned at `{entry.path}`, which this model does not have; "
            "load into a model built the same way as the tuned one"
        ) from None


def _check_target(model: nn.Module, entry: ModuleEntry) -> None:
    from aitune_core.module.wrapper import MODULE_REGISTRY

    target = model if entry.path == "" else _find(model, entry)
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


def _restore_module(
    model: nn.Module, entry: ModuleEntry, root: Path, device: torch.device, classes: dict[str, type[Backend]]
) -> Module:
    target = model if entry.path == "" else _find(model, entry)
    inner = target.module if isinstance(target, Module) else target
    if entry.weights is not None:
        state = load_tensors(root / entry.weights.path, map_location=device)
        inner.load_state_dict(state)
    inner.to(device)
    if isinstance(target, Module):
        wrapper = target
    else:
        wrapper = Module(inner, entry.name)
        if entry.path:
            parent_path, _, attribute = entry.path.rpartition(".")
            setattr(model.get_submodule(parent_path) if parent_path else model, attribute, wrapper)
    routes: dict[Hashable, Route] = {}
    for graph in entry.graphs:
        spec = graph.spec.graph_spec()
        spec = GraphSpec(spec.name, spec.input_spec, spec.output_spec, _retarget(spec.key, device.type))
        samples = _samples(root, graph, device)
        wrapper.add_graph(spec, samples)
        backend = _backend(root, graph, classes[graph.backend.name])
        context = BuildContext(
            module=inner,
            module_name=entry.name,
            graph_spec=spec,
            samples=samples,
            device=device,
            cache_dir=config.cache_dir / entry.name / spec.name / backend.key(),
            signature=wrapper.signature,
        )
        context.cache_dir.mkdir(parents=True, exist_ok=True)
        if backend.is_jit:
            get_logger(module=entry.name, graph=spec.name).info(
                "recompiling JIT backend from stored samples", backend=graph.backend.description
            )
        backend.deploy(context)
        routes[spec.key] = Route(spec, backend, graph.eager_up_to)
    wrapper.set_routes(routes)
    return wrapper


def _backend_class(graph: GraphEntry) -> type[Backend]:
    from aitune_core.plugins import get_backend_class
    from aitune_core.plugins.records import UnknownBackendError

    entry = graph.backend
    try:
        return get_backend_class(entry.name)
    except UnknownBackendError:
        raise CheckpointError(
            f"backend `{entry.name}` ({entry.description}) is not installed; install {entry.distribution}>="
            f"{entry.version} to load this checkpoint"
        ) from None


def _backend(root: Path, graph: GraphEntry, cls: type[Backend]) -> Backend:
    entry = graph.backend
    artifacts = {name: str(root / ref.path) for name, ref in entry.artifacts.items()}
    return cls.from_dict({"config": entry.config, "artifacts": artifacts, "extra": entry.extra})


def _samples(root: Path, graph: GraphEntry, device: torch.device) -> list[Sample]:
    if graph.samples is None:
        return []
    tensors = load_tensors(root / graph.samples.path, map_location="cpu")
    return decode_samples(tensors, graph.sample_trees)


def _retarget(key: Any, device_type: str) -> Any:
    """The graph key with every tensor's device type set to ``device_type``."""
    if isinstance(key, tuple):
        if len(key) == 4 and key[0] == "T" and isinstance(key[2], torch.dtype) and isinstance(key[3], str):
            return ("T", key[1], key[2], device_type)
        return tuple(_retarget(part, device_type) for part in key)
    return key


def read(path: str | os.PathLike[str]) -> tuple[Path, Manifest]:
    """The folder and manifest of a checkpoint, without loading anything else."""
    root = _open(Path(path))
    return root, read_manifest(root)
