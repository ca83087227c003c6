"""One ONNX export per graph, shared by the candidates that build on it and kept for later runs.

ONNX Runtime candidates that differ only in provider or session options, and TensorRT
candidates without an export cast, build on the same ONNX model. Exporting costs
seconds to minutes, so a graph is exported once, into a content-addressed cache::

    <cache>/exports/<key>/model.onnx  (+ model.onnx.data)  + entry.json

beside the ``builds`` folder (:mod:`aitune_core.backends.build_folders`). The key
(:mod:`aitune_onnx.export_key`) covers everything that decides the exported bytes.

An entry is written in a private staging folder and renamed into place in one step,
so readers see a whole entry or none. The staging folder (and an entry being removed)
is named ``.<key>.<pid>-<random>`` after the process writing it, so that what a killed
process left half written is garbage to the cache once that process is gone
(:mod:`aitune_core.store.usage`). Two builds that export the same key at once both
succeed and the first rename wins. A reader trusts nothing it finds: ``entry.json``
records the sha256 of each file, and the files are checked once linked into the
build's folder. An entry that fails the check (a disk error, a hand edit, a partial
copy) is moved aside and the graph exported again.

Builds never use an entry's files in place: they are hard-linked (or copied across
file systems) into the build's own folder, so each backend's artifacts stay in its
folder, where checkpoints hash and copy them from.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from aitune_core.plugin_api import BUILDS, ForwardSignature, GraphSpec, Sample, get_logger
from aitune_core.plugin_api.exported import IOLayout
from aitune_onnx.export import ExportConfig, ExportedModel, data_file_name, example_call, export_graph
from aitune_onnx.export_key import KEY_FORMAT, export_key

EXPORTS = "exports"
RECORD_FILE = "entry.json"
_CHUNK = 1 << 20


class _Unusable(Exception):
    """An entry that must not be used: why, for the log."""


def export_into(
    folder: Path,
    module: torch.nn.Module,
    graph_spec: GraphSpec,
    samples: Sequence[Sample],
    signature: ForwardSignature,
    config: ExportConfig,
    device: torch.device | str,
    file_name: str,
    variant: str = "",
) -> ExportedModel:
    """``folder/file_name`` (and its external data): the graph's export, reused from the cache
    when an entry with the same key checks out, else exported and added to the cache.

    The files appear in ``folder`` whole: they are put together in a unique subfolder and
    moved into place, so a backend already loaded from the same folder never sees half a file.
    variant: what the caller changes about the export beyond the module and config (see
        :func:`aitune_onnx.export_key.export_key`).
    """
    device = torch.device(device)
    folder.mkdir(parents=True, exist_ok=True)
    entry = exports_root(folder) / export_key(module, graph_spec, samples, config, device, file_name, variant)
    building = folder / f"building-{uuid.uuid4().hex}"
    building.mkdir()
    try:
        exported = _reuse(entry, building, file_name, module, graph_spec, samples, signature, device)
        if exported is None:
            exported = export_graph(module, graph_spec, samples, signature, building / file_name, config, device=device)
            _publish(entry, exported)
        for path in exported.files:
            os.replace(path, folder / path.name)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    exported.path = folder / file_name
    if exported.external_data is not None:
        exported.external_data = folder / exported.external_data.name
    return exported


def exports_root(build_folder: Path) -> Path:
    """``exports`` beside the ``builds`` folder that holds ``build_folder`` (``builds/<identity>/<build>``),
    or under ``config.cache_dir`` for a build folder outside one."""
    folder = build_folder.expanduser().absolute()
    if folder.parent.parent.name == BUILDS:
        return folder.parent.parent.parent / EXPORTS
    from aitune_core.plugin_api import config

    return config.cache_dir.expanduser().absolute() / EXPORTS


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link ``source`` at ``target``, or copy it across file systems; ``target`` must not exist yet."""
    try:
        os.link(source, target)
    except FileExistsError:
        raise
    except OSError:
        with source.open("rb") as reading, target.open("xb") as writing:
            shutil.copyfileobj(reading, writing)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as reading:
        while chunk := reading.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------- reading
def _reuse(
    entry: Path,
    building: Path,
    file_name: str,
    module: torch.nn.Module,
    graph_spec: GraphSpec,
    samples: Sequence[Sample],
    signature: ForwardSignature,
    device: torch.device,
) -> ExportedModel | None:
    """The entry's export, linked into ``building`` and checked; None when there is none to use."""
    started = time.perf_counter()
    record_path = entry / RECORD_FILE
    if not record_path.is_file():
        return None
    _, layout = example_call(module, graph_spec, samples, signature, device)
    try:
        record = _read_record(record_path, entry.name, file_name, layout)
        for name, sha256 in record["files"].items():
            target = building / name
            try:
                link_or_copy(entry / name, target)
            except OSError as error:
                raise _Unusable(f"{name} cannot be read: {error}") from error
            if file_sha256(target) != sha256:
                raise _Unusable(f"{name} does not match the sha256 recorded for it")
        exported = _exported_from(record, building, layout, entry)
    except _Unusable as error:
        for name in os.listdir(building):
            (building / name).unlink(missing_ok=True)
        _discard(entry, str(error))
        return None
    exported.duration_s = time.perf_counter() - started
    get_logger().info("export reused", path=str(entry), duration_s=round(exported.duration_s, 3))
    return exported


def _read_record(path: Path, key: str, file_name: str, layout: IOLayout) -> dict[str, Any]:
    """The entry's record, once it is known to describe this export; raises :class:`_Unusable`."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise _Unusable(f"{RECORD_FILE} cannot be read: {error}") from error
    if not isinstance(record, dict) or record.get("format") != KEY_FORMAT or record.get("key") != key:
        raise _Unusable(f"{RECORD_FILE} is not a format-{KEY_FORMAT} record of key {key}")
    files = record.get("files")
    allowed = {file_name, data_file_name(Path(file_name))}
    if not isinstance(files, dict) or file_name not in files or not set(files) <= allowed:
        raise _Unusable(f"{RECORD_FILE} lists files {files!r}, expected {file_name} and at most its external data")
    if record.get("input_names") != layout.input_names or record.get("output_names") != layout.output_names:
        raise _Unusable("the entry's inputs and outputs are not those of the module's call")
    return record


def _exported_from(record: dict[str, Any], folder: Path, layout: IOLayout, entry: Path) -> ExportedModel:
    try:
        data = record["external_data"]
        return ExportedModel(
            path=folder / record["model"],
            external_data=None if data is None else folder / data,
            layout=layout,
            dynamic_axes={
                str(name): {int(axis): str(symbol) for axis, symbol in axes.items()}
                for name, axes in record["dynamic_axes"].items()
            },
            exporter=str(record["exporter"]),
            opset=int(record["opset"]),
            fallback_reason=str(record["fallback_reason"]),
            unused_inputs=[str(name) for name in record["unused_inputs"]],
            data_dependent_outputs=[str(name) for name in record["data_dependent_outputs"]],
            shape_inference=str(record["shape_inference"]),
            reused_from=entry,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise _Unusable(f"{RECORD_FILE} is incomplete: {type(error).__name__}: {error}") from error


def _discard(entry: Path, reason: str) -> None:
    """Move a bad entry aside (one rename, so no reader sees it half gone), then delete it."""
    get_logger().warning("export cache entry discarded, exporting again", path=str(entry), reason=reason)
    aside = entry.with_name(f".{entry.name}.{os.getpid()}-discarded-{uuid.uuid4().hex}")
    try:
        os.replace(entry, aside)
    except OSError:
        return  # already moved or replaced by another build
    shutil.rmtree(aside, ignore_errors=True)


# ---------------------------------------------------------------------- writing
def _publish(entry: Path, exported: ExportedModel) -> None:
    """Add a fresh export to the cache. The build goes on without the cache when this fails."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}.{os.getpid()}-", dir=entry.parent))
        try:
            files = {}
            for path in exported.files:
                link_or_copy(path, staging / path.name)
                files[path.name] = file_sha256(staging / path.name)
            (staging / RECORD_FILE).write_text(json.dumps(_record(entry.name, exported, files), indent=1))
            with contextlib.suppress(OSError):  # another build published this key first; it is checked when read
                os.replace(staging, entry)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as error:
        get_logger().warning("export not cached", path=str(entry), reason=f"{type(error).__name__}: {error}")


def _record(key: str, exported: ExportedModel, files: dict[str, str]) -> dict[str, Any]:
    return {
        "format": KEY_FORMAT,
        "key": key,
        "files": files,
        "model": exported.path.name,
        "external_data": None if exported.external_data is None else exported.external_data.name,
        "input_names": exported.layout.input_names,
        "output_names": exported.layout.output_names,
        "dynamic_axes": {
            name: {str(axis): symbol for axis, symbol in axes.items()} for name, axes in exported.dynamic_axes.items()
        },
        "exporter": exported.exporter,
        "opset": exported.opset,
        "fallback_reason": exported.fallback_reason,
        "unused_inputs": exported.unused_inputs,
        "data_dependent_outputs": exported.data_dependent_outputs,
        "shape_inference": exported.shape_inference,
        "export_s": round(exported.duration_s, 3),
    }
