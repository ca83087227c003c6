"""Background workers step aside: SCHED_IDLE (or nice 19) for the worker and everything it starts."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from aitune_core.executors.isolated.priority import BACKGROUND_GROUPS, step_aside, thread_limits
from aitune_core.executors.isolated.subprocess_executor import SubprocessExecutor, _child_environment, _Job

CHILD = """
import json, os, subprocess, sys, threading
from aitune_core.executors.isolated.priority import step_aside
applied = step_aside()
seen = {}
thread = threading.Thread(target=lambda: seen.update(thread=os.sched_getscheduler(0)))
thread.start(); thread.join()
grandchild = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0), os.nice(0))"],
                            capture_output=True, text=True, check=True).stdout.split()
print(json.dumps({"applied": applied, "self": os.sched_getscheduler(0), "thread": seen["thread"],
                  "grandchild": [int(v) for v in grandchild]}))
"""


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_a_background_worker_and_all_it_starts_run_at_idle_priority():
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, env=_child_environment()
    )
    seen = json.loads(done.stdout)
    assert seen["applied"] == "SCHED_IDLE"
    assert seen["self"] == seen["thread"] == seen["grandchild"][0] == os.SCHED_IDLE
    assert os.sched_getscheduler(0) != os.SCHED_IDLE  # this process is untouched


def test_thread_limits_cover_openmp_and_inductors_compile_pool():
    assert thread_limits(1) == {"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    env = _child_environment(2)
    assert env["OMP_NUM_THREADS"] == "2" and env["TORCHINDUCTOR_COMPILE_THREADS"] == "2"
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in _child_environment(None) or os.environ.get(
        "TORCHINDUCTOR_COMPILE_THREADS"
    )


def test_background_and_threads_reach_every_candidate():
    executor = SubprocessExecutor(threads=1, background=True)
    assert executor.candidate_options() == {"threads": 1, "background": True}
    assert SubprocessExecutor().candidate_options()["background"] is False


def test_step_aside_says_what_it_applied_where_nothing_can_be_applied(monkeypatch):
    monkeypatch.delattr(os, "sched_setscheduler", raising=False)
    monkeypatch.setattr(os, "nice", lambda increment: (_ for _ in ()).throw(OSError("not allowed")))
    assert step_aside() == "unchanged"


# Reports its own scheduling policy (field 41 of /proc/PID/stat) once it is SCHED_IDLE (5), or after 5 s.
POLICY_REPORTER = """#!/bin/sh
for i in $(seq 100); do
  policy=$(cut -d')' -f2 /proc/$$/stat | awk '{print $39}')
  [ "$policy" = 5 ] && break
  sleep 0.05
done
echo "$policy" > REPORT
"""


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_step_aside_lowers_another_process():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert step_aside(child.pid) == "SCHED_IDLE"
        assert os.sched_getscheduler(child.pid) == os.SCHED_IDLE
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
    assert os.sched_getscheduler(0) != os.SCHED_IDLE


def _background_executor(tmp_path: Path, script: str) -> SubprocessExecutor:
    """A background executor whose "interpreter" is ``script``, and a graph folder for its job."""
    python = tmp_path / "python"
    python.write_text(script)
    python.chmod(0o755)
    (tmp_path / "graph").mkdir()
    return SubprocessExecutor(python=str(python), background=True, memory_limit_mb=None)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE") or not Path("/proc/self/stat").exists(), reason="Linux's /proc")
def test_a_background_child_is_idle_from_its_start_not_from_its_own_call(tmp_path: Path):
    # The interpreter started is a script that never calls step_aside: only the executor can lower it.
    report = tmp_path / "policy"
    executor = _background_executor(tmp_path, POLICY_REPORTER.replace("REPORT", str(report)))
    executor.run(_Job(tmp_path / "graph"), {})
    assert report.read_text().strip() == str(os.SCHED_IDLE)


# Waits (at most 10 s) until the test lets it end.
WAITER = """#!/bin/sh
for i in $(seq 1000); do
  [ -e GO ] && break
  sleep 0.01
done
"""


def test_a_background_child_is_listed_for_serving_calls_to_hold_while_it_runs(tmp_path: Path):
    go = tmp_path / "go"
    executor = _background_executor(tmp_path, WAITER.replace("GO", str(go)))
    before = set(BACKGROUND_GROUPS._groups)
    runner = threading.Thread(target=lambda: executor.run(_Job(tmp_path / "graph"), {}))
    runner.start()
    try:
        for _ in range(1000):
            if BACKGROUND_GROUPS._groups - before:
                break
            threading.Event().wait(0.01)
        (group,) = BACKGROUND_GROUPS._groups - before
        assert os.getpgid(group) == group  # the child leads its own group: a signal reaches its compilers too
        assert os.getsid(group) == os.getsid(0)  # in this session: orphaned, and continued, if this process dies
    finally:
        go.touch()
        runner.join(30)
    assert BACKGROUND_GROUPS._groups == before  # gone before its id can be reused


# Starts a build-like child as the subprocess executor does, prints its pid, then waits to be killed.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], process_group=0)
print(child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads process states from /proc")
def test_a_held_build_whose_serving_process_dies_is_not_left_stopped():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        stat = Path(f"/proc/{child}/stat")
        os.killpg(child, signal.SIGSTOP)  # a serving call holds the build
        for _ in range(1000):
            if ") T " in stat.read_text():
                break
            threading.Event().wait(0.01)
        parent.kill()  # and the serving process dies meanwhile
        parent.wait()
        for _ in range(1000):  # the kernel continues the orphaned group (and hangs it up, unless SIGHUP is ignored)
            if not stat.exists() or ") T " not in stat.read_text():
                break
            threading.Event().wait(0.01)
        assert not stat.exists() or ") T " not in stat.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
