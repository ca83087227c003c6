"""A serving call holds the background builds still while it runs, and never starves them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from aitune_core.executors.isolated.priority import BackgroundGroups
from aitune_jit.serving import HOLD_WINDOW_S, ServingCalls, team_takes_every_core

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs POSIX job-control signals")


class Recorded(BackgroundGroups):
    """Groups that only record the signals sent to them."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[int] = []
        self.add(1)

    def signal(self, signal_number: int) -> None:
        self.sent.append(signal_number)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _state(pid: int) -> str:
    """The process's state letter from /proc (``T``: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _becomes(pid: int, wanted: set[str]) -> str:
    deadline = time.monotonic() + 10  # a bound on waiting for the kernel, not a timing verdict
    while (state := _state(pid)) not in wanted and time.monotonic() < deadline:
        time.sleep(0.001)
    return state


@pytest.fixture
def build() -> Iterator[subprocess.Popen[bytes]]:
    """A busy child in its own process group, as the subprocess executor starts a build."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        yield child
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads process states from /proc")
def test_a_build_is_stopped_while_a_serving_call_runs_and_continues_after(build: subprocess.Popen[bytes]) -> None:
    groups = BackgroundGroups()
    groups.add(build.pid)
    calls = ServingCalls(builds=groups, holds_builds=lambda: True)
    with calls.watch():
        seen = calls.serve(lambda: _becomes(build.pid, {"T", "t"}), (), {})
        assert seen in {"T", "t"}
        assert _becomes(build.pid, {"R", "S"}) in {"R", "S"}
        groups.discard(build.pid)
        assert calls.serve(lambda: _state(build.pid), (), {}) in {"R", "S"}  # a finished build is not signalled


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads process states from /proc")
@pytest.mark.parametrize("before", ["a build that has ended", "nothing"])
def test_a_build_started_during_a_call_is_held_with_the_others(build: subprocess.Popen[bytes], before: str) -> None:
    """Held whether or not another build was running when the call began (the JIT's first build is alone)."""
    groups = BackgroundGroups()
    calls = ServingCalls(builds=groups, holds_builds=lambda: True)
    if before == "a build that has ended":
        ended = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
        ended.wait()
        groups.add(ended.pid)  # holding goes on for the rest

    def starts_a_build() -> str:
        groups.add(build.pid)  # the subprocess executor starts a child mid-call
        return _becomes(build.pid, {"T", "t"})

    with calls.watch():
        assert calls.serve(starts_a_build, (), {}) in {"T", "t"}
    assert _becomes(build.pid, {"R", "S"}) in {"R", "S"}


def test_calls_back_to_back_leave_the_builds_their_share_of_each_window() -> None:
    groups, clock = Recorded(), Clock()
    calls = ServingCalls(clock=clock, builds=groups, holds_builds=lambda: True)
    held = [signal.SIGSTOP, signal.SIGCONT]

    def call(seconds: float) -> None:
        def run() -> None:
            clock.now += seconds

        calls.serve(run, (), {})

    with calls.watch():
        call(0.3)  # one slow call (a stall): holding goes on
        call(0.01)
        assert groups.sent == held * 2
        call(0.6)  # held 0.91 s of this window: the builds have what is left of it
        sent = len(groups.sent)
        call(0.01)
        assert len(groups.sent) == sent
        clock.now += HOLD_WINDOW_S  # a new window
        call(0.01)
        assert groups.sent[sent:] == held


def test_a_hold_with_no_build_takes_nothing_from_the_window_and_a_raising_call_still_continues_them() -> None:
    quiet, clock = Recorded(), Clock()
    quiet.discard(1)
    calls = ServingCalls(clock=clock, builds=quiet, holds_builds=lambda: True)

    def slow() -> None:
        clock.now += 0.95

    with calls.watch():
        calls.serve(slow, (), {})  # nothing to hold: the window's share is untouched
        quiet.add(1)
        calls.serve(lambda: None, (), {})
    assert quiet.sent == [signal.SIGSTOP, signal.SIGCONT] * 2
    groups = Recorded()

    def fails() -> None:
        raise RuntimeError("boom")

    calls = ServingCalls(builds=groups, holds_builds=lambda: True)
    with calls.watch(), pytest.raises(RuntimeError):
        calls.serve(fails, (), {})
    assert groups.sent == [signal.SIGSTOP, signal.SIGCONT]


def test_with_a_core_to_spare_the_builds_run_on_through_serving_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """One serving thread on two cores: the build has a core of its own, and holding it would only slow tuning."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert not team_takes_every_core()
    groups = Recorded()
    calls = ServingCalls(builds=groups)
    with calls.watch():
        calls.serve(lambda: None, (), {})
    assert groups.sent == []
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # torch's default here: the team takes both
    with calls.watch():
        calls.serve(lambda: None, (), {})
    assert groups.sent == [signal.SIGSTOP, signal.SIGCONT]
    calls.serve(lambda: None, (), {})  # no tuning job: nothing held
    assert groups.sent == [signal.SIGSTOP, signal.SIGCONT]
