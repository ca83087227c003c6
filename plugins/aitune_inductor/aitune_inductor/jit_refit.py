"""Refitting a ``torch.compile``'d module: its weights are inputs of the compiled graphs, unless frozen into them.

Dynamo lifts a module's parameters and buffers into graph inputs (torch inlines built-in
``nn`` modules always since 2.6), and the compiled code reads them on every call: new
values in the module's tensors reach it without a recompile. So a refit has nothing to
copy, and the caller's validation against eager with the new weights is what checks it.

Three things put the weights into what was compiled instead, and need a rebuild:
Inductor's ``freezing`` (asked in the backend's options, or set process-wide in
``torch._inductor.config``) folds them into the code as constants, and packs them for
the CPU's kernels; and precompiled graphs (``precompile=True``) are functions saved with
what they were traced with, which this backend does not take apart to check.
"""

from __future__ import annotations

from typing import Any

import torch

from aitune_core.plugin_api import RefitError


def frozen_into_graph(options: dict[str, Any] | None, precompile: bool) -> str | None:
    """Why the weights may be part of the compiled code, or None when they are its inputs."""
    if options and options.get("freezing"):
        return "Inductor's freezing option folds the weights into the compiled code"
    import torch._inductor.config as inductor_config  # loaded by torch.compile already; read here, not at import

    if inductor_config.freezing:
        return "torch._inductor.config.freezing is on: Inductor folds the weights into the compiled code"
    if precompile:
        return "precompiled graphs are saved with what they were traced with; they are compiled again"
    return None


def check_compiled_for(described: str, compiled_for: torch.nn.Module | None, module: torch.nn.Module) -> None:
    """The module to refit for must be the one compiled: its tensors are what the graphs read."""
    if compiled_for is not None and module is not compiled_for:
        raise RefitError(f"{described} was compiled for another module; it is compiled again")
