"""The calls a build runs: the graph's typical shape first, then its recorded and extreme shapes.

Compilers take the sizes of the first call they see as hints for code generation, so
the first call is the "opt" shape, the one profiling and serving care most about.
The recorded samples and the min and max shapes follow, so that everything a tuned
call can bring has been compiled before the first real call arrives.
"""

from __future__ import annotations

from typing import Any

from aitune_core.plugin_api import BuildContext, to_device


def _shapes(arguments: dict[str, Any], context: BuildContext) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(locator.get(arguments).shape) for locator in context.graph_spec.input_spec.locators)


def build_calls(context: BuildContext) -> list[tuple[str, dict[str, Any]]]:
    """``(label, arguments)`` pairs on the build device, one per distinct input shape."""
    if not context.samples:
        raise ValueError(f"graph {context.graph_spec.name} has no recorded sample to build with")
    spec = context.graph_spec.input_spec
    base = context.samples[0].arguments
    candidates: list[tuple[str, dict[str, Any]]] = [("opt shape", spec.make_shape(base, "opt"))]
    candidates += [(f"sample {index}", sample.arguments) for index, sample in enumerate(context.samples)]
    candidates += [("min shape", spec.make_shape(base, "min")), ("max shape", spec.make_shape(base, "max"))]
    calls = []
    seen: set[tuple[tuple[int, ...], ...]] = set()
    for label, arguments in candidates:
        shapes = _shapes(arguments, context)
        if shapes not in seen:
            seen.add(shapes)
            calls.append((label, to_device(arguments, context.device)))
    return calls
