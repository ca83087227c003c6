"""Small models, a tuning shortcut and a picture of the user's model, for the refit tests."""

from __future__ import annotations

from typing import Any

import attrs
import torch
from torch import nn

import aitune_core as ait
from aitune_core.strategies import OneBackendStrategy
from aitune_core.testing.timing import FAST_PROFILE

WIDTH = 8
WAIT_S = 120
"""How long a test waits for a background refit: a refit that never ends fails the test instead of hanging it."""


def mlp() -> nn.Module:
    """Linear, BatchNorm and Dropout: weights, buffers and a train/eval difference."""
    return nn.Sequential(nn.Linear(WIDTH, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 4)).eval()


def cnn() -> nn.Sequential:
    """A convolution kept channels-last, so that a refit that changes a memory format shows."""
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )
    return model.to(memory_format=torch.channels_last).eval()


def samples(count: int = 4, shape: tuple[int, ...] = (WIDTH,)) -> list[torch.Tensor]:
    return [torch.randn(*shape) for _ in range(count)]


def one(backend: ait.Backend) -> OneBackendStrategy:
    """A strategy that selects ``backend`` whenever it is correct, however fast."""
    strategy = OneBackendStrategy(backend, profile=FAST_PROFILE)
    strategy.enable_performance_validation(False)
    return strategy


def tune_with(wrapped: ait.Module, backend: ait.Backend, data: list[torch.Tensor] | None = None) -> ait.Backend:
    """Tune ``wrapped`` on ``backend`` alone; the backend serving its one graph."""
    ait.tune(wrapped, data if data is not None else samples(), batch_sizes=[1, 4], strategy=one(backend))
    (route,) = wrapped.routes.values()
    served: ait.Backend = route.backend
    assert type(served) is type(backend), f"tuning chose {served.describe()}"
    if hasattr(served, "calls"):
        served.calls = 0  # count from here: tuning called it too
    return served


def new_weights(model: nn.Module, seed: int = 1) -> dict[str, torch.Tensor]:
    """Another set of weights for ``model``: far from the old ones, so that old answers show."""
    generator = torch.Generator().manual_seed(seed)
    return {
        key: torch.rand(value.shape, generator=generator) + 0.5 if value.is_floating_point() else value
        for key, value in model.state_dict().items()
    }


@attrs.frozen
class UserState:
    """What the user's model is: values, objects, modes, grad flags and memory formats of every tensor."""

    values: dict[str, torch.Tensor]
    objects: dict[str, int]
    modes: dict[str, bool]
    requires_grad: dict[str, bool]
    strides: dict[str, tuple[int, ...]]
    storages: dict[str, int]

    @classmethod
    def of(cls, model: nn.Module) -> UserState:
        tensors = dict(model.named_parameters()) | dict(model.named_buffers())
        return cls(
            values={name: tensor.detach().clone() for name, tensor in tensors.items()},
            objects={name: id(tensor) for name, tensor in tensors.items()},
            modes={name: module.training for name, module in model.named_modules()},
            requires_grad={name: tensor.requires_grad for name, tensor in tensors.items()},
            strides={name: tensor.stride() for name, tensor in tensors.items()},
            storages={name: tensor.data_ptr() for name, tensor in tensors.items()},
        )

    def differences(self, other: UserState) -> list[str]:
        found = [f"{name} values" for name, v in self.values.items() if not torch.equal(v, other.values[name])]
        for field in ("objects", "modes", "requires_grad", "strides", "storages"):
            mine, theirs = getattr(self, field), getattr(other, field)
            found += [f"{name} {field}" for name in mine if mine[name] != theirs.get(name)]
        return found


def run(module: Any, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        output: torch.Tensor = module(x)
        return output
