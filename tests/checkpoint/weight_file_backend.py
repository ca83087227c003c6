"""A backend that stands for an engine: its build writes the weights to a file, and it serves from that file.

What it serves is what the file held when it was loaded, as an engine's numbers are
what its plan held, so a file swapped under it shows in a checkpoint but not in the
tuned process. The module doubles as a plugin (``AITUNE_PLUGIN_API`` and the hook), so
tests can install it as a fake distribution and load checkpoints that use it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import attrs
import torch

from aitune_core import hookimpl
from aitune_core.backends import Backend, BackendConfig, BuildContext

AITUNE_PLUGIN_API = 1
WEIGHTS_FILE = "weights.pt"


@attrs.frozen
class WeightFileConfig(BackendConfig):
    pass


class WeightFileBackend(Backend):
    name = "test_weight_file"
    config_class = WeightFileConfig

    def __init__(self, config: WeightFileConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self.weights: Path | None = None
        self._module: torch.nn.Module | None = None

    def _build(self, context: BuildContext) -> None:
        self.weights = context.cache_dir / WEIGHTS_FILE
        torch.save(context.module.state_dict(), self.weights)
        self._load()

    def _load(self) -> None:
        assert self.context is not None and self.weights is not None
        module = copy.deepcopy(self.context.module)
        module.load_state_dict(torch.load(self.weights, weights_only=True))
        self._module = module

    def _activate(self) -> None:
        self._load()

    def _deactivate(self) -> None:
        self._module = None

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self._module is not None
        return self._module(*args, **kwargs)

    def _artifacts(self) -> dict[str, Path]:
        return {"weights": self.weights} if self.weights is not None else {}

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        self.weights = Path(artifacts["weights"])


@hookimpl
def aitune_register_backends() -> list[type[Backend]]:
    return [WeightFileBackend]
