"""A well-behaved plugin that implements every hook, so tests can watch each one fire."""

from __future__ import annotations

from collections.abc import Generator, Hashable, Sequence
from typing import Any

import attrs
import torch

from aitune_core import hookimpl
from aitune_core.backends import Backend, BackendConfig, BuildContext
from aitune_core.plugins import Candidate

AITUNE_PLUGIN_API = 1

EVENTS: list[tuple[Any, ...]] = []
KEY_PART: Hashable | None = None
STRATEGY: Any = None


class Level:
    """A config value cattrs cannot handle until this plugin extends the converter."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Level) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


@attrs.frozen
class FakeGoodConfig(BackendConfig):
    level: Level = attrs.field(factory=lambda: Level(1))


class FakeGoodBackend(Backend):
    """Runs the module under inference mode."""

    name = "fake_good"
    config_class = FakeGoodConfig

    def __init__(self, config: FakeGoodConfig | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._module: torch.nn.Module | None = None

    @property
    def is_jit(self) -> bool:
        return True

    def _build(self, context: BuildContext) -> None:
        if context.module_name.startswith("fail-build"):
            raise ValueError("cannot build this one")
        self._module = context.module

    def _activate(self) -> None:
        assert self.context is not None
        self._module = self.context.module

    def _deactivate(self) -> None:
        self._module = None

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        assert self._module is not None
        with torch.inference_mode():
            return self._module(*args, **kwargs)


class Pair:
    """A container that metadata capture cannot see into unless registered."""

    def __init__(self, left: Any, right: Any) -> None:
        self.left = left
        self.right = right


@hookimpl
def aitune_register_backends() -> Sequence[type[Backend]]:
    return [FakeGoodBackend]


@hookimpl
def aitune_register_containers(containers: Any) -> None:
    containers.register(
        Pair,
        flatten=lambda pair: [("left", pair.left), ("right", pair.right)],
        unflatten=lambda pair, children: Pair(*children),
    )


@hookimpl
def aitune_graph_key_parts(arguments: dict[str, Any]) -> Hashable | None:
    return KEY_PART


@hookimpl
def aitune_default_candidates(device: torch.device) -> Sequence[Candidate]:
    return [Candidate(FakeGoodBackend(), priority=50)]


@hookimpl
def aitune_choose_strategy(module: Any, device: torch.device) -> Any:
    return STRATEGY


@hookimpl
def aitune_before_step(step: str, backend: Backend) -> None:
    EVENTS.append(("before", step, backend.name, backend.state.name))


@hookimpl(wrapper=True)
def aitune_wrap_step(step: str) -> Generator[None, None, None]:
    EVENTS.append(("wrap enter", step))
    try:
        return (yield)
    except Exception as error:
        EVENTS.append(("wrap error", step, type(error).__name__))
        raise
    finally:
        EVENTS.append(("wrap exit", step))


@hookimpl
def aitune_after_step(step: str, backend: Backend, duration_s: float, error: BaseException | None) -> None:
    EVENTS.append(("after", step, backend.name, duration_s, None if error is None else type(error).__name__))


@hookimpl
def aitune_extend_converter(converter: Any) -> None:
    converter.register_unstructure_hook(Level, lambda level: level.value)
    converter.register_structure_hook(Level, lambda value, _: Level(value))
