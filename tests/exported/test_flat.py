"""The flat view of a graph that exporters take: example inputs that own their memory."""

from __future__ import annotations

from pathlib import Path

import torch

from aitune_core.plugin_api.exported import flat_dynamic_shapes, flat_inputs
from aitune_core.testing.models import TinyEncoder, encoder_call
from aitune_core.testing.recording import record


def test_example_inputs_are_not_views_and_the_program_traces_again(tmp_path: Path) -> None:
    """Resizing a sample to the opt shapes slices it; an export from those views guards on their base,
    and tracing the program again on fresh inputs (``run_decompositions``) failed."""
    torch.manual_seed(0)
    context = record(TinyEncoder(), lambda batch: encoder_call(2, 8 * batch), (2, 4, 8), tmp_path)
    opt = context.graph_spec.input_spec.make_shape(context.samples[0].arguments, "opt")
    assert any(value._base is not None for value in opt.values())  # what the adapter is given to start from
    adapter, tensors, _, layout = flat_inputs(
        context.module, context.graph_spec, context.samples, context.signature, torch.device("cpu")
    )
    assert all(tensor._base is None for tensor in tensors)
    with torch.no_grad():
        program = torch.export.export(adapter, tensors, dynamic_shapes=flat_dynamic_shapes(context.graph_spec, layout))
        decomposed = program.run_decompositions()
        expected = adapter(*tensors)
    assert torch.equal(decomposed.module()(*tensors)[0], expected[0])
