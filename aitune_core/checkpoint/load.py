"""``load(model, path)``: put tuned modules back into a freshly built model, ready to serve.

A checkpoint is data. Loading never runs code from it: the manifest is JSON checked
against a schema, backend configs are checked by their classes (unsafe options are
refused), tensors are read with ``weights_only=True``, every file's sha256 is checked
before use, every path stays inside the checkpoint, and backends come from classes
that installed plugins register, from the distribution that wrote them. Artifacts
that are native code (AOT packages) are refused unless the caller trusts them, and a
signed checkpoint can be required. Loading writes only into a fresh private folder
under the cache.

Loading is all or nothing: everything is checked first (:mod:`.load_plan`), then
applied; a failure while applying puts the model back as it was (:mod:`.rollback`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import weakref
from collections.abc import Hashable
from pathlib import Path

import torch
from torch import nn

from aitune_core.backends.base import BuildContext
from aitune_core.checkpoint.archive import is_archive, unpack
from aitune_core.checkpoint.load_plan import DeviceMap, GraphPlan, LoadPlan, ModulePlan, about, plan_load
from aitune_core.checkpoint.manifest import CheckpointError, Manifest, manifest_bytes, parse_manifest
from aitune_core.checkpoint.rollback import ModelSnapshot
from aitune_core.checkpoint.signing import SigningKey
from aitune_core.checkpoint.staging import clean_stale
from aitune_core.config import config
from aitune_core.extensions import ensure_plugins
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.log import get_logger
from aitune_core.module.router import Route
from aitune_core.module.wrapper import Module
from aitune_core.threads import mismatch


def load(
    model: nn.Module,
    path: str | os.PathLike[str],
    device_map: DeviceMap = None,
    release_weights: bool = False,
    *,
    trust_native_code: bool = False,
    verify_key: SigningKey | None = None,
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
    trust_native_code: allow artifacts that are machine code loaded into this process
        (AOT Inductor packages hold a shared library whose code runs when loaded). Off,
        such checkpoints are refused with the list of what they would run; native code
        a backend can do without (Inductor JIT's compile cache) is left unread instead,
        and that backend compiles again.
    verify_key: refuse the checkpoint unless it was signed with this key
        (``save(..., sign_key=...)``) and nothing in it changed since.
    Returns ``model``, or the new wrapper when the model itself was the tuned module.
    Raises CheckpointError naming the module, graph and backend concerned; the model
    is then exactly as it was.
    """
    ensure_plugins()  # the checkpoint names its backends, which plugins register
    clean_stale(Path(path))  # staging left by killed saves; a checkpoint left only aside is moved back first
    root = _open(Path(path))
    unpacked = root if root != Path(path) else None
    try:
        plan = plan_load(model, root, manifest_bytes(root), device_map, trust_native_code, verify_key)
        result = _apply(model, plan, release_weights, unpacked)
    except BaseException:
        if unpacked is not None:
            shutil.rmtree(unpacked, ignore_errors=True)
        raise
    get_logger().info("checkpoint loaded", path=str(path), modules=[m.entry.name for m in plan.modules])
    if unpacked is None:
        _mark_used(root)
    for module in plan.modules:
        note = mismatch(module.entry.threads)
        if note is not None:
            get_logger(module=module.entry.name).warning("loaded at another thread count", reason=note)
    return result


def _open(path: Path) -> Path:
    if path.is_dir():
        return path
    if is_archive(path):
        folder = _private_folder("checkpoint-")
        try:
            unpack(path, folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return folder
    raise CheckpointError(f"no checkpoint at {path}: it is neither a checkpoint folder nor an archive")


def _mark_used(root: Path) -> None:
    """A checkpoint folder in the cache (aitune-jit keeps its results there) was used now.

    The cache's cap removes what was used longest ago first (:mod:`aitune_core.store.eviction`),
    and for a checkpoint that is when its folder last changed.
    """
    folder = root.expanduser().absolute()
    if folder.is_relative_to(config.cache_dir.expanduser().absolute()):
        with contextlib.suppress(OSError):
            os.utime(folder)


def _private_folder(prefix: str) -> Path:
    """A new folder only this process writes to (mode 0700), under the cache, named after this process.

    Its pid lets a later run tell a folder of a process that was killed (garbage) from
    one still in use (see :mod:`aitune_core.store.usage`).
    """
    parent = config.cache_dir / "loaded"
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))


# --------------------------------------------------------------------------- applying
class _LoadedFiles:
    """Held by every wrapper a load creates: the private folders go when the last wrapper does.

    Backends keep paths into them (a re-``save`` of a loaded model copies its artifacts
    from there), so they live as long as something loaded may use them.
    """

    def __init__(self, folders: list[Path]) -> None:
        weakref.finalize(self, _remove, folders)


def _remove(folders: list[Path]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def _apply(model: nn.Module, plan: LoadPlan, release_weights: bool, unpacked: Path | None) -> nn.Module:
    snapshot = ModelSnapshot([module.target for module in plan.modules])
    folder = _private_folder("deploy-")
    try:
        wrappers = [
            _apply_module(model, module, snapshot, folder / str(index), plan.trust_native_code)
            for index, module in enumerate(plan.modules)
        ]
    except BaseException:
        snapshot.restore()
        shutil.rmtree(folder, ignore_errors=True)
        raise
    files = _LoadedFiles([folder] if unpacked is None else [folder, unpacked])
    result = model
    for module, wrapper in zip(plan.modules, wrappers, strict=True):
        wrapper.__dict__["_loaded_files"] = files
        wrapper.__dict__["_accuracy"] = module.entry.accuracy  # as measured when tuned; loading cannot re-measure
        wrapper.__dict__["_threads"] = module.entry.threads
        graphs = module.entry.graphs
        if release_weights and graphs and not any(b.is_jit for graph in graphs for b in graph.backend_entries()):
            wrapper.release_weights(
                "the original weights were released at load (release_weights=True); load without it to keep "
                "eager fallback for such calls"
            )
        if module.entry.path == "":
            result = wrapper
    return result


def _apply_module(
    model: nn.Module, plan: ModulePlan, snapshot: ModelSnapshot, folder: Path, trust_native_code: bool
) -> Module:
    entry, target, inner = plan.entry, plan.target, plan.inner
    with about(entry.name):
        if plan.weights is not None:
            inner.load_state_dict(plan.weights)
        inner.to(plan.device)
        if isinstance(target, Module):
            wrapper = target
        else:
            wrapper = Module(inner, entry.name)
            snapshot.record_wrapper(wrapper)
            if entry.path:
                parent_path, _, attribute = entry.path.rpartition(".")
                parent = model.get_submodule(parent_path) if parent_path else model
                snapshot.record_swap(parent, attribute, inner)
                setattr(parent, attribute, wrapper)
    routes: dict[Hashable, Route] = {}
    for graph in plan.graphs:
        wrapper.add_graph(graph.spec, graph.samples)
        routes[graph.spec.key] = _deploy_graph(
            graph, entry.name, inner, wrapper.signature, plan.device, folder, trust_native_code
        )
    wrapper.set_routes(routes)
    return wrapper


def _deploy_graph(
    graph: GraphPlan,
    name: str,
    module: nn.Module,
    signature: ForwardSignature,
    device: torch.device,
    folder: Path,
    trust_native_code: bool,
) -> Route:
    """Deploy every backend of one graph of ``module`` and route to them."""
    spec = graph.spec
    for index, (stored, backend) in enumerate(graph.backends()):
        with about(name, spec.name, stored.name):
            context = BuildContext(
                module=module,
                module_name=name,
                graph_spec=spec,
                samples=graph.samples,
                device=device,
                cache_dir=folder / spec.name / str(index) / backend.key(),
                signature=signature,
                trust_native_code=trust_native_code,
            )
            context.cache_dir.mkdir(parents=True, exist_ok=True)
            if backend.is_jit:
                get_logger(module=name, graph=spec.name).info(
                    "activating JIT backend on the stored samples"
                    if graph.samples
                    else "JIT backend compiles on its first call (no samples stored)",
                    backend=stored.description,
                )
            backend.deploy(context)
    return Route(spec, graph.backend, graph.lower)


def read(path: str | os.PathLike[str]) -> tuple[Path, Manifest]:
    """The folder and manifest of a checkpoint, without loading anything else."""
    root = _open(Path(path))
    return root, parse_manifest(manifest_bytes(root), root)
