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

from aitune_core.accuracy.record import AccuracyRecord
from aitune_core.backends.state import BackendState
from aitune_core.checkpoint.format3 import v3_to_v4
from aitune_core.errors import CheckpointError
from aitune_core.graphs.spec_data import GraphSpecData
from aitune_core.serialization import make_converter

FORMAT_VERSION = 4
MANIFEST_NAME = "manifest.json"

Migration = Callable[[dict[str, Any]], dict[str, Any]]


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 marks native-code artifacts; version 1 wrote none, so each is marked unknown (False).

    Loading does not rely on the mark: the installed backend class says which of its
    artifacts are native code.
    """
    return data


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    """Version 3 routes batch ranges to several backends; version 2's ``eager_up_to`` is the lowest range, eager's."""
    for module in data.get("modules", []) if isinstance(data.get("modules"), list) else []:
        for graph in module.get("graphs", []) if isinstance(module, dict) else []:
            if isinstance(graph, dict) and "eager_up_to" in graph:
                up_to = graph.pop("eager_up_to")
                graph["lower"] = [] if up_to is None else [{"up_to": up_to, "backend": None}]
    return data


MIGRATIONS: dict[int, Migration] = {1: _v1_to_v2, 2: _v2_to_v3, 3: v3_to_v4}
"""``MIGRATIONS[n]`` turns a version-``n`` manifest dict into a version ``n + 1`` one."""


@attrs.define
class ArtifactRef:
    """A file of the checkpoint: path relative to its root, sha256 and size in bytes.

    ``native`` marks files that are machine code loaded into the process when the
    checkpoint is deployed (AOT Inductor packages, engines with plugins). The flag is
    what the writer declared, for people reading the manifest; loading decides from the
    installed backend class, never from this flag alone.
    """

    path: str
    sha256: str
    size: int
    native: bool = False


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
    state: str = attrs.field(validator=attrs.validators.in_([state.name for state in BackendState]))
    is_jit: bool
    description: str
    artifacts: dict[str, ArtifactRef] = attrs.field(factory=dict)
    extra: dict[str, Any] = attrs.field(factory=dict)


@attrs.define
class RangeEntry:
    """Calls with a batch up to ``up_to`` (above the previous range) go to ``backend``; None is eager."""

    up_to: int
    backend: BackendEntry | None


@attrs.define
class GraphEntry:
    spec: GraphSpecData
    backend: BackendEntry
    """The backend serving the batches above every range in ``lower`` (all of them without any)."""
    samples: ArtifactRef | None = None
    sample_trees: list[dict[str, Any]] = attrs.field(factory=list)
    samples_note: str = ""
    lower: list[RangeEntry] = attrs.field(factory=list)
    """The batch ranges below ``backend``'s, ascending, each with the backend measured fastest there."""

    def backend_entries(self) -> list[BackendEntry]:
        """Every backend this graph stores, ``backend`` first."""
        return [self.backend, *(r.backend for r in self.lower if r.backend is not None)]


@attrs.define
class ModuleEntry:
    name: str
    path: str
    """Where the module sits in the model (``"encoder.layer"``); empty for the model itself."""
    weights: ArtifactRef | None
    graphs: list[GraphEntry]
    accuracy: AccuracyRecord | None = None
    """The accuracy budget its routes were chosen under (``tune(..., accuracy=...)``); None: lossless."""
    threads: int | None = None
    """The torch thread count its routes were timed at; None in checkpoints saved before it was recorded."""


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
                for backend in graph.backend_entries():
                    refs.extend(backend.artifacts.values())
                if graph.samples is not None:
                    refs.append(graph.samples)
        return refs


_converter = make_converter()
"""The core converter, without plugins' hooks: a manifest holds backend configs as plain data."""


def manifest_text(manifest: Manifest) -> bytes:
    """The exact bytes written as ``manifest.json`` (signatures cover these bytes)."""
    return (json.dumps(_converter.unstructure(manifest), indent=2, sort_keys=True) + "\n").encode()


def write_manifest(manifest: Manifest, root: Path) -> bytes:
    data = manifest_text(manifest)
    (root / MANIFEST_NAME).write_bytes(data)
    return data


def manifest_bytes(root: Path) -> bytes:
    """The manifest file's bytes, read once: what is verified is what is parsed."""
    path = root / MANIFEST_NAME
    if not path.is_file():
        raise CheckpointError(f"{root} is not an aitune checkpoint: {MANIFEST_NAME} is missing")
    return path.read_bytes()


def parse_manifest(data: bytes, root: Path) -> Manifest:
    path = root / MANIFEST_NAME
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path} is not a JSON object")
    raw = migrate(raw)
    try:
        manifest = _converter.structure(raw, Manifest)
    except Exception as error:
        details = "; ".join(cattrs.transform_error(error)) if isinstance(error, cattrs.BaseValidationError) else error
        raise CheckpointError(f"{path} does not match format version {FORMAT_VERSION}: {details}") from None
    if not manifest.modules:
        raise CheckpointError(f"{path} lists no modules: there is nothing to load; the checkpoint is empty or damaged")
    return manifest


def read_manifest(root: Path) -> Manifest:
    return parse_manifest(manifest_bytes(root), root)


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
        try:
            data = step(dict(data))
        except ValueError as error:
            raise CheckpointError(f"cannot read format version {version}: {error}") from None
        data["format_version"] = version = version + 1
    return data
