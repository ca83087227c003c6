"""What a stored build depends on, hashed into the name of its entry.

Two candidates get the same key only when a build of one would produce what the other
produced: the same graph (its spec, shapes and ranges), the same weights (their
fingerprint, :func:`~aitune_core.backends.build_folders.weights_fingerprint`, computed
once per module per tune), the same backend with the same config, from the same
distribution at the same version, under the same torch, for the same device. Anything
else (another plugin release, a torch upgrade, another GPU) is another key, so an entry
is never used where its build might differ; old entries simply stop being used and
age out of the store.

What the key does not hold: the values of the recorded samples. Backends build from
the graph's shapes; a backend that calibrates on the samples' values (quantization) is
still validated against eager on this tune's samples before it may serve.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from aitune_core.backends.base import Backend
from aitune_core.backends.build_folders import weights_fingerprint
from aitune_core.backends.restore import backend_origin
from aitune_core.extensions import UnknownBackendError, slots
from aitune_core.graphs.graph_spec import GraphSpec
from aitune_core.graphs.spec_data import GraphSpecData
from aitune_core.serialization import stable_hash

STORE_FORMAT = 1
"""Part of every key: entries of another layout are never looked up."""

KEY_LENGTH = 40


def device_description(device: torch.device) -> str:
    """The device as a build depends on it: its type, and for a GPU its model and compute capability."""
    if device.type == "cuda" and torch.cuda.is_available():
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        return f"cuda {torch.cuda.get_device_name(index)} sm_{major}{minor}"
    return device.type


class NotStorableError(ValueError):
    """A backend the store cannot restore later: its class is not the one a plugin registers under its name."""


def key_parts(
    module: torch.nn.Module, scope: object, graph: GraphSpec, backend: Backend, device: torch.device
) -> dict[str, Any]:
    """Everything the key is made of, as JSON data (``entry.json`` keeps it).

    scope: what the weights fingerprint is reused for (the session's module guard).
    Raises NotStorableError for a backend class no plugin registers (defined in a
    script): entries are restored by their registered class, as checkpoints are.
    """
    name = type(backend).name
    try:
        registered = slots().backend_class(name) if name else None
    except UnknownBackendError:
        registered = None
    if registered is not type(backend):
        raise NotStorableError(f"{type(backend).__qualname__} is not a backend a plugin registers")
    distribution, version = backend_origin(name)
    return {
        **key_parts_of_graph(module, scope, graph, device),
        "backend": name,
        "config": backend.config_dict(),
        "distribution": distribution,
        "version": version,
    }


def key_parts_of_graph(
    module: torch.nn.Module, scope: object, graph: GraphSpec, device: torch.device
) -> dict[str, Any]:
    """The parts of a key that do not depend on a backend: graph, weights, torch and device."""
    return {
        "format": STORE_FORMAT,
        "graph": attrs.asdict(GraphSpecData.of(graph)),
        "weights": weights_fingerprint(module, scope=scope),
        "torch": torch.__version__,
        "device": device_description(device),
    }


def store_key(parts: dict[str, Any]) -> str:
    """The entry name for ``parts``: a sha256 of their JSON text (content addressing)."""
    return stable_hash(parts, length=KEY_LENGTH)
