"""A three-block model whose middle block no shape-tracing compiler takes, and a test backend that declines it.

``TracedBackend`` stands for a compiler that traces shapes ahead of time: it runs a
deep copy of the module, and declines (before building) any graph whose forward
depends on its data, through the same helper the exporting plugins use. It doubles as
a plugin (``AITUNE_PLUGIN_API`` and the hook), so checkpoints naming it load in a
fresh process once its folder is installed as a fake distribution.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import attrs
import torch
from torch import nn

from aitune_core import hookimpl
from aitune_core.backends import Backend, BackendConfig, BuildContext
from aitune_core.validation.data_dependent import data_dependent_reason

AITUNE_PLUGIN_API = 1


@attrs.frozen
class TracedConfig(BackendConfig):
    symbolic_sizes: bool = False


class TracedBackend(Backend):
    """A deep copy of the module as the "compiled" form; declines data-dependent graphs."""

    name = "test_traced"
    config_class = TracedConfig

    def __init__(self, config: TracedConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._module: nn.Module | None = None
        self.calls = 0

    @property
    def is_jit(self) -> bool:
        return True

    def declines(self, context: BuildContext) -> str | None:
        return data_dependent_reason(context, symbolic_sizes=self.config.symbolic_sizes)  # type: ignore[attr-defined]

    def _build(self, context: BuildContext) -> None:
        self._activate()

    def _activate(self) -> None:
        assert self.context is not None
        self._module = copy.deepcopy(self.context.module)

    def _deactivate(self) -> None:
        self._module = None

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self._module is not None
        self.calls += 1
        return self._module(*args, **kwargs)


class EngineFileBackend(TracedBackend):
    """Stands for an engine: its build writes the weights to a file it then serves from.

    The file counts as native code, as an engine with plugins does, so a checkpoint
    holding it loads only with ``trust_native_code=True``.
    """

    name = "test_engine_file"

    def __init__(self, config: TracedConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self.engine: Path | None = None

    def _build(self, context: BuildContext) -> None:
        self.engine = context.cache_dir / "engine.pt"
        torch.save(context.module.state_dict(), self.engine)
        self._activate()

    def _activate(self) -> None:
        assert self.context is not None and self.engine is not None
        module = copy.deepcopy(self.context.module)
        module.load_state_dict(torch.load(self.engine, weights_only=True))
        self._module = module

    def _artifacts(self) -> dict[str, Path]:
        return {"engine": self.engine} if self.engine is not None else {}

    def native_artifacts(self) -> frozenset[str]:
        return frozenset({"engine"})

    def _restore(self, artifacts: dict[str, Path], extra: dict[str, Any]) -> None:
        self.engine = Path(artifacts["engine"])


@hookimpl
def aitune_register_backends() -> list[type[Backend]]:
    return [TracedBackend, EngineFileBackend]


class Block1(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class MaskedBlock(nn.Module):
    """Adds the mean of the positive activations: ``nonzero`` in the middle (a boolean mask).

    Its weights are its own parameters, not a child's, so partitioning finds nothing to
    descend into: the block stays eager as a whole.
    """

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16, 16) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.weight
        positive = y[y > 0]
        return y + positive.sum() / y.numel()


class NestedMaskedBlock(nn.Module):
    """The same mask, after a Linear child that a deeper level of partitioning can compile."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        positive = y[y > 0]
        return y + positive.sum() / y.numel()


class PlainBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class BranchingBlock(nn.Module):
    """Decides in Python on a value read from the data (``.item()``): no exporter takes it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if y.sum().item() > 0:
            return y * 2
        return -y


class ThreeBlocks(nn.Module):
    def __init__(self, middle: type[nn.Module] = MaskedBlock) -> None:
        super().__init__()
        self.block1 = Block1()
        self.block2 = middle()
        self.block3 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block3(self.block2(self.block1(x)))
