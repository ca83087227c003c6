"""The executor abstraction: choosing one, what strategies submit, and plugin executors.

These tests start no child process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from executor_backends import FAST_PROFILE, FastBackend, SlowableMLP

import aitune_core as ait
from aitune_core.backends import TorchEagerBackend
from aitune_core.evaluate.session import GraphSession
from aitune_core.executors import (
    AutoExecutor,
    CandidateTask,
    Executor,
    ExecutorError,
    InProcessExecutor,
    PendingCandidate,
    SubprocessExecutor,
    executor_names,
    get_executor_class,
    registry,
    resolve_executor,
)
from aitune_core.strategies import FirstWinsStrategy, MaxThroughputStrategy
from aitune_core.testing import fixtures

aitune_fake_dist = fixtures.aitune_fake_dist
aitune_isolated_plugins = fixtures.aitune_isolated_plugins


def samples(count: int = 4) -> list[torch.Tensor]:
    return [torch.randn(16) for _ in range(count)]


class Recording(InProcessExecutor):
    """Runs in-process, claims two slots, and records when candidates are submitted and collected."""

    name = "recording"

    def __init__(self) -> None:
        self.events: list[str] = []
        self.ended = 0

    def max_parallel(self, session: GraphSession) -> int:
        return 2

    def submit(self, session: GraphSession, task: CandidateTask) -> PendingCandidate:
        self.events.append(f"submit {task.result.backend}")
        pending = super().submit(session, task)
        events = self.events

        class Logged(PendingCandidate):
            def result(self) -> Any:
                events.append(f"result {task.result.backend}")
                return pending.result()

            def done(self) -> bool:
                return True

        return Logged()

    def end_graph(self, session: GraphSession) -> None:
        self.ended += 1


def test_default_is_auto_and_names_resolve() -> None:
    assert ait.config.executor == "auto"
    auto, owned = resolve_executor("auto")
    assert isinstance(auto, AutoExecutor) and owned and auto.children is None  # the tests build one at a time
    executor, owned = resolve_executor("inprocess")
    assert isinstance(executor, InProcessExecutor) and owned
    assert get_executor_class("subprocess") is SubprocessExecutor
    instance = SubprocessExecutor(timeout_s=5)
    assert resolve_executor(instance) == (instance, False)
    assert {"auto", "inprocess", "subprocess"} <= set(executor_names())


def test_unknown_executor_fails_before_gathering_and_names_the_distribution(
    unique_name: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(registry.DISTRIBUTIONS, "moon", "aitune-moon")  # known by name, not installed
    calls: list[int] = []
    module = ait.Module(SlowableMLP().eval(), unique_name())

    def func(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return module(x)  # type: ignore[no-any-return]

    with pytest.raises(ExecutorError, match=r"unknown executor 'moon'.*install aitune-moon"):
        ait.tune(func, samples(), batch_sizes=[1, 2], executor="moon")
    assert not calls


def test_config_executor_is_checked_when_set() -> None:
    with pytest.raises(ValueError, match="executor name"):
        ait.config.executor = "Not A Name"
    ait.config.executor = "subprocess"
    ait.config.executor = InProcessExecutor()


def test_parallel_strategies_submit_every_candidate_before_collecting(unique_name: Callable[..., str]) -> None:
    recording = Recording()
    module = ait.Module(SlowableMLP(0.002).eval(), unique_name())
    strategy = MaxThroughputStrategy([FastBackend(), TorchEagerBackend()], profile=FAST_PROFILE)
    report = ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy, executor=recording)
    assert recording.events == [
        "submit FastBackend()",
        "submit TorchEagerBackend()",
        "result FastBackend()",
        "result TorchEagerBackend()",
    ]
    assert recording.ended == 1
    assert report.selected(module.name) == "FastBackend()"
    assert "Worker" not in report.summary()  # in-process rows name no worker


def test_first_wins_tries_one_candidate_at_a_time_and_stops(unique_name: Callable[..., str]) -> None:
    recording = Recording()
    ait.config.executor = recording
    module = ait.Module(SlowableMLP(0.002).eval(), unique_name())
    strategy = FirstWinsStrategy([FastBackend(), TorchEagerBackend()], profile=FAST_PROFILE)
    ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy)
    assert recording.events == ["submit FastBackend()", "result FastBackend()"]


def test_a_backend_another_process_cannot_import_is_a_failed_row(unique_name: Callable[..., str]) -> None:
    class Local(FastBackend):  # defined in a function: no other process can import it
        name = ""

    module = ait.Module(SlowableMLP().eval(), unique_name())
    strategy = FirstWinsStrategy([Local()], profile=FAST_PROFILE)
    report = ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy, executor="subprocess")
    row = report.graphs[0].candidates[0]
    assert row.status == "failed" and row.stage == "start"
    assert "cannot be found by another process" in row.reason
    assert isinstance(module.backends["0"], TorchEagerBackend)


_PLUGIN = """
from aitune_core import hookimpl
from aitune_core.executors import InProcessExecutor

AITUNE_PLUGIN_API = 1


class NearbyExecutor(InProcessExecutor):
    name = "nearby"


@hookimpl
def aitune_register_executors():
    return [NearbyExecutor]
"""

_IMPOSTOR = """
from aitune_core import hookimpl
from aitune_core.executors import InProcessExecutor

AITUNE_PLUGIN_API = 1


class Impostor(InProcessExecutor):
    name = "subprocess"


@hookimpl
def aitune_register_executors():
    return [Impostor]
"""


def test_plugins_register_executors_through_the_hook(
    aitune_fake_dist: Any, aitune_isolated_plugins: Any, unique_name: Callable[..., str]
) -> None:
    registry = aitune_isolated_plugins.load(
        aitune_fake_dist("aitune-nearby", _PLUGIN), aitune_fake_dist("aitune-impostor", _IMPOSTOR)
    )
    assert executor_names() == ["auto", "inprocess", "nearby", "subprocess"]
    cls = get_executor_class("nearby")
    assert cls.__name__ == "NearbyExecutor"
    assert get_executor_class("subprocess") is SubprocessExecutor  # the core's names cannot be taken
    [impostor] = [record for record in registry.records() if record.distribution == "aitune-impostor"]
    assert (impostor.status.value, impostor.reason) == ("failed", "executor name 'subprocess' is taken by aitune-core")
    module = ait.Module(SlowableMLP(0.002).eval(), unique_name())
    strategy = FirstWinsStrategy([FastBackend()], profile=FAST_PROFILE)
    report = ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy, executor="nearby")
    assert report.selected(module.name) == "FastBackend()"


def test_custom_executor_instances_are_left_open(unique_name: Callable[..., str]) -> None:
    closed: list[bool] = []

    class Closing(InProcessExecutor):
        def close(self) -> None:
            closed.append(True)

    module = ait.Module(SlowableMLP().eval(), unique_name())
    strategy = FirstWinsStrategy([TorchEagerBackend()], profile=FAST_PROFILE)
    ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy, executor=Closing())
    assert not closed


def test_executor_base_is_abstract() -> None:
    with pytest.raises(TypeError):
        Executor()  # type: ignore[abstract]


def test_a_module_a_worker_cannot_import_stops_the_tuning_with_the_reason(unique_name: Callable[..., str]) -> None:
    class Local(SlowableMLP):  # defined in a function: a worker could not unpickle it
        pass

    module = ait.Module(Local().eval(), unique_name())
    strategy = FirstWinsStrategy([FastBackend()], profile=FAST_PROFILE)
    with pytest.raises(ExecutorError, match=r"Local is defined in a function.*executor='inprocess'"):
        ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy, executor="subprocess")
