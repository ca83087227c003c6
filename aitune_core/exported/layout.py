"""How a call's nested arguments map onto an exported model's flat inputs, and its outputs back.

An exported model (ONNX, an OpenVINO IR, a TensorRT engine) takes a flat list of named
tensors and returns one. A module takes
whatever its forward takes: tensors inside tuples, dicts and dataclasses, next to
flags and numbers. The layout remembers, for one graph:

* which tensor, by locator, feeds which flat input, in order;
* the non-tensor values of the recorded call, which the export baked into the model
  and which every later call must therefore repeat;
* which tensor of the module's output each flat output is, and the output's structure
  (a *template*: the eager output of one call with every tensor replaced by a slot),
  so that the flat outputs can be put back into the tuples, dicts or dataclasses
  the module returns.

The recorded output spec has locators but not the container objects, which is why the
template comes from a real eager call. A layout made of plain containers (tuples,
lists, dicts with string or integer keys, and scalar constants) is saved as JSON
with a checkpoint; one holding other types cannot be, and is rebuilt from the module
when the backend is restored (see :class:`LayoutNotSerializable`).
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch

from aitune_core.backends.base import BuildContext
from aitune_core.exported.names import io_names
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec
from aitune_core.metadata.locator import Locator, map_leaves, walk_inputs, walk_outputs
from aitune_core.validation.inputs import to_device

_SCALARS = (type(None), bool, int, float, str)
_KINDS = {
    int(kind): kind
    for kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.VAR_KEYWORD,
    )
}


class LayoutNotSerializable(ValueError):
    """The layout holds a value or container that JSON cannot carry without pickling."""


class ConstantMismatchError(ValueError):
    """A call passed a non-tensor value other than the one baked into the exported model."""


@attrs.frozen
class Slot:
    """Where the ``index``-th flat output goes in the output template."""

    index: int


@attrs.define(eq=False)
class IOLayout:
    """The flat view of one graph's calls (see the module docstring).

    inputs / input_names: tensor inputs by locator, in flat input order, with their names.
    outputs / output_names: tensor outputs by locator, in flat output order, with their names.
    constants: the non-tensor leaves of the recorded call, baked into the export.
    template: the output structure with :class:`Slot` leaves where tensors go.
    parameters: the forward signature as ``(name, kind, has_default)``, so that a
        restored backend can normalize calls without the module's source.
    """

    inputs: list[Locator]
    input_names: list[str]
    outputs: list[Locator]
    output_names: list[str]
    constants: list[tuple[Locator, Any]]
    template: Any
    parameters: list[tuple[str, int, bool]] | None = None
    _getters: list[Callable[[dict[str, Any]], Any]] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self._getters = [
            operator.itemgetter(locator.root) if not locator.keys and locator.root is not None else locator.get
            for locator in self.inputs
        ]

    # ------------------------------------------------------------------ making one
    @classmethod
    def of_call(cls, arguments: dict[str, Any], outputs: Any, signature: ForwardSignature) -> IOLayout:
        """The layout of a call with normalized ``arguments`` that returned ``outputs``."""
        inputs, constants = [], []
        for locator, leaf in walk_inputs(arguments):
            if isinstance(leaf, torch.Tensor):
                inputs.append(locator)
            else:
                constants.append((locator, leaf))
        tensor_outputs = [locator for locator, leaf in walk_outputs(outputs) if isinstance(leaf, torch.Tensor)]
        if not tensor_outputs:
            raise ValueError("the module returned no tensor; there is nothing for an exported model to compute")
        slots = {locator: Slot(index) for index, locator in enumerate(tensor_outputs)}
        template = map_leaves(outputs, Locator(None), lambda locator, leaf: slots.get(locator, leaf))
        input_names, output_names = io_names(
            [locator.display_path for locator in inputs], [locator.display_path for locator in tensor_outputs]
        )
        return cls(inputs, input_names, tensor_outputs, output_names, constants, template, _parameters_of(signature))

    # ------------------------------------------------------------------ calls in
    def flatten(self, arguments: dict[str, Any]) -> list[torch.Tensor]:
        """The flat inputs of a normalized call, after checking its baked constants."""
        for locator, expected in self.constants:
            try:
                value = locator.get(arguments)
            except (KeyError, IndexError, TypeError):
                raise ConstantMismatchError(
                    f"`{locator.display_path}` is missing from this call; the exported model has it baked in "
                    f"as {expected!r}"
                ) from None
            if not _same(value, expected):
                raise ConstantMismatchError(
                    f"`{locator.display_path}` is {value!r}, but the exported model has {expected!r} baked in; "
                    "a different value needs its own graph (keep aitune_core.config.strict_mode on)"
                )
        try:
            return [getter(arguments) for getter in self._getters]
        except (KeyError, IndexError, TypeError) as error:
            raise ValueError(
                f"this call does not have the structure the model was exported with (missing {error}); "
                f"expected tensors at {', '.join(locator.display_path for locator in self.inputs)}"
            ) from None

    def unflatten(self, template_arguments: dict[str, Any], tensors: Sequence[torch.Tensor]) -> dict[str, Any]:
        """Normalized arguments with the flat inputs put back in place (the inverse of :meth:`flatten`)."""
        values = dict(zip(self.inputs, tensors, strict=True))
        return {
            name: map_leaves(value, Locator(name), lambda locator, leaf: values.get(locator, leaf))
            for name, value in template_arguments.items()
        }

    # ------------------------------------------------------------------ calls out
    def flat_outputs(self, outputs: Any) -> tuple[torch.Tensor, ...]:
        """The tensors of a module's output, in flat output order."""
        return tuple(locator.get(outputs) for locator in self.outputs)

    def rebuild(self, tensors: Sequence[Any]) -> Any:
        """The module's output structure with the flat outputs put in their places."""
        template = self.template
        if type(template) is Slot:
            return tensors[template.index]
        return map_leaves(template, Locator(None), lambda _, leaf: tensors[leaf.index] if type(leaf) is Slot else leaf)

    # ------------------------------------------------------------------ names
    @property
    def input_name_map(self) -> dict[str, str]:
        """Access path -> flat input name."""
        return {locator.display_path: name for locator, name in zip(self.inputs, self.input_names, strict=True)}

    @property
    def output_name_map(self) -> dict[str, str]:
        """Access path -> flat output name."""
        return {locator.display_path: name for locator, name in zip(self.outputs, self.output_names, strict=True)}

    def signature(self) -> ForwardSignature | None:
        """A forward signature rebuilt from :attr:`parameters`, for a restored backend."""
        if self.parameters is None:
            return None
        params = [
            inspect.Parameter(name, _KINDS[kind], default=None if has_default else inspect.Parameter.empty)
            for name, kind, has_default in self.parameters
        ]

        def forward(*args: Any, **kwargs: Any) -> None:
            """Stands in for the module's forward; only its signature is used."""

        forward.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        return ForwardSignature(forward)

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data; raises :class:`LayoutNotSerializable` for what JSON cannot carry."""
        return {
            "inputs": [_encode_locator(locator) for locator in self.inputs],
            "input_names": list(self.input_names),
            "outputs": [_encode_locator(locator) for locator in self.outputs],
            "output_names": list(self.output_names),
            "constants": [[_encode_locator(locator), _encode_scalar(value)] for locator, value in self.constants],
            "template": _encode_template(self.template),
            "parameters": None if self.parameters is None else [list(p) for p in self.parameters],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IOLayout:
        parameters = data.get("parameters")
        return cls(
            [_decode_locator(item) for item in data["inputs"]],
            list(data["input_names"]),
            [_decode_locator(item) for item in data["outputs"]],
            list(data["output_names"]),
            [(_decode_locator(locator), value) for locator, value in data["constants"]],
            _decode_template(data["template"]),
            None if parameters is None else [(str(n), int(k), bool(d)) for n, k, d in parameters],
        )


def layout_from_context(backend: str, context: BuildContext | None) -> IOLayout:
    """Rebuild a layout from one eager call, for checkpoints whose outputs JSON cannot describe.

    ``backend`` names the backend asking, for the error when ``context`` cannot help.
    """
    if context is None or not context.samples:
        raise RuntimeError(
            f"{backend}: this checkpoint's output structure is not stored as JSON; activate it with a "
            "BuildContext that holds the module and a recorded sample"
        )
    arguments = to_device(context.graph_spec.input_spec.make_shape(context.samples[0].arguments, "opt"), context.device)
    args, kwargs = context.signature.bind(arguments)
    with torch.no_grad():
        outputs = context.module(*args, **kwargs)
    return IOLayout.of_call(arguments, outputs, context.signature)


def _same(value: Any, expected: Any) -> bool:
    if value is expected:
        return True
    if type(value) is not type(expected):
        return False
    try:
        return bool(value == expected)
    except Exception:  # objects whose == raises or returns arrays are not the same value
        return False


def _parameters_of(signature: ForwardSignature) -> list[tuple[str, int, bool]] | None:
    if signature.signature is None:
        return None
    return [
        (name, int(param.kind), param.default is not inspect.Parameter.empty)
        for name, param in signature.signature.parameters.items()
    ]


# ---------------------------------------------------------------------- JSON encoding
def _encode_key(key: Any) -> Any:
    if type(key) not in (str, int):
        raise LayoutNotSerializable(f"container key {key!r} of type {type(key).__name__}")
    return key


def _encode_locator(locator: Locator) -> dict[str, Any]:
    return {
        "root": locator.root,
        "keys": [[_encode_key(k), kind] for k, kind in zip(locator.keys, locator.kinds, strict=True)],
    }


def _decode_locator(data: dict[str, Any]) -> Locator:
    keys = tuple(key for key, _ in data["keys"])
    kinds = tuple(kind for _, kind in data["keys"])
    return Locator(data["root"], keys, kinds)


def _encode_scalar(value: Any) -> Any:
    if type(value) not in _SCALARS:
        raise LayoutNotSerializable(f"baked value {value!r} of type {type(value).__name__}")
    return value


def _encode_template(node: Any) -> Any:
    kind = type(node)
    if kind is Slot:
        return {"slot": node.index}
    if kind in _SCALARS:
        return {"value": node}
    if kind is tuple:
        return {"tuple": [_encode_template(child) for child in node]}
    if kind is list:
        return {"list": [_encode_template(child) for child in node]}
    if kind is dict:
        return {"dict": [[_encode_key(key), _encode_template(child)] for key, child in node.items()]}
    raise LayoutNotSerializable(f"output container {kind.__qualname__}")


def _decode_template(data: dict[str, Any]) -> Any:
    (kind, value), *_ = data.items()
    if kind == "slot":
        return Slot(int(value))
    if kind == "value":
        return value
    if kind == "tuple":
        return tuple(_decode_template(child) for child in value)
    if kind == "list":
        return [_decode_template(child) for child in value]
    if kind == "dict":
        return {key: _decode_template(child) for key, child in value}
    raise ValueError(f"unknown output template node {kind!r}")


def check_layout_fits_graph(owner: str, layout: IOLayout, graph: GraphSpec) -> None:
    """The layout must read the graph's own tensor inputs, and only those.

    The graph spec was checked against the stored samples when loading; a layout edited
    apart from it (a checkpoint's manifest is a file anyone can edit) would fail at the
    first call instead of when loading.
    """
    expected = {locator.display_path for locator, _ in graph.input_spec.tensor_data}
    found = {locator.display_path for locator in layout.inputs}
    if found != expected:
        raise ValueError(
            f"{owner}: the stored input layout reads {sorted(found)}, but graph {graph.name} takes tensors at "
            f"{sorted(expected)}; export the model again, or restore the checkpoint's manifest"
        )
