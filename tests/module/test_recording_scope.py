"""Recording belongs to the tuning run that gathers: other threads' calls are never tuning data."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from module_helpers import WIDTH, FrozenBackend, mlp, one, samples, tune_frozen

import aitune_core as ait
from aitune_core.backends.base import BuildContext
from aitune_core.executors.inprocess import InProcessExecutor
from aitune_core.module import ModuleState

Name = Callable[[str], str]
BIG = 3000


def max_batch(module: ait.Module) -> int:
    (graph,) = module.graph_specs
    return int(graph.input_spec.tensor_data[0][1].max_shape[0])


def in_other_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` in a new thread and wait for it; its result, or its exception raised here."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except BaseException as error:  # handed back to the test
            result["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    if "error" in result:
        raise result["error"]
    return result["value"]


def gathering_with_a_stranger(wrapped: ait.Module, model: torch.nn.Module) -> Callable[[torch.Tensor], Any]:
    """A tuning func that, on its first call, has another thread call the module with batch 3000."""
    seen: list[torch.Tensor] = []

    def func(x: torch.Tensor) -> Any:
        if not seen:
            big = torch.randn(BIG, WIDTH)
            with torch.no_grad():
                out = in_other_thread(lambda: wrapped(big))
                torch.testing.assert_close(out, model(big))
            seen.append(out)
        return wrapped(x)

    return func


def test_calls_served_before_tune_begins_are_not_tuned_from(unique_name: Name) -> None:
    """Three threads serve batches 3 to 3,000 before ``tune`` is called: the module records them apart."""
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    served = [threading.Event() for _ in range(3)]
    errors: list[BaseException] = []

    def serve(sizes: list[int], done: threading.Event) -> None:
        try:
            with torch.no_grad():
                for size in sizes:
                    wrapped(torch.randn(size, WIDTH))
        except BaseException as error:  # handed back to the test
            errors.append(error)
        finally:
            done.set()

    batches = [[3, 30], [300, BIG], [BIG, 3]]
    threads = [threading.Thread(target=serve, args=(sizes, done)) for sizes, done in zip(batches, served, strict=True)]
    for thread in threads:
        thread.start()
    assert all(done.wait(timeout=60) for done in served)
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert max_batch(wrapped) == BIG  # a fresh wrapper shows what it recorded on its own, as ever
    ait.tune(wrapped, samples(8), batch_sizes=[1, 2, 4, 8], strategy=one(FrozenBackend()))
    assert max_batch(wrapped) == 8
    backend = wrapped.backends["0"]
    assert isinstance(backend, FrozenBackend)
    backend.calls = 0
    big, small = torch.randn(BIG, WIDTH), torch.randn(8, WIDTH)
    with torch.no_grad():
        torch.testing.assert_close(wrapped(big), model(big))
        assert backend.calls == 0, "batch 3000 is outside the tuned range: eager serves it"
        torch.testing.assert_close(wrapped(small), model(small))
    assert backend.calls == 1


def test_calls_from_another_thread_while_gathering_are_not_recorded(unique_name: Name) -> None:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    ait.tune(gathering_with_a_stranger(wrapped, model), samples(), batch_sizes=[1, 4], strategy=one(FrozenBackend()))
    assert max_batch(wrapped) == 4
    assert wrapped.state is ModuleState.TUNED


def test_while_re_tuning_other_threads_are_routed_and_not_recorded(unique_name: Name) -> None:
    model = mlp()
    wrapped = ait.Module(model, unique_name("model"))
    tune_frozen(wrapped)
    first = wrapped.backends["0"]
    assert isinstance(first, FrozenBackend)
    first.calls = 0
    ait.tune(gathering_with_a_stranger(wrapped, model), samples(), batch_sizes=[2, 4], strategy=one(FrozenBackend()))
    assert max_batch(wrapped) == 4
    assert first.calls == 0  # batch 3000 is outside the tuned range: eager ran it


class StrangerWhileSettingUp(InProcessExecutor):
    """Another thread calls the module while ``tune`` sets up, before it gathers.

    ``tune`` asks an executor that is not the in-process one to describe itself for its
    first log line, which it writes before gathering: the stranger calls from there.
    """

    name = "test_stranger_while_setting_up"

    def __init__(self, target: ait.Module) -> None:
        super().__init__()
        self.target = target
        self.strangers = 0

    def describe(self) -> str:
        with torch.no_grad():
            in_other_thread(lambda: self.target(torch.randn(BIG, WIDTH)))
        self.strangers += 1
        return "in this process"


def test_calls_from_another_thread_while_tune_sets_up_are_not_recorded(unique_name: Name) -> None:
    wrapped = ait.Module(mlp(), unique_name("model"))
    executor = StrangerWhileSettingUp(wrapped)
    ait.tune(wrapped, samples(), batch_sizes=[1, 4], strategy=one(FrozenBackend()), executor=executor)
    assert executor.strangers == 1
    assert max_batch(wrapped) == 4
    assert wrapped.state is ModuleState.TUNED


class StrangerDuringBuild(FrozenBackend):
    """Another thread calls the module while this backend builds, after gathering ended."""

    name = "test_stranger_during_build"
    target: ait.Module | None = None

    def _build(self, context: BuildContext) -> None:
        target = type(self).target
        assert target is not None
        with torch.no_grad():
            in_other_thread(lambda: target(torch.randn(BIG, WIDTH)))
        super()._build(context)


def test_calls_from_another_thread_while_building_are_not_recorded(unique_name: Name) -> None:
    wrapped = ait.Module(mlp(), unique_name("model"))
    StrangerDuringBuild.target = wrapped
    try:
        ait.tune(wrapped, samples(), batch_sizes=[1, 4], strategy=one(StrangerDuringBuild()))
    finally:
        StrangerDuringBuild.target = None
    assert max_batch(wrapped) == 4


def test_two_threads_tuning_two_models_each_tune_their_own(unique_name: Name) -> None:
    models = {"first": ait.Module(mlp(), unique_name("first")), "second": ait.Module(mlp(), unique_name("second"))}
    both_gathering = threading.Barrier(2, timeout=60)

    def tune(wrapped: ait.Module, batch_sizes: list[int]) -> ait.TuneReport:
        waited: list[bool] = []

        def func(x: torch.Tensor) -> Any:
            if not waited:  # both runs are gathering at once from here on
                both_gathering.wait()
                waited.append(True)
            return wrapped(x)

        return ait.tune(func, samples(8), batch_sizes=batch_sizes, strategy=one(FrozenBackend()))

    reports: dict[str, ait.TuneReport] = {}
    errors: list[BaseException] = []

    def run(key: str, batch_sizes: list[int]) -> None:
        try:
            reports[key] = tune(models[key], batch_sizes)
        except BaseException as error:
            errors.append(error)
            both_gathering.abort()

    threads = [
        threading.Thread(target=run, args=("first", [1, 2])),
        threading.Thread(target=run, args=("second", [4, 8])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    for key, wrapped in models.items():
        assert {graph.module for graph in reports[key].graphs} == {wrapped.name}
        assert wrapped.state is ModuleState.TUNED
    assert max_batch(models["first"]) == 2
    assert max_batch(models["second"]) == 8


def test_without_a_tuning_run_calls_are_recorded_from_any_thread(unique_name: Name) -> None:
    wrapped = ait.Module(mlp(), unique_name("model"))
    with torch.no_grad():
        in_other_thread(lambda: wrapped(torch.randn(5, WIDTH)))
    assert wrapped.graph_specs and max_batch(wrapped) == 5


@pytest.mark.parametrize("tuned", [False, True])
def test_a_dry_run_leaves_the_module_as_it_was(unique_name: Name, tuned: bool) -> None:
    wrapped = ait.Module(mlp(), unique_name("model"))
    if tuned:
        tune_frozen(wrapped)
    before = wrapped.state
    ait.tune(wrapped, samples(), batch_sizes=[1, 2], dry_run=True, strategy=one(FrozenBackend()))
    assert wrapped.state is before
    with torch.no_grad():
        in_other_thread(lambda: wrapped(torch.randn(BIG, WIDTH)))
    assert max_batch(wrapped) < BIG  # untuned modules record again once the run is over, apart from tuning data
