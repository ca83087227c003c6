"""``save(model, path)``: write every tuned module of a model to a checkpoint, atomically.

Everything is written into a temporary sibling folder first and renamed into place at
the end, so a crash or a kill mid-save leaves the previous checkpoint as it was.
"""

from __future__ import annotations

import datetime
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from torch import nn

from aitune_core._version import __version__
from aitune_core.checkpoint.archive import pack
from aitune_core.checkpoint.files import add_file, save_tensors
from aitune_core.checkpoint.manifest import (
    FORMAT_VERSION,
    BackendEntry,
    CheckpointError,
    GraphEntry,
    Manifest,
    ModuleEntry,
    PluginRef,
    write_manifest,
)
from aitune_core.checkpoint.samples import encode_samples
from aitune_core.checkpoint.specs import GraphSpecData
from aitune_core.log import get_logger
from aitune_core.module.wrapper import Module, ModuleState


def tuned_modules(model: nn.Module) -> list[tuple[str, Module]]:
    """``(path in model, wrapper)`` for every tuned aitune module, the model itself included."""
    found = []
    for path, module in model.named_modules(remove_duplicate=True):
        if isinstance(module, Module) and module.state is ModuleState.TUNED:
            found.append((path, module))
    return found


def backend_origin(name: str) -> tuple[str, str]:
    """The distribution (and its version) whose plugin registered backend ``name``."""
    from aitune_core.plugins import plugins

    for record in plugins():
        if name in record.backends:
            return record.distribution, record.version
    return "aitune-core", __version__


def save(model: nn.Module, path: str | os.PathLike[str], archive: bool = False) -> Path:
    """Save the tuned modules of ``model`` to the folder ``path`` (or one archive file).

    Returns the path written. Raises CheckpointError when nothing in ``model`` is tuned.
    """
    target = Path(path)
    modules = tuned_modules(model)
    if not modules:
        raise CheckpointError("nothing to save: no aitune module in this model is tuned; call aitune_core.tune first")
    staging = target.parent / f".{target.name}.saving-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        manifest = _write_contents(modules, staging)
        write_manifest(manifest, staging)
        if archive:
            packed = staging.with_name(staging.name + ".zip")
            pack(staging, packed)
            shutil.rmtree(staging)
            staging = packed
        _replace(staging, target)
    except BaseException:
        if staging.is_dir():
            shutil.rmtree(staging, ignore_errors=True)
        elif staging.exists():
            staging.unlink()
        raise
    get_logger().info("checkpoint saved", path=str(target), modules=[m.name for _, m in modules])
    return target


def _write_contents(modules: list[tuple[str, Module]], root: Path) -> Manifest:
    entries: list[ModuleEntry] = []
    distributions: dict[str, str] = {}
    for index, (model_path, module) in enumerate(modules):
        folder = f"modules/{index}"
        save_tensors(module.module.state_dict(), root / folder / "weights.pt")
        weights = add_file(root, f"{folder}/weights.pt")
        graphs = []
        for record in module.graphs.values():
            route = module.routes.get(record.spec.key)
            if route is None:
                continue
            entry = _graph_entry(root, f"{folder}/graphs/{record.spec.name}", record, route.backend, distributions)
            entry.eager_up_to = route.eager_up_to
            graphs.append(entry)
        entries.append(ModuleEntry(module.name, model_path, weights, graphs))
    return Manifest(
        format_version=FORMAT_VERSION,
        aitune_core_version=__version__,
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        plugins=[PluginRef(name, version) for name, version in sorted(distributions.items())],
        modules=entries,
    )


def _graph_entry(root: Path, folder: str, record: Any, backend: Any, distributions: dict[str, str]) -> GraphEntry:
    data = backend.to_dict()
    artifacts = {}
    for name, source in data.get("artifacts", {}).items():
        source = Path(source)
        if not source.is_file():
            raise CheckpointError(
                f"backend {backend.describe()} declares artifact {name!r} at {source}, which is not a file"
            )
        artifacts[name] = add_file(root, f"{folder}/artifacts/{name}/{source.name}", source)
    distribution, version = backend_origin(type(backend).name)
    distributions[distribution] = version
    entry = GraphEntry(
        spec=GraphSpecData.of(record.spec),
        backend=BackendEntry(
            name=type(backend).name,
            distribution=distribution,
            version=version,
            config=data.get("config", {}),
            state=backend.state.name,
            is_jit=backend.is_jit,
            description=backend.describe(),
            artifacts=artifacts,
            extra=data.get("extra", {}),
        ),
    )
    encoded = encode_samples(record.samples)
    if isinstance(encoded, str):
        entry.samples_note = encoded
    else:
        tensors, trees = encoded
        save_tensors(tensors, root / folder / "samples.pt")
        entry.samples = add_file(root, f"{folder}/samples.pt")
        entry.sample_trees = trees
    return entry


def _replace(staging: Path, target: Path) -> None:
    """Move ``staging`` to ``target``; an existing checkpoint is set aside first and removed last."""
    if not target.exists():
        os.replace(staging, target)
        return
    aside = target.parent / f".{target.name}.replaced-{uuid.uuid4().hex[:8]}"
    os.replace(target, aside)
    try:
        os.replace(staging, target)
    except BaseException:
        os.replace(aside, target)
        raise
    if aside.is_dir():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)
