"""A stored graph checked against the module whose calls it will route, before anything is loaded.

A checkpoint's graph spec and its samples are data from somewhere else. Loading
checks a module's graphs with :func:`check_graph` against that module's forward, and a
partition checks each of its submodules' graphs the same way against the
submodule's forward, so a spec edited apart from its samples is refused rather than
loaded to send every call to the fallback.
"""

from __future__ import annotations

from typing import Any

import torch

from aitune_core.backends.restore import StoredStateError
from aitune_core.extensions import slots
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.module.recorder import call_key
from aitune_core.module.router import Route


def check_graph(spec: GraphSpec, samples: list[Sample], signature: ForwardSignature) -> None:
    """The graph must describe calls of this forward, and its stored samples must be such calls."""
    parameters = set(signature.parameter_names)
    for locator, _ in (*spec.input_spec.tensor_data, *spec.input_spec.other_data):
        if locator.root is not None and locator.root not in parameters:
            raise StoredStateError(
                f"its inputs name `{locator.root}`, which is not a parameter of this module's forward "
                f"({', '.join(sorted(parameters))})"
            )
    key_parts = slots().graph_key_parts()
    route = Route(spec, None)
    for index, sample in enumerate(samples):
        arguments = sample.arguments
        if not isinstance(arguments, dict) or not set(arguments) <= parameters:
            raise StoredStateError(f"stored sample {index} is not a call of this module's forward")
        key = call_key(arguments, spec.input_spec.strict, key_parts)
        # Samples are kept on the CPU; the graph may have been tuned on another device type.
        if retarget(key, "cpu") != retarget(spec.key, "cpu"):
            raise StoredStateError(f"stored sample {index} does not belong to this graph: the graph key differs")
        reason = route.mismatch(arguments)
        if reason is not None:
            raise StoredStateError(f"stored sample {index} is outside the graph's shapes: {reason}")


def on_device(spec: GraphSpec, device_type: str) -> GraphSpec:
    """``spec`` with its key's tensors on ``device_type``: calls on the loading device find it."""
    return GraphSpec(spec.name, spec.input_spec, spec.output_spec, retarget(spec.key, device_type), spec.declared)


def retarget(key: Any, device_type: str) -> Any:
    """The graph key with every tensor's device type set to ``device_type``."""
    if isinstance(key, tuple):
        if len(key) == 4 and key[0] == "T" and isinstance(key[2], torch.dtype) and isinstance(key[3], str):
            return ("T", key[1], key[2], device_type)
        return tuple(retarget(part, device_type) for part in key)
    return key
