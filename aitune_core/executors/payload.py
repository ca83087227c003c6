"""What travels between the tuning process and a worker, as plain data wherever it can be.

Per graph (made once, shared by every candidate of the graph):

* the graph spec, as :class:`~aitune_core.graphs.spec_data.GraphSpecData` in JSON, the
  way checkpoints store it;
* the recorded samples, as checkpoints store them: tensors written with ``torch.save``
  and read back with ``weights_only=True``, their structure as JSON;
* the profile settings and tolerances, as JSON;
* **the module itself, as ``torch.save`` of the whole object. That is pickle.** It is
  acceptable here, and only here, because the bytes are the user's own live module,
  made by this process for a worker of the same tuning run, which unpickles them at
  once; they never go into a checkpoint, are never kept after the graph is tuned and
  are never read from anywhere else. Checkpoints stay free of pickle (see
  :mod:`aitune_core.checkpoint`). Samples holding user types that plain data cannot
  express travel in the same pickle, with the module, for the same reason.

Per candidate: the backend by registered name (or ``module:qualname`` import path) and
its config through the cattrs converter, as JSON.

Back from the worker: a :class:`CandidateRecord` in JSON, and the built backend's
``to_dict()``. Its artifacts are files: in a cache folder both sides see (subprocess),
or packed as bytes (a cluster), see :func:`pack_artifacts`.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import cattrs
import torch

from aitune_core.backends.artifacts import seal_of
from aitune_core.backends.tolerances import Tolerance, Tolerances
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.sample_data import decode_samples, encode_samples
from aitune_core.graphs.spec_data import GraphSpecData
from aitune_core.profiling.measurement import Measurement, ProfileConfig
from aitune_core.serialization import dtype_from_str

if TYPE_CHECKING:
    from aitune_core.backends.base import Backend
    from aitune_core.strategies.candidates import CandidateResult, GraphSession

_plain = cattrs.Converter()

GRAPH_FILE = "graph.json"
MODULE_FILE = "module.pt"
SAMPLES_FILE = "samples.pt"


class UnshippableBackendError(ValueError):
    """A backend class that another process could not find by name."""


def worker_id() -> str:
    """``pid@host``: which process ran a candidate, as logs and the summary show it."""
    return f"{os.getpid()}@{socket.gethostname()}"


# --------------------------------------------------------------------------- per graph
@attrs.define(eq=False)
class GraphPayload:
    """Everything a worker needs to try candidates on one graph.

    spec: JSON-ready: module name, graph spec, device, profile settings, tolerances and,
        when the samples are plain data, their structure.
    module: ``torch.save`` bytes of ``{"module": ..., "samples": ...}`` (pickle; see the
        module docstring). ``samples`` is None when they travel as plain data.
    tensors: ``torch.save`` bytes of the sample tensors, read with ``weights_only=True``.
    """

    spec: dict[str, Any]
    module: bytes
    tensors: bytes

    @classmethod
    def of(cls, session: GraphSession) -> GraphPayload:
        """The payload of ``session``'s graph; ValueError when a worker could not rebuild the module."""
        for submodule in session.module.modules():
            kind = type(submodule)
            if kind.__module__ == "__main__" or "<locals>" in kind.__qualname__:
                raise ValueError(
                    f"{kind.__qualname__} is defined in {'__main__' if kind.__module__ == '__main__' else 'a function'}"
                    ", where a worker cannot import it"
                )
        encoded = encode_samples(session.samples)
        pickled_samples = session.samples if isinstance(encoded, str) else None
        tensors, trees = ({}, None) if isinstance(encoded, str) else encoded
        spec = {
            "module_name": session.module_name,
            "graph": _plain.unstructure(GraphSpecData.of(session.graph)),
            "device": str(session.device),
            "profile": _plain.unstructure(session.profile_config),
            "tolerances": {str(dtype): [t.atol, t.rtol] for dtype, t in session.tolerances.by_dtype.items()},
            "sample_trees": trees,
        }
        return cls(spec, _save({"module": session.module, "samples": pickled_samples}), _save(tensors))

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / GRAPH_FILE).write_text(json.dumps(self.spec))
        (folder / MODULE_FILE).write_bytes(self.module)
        (folder / SAMPLES_FILE).write_bytes(self.tensors)

    @classmethod
    def read(cls, folder: Path) -> GraphPayload:
        return cls(
            json.loads((folder / GRAPH_FILE).read_text()),
            (folder / MODULE_FILE).read_bytes(),
            (folder / SAMPLES_FILE).read_bytes(),
        )

    def open(self, cache_dir: Path, log: Any) -> GraphSession:
        """The session a worker tries candidates in: the same graph, module and samples as the parent's."""
        from aitune_core.strategies.candidates import GraphSession

        device = local_device(self.spec["device"])
        shipped = torch.load(io.BytesIO(self.module), map_location=device, weights_only=False)
        module: torch.nn.Module = shipped["module"]
        samples = shipped["samples"]
        if samples is None:
            tensors = torch.load(io.BytesIO(self.tensors), map_location="cpu", weights_only=True)
            samples = decode_samples(tensors, self.spec["sample_trees"])
        tolerances = Tolerances(
            {dtype_from_str(name): Tolerance(atol, rtol) for name, (atol, rtol) in self.spec["tolerances"].items()}
        )
        return GraphSession(
            module=module,
            module_name=self.spec["module_name"],
            graph=_plain.structure(self.spec["graph"], GraphSpecData).graph_spec(),
            samples=samples,
            device=device,
            cache_dir=cache_dir,
            signature=ForwardSignature(module.forward),
            tolerances=tolerances,
            profile_config=_plain.structure(self.spec["profile"], ProfileConfig),
            log=log,
        )


def _save(value: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def local_device(name: str) -> torch.device:
    """The tuning device as this worker sees it.

    A cluster scheduler hands a worker its own GPU, which the worker sees as index 0,
    so an index the worker does not have means "the GPU I was given".
    """
    device = torch.device(name)
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        return torch.device("cuda")
    return device


# --------------------------------------------------------------------------- per candidate
def backend_ref(blueprint: Backend) -> dict[str, Any]:
    """How another process finds ``blueprint``'s class and config without pickle.

    By registered name when a plugin registers this very class, else by import path.
    Raises UnshippableBackendError for a class defined in ``__main__`` or in a function.
    """
    cls = type(blueprint)
    registered = False
    if cls.name:
        from aitune_core.extensions import UnknownBackendError, slots

        try:
            registered = slots().backend_class(cls.name) is cls
        except UnknownBackendError:
            registered = False
    module = cls.__module__
    if not registered and (module == "__main__" or "<locals>" in cls.__qualname__):
        raise UnshippableBackendError(
            f"{cls.__qualname__} cannot be found by another process: it is not registered by a plugin and is "
            f"defined in {'__main__' if module == '__main__' else 'a function'}; define it in an importable "
            "module or register it with aitune_register_backends"
        )
    return {
        "name": cls.name if registered else "",
        "import": f"{module}:{cls.__qualname__}",
        "config": blueprint.config_dict(),
    }


def backend_from_ref(ref: dict[str, Any]) -> Backend:
    """A fresh blueprint from :func:`backend_ref`'s data, in this process."""
    from aitune_core.serialization import converter

    cls: type[Backend]
    if ref.get("name"):
        from aitune_core.extensions import slots

        cls = slots().backend_class(ref["name"])
    else:
        module, _, qualname = ref["import"].partition(":")
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
        cls = found
    return cls(converter().structure(ref["config"], cls.config_class))


# --------------------------------------------------------------------------- results
@attrs.define
class CandidateRecord:
    """A candidate's result as plain data: what a worker sends back.

    backend: the built backend's ``to_dict()`` (artifact paths as strings) plus
        ``"is_jit"`` and ``"seal"`` (each artifact's sha256 and size when it passed), when
        it passed; what restores it in the tuning process.
    """

    status: str
    stage: str = ""
    reason: str = ""
    build_s: float = 0.0
    validate_s: float = 0.0
    profile_s: float = 0.0
    sweep: list[Measurement] = attrs.field(factory=list)
    measurement: Measurement | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    build_info: dict[str, Any] = attrs.field(factory=dict)
    backend: dict[str, Any] | None = None
    worker: str = ""
    log_tail: str = ""

    @classmethod
    def failed(cls, stage: str, reason: str, worker: str = "", log_tail: str = "") -> CandidateRecord:
        return cls("failed", stage, reason, worker=worker, log_tail=log_tail)

    @classmethod
    def of(cls, result: CandidateResult, worker: str) -> CandidateRecord:
        record = cls(
            status=result.status,
            stage=result.stage,
            reason=result.reason,
            build_s=result.build_s,
            validate_s=result.validate_s,
            profile_s=result.profile_s,
            sweep=list(result.sweep),
            measurement=result.measurement,
            max_abs_error=result.max_abs_error,
            max_rel_error=result.max_rel_error,
            worker=worker,
        )
        backend = result.instance
        if backend is not None:
            record.build_info = {k: v for k, v in backend.build_info.items() if isinstance(v, (int, float, str, bool))}
            if result.status == "passed":
                data = backend.to_dict()
                data["artifacts"] = {name: str(path) for name, path in data.get("artifacts", {}).items()}
                record.backend = {**data, "is_jit": backend.is_jit}
                artifact_seal = seal_of(backend)
                if artifact_seal is not None:  # what the worker validated: the winner is checked against it here
                    record.backend["seal"] = artifact_seal.to_data()
        if record.status == "failed" and looks_out_of_memory(record.reason):
            record.reason = f"out of memory: {record.reason}"
        return record

    def to_json(self) -> str:
        return json.dumps(_plain.unstructure(self))

    @classmethod
    def from_json(cls, text: str) -> CandidateRecord:
        return _plain.structure(json.loads(text), cls)

    def apply(self, result: CandidateResult) -> None:
        """Fill the tuning process's summary row from this record."""
        result.status = self.status  # type: ignore[assignment]
        result.stage, result.reason = self.stage, self.reason
        result.build_s, result.validate_s, result.profile_s = self.build_s, self.validate_s, self.profile_s
        result.sweep, result.measurement = list(self.sweep), self.measurement
        result.max_abs_error, result.max_rel_error = self.max_abs_error, self.max_rel_error
        result.backend_data = self.backend if self.status == "passed" else None
        result.worker, result.log_tail = self.worker, self.log_tail
        result.instance = None


_MEMORY_MARKS = ("MemoryError", "out of memory", "can't allocate memory", "Cannot allocate memory", "bad_alloc")


def looks_out_of_memory(text: str) -> bool:
    return any(mark in text for mark in _MEMORY_MARKS)


# --------------------------------------------------------------------------- artifacts as bytes
def pack_artifacts(artifacts: dict[str, str], root: Path) -> dict[str, tuple[str, bytes]]:
    """``{name: (path relative to root, bytes)}`` for artifacts that must cross machines."""
    packed = {}
    for name, path in artifacts.items():
        file = Path(path)
        try:
            relative = file.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            relative = f"{name}/{file.name}"
        packed[name] = (relative, file.read_bytes())
    return packed


def unpack_artifacts(packed: dict[str, tuple[str, bytes]], root: Path) -> dict[str, str]:
    """Write packed artifacts under ``root`` and return their new paths; nothing escapes ``root``."""
    paths = {}
    base = root.resolve()
    for name, (relative, data) in packed.items():
        target = (root / relative).resolve()
        if not target.is_relative_to(base):
            raise ValueError(f"artifact {name!r} would be written outside {root}: {relative!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        paths[name] = str(target)
    return paths
