"""``save(model, path)``: write every tuned module of a model to a checkpoint, atomically.

Everything is written into a staging sibling first and swapped into place at the end
(see :mod:`aitune_core.checkpoint.staging` for what is atomic where), so a crash or a
kill at any point leaves a complete checkpoint at the path: the previous one or the new.

Artifacts are copied as they were validated: a backend sealed when its candidate passed
(:mod:`aitune_core.backends.artifacts`) has each file hashed again while it is copied,
and a file that changed since is refused. Every error names the module, the graph and
the backend it concerns.
"""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path
from typing import Any

from torch import nn

from aitune_core._version import __version__
from aitune_core.backends.artifacts import copy_hashed, seal_of
from aitune_core.backends.persistable import NotPersistableError, check_persistable
from aitune_core.backends.restore import StoredStateError, backend_origin
from aitune_core.checkpoint import staging
from aitune_core.checkpoint.archive import pack
from aitune_core.checkpoint.files import add_file, save_tensors
from aitune_core.checkpoint.manifest import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    ArtifactRef,
    BackendEntry,
    CheckpointError,
    GraphEntry,
    Manifest,
    ModuleEntry,
    PluginRef,
    RangeEntry,
    write_manifest,
)
from aitune_core.checkpoint.origin import about
from aitune_core.checkpoint.signing import SigningKey, write_signature
from aitune_core.graphs.sample_data import encode_samples
from aitune_core.graphs.spec_data import GraphSpecData
from aitune_core.log import get_logger
from aitune_core.module.wrapper import Module, ModuleState


def tuned_modules(model: nn.Module) -> list[tuple[str, Module]]:
    """``(path in model, wrapper)`` for every tuned aitune module, the model itself included."""
    found = []
    for path, module in model.named_modules(remove_duplicate=True):
        if isinstance(module, Module) and module.state is ModuleState.TUNED:
            found.append((path, module))
    return found


def save(
    model: nn.Module, path: str | os.PathLike[str], archive: bool = False, *, sign_key: SigningKey | None = None
) -> Path:
    """Save the tuned modules of ``model`` to the folder ``path`` (or one archive file).

    sign_key: a secret (16 bytes or more); an HMAC over the manifest, which holds every
        file's sha256, is written beside it, and ``load(..., verify_key=...)`` refuses the
        checkpoint if anything in it changes.
    Staging that killed saves left next to ``path`` is removed first.
    Returns the path written. Raises CheckpointError when nothing in ``model`` is tuned.
    """
    target = Path(path)
    modules = tuned_modules(model)
    if not modules:
        raise CheckpointError("nothing to save: no aitune module in this model is tuned; call aitune_core.tune first")
    staging.clean_stale(target)
    folder = staging.staging_path(target, staging.SAVING)
    packed = folder.with_name(folder.name + ".zip")
    folder.mkdir(parents=True)
    try:
        manifest = _write_contents(modules, folder)
        written = write_manifest(manifest, folder)
        if sign_key is not None:
            write_signature(folder, written, sign_key)
        staging.fsync(folder / MANIFEST_NAME)
        if archive:
            pack(folder, packed)
            staging.fsync(packed)
            staging.remove(folder)
        _replace(packed if archive else folder, target)
    except BaseException:
        # After the swap these names hold the previous checkpoint; before it, the partial new one.
        staging.remove(folder)
        staging.remove(packed)
        raise
    get_logger().info("checkpoint saved", path=str(target), modules=[m.name for _, m in modules])
    return target


def _write_contents(modules: list[tuple[str, Module]], root: Path) -> Manifest:
    entries: list[ModuleEntry] = []
    distributions: dict[str, str] = {}
    for index, (model_path, module) in enumerate(modules):
        folder = f"modules/{index}"
        with about(module.name):
            save_tensors(module.module.state_dict(), root / folder / "weights.pt")
            weights = add_file(root, f"{folder}/weights.pt")
        graphs = []
        for record in module.graphs.values():
            route = module.routes.get(record.spec.key)
            if route is None:
                continue
            graphs.append(
                _graph_entry(root, f"{folder}/graphs/{record.spec.name}", record, route, distributions, module.name)
            )
        entries.append(ModuleEntry(module.name, model_path, weights, graphs, module.accuracy, module.threads))
    return Manifest(
        format_version=FORMAT_VERSION,
        aitune_core_version=__version__,
        created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        plugins=[PluginRef(name, version) for name, version in sorted(distributions.items())],
        modules=entries,
    )


def _graph_entry(
    root: Path, folder: str, record: Any, route: Any, distributions: dict[str, str], module_name: str = ""
) -> GraphEntry:
    """The manifest entry of one graph, its backends' artifacts and its samples written under ``root/folder``.

    A backend serving a lower batch range gets its own folder (``ranges/<n>``). Any
    error names the module, the graph and the backend.
    """
    main = _backend_entry(root, folder, route.backend, distributions, module_name, record.spec.name)
    written = {id(route.backend): main}
    lower = []
    for index, (up_to, backend) in enumerate(route.lower):
        if backend is not None and id(backend) not in written:
            where = f"{folder}/ranges/{index}"
            written[id(backend)] = _backend_entry(root, where, backend, distributions, module_name, record.spec.name)
        lower.append(RangeEntry(up_to, None if backend is None else written[id(backend)]))
    # The route's spec: the graph as tuned, widened to declared ranges and to the batch search's find.
    entry = GraphEntry(spec=GraphSpecData.of(route.graph), backend=main, lower=lower)
    with about(module_name, record.spec.name):
        encoded = encode_samples(record.samples)
        if isinstance(encoded, str):
            entry.samples_note = encoded
        else:
            tensors, trees = encoded
            save_tensors(tensors, root / folder / "samples.pt")
            entry.samples = add_file(root, f"{folder}/samples.pt")
            entry.sample_trees = trees
        return entry


def _backend_entry(
    root: Path, folder: str, backend: Any, distributions: dict[str, str], module_name: str, graph: str
) -> BackendEntry:
    with about(module_name, graph, backend.describe()):
        try:
            data = check_persistable(backend)
        except (NotPersistableError, StoredStateError) as error:
            raise CheckpointError(str(error)) from None
        artifacts = _write_artifacts(root, folder, backend, data.get("artifacts", {}))
        distribution, version = backend_origin(type(backend).name)
        distributions[distribution] = version
        return BackendEntry(
            name=type(backend).name,
            distribution=distribution,
            version=version,
            config=data.get("config", {}),
            state=backend.state.name,
            is_jit=backend.is_jit,
            description=backend.describe(),
            artifacts=artifacts,
            extra=data.get("extra", {}),
        )


def _write_artifacts(root: Path, folder: str, backend: Any, declared: dict[str, Any]) -> dict[str, ArtifactRef]:
    """Copy each artifact into the checkpoint, hashing the bytes copied.

    A backend sealed when its candidate passed (:mod:`aitune_core.backends.artifacts`)
    must declare the very artifacts it was validated with, and each file must still
    hold the bytes it held then; anything else is refused, naming both hashes.
    """
    artifact_seal = seal_of(backend)
    if artifact_seal is not None and set(declared) != set(artifact_seal.artifacts):
        raise CheckpointError(
            f"it declares artifacts {sorted(declared)}, but was validated with {sorted(artifact_seal.artifacts)}; "
            "a backend must not change its artifacts after it passed"
        )
    refs = {}
    native = backend.native_artifacts() | backend.optional_native_artifacts()
    for name, source in declared.items():
        relative = f"{folder}/artifacts/{name}/{Path(source).name}"
        sha256, size = copy_hashed(Path(source), root / relative)
        sealed = artifact_seal.artifacts[name] if artifact_seal is not None else None
        if sealed is not None and (sha256 != sealed.sha256 or size != sealed.size):
            raise CheckpointError(
                f"artifact {name!r} at {source} changed after the candidate was validated: it now has sha256 "
                f"{sha256} ({size} bytes), the validated file had sha256 {sealed.sha256} ({sealed.size} bytes); "
                "something wrote into the build folder since; tune again to save what was validated"
            )
        refs[name] = ArtifactRef(relative, sha256, size, native=name in native)
    return refs


def _replace(source: Path, target: Path) -> None:
    """Put ``source`` at ``target`` so that every reader sees the old or the new checkpoint.

    The previous checkpoint ends up at ``source``'s name and is removed there.
    """
    try:
        existing: int | None = os.lstat(target).st_mode
    except FileNotFoundError:
        existing = None
    if existing is None or (not stat.S_ISDIR(existing) and not source.is_dir()):
        os.replace(source, target)  # nothing to keep, or a file over a file: rename(2) is atomic
    else:
        try:
            staging.exchange(source, target)
        except staging.ExchangeUnsupported:
            staging.replace_via_aside(source, target)
        else:
            staging.remove(source)
    staging.fsync(target.parent)
