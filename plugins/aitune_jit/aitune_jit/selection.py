"""Which modules of a model the JIT tunes: by depth below the model, size and an exclude list.

The modules chosen never nest, so that each call is recorded and routed by one
wrapper only. Depth 0 is the model itself: one wrapper, one set of graphs, the fewest
compiles, and a compiler sees the whole forward. Deeper levels suit models whose
top-level forward a compiler cannot take whole (data-dependent control flow).
"""

from __future__ import annotations

from torch import nn

from aitune_core.module.wrapper import Module
from aitune_core.wrapping import matches
from aitune_jit.options import JitOptions

ROOT = ""
"""The path of the model itself."""


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def choose(model: nn.Module, options: JitOptions) -> list[str]:
    """The paths to tune, outermost first; ``""`` is the model itself."""
    total = parameter_count(model)
    floor = options.min_params if options.min_params >= 1 else options.min_params * total
    chosen: list[str] = []

    def visit(module: nn.Module, path: str, depth: int) -> None:
        if isinstance(module, Module) or any(matches(pattern, path) for pattern in options.exclude if path):
            return  # a user's own wrapper, or excluded with everything inside it
        if depth == options.depth:
            if parameter_count(module) >= max(floor, 1):
                chosen.append(path)
            return
        for name, child in module.named_children():
            visit(child, f"{path}.{name}" if path else name, depth + 1)

    visit(model, ROOT, 0)
    return chosen
