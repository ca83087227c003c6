"""Backends that hold their own copy of the weights, as engines do, for the refit tests.

``CopyBackend`` writes the weights it was built from to a file and serves a copy of the
module holding them; its refit writes the new weights to that file and copies them into
its copy, as a backend that refits correctly does. The others refit wrongly, cannot
refit, write the user's module while refitting, or wait for the test in the middle of a
refit. The module doubles as a plugin (``AITUNE_PLUGIN_API`` and the hook), so a test
can install it as a fake distribution and load checkpoints that use its backends.
"""

from __future__ import annotations

import copy
import os
import threading
from pathlib import Path
from typing import Any, ClassVar

import attrs
import torch

from aitune_core import hookimpl
from aitune_core.plugin_api import Backend, BackendConfig, BuildContext

AITUNE_PLUGIN_API = 1
WEIGHTS_FILE = "weights.pt"


@attrs.frozen
class CopyConfig(BackendConfig):
    pass


class CopyBackend(Backend):
    """Serves a copy of the module that holds the weights of its file; refits by writing the file again."""

    name = "test_refit_copy"
    config_class = CopyConfig
    fail_builds: ClassVar[bool] = False
    """Set by a test: builds from then on fail, as a rebuild that cannot be done."""

    def __init__(self, config: CopyConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self.weights: Path | None = None
        self.copy: torch.nn.Module | None = None
        self.calls = 0
        self.refits = 0

    def can_refit(self) -> bool:
        return True

    def _build(self, context: BuildContext) -> None:
        if type(self).fail_builds:
            raise RuntimeError("this build fails on purpose")
        self.weights = context.cache_dir / WEIGHTS_FILE
        torch.save(context.module.state_dict(), self.weights)
        self._activate()

    def _activate(self) -> None:
        assert self.context is not None and self.weights is not None
        served = copy.deepcopy(self.context.module)
        served.load_state_dict(torch.load(self.weights, weights_only=True))
        self.copy = served

    def _deactivate(self) -> None:
        self.copy = None

    def _refit(self, module: torch.nn.Module) -> None:
        assert self.weights is not None and self.copy is not None
        self.refits += 1
        written = self.weights.with_name(WEIGHTS_FILE + ".new")
        torch.save(self.new_weights(module), written)
        os.replace(written, self.weights)  # a new file: the store may hold the old one as a hard link
        self.copy.load_state_dict(torch.load(self.weights, weights_only=True))

    def new_weights(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        return module.state_dict()

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self.copy is not None
        self.calls += 1
        with torch.no_grad():
            return self.copy(*args, **kwargs)

    def _artifacts(self) -> dict[str, Path]:
        return {"weights": self.weights} if self.weights is not None else {}

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        self.weights = Path(artifacts["weights"])


class WrongRefitBackend(CopyBackend):
    """Its refit takes the new weights doubled: validation must refuse it."""

    name = "test_refit_wrong"

    def new_weights(self, module: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {k: v * 2 if v.is_floating_point() else v for k, v in module.state_dict().items()}


class NoRefitBackend(CopyBackend):
    """Cannot take new weights without a rebuild."""

    name = "test_refit_none"

    def can_refit(self) -> bool:
        return False


class MeddlingRefitBackend(CopyBackend):
    """Its refit scales the user's own weights: the guard must put them back and refuse the refit."""

    name = "test_refit_meddling"

    def _refit(self, module: torch.nn.Module) -> None:
        with torch.no_grad():
            for parameter in module.parameters():
                parameter.mul_(0.5)
        super()._refit(module)


class PausingRefitBackend(CopyBackend):
    """Its first refit stops half-way until the test lets it go on, so the test can change the weights meanwhile."""

    name = "test_refit_pausing"
    entered: ClassVar[threading.Event] = threading.Event()
    proceed: ClassVar[threading.Event] = threading.Event()
    pauses: ClassVar[int] = 1

    def _refit(self, module: torch.nn.Module) -> None:
        if type(self).pauses > 0:
            type(self).pauses -= 1
            type(self).entered.set()
            assert type(self).proceed.wait(30), "the test never let the refit go on"
        super()._refit(module)


@hookimpl
def aitune_register_backends() -> list[type[Backend]]:
    return [CopyBackend]
