"""Names of an exported graph's flat inputs and outputs, made from aitune's access paths.

An exported model (ONNX, an OpenVINO IR) refers to its inputs and outputs by name:
runtimes' bindings, TensorRT's optimization profiles and anyone reading the model in
Netron use them. aitune already has a readable name for every tensor, its access path
(``x``, ``values[3]["t"]``, ``output[0]``), so the names are made from it, by a rule
that also fits ONNX's identifiers.

The rule (:func:`sanitize`):

1. every run of characters other than ``A-Z``, ``a-z``, ``0-9`` and ``_`` becomes one ``_``;
2. leading and trailing ``_`` are dropped;
3. a name that is then empty or starts with a digit gets a leading ``t_``.

So ``x`` stays ``x``, ``values[3]["t"]`` becomes ``values_3_t``, ``output[0]`` becomes
``output_0`` and ``t3.data`` becomes ``t3_data``. Names are made unique across the
inputs and outputs of a model together (an output may not share an input's name): the
second path that would get a taken name gets ``_2`` appended, the third ``_3``, and so
on, in input order and then output order, so the result only depends on the graph.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_RUNS = re.compile(r"[^A-Za-z0-9_]+")


def sanitize(path: str) -> str:
    """The flat name for one access path, before making it unique (see the module docstring)."""
    name = _RUNS.sub("_", path).strip("_")
    if not name or name[0].isdigit():
        name = f"t_{name}"
    return name


def unique_names(paths: Iterable[str], taken: Iterable[str] = ()) -> list[str]:
    """Sanitized, unique names for ``paths``, in order, avoiding the names in ``taken``.

    ``taken`` holds names already given (the inputs' names, when naming outputs).
    """
    used = set(taken)
    names = []
    for path in paths:
        base = sanitize(path)
        name, counter = base, 2
        while name in used:
            name = f"{base}_{counter}"
            counter += 1
        used.add(name)
        names.append(name)
    return names


def io_names(input_paths: list[str], output_paths: list[str]) -> tuple[list[str], list[str]]:
    """Names for a model's flat inputs and outputs, unique across both."""
    inputs = unique_names(input_paths)
    outputs = unique_names(output_paths, taken=inputs)
    return inputs, outputs
