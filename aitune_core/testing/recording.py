"""Graphs recorded the way ``tune()`` records them, for testing one backend's build directly.

A backend's unit tests need what a strategy hands it: a :class:`BuildContext` with the
graph spec and samples of a real recording. :func:`record` wraps the model, calls it
once per batch size under the global context, and returns that context for its only
graph, without tuning; :func:`at_shape` gives a call at the graph's min, opt or max
shape to compare the built backend with eager on.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aitune_core.backends.base import BuildContext
from aitune_core.context import BATCH_SIZE_KEY, global_context
from aitune_core.metadata.sample_metadata import ShapeChoice
from aitune_core.module.wrapper import Module
from aitune_core.testing.models import Call

_names = itertools.count()


def record(
    model: torch.nn.Module, make_call: Callable[[int], Call], batch_sizes: tuple[int, ...], cache_dir: Path
) -> BuildContext:
    """Record ``model`` in eval mode, one call ``make_call(batch)`` per batch size, on the CPU.

    The model must record one graph (its calls differ only in sizes). Module names are
    unique per process while a wrapper lives, so each recording gets a new one.
    """
    model.eval()
    wrapped = Module(model, f"aitune-test-{next(_names)}")
    with torch.no_grad():
        for batch_size in batch_sizes:
            args, kwargs = make_call(batch_size)
            with global_context:
                global_context.set(BATCH_SIZE_KEY, batch_size)
                wrapped(*args, **kwargs)
    (graph,) = wrapped.graphs.values()
    return BuildContext(
        module=model,
        module_name=wrapped.name,
        graph_spec=graph.spec,
        samples=graph.samples,
        device=torch.device("cpu"),
        cache_dir=cache_dir,
        signature=wrapped.signature,
    )


def at_shape(context: BuildContext, which: ShapeChoice) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Call arguments at the graph's min, opt or max shape."""
    arguments = context.graph_spec.input_spec.make_shape(context.samples[0].arguments, which)
    return context.signature.bind(arguments)
