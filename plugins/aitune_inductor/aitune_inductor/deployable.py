"""What the Inductor backends serve from, described for deploy targets.

An AOT package (``.pt2``) compiled with its weights inside runs in any libtorch that
loads AOT Inductor packages, Triton's ``torch_aoti`` platform included (Triton 26.03 and
later), with no aitune and none of the model's code. One that reads its weights from
the module (the backend's default) needs the module beside it, and does not stand alone.

Triton names a package's tensors by its call: positional arguments ``ARGS[i]``, keyword
arguments ``KWARGS[name]``, the output ``RESULT`` (one tensor) or ``RESULT[i]`` /
``RESULT[key]`` inside tuples, lists and dicts, nested by appending ``[i]`` or
``[key]``. Only tensors, tuples, lists and dicts can be named so: a package whose call
holds anything else (a flag baked into it, a library's output class) is not offered.

The JIT backend compiles in the process that serves, from the module's own code: there
is no file to deploy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aitune_core.plugin_api import GraphSpec, Locator
from aitune_core.plugin_api.deploy import Deployable, NoDeployable, RuntimeOptions, TensorIO, device_of
from aitune_inductor.aot_weights import PackageWeights
from aitune_inductor.call_layout import CallLayout

PACKAGE_FILE = "model.pt2"
_UNNAMEABLE = set('"[]') | {" ", "\t", "\n", "\r"}
"""Characters Triton's PyTorch backend refuses in the dict keys of a package's call."""


class UnnamedTensor(ValueError):
    """A tensor of the call that Triton's naming of a package's inputs and outputs cannot reach."""


def aot_deployable(
    owner: str, package: Path | None, layout: CallLayout | None, weights: PackageWeights | None, graph: GraphSpec
) -> Deployable | NoDeployable:
    """The ``.pt2`` package ``owner`` serves ``graph`` from, named as Triton names its call."""
    if package is None or not package.is_file():
        return NoDeployable(f"{owner} has no package file; build it or restore it from a checkpoint")
    if weights is not None and not weights.in_package:
        return NoDeployable(
            f"{owner}'s package reads its weights from the module, so the file does not run alone; tune with "
            "TorchInductorAotBackend(weights_in_package=True) for a package a server loads by itself"
        )
    if layout is None:
        return NoDeployable(f"{owner} has no stored call layout (a checkpoint of an older aitune-inductor)")
    constants = [locator.display_path for locator, _ in graph.input_spec.other_data]
    if constants:
        return NoDeployable(
            f"{owner}'s package has non-tensor arguments baked in ({', '.join(constants)}), which Triton cannot pass"
        )
    try:
        inputs = [TensorIO.of_spec(input_name(loc, layout), spec) for loc, spec in graph.input_spec.tensor_data]
        outputs = [TensorIO.of_spec(output_name(loc), spec) for loc, spec in graph.output_spec.tensor_data]
    except UnnamedTensor as error:
        return NoDeployable(f"{owner}: {error}")
    runtime = RuntimeOptions(device=device_of(graph))
    return Deployable("aoti_pt2", {PACKAGE_FILE: package}, PACKAGE_FILE, inputs, outputs, runtime)


def input_name(locator: Locator, layout: CallLayout) -> str:
    """``ARGS[i]...`` or ``KWARGS[name]...`` for an input tensor, as the export split the call."""
    root = str(locator.root)
    if root not in layout.parameters:
        raise UnnamedTensor(f"input `{locator.display_path}` is not a named parameter of the exported call")
    index = layout.parameters.index(root)
    if index < layout.positional:
        head = f"ARGS[{index}]"
    elif root in layout.keywords:
        head = f"KWARGS[{root}]"
    else:
        raise UnnamedTensor(f"input `{locator.display_path}` was not passed to the export")
    return head + _steps(locator, f"input `{locator.display_path}`")


def output_name(locator: Locator) -> str:
    """``RESULT`` for a lone tensor, else ``RESULT`` with a ``[i]`` or ``[key]`` per step into the output."""
    return "RESULT" + _steps(locator, f"output `{locator.display_path}`")


def _steps(locator: Locator, what: str) -> str:
    parts: Sequence[str] = []
    for key, kind in zip(locator.keys, locator.kinds, strict=True):
        if kind == "attr":
            raise UnnamedTensor(f"{what} is an attribute of an object; Triton names tensors in tuples, lists and dicts")
        text = str(key)
        if kind == "key" and (not text or _UNNAMEABLE & set(text)):
            raise UnnamedTensor(f"{what} has the dict key {text!r}, which Triton cannot name")
        parts = [*parts, f"[{text}]"]
    return "".join(parts)


def jit_reason(owner: str) -> NoDeployable:
    return NoDeployable(
        f"{owner} compiles the module's own Python code with torch.compile in the process that serves it; no file "
        "stands alone (TorchInductorAotBackend(weights_in_package=True) writes a package a server runs)"
    )
