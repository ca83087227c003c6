"""Where the JIT builds: a child process for its own default candidates, when the module can be sent."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import torch
from torch import nn

import aitune_core as ait
from aitune_core.backends.base import Availability, Backend, BackendConfig, BuildContext
from aitune_core.executors.isolated.subprocess_executor import SubprocessExecutor
from aitune_core.testing.models import TinyMLP
from aitune_jit import placement

CPU = torch.device("cpu")


class Local(nn.Module):
    """Defined in a test module: importable by name, as a child process needs."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = TinyMLP()


@attrs.frozen
class KindConfig(BackendConfig):
    pass


class AotKind(Backend):
    """Builds artifacts that this process only loads."""

    name = "test_aot_kind"
    config_class = KindConfig

    @property
    def is_jit(self) -> bool:
        return False

    def _build(self, context: BuildContext) -> None:
        raise AssertionError("never built here")

    def _infer(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("never run here")


class JitKind(AotKind):
    """Compiles where it serves."""

    name = "test_jit_kind"

    @property
    def is_jit(self) -> bool:
        return True


def defaults(monkeypatch: pytest.MonkeyPatch, *kinds: Backend) -> None:
    import aitune_core.strategies.defaults as module

    offered: list[Any] = [(kind, Availability.yes()) for kind in kinds]
    monkeypatch.setattr(
        module, "default_backends", lambda device: [*offered, (ait.TorchEagerBackend(), Availability.yes())]
    )


def test_default_candidates_that_compile_elsewhere_build_in_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults(monkeypatch, AotKind(), JitKind())
    monkeypatch.setattr(placement, "usable_cores", lambda: 1)
    chosen = placement.place(Local(), None, None, CPU, 2)
    assert chosen.executor.workers == 1
    assert isinstance(chosen.executor, SubprocessExecutor) and chosen.owned
    # Built at the serving count (Inductor specializes kernels for it), in CPU time serving leaves.
    assert chosen.executor.background and chosen.executor.threads == 2
    assert chosen.executor.candidate_options() == {"threads": 2, "background": True}
    assert [type(b) for b in chosen.strategy.backends] == [AotKind, ait.TorchEagerBackend]
    assert chosen.reason == "in a child process at background priority, 2 threads: AotKind(), TorchEagerBackend()"


def test_one_build_per_core_runs_at_a_time_up_to_one_per_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The longest build (AOT) runs beside the others instead of before them, each still at the serving count."""
    defaults(monkeypatch, AotKind(), AotKind())
    monkeypatch.setattr(placement, "usable_cores", lambda: 2)
    chosen = placement.place(Local(), None, None, CPU, 2)
    assert chosen.executor.workers == 2 and chosen.executor.threads == 2
    assert "2 builds at a time" in chosen.reason
    monkeypatch.setattr(placement, "usable_cores", lambda: 16)
    assert placement.place(Local(), None, None, CPU, 2).executor.workers == 3  # two AOT kinds and eager


def test_only_jit_kind_defaults_stay_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults(monkeypatch, JitKind())
    chosen = placement.place(Local(), None, None, CPU, 1)
    assert chosen.executor is None and chosen.strategy is None
    assert "every default candidate compiles where it serves" in chosen.reason


def test_a_class_a_child_cannot_import_stays_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults(monkeypatch, AotKind())

    class InAFunction(nn.Module):
        pass

    chosen = placement.place(InAFunction(), None, None, CPU, 1)
    assert chosen.executor is None
    assert "InAFunction is defined in" in chosen.reason or "cannot be imported" in chosen.reason


def test_what_the_user_names_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults(monkeypatch, AotKind())
    strategy = ait.FirstWinsStrategy([ait.TorchEagerBackend()])
    assert placement.place(Local(), strategy, None, CPU, 1).executor is None  # named candidates: in-process
    assert placement.place(Local(), None, "inprocess", CPU, 1).executor == "inprocess"
    ait.config.executor = "subprocess"
    assert placement.place(Local(), None, None, CPU, 1).executor is None  # config.executor decides
