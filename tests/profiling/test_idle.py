"""Between variants, profiling waits for the last one's spinning thread pools, on a scripted clock."""

from __future__ import annotations

import time

import pytest

from aitune_core.profiling.compare import Variant, compare
from aitune_core.profiling.idle import LIMIT_S, SLICE_S, wait_until_idle
from aitune_core.profiling.measurement import ProfileConfig
from aitune_core.profiling.timer import EAGER, ScriptedTimer
from aitune_core.validation.inputs import CallInputs


class SpinningPool:
    """A process whose pool burns ``threads`` cores until ``stops_at`` (virtual seconds), then sleeps."""

    def __init__(self, stops_at: float, threads: float = 1.0) -> None:
        self.now = 0.0
        self.cpu_s = 0.0
        self.stops_at = stops_at
        self.threads = threads

    def sleep(self, seconds: float) -> None:
        spinning = max(0.0, min(self.stops_at, self.now + seconds) - self.now)
        self.cpu_s += spinning * self.threads
        self.now += seconds

    def wait(self, limit_s: float = LIMIT_S) -> float:
        return wait_until_idle(cpu=lambda: self.cpu_s, wall=lambda: self.now, sleep=self.sleep, limit_s=limit_s)


def test_an_idle_process_waits_one_slice() -> None:
    assert SpinningPool(stops_at=0.0).wait() == pytest.approx(SLICE_S)


def test_waits_until_the_pool_stops_spinning() -> None:
    waited = SpinningPool(stops_at=0.03).wait()  # ONNX Runtime's tail at two threads
    assert 0.03 <= waited <= 0.03 + 2 * SLICE_S


def test_a_pool_that_never_sleeps_is_not_waited_out() -> None:
    assert SpinningPool(stops_at=1e9).wait(limit_s=0.01) == pytest.approx(0.01, abs=SLICE_S)


def test_a_pool_spinning_below_the_idle_share_counts_as_idle() -> None:
    assert SpinningPool(stops_at=1.0, threads=0.1).wait() == pytest.approx(SLICE_S)


class SwitchCounting(ScriptedTimer):
    def __init__(self) -> None:
        super().__init__({EAGER: 2e-3, "fast": 1e-3})
        self.order: list[str] = []

    def switch(self) -> None:
        self.order.append("switch")

    def time_round(self, name, fn, call, batch_size, calls):  # type: ignore[no-untyped-def]
        self.order.append(name)
        return super().time_round(name, fn, call, batch_size, calls)


def test_compare_lets_pools_settle_before_every_variants_round() -> None:
    timer = SwitchCounting()
    variants = [Variant(EAGER, lambda: None), Variant("fast", lambda: None)]
    compare(variants, CallInputs("test", (), {}), 1, ProfileConfig(min_rounds=8), timer, gate=1.01)
    timed = [i for i, step in enumerate(timer.order) if step != "switch"][len(variants) :]  # after the calibration
    assert len(timed) >= 16
    assert all(timer.order[i - 1] == "switch" for i in timed)


def test_a_pool_thread_spinning_on_another_core_is_waited_for_not_seen_a_tick_late() -> None:
    """A real thread burns a core for 60 ms while the caller looks in 0.5 ms slices.

    The process clock counted that thread only at scheduler ticks (every 4 ms here), so
    nearly every slice read it as idle and the wait ended at once.
    """
    import hashlib
    import threading

    block = bytes(4 << 20)  # hashing it releases the GIL and never leaves the core: no switch updates the clock
    waits = []
    for _ in range(3):
        started = threading.Event()

        def spin(started: threading.Event = started) -> None:
            end = time.perf_counter() + 0.06
            while time.perf_counter() < end:
                hashlib.sha256(block).digest()
                started.set()

        worker = threading.Thread(target=spin, daemon=True)
        worker.start()
        started.wait()
        waits.append(wait_until_idle(limit_s=0.5))
        worker.join()
    assert sum(waited >= 0.04 for waited in waits) >= 2, waits
