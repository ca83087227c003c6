"""The JIT's work in this process goes in the gaps between serving calls, and is measured at serving's threads."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from jit_helpers import FAST_PROFILE, GatedBackend, Hold, TwoLayers

import aitune_core as ait
from aitune_core.module.wrapper import MODULE_REGISTRY
from aitune_core.profiling.timer import ScriptedTimer, TimedRound, Timer
from aitune_core.validation.inputs import CallInputs
from aitune_jit.pacing import PacedTimer
from aitune_jit.serving import SERVING_CALLS, ServingCalls
from aitune_jit.states import JitState

CALL = CallInputs("batch 2", (torch.zeros(2, 16),), {}, 2)


@pytest.fixture
def gated() -> Iterator[type[GatedBackend]]:
    GatedBackend.reset()
    Hold.reset()
    yield GatedBackend
    GatedBackend.gate.set()  # a failing test must not leave the worker waiting
    Hold.release.set()


@pytest.fixture
def patient(monkeypatch: pytest.MonkeyPatch) -> ServingCalls:
    """The process's serving calls, waited for as long as a test holds one (never given up on)."""
    monkeypatch.setattr(SERVING_CALLS, "wait_limit_s", 60.0)
    monkeypatch.setattr(SERVING_CALLS, "waited", threading.Event())
    return SERVING_CALLS


def _held_call(model: TwoLayers, x: torch.Tensor) -> threading.Thread:
    """A serving call of ``model``, kept in flight inside its forward until ``Hold.release``."""
    model.holding = True
    thread = threading.Thread(target=lambda: model(x), name=Hold.THREAD)
    thread.start()
    assert Hold.entered.wait(10)
    return thread


def test_validation_waits_while_a_serving_call_is_in_flight(gated: type[GatedBackend], patient: ServingCalls) -> None:
    model = TwoLayers().eval()
    x = torch.randn(4, 16)
    ait.jit.enable(model, calls=2, live_checks=1, strategy=ait.FirstWinsStrategy([gated()], profile=FAST_PROFILE))
    model(x)
    model(x)  # tuning starts: its build waits on the gate
    assert gated.building.wait(10)
    held = _held_call(model, x)
    assert patient.in_flight == 1  # the model's own __call__ marked it
    gated.gate.set()  # built: validating is the next step, and it must wait for the call
    assert patient.waited.wait(10)
    assert gated.served == 0  # nothing of the candidate ran beside the serving call
    (status,) = ait.jit.status().values()
    assert status.state is JitState.TUNING
    Hold.release.set()
    held.join(10)
    assert ait.jit.wait(30)
    (status,) = ait.jit.status().values()
    assert status.state is JitState.TUNED, status
    assert gated.served > 0
    model.holding = False
    assert patient.in_flight == 0 and not patient.watching  # tuned: calls are no longer marked


def test_the_timer_times_nothing_while_a_serving_call_is_in_flight(patient: ServingCalls) -> None:
    # A model routed by the JIT, not tuning: its calls are marked only while serving calls are watched.
    Hold.reset()
    model = TwoLayers().eval()
    x = torch.randn(4, 16)
    ait.jit.enable(model, calls=1000)
    model(x)
    inner = ScriptedTimer({"candidate": 1e-3})
    timer = PacedTimer(inner, patient)
    timed: list[TimedRound] = []
    with patient.watch():
        held = _held_call(model, x)
        timing = threading.Thread(target=lambda: timed.append(timer.time_round("candidate", model, CALL, 2, 3)))
        timing.start()
        assert patient.waited.wait(10)
        assert inner.timed == {}
        Hold.release.set()
        held.join(10)
        timing.join(10)
    assert inner.timed == {"candidate": 3}
    assert timed[0].latencies == [1e-3] * 3


class _Scripted(Timer):
    """Runs each call's function, and gives the times it is told, in order."""

    def __init__(self, times: list[float]) -> None:
        self.times = times
        self.ran = 0

    def warm(self, name: str, fn: Callable[..., Any], call: CallInputs, iterations: int) -> None:
        pass

    def time(self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int) -> list[float]:
        return self.time_round(name, fn, call, batch_size, calls).latencies

    def time_round(
        self, name: str, fn: Callable[..., Any], call: CallInputs, batch_size: int, calls: int
    ) -> TimedRound:
        values = []
        for _ in range(calls):
            fn()
            values.append(self.times[self.ran])
            self.ran += 1
        return TimedRound(values, sum(values))


def test_a_call_a_serving_call_came_during_is_timed_again() -> None:
    calls = ServingCalls(settle_s=0.0)
    served: list[int] = []

    def candidate() -> None:
        if not served:  # a serving call comes (and goes) while the first timed call runs
            calls.serve(served.append, (1,), {})

    inner = _Scripted([0.5, 0.001, 0.002])
    timer = PacedTimer(inner, calls)
    with calls.watch():
        round_ = timer.time_round("candidate", candidate, CALL, 2, 2)
    assert round_.latencies == [0.001, 0.002]  # the shared time is not kept
    assert round_.cpu_s == pytest.approx(0.003)
    assert (inner.ran, timer.retaken) == (3, 1)


def test_calls_that_keep_coming_are_timed_again_only_so_often() -> None:
    calls = ServingCalls(settle_s=0.0, wait_limit_s=0.0)
    inner = _Scripted([0.5, 0.4, 0.3])
    timer = PacedTimer(inner, calls, retakes=2)
    with calls.watch():
        round_ = timer.time_round("candidate", lambda: calls.serve(lambda: None, (), {}), CALL, 2, 1)
    assert round_.latencies == [0.3] and timer.retaken == 2


def test_the_tuning_is_measured_at_the_serving_thread_count(gated: type[GatedBackend]) -> None:
    model = TwoLayers().eval()
    x = torch.randn(4, 16)
    gated.gate.set()
    ait.jit.enable(model, calls=2, live_checks=1, strategy=ait.FirstWinsStrategy([gated()], profile=FAST_PROFILE))
    for _ in range(3):
        model(x)
    assert ait.jit.wait(30)
    (status,) = ait.jit.status().values()
    assert status.state is JitState.TUNED, status
    assert MODULE_REGISTRY.modules[status.name].threads == torch.get_num_threads()  # what a checkpoint records
