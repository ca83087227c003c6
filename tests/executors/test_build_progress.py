"""The progress line counts builds done, running and queued, and estimates the time left from those done."""

from __future__ import annotations

from typing import Any

from aitune_core.executors.progress import BuildProgress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Lines:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def info(self, event: str, **fields: Any) -> None:
        self.events.append({"event": event, **fields})


def test_estimate_waits_for_the_first_build_then_follows_the_finished_ones() -> None:
    clock, log = Clock(), Lines()
    progress = BuildProgress(clock, log)
    progress.submitted(5)
    assert progress.line() == "0 done, 0 running, 5 queued, estimating"
    first, second = progress.started(), progress.started()
    assert progress.line() == "0 done, 2 running, 3 queued, estimating"
    assert progress.left_s() is None

    clock.now = 10.0
    progress.finished(first)  # took 10 s: the mean so far
    # 3 queued at 10 s each, the running one has 0 s of its 10 left, shared by 2 at a time.
    assert progress.left_s() == 15.0
    assert log.events[-1] == {"event": "builds", "progress": "1 done, 1 running, 3 queued", "left": "about 15 s left"}

    clock.now = 14.0
    progress.finished(second)  # took 14 s: the mean is 12
    assert progress.left_s() == 18.0  # 3 queued x 12 s / 2
    third = progress.started()
    clock.now = 18.0  # 4 s into the third: 8 s of the mean left
    assert progress.left_s() == (2 * 12.0 + 8.0) / 2
    progress.finished(third)
    assert progress.line().startswith("3 done, 0 running, 2 queued, about ")


def test_builds_that_will_not_run_leave_the_queue_and_reset_starts_anew() -> None:
    progress = BuildProgress(Clock(), Lines())
    progress.submitted(3)
    progress.submitted(-2)  # a strategy stopped after its first candidate
    assert progress.queued == 1
    progress.submitted(-5)
    assert progress.queued == 0
    progress.finished(progress.started())
    progress.reset()
    assert (progress.done, progress.queued, progress.line()) == (0, 0, "0 done, 0 running, 0 queued, estimating")
