"""TorchEagerBackend: the original module, optionally under autocast.

It is the baseline every other candidate is measured against and the fallback when
none of them is correct or faster, so it must always build.
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from aitune_core.backends.autocast import autocast, cast_outputs
from aitune_core.backends.base import Backend, BackendConfig, BuildContext


def floating_dtype(_instance: object, attribute: attrs.Attribute[torch.dtype], value: object) -> None:
    """Autocast computes in a floating dtype; anything else fails only once a call runs."""
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(f"{attribute.name} must be a floating torch dtype such as torch.float16, got {value!r}")


@attrs.frozen
class TorchEagerBackendConfig(BackendConfig):
    """autocast_enabled / autocast_dtype: run under ``torch.autocast`` in that dtype."""

    autocast_enabled: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    autocast_dtype: torch.dtype = attrs.field(default=torch.float16, validator=floating_dtype)


def is_plain_eager(backend: object) -> bool:
    """Whether ``backend`` runs the module's own forward unchanged: serving it is serving eager.

    Strategies time it for the table but never pick it, routes send its batches to the
    module itself, and partitioning counts such a child as not tuned. Eager under
    autocast changes the numbers, so it is a candidate like any other.
    """
    return isinstance(backend, TorchEagerBackend) and not backend.config.autocast_enabled  # type: ignore[attr-defined]


class TorchEagerBackend(Backend):
    name = "eager"
    config_class = TorchEagerBackendConfig
    supported_devices = ("cpu", "cuda", "mps", "xpu", "meta")

    def __init__(self, config: TorchEagerBackendConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._module: torch.nn.Module | None = None

    @property
    def is_jit(self) -> bool:
        return True

    @property
    def lossy(self) -> bool:
        """Autocast computes in a narrower dtype than the module's own."""
        return bool(self.config.autocast_enabled)  # type: ignore[attr-defined]

    def _build(self, context: BuildContext) -> None:
        self._module = context.module

    def _activate(self) -> None:
        if self.context is None:
            raise RuntimeError("TorchEagerBackend needs the original module to activate; pass a BuildContext")
        self._module = self.context.module

    def _deactivate(self) -> None:
        self._module = None

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self._module is not None
        config: TorchEagerBackendConfig = self.config  # type: ignore[assignment]
        if not config.autocast_enabled:
            return self._module(*args, **kwargs)
        assert self.context is not None
        with autocast(True, self.context.device, config.autocast_dtype):
            outputs = self._module(*args, **kwargs)
        return cast_outputs(outputs, self.context.graph_spec.output_spec)

    def inference_callable(self) -> Any:
        return self._module if not self.config.autocast_enabled else self._infer  # type: ignore[attr-defined]
