"""SubprocessExecutor: each candidate in a fresh child process, so a crash is one failed row.

Compilers segfault, call ``abort()``, hang in an autotuner or exhaust memory; in-process
any of these ends the tuning run, and the graphs tuned so far with it. Here each
candidate runs in a new interpreter (started with ``subprocess``: spawned, never
forked, so it shares no threads, locks or CUDA context with this process), and what
happens to it is read from outside:

* a signal becomes "killed by SIGABRT" (or SIGSEGV, ...);
* a time limit, counted from the child's start, becomes "timed out after 30 s";
* a memory limit (``RLIMIT_AS``, set in the child before it imports anything) makes
  allocations fail, which becomes "out of memory";

each with the end of the child's log (``PYTHONFAULTHANDLER`` is on, so a native crash
leaves the Python stack there). The other candidates and this process carry on.

Children load the graph from files written once per graph (see
:mod:`aitune_core.executors.payload`; the module itself is pickled for them), build
into the same cache folder as in-process tuning, and write their result as JSON. An
AOT winner is then loaded here from its artifacts in that folder; a JIT winner is
compiled again here. Children find modules the way this process does: its
``sys.path`` is their ``PYTHONPATH``.

Costs: each child starts an interpreter and imports torch (a few seconds), and times
eager again next to the candidate, so that the candidate's speedup compares timings
taken in the same process. Linux and macOS; on macOS ``RLIMIT_AS`` is not enforced.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from aitune_core.executors.child import EXIT_OUT_OF_MEMORY
from aitune_core.executors.payload import CandidateRecord, GraphPayload, looks_out_of_memory
from aitune_core.executors.remote import Fetch, RemoteExecutor, output_tail

if TYPE_CHECKING:
    from aitune_core.strategies.candidates import GraphSession

# Log events of run_candidate, and the step a child is in once it has logged each.
_STAGE_MARKS = (("build started", "build"), ("build finished", "validation"), ("validated", "profile"))


@attrs.define(eq=False)
class _Job:
    """One graph's payload folder and the children running on it."""

    folder: Path
    children: set[subprocess.Popen[bytes]] = attrs.field(factory=set)
    cancelled: bool = False
    lock: threading.Lock = attrs.field(factory=threading.Lock)


class SubprocessExecutor(RemoteExecutor):
    """Runs every candidate in its own child process, with a time and an optional memory limit.

    workers: children running at once (only strategies that try every candidate use
        more than one). With more than one, each child gets ``threads`` torch threads.
    timeout_s: the most one child may run, start-up included; None: no limit.
    memory_limit_mb: address space each child may use (``RLIMIT_AS``). It counts virtual
        memory: a CUDA context alone reserves many GiB of it, so leave it unset on GPUs.
    threads: torch threads per child; default: all cores for one worker, else the cores
        shared out among the workers.
    python: the interpreter to start; default: this one.
    keep_files: keep the payload and child logs (in the system temp folder) for debugging.
    """

    name = "subprocess"

    def __init__(
        self,
        workers: int = 1,
        timeout_s: float | None = 1800.0,
        memory_limit_mb: int | None = None,
        threads: int | None = None,
        python: str | None = None,
        keep_files: bool = False,
    ) -> None:
        super().__init__(workers, timeout_s)
        if memory_limit_mb is not None and memory_limit_mb <= 0:
            raise ValueError(f"memory_limit_mb must be positive or None, got {memory_limit_mb!r}")
        self.memory_limit_mb = memory_limit_mb
        self.threads = threads if threads is not None else (_share_cores(workers) if workers > 1 else None)
        self.python = python or sys.executable
        self.keep_files = keep_files

    def describe(self) -> str:
        text = super().describe()
        return text[:-1] + f", memory {self.memory_limit_mb} MiB)" if self.memory_limit_mb else text

    # ------------------------------------------------------------------ RemoteExecutor
    def ship(self, session: GraphSession, payload: GraphPayload) -> _Job:
        folder = Path(tempfile.mkdtemp(prefix="aitune-graph-"))
        payload.write(folder)
        return _Job(folder)

    def candidate_options(self) -> dict[str, Any]:
        return {
            "memory_limit_bytes": self.memory_limit_mb * 2**20 if self.memory_limit_mb else None,
            "threads": self.threads,
        }

    def run(self, handle: Any, candidate: dict[str, Any]) -> tuple[CandidateRecord, Fetch]:
        job: _Job = handle
        folder = Path(tempfile.mkdtemp(prefix="candidate-", dir=job.folder))
        (folder / "candidate.json").write_text(json.dumps(candidate))
        log_path, result_path = folder / "child.log", folder / "result.json"
        command = [self.python, "-m", "aitune_core.executors.child", str(job.folder), str(folder / "candidate.json")]
        with log_path.open("wb") as log:
            child = subprocess.Popen(
                [*command, str(result_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_child_environment(),
                start_new_session=True,  # its own process group: a kill reaches its compiler workers too
            )
        with job.lock:
            job.children.add(child)
            if job.cancelled:
                _kill(child)
        timed_out = False
        try:
            code = child.wait(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(child)
            code = child.wait()
        finally:
            with job.lock:
                job.children.discard(child)
        worker = f"{child.pid}@{socket.gethostname()}"
        if code == 0 and result_path.is_file():
            record = CandidateRecord.from_json(result_path.read_text())
            if record.status == "failed":
                record.log_tail = output_tail(log_path) or record.log_tail
            return record, None
        tail = output_tail(log_path)
        reason = self._reason(code, timed_out, job.cancelled, tail)
        return CandidateRecord.failed(_stage_from_log(tail), reason, worker, tail), None

    def _reason(self, code: int, timed_out: bool, cancelled: bool, tail: str) -> str:
        if timed_out:
            return f"timed out after {self.timeout_s:g} s"
        if cancelled:
            return "stopped: the strategy finished without it"
        if code == EXIT_OUT_OF_MEMORY or looks_out_of_memory(tail):
            limit = f" (limit {self.memory_limit_mb} MiB)" if self.memory_limit_mb else ""
            return f"out of memory{limit}"
        if code < 0:
            name = _signal_name(-code)
            return f"killed by {name}" + (" (the system may have run out of memory)" if name == "SIGKILL" else "")
        return f"child exited with status {code} before writing a result"

    def cancel(self, handle: Any) -> None:
        job: _Job = handle
        with job.lock:
            job.cancelled = True
            for child in job.children:
                _kill(child)

    def unship(self, handle: Any) -> None:
        job: _Job = handle
        if not self.keep_files:
            shutil.rmtree(job.folder, ignore_errors=True)


def _share_cores(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // workers)


def _child_environment() -> dict[str, str]:
    """This process's environment, with its module search path, so the child imports what it imports."""
    env = dict(os.environ)
    paths = list(dict.fromkeys(entry or os.getcwd() for entry in sys.path))
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONFAULTHANDLER"] = "1"
    return env


def _kill(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is not None:
        return
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        child.kill()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _stage_from_log(tail: str) -> str:
    """The step a child was in when it died, from the last run_candidate event in its log."""
    latest, stage = -1, "start"
    for mark, step in _STAGE_MARKS:
        at = tail.rfind(mark)
        if at > latest:
            latest, stage = at, step
    return stage
