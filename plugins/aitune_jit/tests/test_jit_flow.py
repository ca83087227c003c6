"""A model under the JIT: recording, tuning in the background while calls go on, the live check, the swap."""

from __future__ import annotations

import threading

import pytest
import torch
from jit_helpers import FAST_PROFILE, GatedBackend, Hold, OffBackend, TwoLayers

import aitune_core as ait
from aitune_jit.serving import SERVING_CALLS
from aitune_jit.states import JitState


def _state() -> JitState:
    (status,) = ait.jit.status().values()
    return status.state


@pytest.fixture
def gated() -> type[GatedBackend]:
    GatedBackend.reset()
    yield GatedBackend
    GatedBackend.gate.set()  # a failing test must not leave the worker waiting


def test_calls_never_wait_on_tuning_and_the_winner_serves_after(gated: type[GatedBackend]) -> None:
    model = TwoLayers().eval()
    x = torch.randn(4, 16)
    expected = model.forward(x)
    ait.jit.enable(model, calls=3, strategy=ait.FirstWinsStrategy([gated()], profile=FAST_PROFILE))
    for _ in range(2):
        assert torch.equal(model(x), expected)
    assert _state() is JitState.RECORDING
    model(x)  # the third: tuning starts, its build waits on the gate
    assert gated.building.wait(10)
    for _ in range(20):  # all served while the build waits: none of them waits for it
        assert torch.equal(model(x), expected)
    assert _state() is JitState.TUNING
    assert gated.served == 0
    gated.gate.set()
    assert ait.jit.wait(30)
    (status,) = ait.jit.status().values()
    assert status.state is JitState.TUNED, status
    assert status.backends == {"0": "test_jit_gated"}
    assert "checked on" in status.detail
    assert torch.allclose(model(x), expected)
    assert gated.served > 0


def test_a_winner_wrong_on_live_calls_is_not_swapped_in() -> None:
    model = TwoLayers().eval()
    cls = type(model)
    x = torch.randn(4, 16)
    expected = model.forward(x)
    # Validation off: only the live check stands between this backend and the calls.
    strategy = ait.FirstWinsStrategy([OffBackend()], profile=FAST_PROFILE).enable_correctness_check(False)
    ait.jit.enable(model, calls=2, strategy=strategy)
    for _ in range(6):
        model(x)
    assert ait.jit.wait(30)
    (status,) = ait.jit.status().values()
    assert status.state is JitState.FAILED
    assert "differs from eager on a live call" in status.detail
    assert type(model) is cls  # taken off: the original class, no wrapper left
    assert torch.equal(model(x), expected)


def test_a_call_in_flight_finishes_on_the_path_it_started(
    gated: type[GatedBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The held call is in flight for the rest of the tuning: each piece of it would wait for a gap in vain.
    monkeypatch.setattr(SERVING_CALLS, "wait_limit_s", 0.0)
    model = TwoLayers().eval()
    x = torch.randn(4, 16)
    expected = model.forward(x)
    ait.jit.enable(model, calls=2, live_checks=2, strategy=ait.FirstWinsStrategy([gated()], profile=FAST_PROFILE))
    for _ in range(4):  # two recorded, then two live samples
        model(x)
    assert gated.building.wait(10)
    Hold.reset()
    model.holding = True
    result: list[torch.Tensor] = []
    in_flight = threading.Thread(target=lambda: result.append(model(x)), name=Hold.THREAD)
    in_flight.start()
    assert Hold.entered.wait(10)  # an eager call, held inside the forward
    gated.gate.set()
    assert ait.jit.wait(30)
    assert _state() is JitState.TUNED
    served = gated.served
    model(x)  # the swap is done: new calls go to the winner (whose copy does not hold)
    assert gated.served == served + 1
    Hold.release.set()
    in_flight.join(10)
    assert torch.equal(result[0], expected)  # finished eagerly, where it started
    assert gated.served == served + 1


def test_status_names_each_module_and_disable_puts_the_model_back() -> None:
    model = TwoLayers().eval()
    cls = type(model)
    ait.jit.enable(model, calls=100)
    model(torch.randn(2, 16))
    (status,) = ait.jit.status().values()
    assert (status.name, status.path, status.state, status.calls_recorded) == ("TwoLayers", "", JitState.RECORDING, 1)
    assert "TwoLayers: recording" in str(status)
    assert type(model) is not cls and isinstance(model, cls)
    ait.jit.disable()
    assert type(model) is cls
    assert ait.jit.status() == {}


def test_enable_refuses_a_model_in_training_mode() -> None:
    with pytest.raises(ValueError, match=r"model.eval\(\)"):
        ait.jit.enable(TwoLayers())
