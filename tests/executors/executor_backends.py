"""A model and test backends for the executor tests, importable by child processes.

Children find this module through their ``PYTHONPATH``, which the subprocess executor
sets to the parent's ``sys.path`` (pytest puts this folder there). The misbehaving
backends do what compilers sometimes do: abort, hang, or exhaust memory while building.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core.backends.base import Backend, BackendConfig, BuildContext
from aitune_core.backends.state import BackendState
from aitune_core.profiling.measurement import ProfileConfig

FAST_PROFILE = ProfileConfig(
    warmup_iterations=3, window=4, min_time_s=0.01, max_time_s=0.05, max_batch_search=False, sweep=False
)


class SlowableMLP(nn.Module):
    """An MLP whose eager forward sleeps; the fast backend runs it without the sleep."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 8)
        self.delay_s = delay_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.down(torch.relu(self.up(x)))


@attrs.frozen
class EmptyConfig(BackendConfig):
    pass


class _CopyBackend(Backend):
    """Runs a copy of the module without its artificial delay."""

    config_class = EmptyConfig

    def _prepare(self, module: nn.Module) -> nn.Module:
        fast = copy.deepcopy(module)
        fast.delay_s = 0.0
        return fast

    def _build(self, context: BuildContext) -> None:
        self.built_module: nn.Module | None = self._prepare(context.module)

    def _activate(self) -> None:
        assert self.context is not None
        self.built_module = self._prepare(self.context.module)

    def _deactivate(self) -> None:
        self.built_module = None

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self.built_module is not None
        return self.built_module(*args, **kwargs)


class FastBackend(_CopyBackend):
    """Correct and clearly faster than eager when eager sleeps."""

    name = "test_exec_fast"

    @property
    def is_jit(self) -> bool:
        return True


class AbortBackend(_CopyBackend):
    """Its build kills the process, as a crashing compiler would."""

    name = "test_exec_abort"

    def _build(self, context: BuildContext) -> None:
        os.abort()


@attrs.frozen
class HangConfig(BackendConfig):
    sleep_s: float = 600.0


class HangBackend(_CopyBackend):
    """Its build never finishes in time."""

    name = "test_exec_hang"
    config_class = HangConfig

    def _build(self, context: BuildContext) -> None:
        time.sleep(self.config.sleep_s)  # type: ignore[attr-defined]


@attrs.frozen
class ExitConfig(BackendConfig):
    status: int = 0
    signal: int = 0


class ExitBackend(_CopyBackend):
    """Its build ends the process, with ``status`` or by ``signal``, before any answer is written.

    A backend that calls ``sys.exit(0)`` from a compiler's error path, or a library that
    exits its host on a fatal error, does this.
    """

    name = "test_exec_exit"
    config_class = ExitConfig

    def _build(self, context: BuildContext) -> None:
        config: ExitConfig = self.config  # type: ignore[assignment]
        if config.signal:
            os.kill(os.getpid(), config.signal)
            time.sleep(60)
        os._exit(config.status)


class GreedyBackend(_CopyBackend):
    """Its build asks for far more memory than any limit allows."""

    name = "test_exec_greedy"

    def _build(self, context: BuildContext) -> None:
        self.hoard = torch.ones(8 * 2**30, dtype=torch.uint8)  # 8 GiB, touched


class ArtifactBackend(_CopyBackend):
    """An ahead-of-time backend: it writes its weights as an artifact and serves from that file.

    ``loaded_from`` tells tests that a restored instance really read the artifact.
    """

    name = "test_exec_artifact"

    def __init__(self, config: BackendConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self.weights: Path | None = None
        self.loaded_from: Path | None = None

    def _build(self, context: BuildContext) -> None:
        self.weights = context.cache_dir / "weights.pt"
        torch.save(context.module.state_dict(), self.weights)
        super()._build(context)

    def _artifacts(self) -> dict[str, Path]:
        return {"weights": self.weights} if self.weights is not None else {}

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        self.weights = artifacts["weights"]

    def _activate(self) -> None:
        assert self.context is not None and self.weights is not None
        module = self._prepare(self.context.module)
        if self._state is BackendState.CHECKPOINT_LOADED:
            module.load_state_dict(torch.load(self.weights, weights_only=True))
            self.loaded_from = self.weights
        self.built_module = module
