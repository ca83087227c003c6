"""Backends that change the user's module, importable by child processes (see executor_backends)."""

from __future__ import annotations

import torch
from executor_backends import _CopyBackend
from torch import nn

from aitune_core.backends.base import BuildContext


def scale_in_place(module: nn.Module) -> None:
    with torch.no_grad():
        module.up.weight.mul_(2)


class ScalesOnBuild(_CopyBackend):
    """Scales the user's weights while building (and again when activated), then serves a fast copy."""

    name = "test_exec_scales_on_build"

    def _build(self, context: BuildContext) -> None:
        scale_in_place(context.module)
        super()._build(context)

    def _activate(self) -> None:
        assert self.context is not None
        scale_in_place(self.context.module)
        super()._activate()


class ScalesOnActivate(_CopyBackend):
    """Builds cleanly where it is tried; edits the user's module only when loaded and activated for serving."""

    name = "test_exec_scales_on_activate"

    def _activate(self) -> None:
        assert self.context is not None
        scale_in_place(self.context.module)
        super()._activate()
