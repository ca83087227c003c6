"""Training modes around ``tune()``: refuse a module in training mode, and give every module back as it came.

Tuning calls the module many times (gathering, eager reference, eager timing). In
training mode those calls update BatchNorm running statistics and apply Dropout, so the
user's model would come back changed and eager would not even agree with itself; and
backends would be built for training behaviour. ``tune()`` therefore refuses such a
module at its first call, before it runs, and restores every submodule's flag when it
returns, raises or is interrupted, whatever a backend or strategy did in between.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from torch import nn

_MAX_LISTED = 4


class TrainingModeError(ValueError):
    """A module handed to ``tune()`` is in training mode."""


def training_paths(module: nn.Module, name: str) -> list[str]:
    """The submodules of ``module`` in training mode, named from ``name`` (``encoder.1``)."""
    return [path for path, submodule in module.named_modules(prefix=name) if submodule.training]


def training_error(name: str, paths: list[str]) -> TrainingModeError:
    shown = ", ".join(f"{path}.training" for path in paths[:_MAX_LISTED])
    more = f" and {len(paths) - _MAX_LISTED} more" if len(paths) > _MAX_LISTED else ""
    verb = "is" if len(paths) == 1 else "are"
    return TrainingModeError(
        f"aitune module `{name}` is in training mode ({shown}{more} {verb} True); call model.eval() before "
        "tuning: tuning's calls would update BatchNorm statistics and apply Dropout, and backends would "
        "be built for training behaviour"
    )


@contextlib.contextmanager
def refusing_training(modules: Iterable[tuple[str, nn.Module, nn.Module]]) -> Iterator[None]:
    """Refuse the first call of every module in training mode, before it runs.

    ``modules``: ``(name, wrapper, wrapped)``; a pre-hook on the wrapper raises
    :class:`TrainingModeError` when ``wrapped`` has a submodule in training mode. Only
    modules the tuning really calls are refused: a wrapper that is alive but not part of
    ``func`` may be in any mode. The error is raised again on the way out, should ``func``
    have caught it.
    """
    refused: list[TrainingModeError] = []
    handles = []
    for name, wrapper, wrapped in modules:
        paths = training_paths(wrapped, name)
        if not paths:
            continue
        error = training_error(name, paths)

        def refuse(_module: nn.Module, _args: Any, error: TrainingModeError = error) -> None:
            refused.append(error)
            raise error

        handles.append(wrapper.register_forward_pre_hook(refuse))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
    if refused:
        raise refused[0]


class TrainingModes:
    """Every given module's ``training`` flag, to set back with :meth:`restore` (not recursively)."""

    def __init__(self, modules: Iterable[nn.Module]) -> None:
        self._flags = [(module, module.training) for module in modules]

    def restore(self) -> None:
        for module, training in self._flags:
            module.training = training
