"""FxFuseBackend: trace the module with torch.fx and fold BatchNorm into the convolution before it.

In eval mode a BatchNorm after a convolution is an affine map with fixed numbers, so it
can be folded into the convolution's weights and bias: one kernel instead of two, the
same outputs up to rounding. ``channels_last`` also moves weights and 4-d inputs to the
NHWC layout that CPU and GPU convolution kernels often prefer.

The result is rebuilt from the original module on activation (``is_jit``), so there are
no artifacts to save.
"""

from __future__ import annotations

import copy
from typing import Any

import attrs
import torch
import torch.fx
from torch.fx.experimental.optimization import fuse

from aitune_core.plugin_api import Backend, BackendConfig, BuildContext


@attrs.frozen
class FxFuseConfig(BackendConfig):
    """Checkpoints rebuild configs from data, so each field checks its type when the config is made."""

    fuse_conv_bn: bool = attrs.field(default=True, validator=attrs.validators.instance_of(bool))
    channels_last: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))


class FxFuseBackend(Backend):
    name = "example_fx_fuse"
    config_class = FxFuseConfig
    supported_devices = ("cpu", "cuda")

    def __init__(self, config: FxFuseConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self.compiled: torch.nn.Module | None = None

    @property
    def is_jit(self) -> bool:
        return True

    def _build(self, context: BuildContext) -> None:
        self.compiled = self._transform(context.module)

    def _activate(self) -> None:
        if self.context is None:
            raise RuntimeError("FxFuseBackend rebuilds from the original module; pass a BuildContext to activate")
        self.compiled = self._transform(self.context.module)

    def _deactivate(self) -> None:
        self.compiled = None

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self.compiled is not None
        if self.config.channels_last:  # type: ignore[attr-defined]
            args = tuple(_channels_last(value) for value in args)
            kwargs = {name: _channels_last(value) for name, value in kwargs.items()}
        return self.compiled(*args, **kwargs)

    def _transform(self, module: torch.nn.Module) -> torch.nn.Module:
        config: FxFuseConfig = self.config  # type: ignore[assignment]
        if module.training:
            raise ValueError("FxFuseBackend folds BatchNorm running statistics, so the module must be in eval mode")
        # Both paths work on a copy: the user's module must not change under them.
        graph: torch.nn.Module = fuse(module) if config.fuse_conv_bn else torch.fx.symbolic_trace(copy.deepcopy(module))
        if config.channels_last:
            graph = graph.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        return graph


def _channels_last(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.dim() == 4:
        return value.contiguous(memory_format=torch.channels_last)
    return value
