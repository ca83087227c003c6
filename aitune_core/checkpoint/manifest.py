"""The checkpoint manifest: what was tuned, with which backends, and which files hold it.

``manifest.json`` is written with cattrs over these attrs classes. The format has a
version; older versions are brought up to date by registered migrations, one version
step at a time, and a newer version than this aitune-core knows is refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import cattrs

from aitune_core.checkpoint.specs import GraphSpecData

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"

Migration = Callable[[dict[str, Any]], dict[str, Any]]
MIGRATIONS: dict[int, Migration] = {}
"""``MIGRATIONS[n]`` turns a version-``n`` manifest dict into a version ``n + 1`` one."""


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read; the message names the file or setting to fix."""


@attrs.define
class ArtifactRef:
    """A file of the checkpoint: path relative to its root, sha256 and size in bytes."""

    path: str
    sha256: str
    size: int


@attrs.define
class PluginRef:
    distribution: str
    version: str


@attrs.define
class BackendEntry:
    name: str
    distribution: str
    version: str
    config: dict[str, Any]
    state: str
    is_jit: bool
    description: str
    artifacts: dict[str, ArtifactRef] = attrs.field(factory=dict)
    extra: dict[str, Any] = attrs.field(factory=dict)


@attrs.define
class GraphEntry:
    spec: GraphSpecData
    backend: BackendEntry
    samples: ArtifactRef | None = None
    sample_trees: list[dict[str, Any]] = attrs.field(factory=list)
    samples_note: str = ""
    eager_up_to: int | None = None
    """Calls with a batch up to this size run eagerly (measured faster there)."""


@attrs.define
class ModuleEntry:
    name: str
    path: str
    """Where the module sits in the model (``"encoder.layer"``); empty for the model itself."""
    weights: ArtifactRef | None
    graphs: list[GraphEntry]


@attrs.define
class Manifest:
    format_version: int
    aitune_core_version: str
    created: str
    plugins: list[PluginRef]
    modules: list[ModuleEntry]

    def artifacts(self) -> list[ArtifactRef]:
        refs: list[ArtifactRef] = []
        for module in self.modules:
            if module.weights is not None:
                refs.append(module.weights)
            for graph in module.graphs:
                refs.extend(graph.backend.artifacts.values())
                if graph.samples is not None:
                    refs.append(graph.samples)
        return refs


_converter = cattrs.Converter()


def write_manifest(manifest: Manifest, root: Path) -> None:
    text = json.dumps(_converter.unstructure(manifest), indent=2, sort_keys=True)
    (root / MANIFEST_NAME).write_text(text + "\n")


def read_manifest(root: Path) -> Manifest:
    path = root / MANIFEST_NAME
    if not path.is_file():
        raise CheckpointError(f"{root} is not an aitune checkpoint: {MANIFEST_NAME} is missing")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from error
    data = migrate(data)
    try:
        return _converter.structure(data, Manifest)
    except Exception as error:
        raise CheckpointError(f"{path} does not match format version {FORMAT_VERSION}: {error}") from error


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a manifest dict up to :data:`FORMAT_VERSION` with the registered migrations."""
    version = data.get("format_version")
    if not isinstance(version, int):
        raise CheckpointError("the manifest has no integer format_version")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"this checkpoint has format version {version}, newer than the {FORMAT_VERSION} this aitune-core "
            "reads; upgrade aitune-core to load it"
        )
    while version < FORMAT_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise CheckpointError(f"no migration from checkpoint format version {version} to {version + 1}")
        data = step(dict(data))
        data["format_version"] = version = version + 1
    return data
