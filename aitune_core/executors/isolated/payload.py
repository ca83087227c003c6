"""What travels to a worker, as plain data wherever it can be.

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
its config through the cattrs converter, as JSON. What comes back is an
:class:`~aitune_core.executors.isolated.answer.Answer`.
"""

from __future__ import annotations

import importlib
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import torch

from aitune_core.backends.tolerances import Tolerances
from aitune_core.evaluate.session import GraphSession
from aitune_core.extensions import UnknownBackendError, slots
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.sample_data import decode_samples, encode_samples
from aitune_core.graphs.spec_data import GraphSpecData
from aitune_core.profiling.measurement import ProfileConfig
from aitune_core.serialization import converter
from aitune_core.store.store import ArtifactStore

if TYPE_CHECKING:
    from aitune_core.backends.base import Backend
    from aitune_core.evaluate.session import GraphSession

GRAPH_FILE = "graph.json"
MODULE_FILE = "module.pt"
SAMPLES_FILE = "samples.pt"


class UnshippableBackendError(ValueError):
    """A backend class that another process could not find by name."""


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
        for kind in map(type, session.module.modules()):
            if _defined_in(kind):
                raise ValueError(
                    f"{kind.__qualname__} is defined in {_defined_in(kind)}, where a worker cannot import it"
                )
        encoded = encode_samples(session.samples)
        pickled_samples = session.samples if isinstance(encoded, str) else None
        tensors, trees = ({}, None) if isinstance(encoded, str) else encoded
        spec = {
            "module_name": session.module_name,
            "graph": converter().unstructure(GraphSpecData.of(session.graph)),
            "device": str(session.device),
            "profile": converter().unstructure(session.profile_config),
            "tolerances": converter().unstructure(session.tolerances),
            "sample_trees": trees,
            "store": None if session.store is None else session.store.to_data(),
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
        device = local_device(self.spec["device"])
        shipped = torch.load(io.BytesIO(self.module), map_location=device, weights_only=False)
        module: torch.nn.Module = shipped["module"]
        samples = shipped["samples"]
        if samples is None:
            tensors = torch.load(io.BytesIO(self.tensors), map_location="cpu", weights_only=True)
            samples = decode_samples(tensors, self.spec["sample_trees"])
        return GraphSession(
            module=module,
            module_name=self.spec["module_name"],
            graph=converter().structure(self.spec["graph"], GraphSpecData).graph_spec(),
            samples=samples,
            device=device,
            cache_dir=cache_dir,
            signature=ForwardSignature(module.forward),
            tolerances=converter().structure(self.spec["tolerances"], Tolerances),
            profile_config=converter().structure(self.spec["profile"], ProfileConfig),
            log=log,
            store=ArtifactStore.from_data(self.spec.get("store")),
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


def backend_ref(blueprint: Backend) -> dict[str, Any]:
    """How another process finds ``blueprint``'s class and config without pickle.

    By registered name when a plugin registers this very class, else by import path.
    Raises UnshippableBackendError for a class defined in ``__main__`` or in a function.
    """
    cls = type(blueprint)
    registered = False
    if cls.name:
        try:
            registered = slots().backend_class(cls.name) is cls
        except UnknownBackendError:
            registered = False
    if not registered and _defined_in(cls):
        raise UnshippableBackendError(
            f"{cls.__qualname__} cannot be found by another process: it is not registered by a plugin and is "
            f"defined in {_defined_in(cls)}; define it in an importable module or register it with "
            "aitune_register_backends"
        )
    return {
        "name": cls.name if registered else "",
        "import": f"{cls.__module__}:{cls.__qualname__}",
        "config": blueprint.config_dict(),
    }


def cannot_travel(module: torch.nn.Module) -> str | None:
    """Why a worker could not import one of ``module``'s classes by name (where it is defined); None when it can."""
    return next((where for where in map(_defined_in, map(type, module.modules())) if where), None)


def _defined_in(cls: type) -> str | None:
    """Where a class that another process cannot import by name is defined; None when it can."""
    if cls.__module__ == "__main__":
        return "__main__"
    return "a function" if "<locals>" in cls.__qualname__ else None


def backend_from_ref(ref: dict[str, Any]) -> Backend:
    """A fresh blueprint from :func:`backend_ref`'s data, in this process."""
    cls: type[Backend]
    if ref.get("name"):
        cls = slots().backend_class(ref["name"])
    else:
        module, _, qualname = ref["import"].partition(":")
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
        cls = found
    return cls(converter().structure(ref["config"], cls.config_class))
