"""The build gate: timings wait for running builds, builds wait for timings, and a waiting timing goes first."""

from __future__ import annotations

import threading

from aitune_core.executors.gate import BuildGate


def test_a_timing_waits_for_running_builds_and_holds_new_ones_back() -> None:
    gate = BuildGate()
    events: list[tuple[str, str, str]] = []
    gate.listeners.append(lambda kind, event, label: events.append((kind, event, label)))
    building, release_build = threading.Event(), threading.Event()
    timing_waits = threading.Event()

    def first_build() -> None:
        with gate.building("a"):
            building.set()
            release_build.wait(10)

    def timing() -> None:
        building.wait(10)
        timing_waits.set()
        with gate.profiling("t"):
            pass

    def second_build() -> None:
        timing_waits.wait(10)
        while not gate._waiting:  # the timing is waiting now: this build must queue behind it
            threading.Event().wait(0.001)
        with gate.building("b"):
            pass

    threads = [threading.Thread(target=f) for f in (first_build, timing, second_build)]
    for thread in threads:
        thread.start()
    timing_waits.wait(10)
    while not gate._waiting:
        threading.Event().wait(0.001)
    assert events == [("build", "start", "a")]  # neither the timing nor the second build got in
    release_build.set()
    for thread in threads:
        thread.join(10)
    assert events == [
        ("build", "start", "a"),
        ("build", "end", "a"),
        ("profile", "start", "t"),
        ("profile", "end", "t"),
        ("build", "start", "b"),
        ("build", "end", "b"),
    ]


def test_the_gate_is_reentrant_within_a_thread() -> None:
    gate = BuildGate()
    with gate.profiling(), gate.building():  # an in-process build during a timing does not wait for itself
        assert gate.builds == 0
    with gate.building(), gate.profiling():
        assert gate.builds == 1
    assert gate.builds == 0
