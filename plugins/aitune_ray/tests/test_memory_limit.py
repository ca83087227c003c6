"""The Ray executor's memory limit, against a stand-in for ``ray`` (these tests need no Ray).

What is checked: the options every task is submitted with (Ray's ``memory`` booking),
the limit each candidate carries to its task, the task holding the candidate to it,
and the driver's reason when a task ran out of memory.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_ray import FakeRay

from aitune_core.plugin_api.executors import Answer
from aitune_ray import executor as ray_executor
from aitune_ray import memory_watch as memory
from aitune_ray.executor import MEMORY_KEY, RayExecutor, run_limited_task
from aitune_ray.nodes import Place


def _graph(executor: RayExecutor, device: str) -> Any:
    return ray_executor._Graph("payload", executor.task_options(torch.device(device)), Path("unused"))


def test_tasks_book_the_memory_limit_with_ray(fake_ray: FakeRay) -> None:
    executor = RayExecutor(memory_mb=2048, num_cpus=2)
    failed = Answer.failed("build", "RuntimeError: no", "7@node")
    fake_ray.answers = [Place("7@node").to_data(), failed.to_json()]
    answer = executor.run(_graph(executor, "cpu"), {"label": "x", **executor.candidate_options()})

    assert answer.result.reason == "RuntimeError: no" and answer.fetch is None
    (remote,) = fake_ray.remotes
    assert remote.function is run_limited_task and remote.decorator_options == {"max_retries": 0}
    assert fake_ray.submitted_options == [{"num_cpus": 2, "memory": 2048 * 2**20}]
    assert fake_ray.submitted_candidates[0][MEMORY_KEY] == 2048
    assert executor.task_options(torch.device("cuda")) == {"num_cpus": 2, "num_gpus": 1.0, "memory": 2048 * 2**20}


def test_without_a_limit_nothing_is_booked_and_the_timeout_is_the_default(fake_ray: FakeRay) -> None:
    executor = RayExecutor()
    assert executor.timeout_s == 600
    assert executor.task_options(torch.device("cpu")) == {"num_cpus": 1.0}
    assert executor.candidate_options()[MEMORY_KEY] is None  # the task holds it to half its node's memory
    with pytest.raises(ValueError, match="memory_mb must be a positive whole number"):
        RayExecutor(memory_mb=0)


@pytest.mark.parametrize(
    "error",
    [
        "OutOfMemoryError",
        "RayError",  # a task that raised CandidateMemoryError: Ray wraps it in its own error
    ],
)
def test_a_task_out_of_memory_is_a_failed_row_saying_so(fake_ray: FakeRay, error: str) -> None:
    executor = RayExecutor(memory_mb=512)
    kind = getattr(fake_ray.exceptions, error)
    text = {
        "OutOfMemoryError": "Task was killed due to the node running low on memory.",
        "RayError": "ray::run_limited_task() (pid=7) CandidateMemoryError: held 900 MiB, over the limit of 512 MiB",
    }[error]
    fake_ray.answers = [Place("7@node").to_data(), kind(text)]
    record = executor.run(_graph(executor, "cpu"), {"label": "x", **executor.candidate_options()}).result
    assert record.status == "failed" and record.worker == "7@node"
    assert record.reason.startswith("out of memory: ")


def test_the_task_holds_its_candidate_to_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    ended: list[int] = []
    monkeypatch.setattr(memory.MemoryWatch, "_end_process", lambda self, held: ended.append(held))
    monkeypatch.setattr(memory, "held_bytes", lambda pids: 900 * 2**20)
    steps: list[str] = []

    def greedy_task(payload: Any, candidate: dict[str, Any]) -> Iterator[str]:
        yield "7@node"
        try:
            for _ in range(300):
                time.sleep(0.01)  # the candidate's own code: the watch interrupts it
        except memory.CandidateMemoryError as error:
            steps.append(str(error))
            yield json.dumps({"failed": str(error)})
            return
        yield "never"

    monkeypatch.setattr("aitune_ray.worker.run_candidate_task", greedy_task)
    task = run_limited_task("payload", {MEMORY_KEY: 512})
    assert next(task) == "7@node"
    time.sleep(5 * memory.CHECK_INTERVAL_S)  # Ray holds the generator between answers: over, but disarmed
    assert json.loads(next(task)) == {"failed": "held 900 MiB, over the limit of 512 MiB"}
    assert list(task) == [] and steps and ended == []


def test_memory_watch_raises_only_where_armed() -> None:
    stuck: list[int] = []
    over = 2048 * 2**20
    watch = memory.MemoryWatch(1024 * 2**20, exit_code=3, grace_s=0.3, on_stuck=stuck.append, measure=lambda: over)
    with watch:
        time.sleep(5 * memory.CHECK_INTERVAL_S)  # over the limit, but disarmed: the caller's code
        assert watch.tripped_at is None
        match = "held 2048 MiB, over the limit of 1024 MiB"
        with pytest.raises(memory.CandidateMemoryError, match=match), watch.armed():
            for _ in range(200):
                time.sleep(0.01)
        time.sleep(0.6)
    assert watch.tripped_at == over and stuck == [over]  # still over after the grace: the process would end
