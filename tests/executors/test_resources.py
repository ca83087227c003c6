"""What a candidate may cost, and what it leaves behind once it is done.

Helper processes die with their subprocess candidate, however it ends; the default
time and memory limits stop a hang and a hoard (shrunk here, so no test waits
minutes); absurd batch sizes are refused before any work; losing candidates are
deactivated and dropped.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from executor_backends import FAST_PROFILE, FastBackend, HangBackend, SlowableMLP
from resource_backends import HelperBackend, HoardBackend, TrackedBackend, helper_alive

import aitune_core as ait
from aitune_core.backends import BackendState
from aitune_core.data import MAX_BATCH_SIZE, DatasetError, check_batch_sizes
from aitune_core.evaluate.candidate import release
from aitune_core.executors import SubprocessExecutor
from aitune_core.executors.base import DEFAULT_TIMEOUT_S
from aitune_core.executors.isolated import memory, subprocess_executor
from aitune_core.strategies import MaxThroughputStrategy

linux_only = pytest.mark.skipif(not Path("/proc/self/statm").is_file(), reason="reads /proc")

TIMEOUT_S = 12  # a healthy child needs ~3 s here, more while others start next to it


def samples(count: int = 4) -> list[torch.Tensor]:
    return [torch.randn(16) for _ in range(count)]


def rows(report: ait.TuneReport) -> dict[str, ait.CandidateResult]:
    return {row.backend: row for row in report.graphs[0].candidates}


# --------------------------------------------------------------------------- helper processes
@linux_only
@pytest.mark.slow  # child processes and their limits
def test_helpers_die_with_their_candidate_however_it_ends(unique_name: Callable[..., str], tmp_path: Path) -> None:
    ends = ("pass", "raise", "hang")
    backends = [HelperBackend(pid_file=str(tmp_path / f"{end}.pid"), then=end) for end in ends]
    strategy = MaxThroughputStrategy(backends, profile=FAST_PROFILE)
    module = ait.Module(SlowableMLP(0.005).eval(), unique_name())
    executor = SubprocessExecutor(workers=3, timeout_s=TIMEOUT_S)
    report = ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy, executor=executor)

    by_end = dict(zip(ends, report.graphs[0].candidates, strict=True))
    assert by_end["pass"].status == "selected"
    assert by_end["raise"].reason == "RuntimeError: the compiler failed after starting its workers"
    assert by_end["hang"].reason == f"timed out after {TIMEOUT_S} s"
    for end in ends:
        pid = int((tmp_path / f"{end}.pid").read_text())
        assert not helper_alive(pid), f"the helper of the candidate that ended with {end!r} outlived it"


@linux_only
def test_cancel_kills_the_group_of_a_running_child(tmp_path: Path) -> None:
    """The executor's own kill reaches grandchildren, not only the child it started."""
    pid_file = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, time; p = subprocess.Popen(['sleep', '600']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(600)"
    )
    child = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 30
    while not (pid_file.is_file() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    assert not subprocess_executor._ended(child)
    subprocess_executor._kill_group(child)
    child.wait(timeout=10)
    time.sleep(0.2)
    assert child.returncode == -signal.SIGKILL and not helper_alive(grandchild)


# --------------------------------------------------------------------------- default limits
def test_defaults_are_bounded() -> None:
    one, four = SubprocessExecutor(), SubprocessExecutor(workers=4)
    assert one.timeout_s == DEFAULT_TIMEOUT_S == 600
    assert one.memory_limit_mb == memory.default_limit_mb(1)
    if one.memory_limit_mb is not None:
        assert four.memory_limit_mb is not None and abs(four.memory_limit_mb * 4 - one.memory_limit_mb) <= 4
        assert "memory" in one.describe() and "timeout 600 s" in one.describe()
    unbounded = SubprocessExecutor(timeout_s=None, memory_limit_mb=None)
    assert unbounded.timeout_s is None and unbounded.memory_limit_mb is None
    with pytest.raises(ValueError, match="memory_limit_mb must be a positive whole number, 'auto' or None"):
        SubprocessExecutor(memory_limit_mb=0)


@linux_only
@pytest.mark.slow  # child processes and their limits
def test_default_limits_stop_a_hang_and_a_hoard(
    unique_name: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The defaults, shrunk: 6 s instead of 600, and a 1 GiB "machine" whose half is 512 MiB.
    # A worker holds about 150 MiB after importing torch; the hoard passes 512 MiB after touching
    # a tenth of its 3 GiB, well inside the 6 s even where page faults are slow.
    monkeypatch.setattr(subprocess_executor, "DEFAULT_TIMEOUT_S", 6.0)
    monkeypatch.setattr(memory, "machine_memory_bytes", lambda: 2**30)
    module = ait.Module(SlowableMLP(0.005).eval(), unique_name())
    strategy = MaxThroughputStrategy([HangBackend(), HoardBackend(), FastBackend()], profile=FAST_PROFILE)
    started = time.monotonic()
    report = ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy, executor="subprocess")

    found = rows(report)
    hung, hoard = found["HangBackend()"], found["HoardBackend()"]
    assert (hung.status, hung.reason) == ("failed", "timed out after 6 s")  # in "start" on a very busy machine
    assert hoard.status == "failed" and hoard.stage == "build"
    assert hoard.reason.startswith("out of memory: held ") and hoard.reason.endswith("over the limit of 512 MiB")
    assert found["FastBackend()"].status == "selected"
    assert time.monotonic() - started < 120


# --------------------------------------------------------------------------- memory readings
@linux_only
def test_held_bytes_counts_what_a_process_touches() -> None:
    before = memory.held_bytes([os.getpid()])
    hoard = torch.ones(256 * 2**20, dtype=torch.uint8)
    after = memory.held_bytes([os.getpid()])
    assert before is not None and after is not None and after - before > 200 * 2**20
    del hoard


@linux_only
def test_group_and_descendants_include_helpers() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import subprocess; subprocess.run(['sleep', '30'])"], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 30
        while len(memory.group_members(child.pid) or []) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        members = memory.group_members(child.pid)
        assert members is not None and child.pid in members and len(members) == 2
        assert sorted(memory.with_descendants(child.pid) or []) == sorted(members)
        assert os.getpid() not in members
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def test_machine_memory_honours_a_container_limit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    limit = tmp_path / "memory.max"
    limit.write_text(f"{2 * 2**30}\n")
    monkeypatch.setattr(memory, "_CGROUP_LIMITS", (limit,))
    assert memory.machine_memory_bytes() == min(2 * 2**30, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    limit.write_text("max\n")
    assert memory.machine_memory_bytes() == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    monkeypatch.setattr(memory, "machine_memory_bytes", lambda: 8 * 2**30)
    assert (memory.default_limit_mb(1), memory.default_limit_mb(4)) == (4096, 1024)


# --------------------------------------------------------------------------- batch sizes
def test_absurd_batch_sizes_are_refused_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    with pytest.raises(DatasetError, match=rf"larger than the limit of {MAX_BATCH_SIZE}.*AITUNE_MAX_BATCH_SIZE="):
        ait.tune(calls.append, samples(), batch_sizes=[2, 10**9])
    assert calls == []
    assert check_batch_sizes([1, MAX_BATCH_SIZE]) == [1, MAX_BATCH_SIZE]
    monkeypatch.setenv("AITUNE_MAX_BATCH_SIZE", str(2 * MAX_BATCH_SIZE))
    assert check_batch_sizes([2 * MAX_BATCH_SIZE]) == [2 * MAX_BATCH_SIZE]
    monkeypatch.setenv("AITUNE_MAX_BATCH_SIZE", "lots")
    with pytest.raises(DatasetError, match="AITUNE_MAX_BATCH_SIZE must be a whole number"):
        check_batch_sizes([4])


# --------------------------------------------------------------------------- losing candidates
@pytest.fixture
def tracked() -> Iterator[type[TrackedBackend]]:
    TrackedBackend.built.clear()
    TrackedBackend.deactivated.clear()
    yield TrackedBackend
    TrackedBackend.built.clear()
    TrackedBackend.deactivated.clear()


def test_losing_candidates_are_deactivated_and_dropped(
    unique_name: Callable[..., str], tracked: type[TrackedBackend]
) -> None:
    module = ait.Module(SlowableMLP(0.005).eval(), unique_name())
    strategy = MaxThroughputStrategy([tracked(tag=tag) for tag in range(3)], profile=FAST_PROFILE)
    report = ait.tune(module, samples(), batch_sizes=[1, 2], strategy=strategy, executor="inprocess")
    winner = module.backends["0"]
    results = report.graphs[0].candidates
    assert [row.status for row in results].count("selected") == 1 and len(tracked.built) == 3
    assert all(row.instance is None for row in results if row.status != "selected")
    gc.collect()
    losers = [ref for ref in tracked.built if ref() is not winner]
    assert len(losers) == 2 and all(ref() is None for ref in losers)  # nothing holds them any more
    assert len(tracked.deactivated) == 2 and id(winner) not in tracked.deactivated
    assert isinstance(winner, TrackedBackend) and winner.state is BackendState.ACTIVE


def test_release_deactivates_only_active_backends(tracked: type[TrackedBackend]) -> None:
    backend = tracked()
    assert release(backend) is None and backend.state is BackendState.INIT  # never built: nothing to free
    assert release(None) is None
