"""One graph of a module as exporters take it: flat tensors in, flat tensors out.

Exporters (``torch.export``, the ONNX exporters, OpenVINO's converter) take tensors,
and pytrees of the containers torch knows, in and out. A module takes whatever its
forward takes and returns whatever it likes. :func:`example_call` makes the call an
export traces, from the graph's recorded samples, and the :class:`IOLayout` between
that call and flat tensors; :class:`FlatModule` is the module seen through the layout
(:func:`flat_inputs` gives all three); :func:`flat_dynamic_shapes` gives the graph's
ranged axes as ``torch.export`` takes them for it, so that
``torch.export.export(adapter, tensors, dynamic_shapes=flat_dynamic_shapes(graph, layout))``
is where an exporting backend starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from aitune_core.exported.layout import IOLayout
from aitune_core.graphs.dims import export_dims
from aitune_core.graphs.forward_signature import ForwardSignature
from aitune_core.graphs.graph_spec import GraphSpec, Sample
from aitune_core.validation.inputs import to_device


class OutputMismatchError(ValueError):
    """The module returned other tensors for the example call than the graph recorded."""


class FlatModule(torch.nn.Module):
    """The module as exporters see it: flat tensors in, flat tensors out.

    It puts the flat inputs back into the recorded call's structure, with its
    non-tensor values as constants, calls the module, and returns the output tensors in
    layout order, so that any structure aitune can record can be exported.

    It takes the mode of the module it wraps. A new ``nn.Module`` starts in training
    mode, and exporters put the mode they found back recursively when they finish
    (``model.train(original)``): an adapter left in training mode would switch the
    user's module, and its Dropout, to training for every later eager call.
    """

    def __init__(
        self, module: torch.nn.Module, layout: IOLayout, arguments: dict[str, Any], signature: ForwardSignature
    ) -> None:
        super().__init__()
        self.training = module.training  # not .train(): that would also set every submodule of the user's module
        self.module = module
        self._layout = layout
        self._arguments = arguments
        self._signature = signature

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args, kwargs = self._signature.bind(self._layout.unflatten(self._arguments, tensors))
        return self._layout.flat_outputs(self.module(*args, **kwargs))


def example_call(
    module: torch.nn.Module,
    graph_spec: GraphSpec,
    samples: Sequence[Sample],
    signature: ForwardSignature,
    device: torch.device | str | None = None,
) -> tuple[dict[str, Any], IOLayout]:
    """The call an export traces, on ``device``, and the layout of what the module returns for it.

    The call is the first sample resized to the graph's opt shapes (largest batch,
    middle of each dynamic range). The module runs once on it in eager mode: the layout
    comes from its outputs, which must be the tensors the graph recorded
    (:class:`OutputMismatchError` otherwise). ``device``: where the call runs (default:
    where the module's parameters are).
    """
    if not samples:
        raise ValueError(f"graph {graph_spec.name} has no recorded sample to export with")
    device = torch.device(device) if device is not None else module_device(module)
    arguments = to_device(graph_spec.input_spec.make_shape(samples[0].arguments, "opt"), device)
    args, kwargs = signature.bind(arguments)
    with torch.no_grad():
        outputs = module(*args, **kwargs)
    layout = IOLayout.of_call(arguments, outputs, signature)
    recorded = [locator.display_path for locator in graph_spec.output_spec.locators]
    found = [locator.display_path for locator in layout.outputs]
    if recorded and recorded != found:
        raise OutputMismatchError(f"the module returned tensors at {found}, but the graph recorded {recorded}")
    return arguments, layout


def module_device(module: torch.nn.Module) -> torch.device:
    """Where the module's first parameter or buffer is; the CPU for a module without either."""
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return torch.device("cpu")


def flat_dynamic_shapes(graph: GraphSpec, layout: IOLayout) -> tuple[tuple[dict[int, Any] | None, ...]]:
    """``dynamic_shapes`` for exporting a :class:`FlatModule`, whose forward is ``forward(*tensors)``.

    Its only parameter is ``*tensors``, so the spec is a one-element tuple holding one
    entry per flat input: a dict ``axis -> dim`` (see
    :func:`aitune_core.graphs.dims.export_dims`), or None for a static tensor.
    """
    dims = export_dims(graph)
    return (tuple(dims.get(locator) for locator in layout.inputs),)


def flat_inputs(
    module: torch.nn.Module,
    graph_spec: GraphSpec,
    samples: Sequence[Sample],
    signature: ForwardSignature,
    device: torch.device | str | None = None,
) -> tuple[FlatModule, tuple[torch.Tensor, ...], dict[str, Any], IOLayout]:
    """The adapter, its example inputs, the example call and the layout: what any exporter of the graph takes.

    The example inputs own their memory. Resizing a sample to the opt shapes slices it,
    and ``torch.export`` guards on a view's base (``tensors_0._base.size()[1] != ...``):
    a program exported from views fails when it is traced again on fresh inputs, which
    is what ``run_decompositions`` does (OpenVINO's converter calls it).
    """
    arguments, layout = example_call(module, graph_spec, samples, signature, device)
    tensors = tuple(tensor.clone() if tensor._base is not None else tensor for tensor in layout.flatten(arguments))
    return FlatModule(module, layout, arguments, signature), tensors, arguments, layout


@contextlib.contextmanager
def modes_kept(module: torch.nn.Module) -> Iterator[None]:
    """Every submodule's training flag as it was, after an exporter that sets modes recursively.

    Tracing exporters set the whole module to eval for the export and then back to the
    root's mode, which would also flip a submodule the user keeps in another mode.
    """
    modes = [(submodule, submodule.training) for submodule in module.modules()]
    try:
        yield
    finally:
        for submodule, training in modes:
            submodule.training = training
