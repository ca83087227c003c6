"""SubprocessExecutor: each candidate in a fresh child process, so a crash is one failed row.

Compilers segfault, call ``abort()``, hang in an autotuner or exhaust memory; in-process
any of these ends the tuning run, and the graphs tuned so far with it. Here each
candidate runs in a new interpreter (started with ``subprocess``: spawned, never
forked, so it shares no threads, locks or CUDA context with this process), and what
happens to it is read from outside:

* a signal becomes "killed by SIGABRT" (or SIGSEGV, ...);
* a time limit, counted from the child's start, becomes "timed out after 600 s";
* a memory limit on what the child and its helpers hold (read from ``/proc`` ten times
  a second, see :mod:`.memory`) becomes "out of memory: held ...";

each at the stage the child recorded last, with the end of the child's log
(``PYTHONFAULTHANDLER`` is on, so a native crash leaves the Python stack there). The
other candidates and this process carry on.

Children load the graph from files written once per graph (:mod:`.payload`), find
modules the way this process does (its ``sys.path`` is their ``PYTHONPATH``), build
into the same cache folder as in-process tuning, so an AOT winner is loaded here from
its artifacts there, and write their answer as JSON (:mod:`.worker`).

Each child leads a process group of its own, and the whole group is killed when the
candidate ends, however it ends: compiler worker pools and helper processes a backend
started die with it instead of holding memory for the rest of the tuning. (A helper
that leaves the group on purpose, with ``setsid``, is out of reach.) The group stays in
this process's session, so that it becomes an orphaned group when this process dies, and
the kernel then sends its stopped members ``SIGHUP`` and ``SIGCONT`` (a JIT serving call
holds background builds stopped while it runs, :mod:`.priority`).

Costs: each child starts an interpreter and imports torch (a few seconds). Linux and
macOS; on macOS the memory limit is not enforced.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from aitune_core.config import config
from aitune_core.executors.base import DEFAULT_TIMEOUT_S
from aitune_core.executors.isolated import memory
from aitune_core.executors.isolated.answer import Answer, looks_out_of_memory
from aitune_core.executors.isolated.payload import GraphPayload
from aitune_core.executors.isolated.priority import BACKGROUND_GROUPS, step_aside, thread_limits
from aitune_core.executors.isolated.remote import RemoteExecutor
from aitune_core.executors.isolated.worker import EXIT_OUT_OF_MEMORY

if TYPE_CHECKING:
    from aitune_core.evaluate.session import GraphSession


@attrs.define(eq=False)
class _Job:
    """One graph's payload folder and the children running on it."""

    folder: Path
    children: set[subprocess.Popen[bytes]] = attrs.field(factory=set)
    cancelled: bool = False
    lock: threading.Lock = attrs.field(factory=threading.Lock)


class SubprocessExecutor(RemoteExecutor):
    """Runs every candidate in its own child process, with a time and a memory limit.

    workers: children running at once (only strategies that try every candidate use
        more than one). With more than one, each child gets ``threads`` torch threads.
    timeout_s: the most one child may run, start-up included; "auto": ``DEFAULT_TIMEOUT_S``
        (600 s); None: no limit.
    memory_limit_mb: the most host memory one child and the helpers it starts may hold
        together (anonymous resident memory, so a CUDA context's reservations do not
        count); over it, the child is killed. "auto": half of this machine's memory (or
        its container's limit), divided by ``workers``; None: no limit. Linux only.
    threads: torch threads per child; default: all cores for one worker, else the cores
        shared out among the workers.
    python: the interpreter to start; default: this one.
    keep_files: keep the payload and child logs (in the system temp folder) for debugging.
    background: children run at background priority (``SCHED_IDLE`` on Linux, see
        :mod:`.priority`): they use only the CPU time nothing else wants, as tuning beside a
        serving process must.
    """

    name = "subprocess"

    def __init__(
        self,
        workers: int = 1,
        timeout_s: float | Literal["auto"] | None = "auto",
        memory_limit_mb: int | Literal["auto"] | None = "auto",
        threads: int | None = None,
        python: str | None = None,
        keep_files: bool = False,
        background: bool = False,
    ) -> None:
        super().__init__(workers, DEFAULT_TIMEOUT_S if timeout_s == "auto" else timeout_s)
        if memory_limit_mb == "auto":
            memory_limit_mb = memory.default_limit_mb(workers)
        elif memory_limit_mb is not None and (
            isinstance(memory_limit_mb, bool) or not isinstance(memory_limit_mb, int) or memory_limit_mb <= 0
        ):
            raise ValueError(
                f"memory_limit_mb must be a positive whole number, 'auto' or None, got {memory_limit_mb!r}"
            )
        self.memory_limit_mb: int | None = memory_limit_mb
        self.threads = threads if threads is not None else (_share_cores(workers) if workers > 1 else None)
        self.python = python or sys.executable
        self.keep_files = keep_files
        self.background = background

    def describe(self) -> str:
        text = super().describe()
        return text[:-1] + f", memory {self.memory_limit_mb} MiB)" if self.memory_limit_mb else text

    def ship(self, session: GraphSession, payload: GraphPayload) -> _Job:
        folder = Path(tempfile.mkdtemp(prefix="aitune-graph-"))
        payload.write(folder)
        return _Job(folder)

    def candidate_options(self) -> dict[str, Any]:
        return {"threads": self.threads, "background": self.background}

    def run(self, handle: Any, candidate: dict[str, Any]) -> Answer:
        job: _Job = handle
        folder = Path(tempfile.mkdtemp(prefix="candidate-", dir=job.folder))
        (folder / "candidate.json").write_text(json.dumps(candidate))
        log_path, answer_path, stage_path = folder / "child.log", folder / "answer.json", folder / "stage"
        command = [self.python, "-m", "aitune_core.executors.isolated.worker", str(job.folder)]
        with log_path.open("wb") as log:
            child = subprocess.Popen(
                [*command, str(folder / "candidate.json"), str(answer_path), str(stage_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_child_environment(self.threads),
                # Its own process group (a kill reaches its compiler workers too), in this
                # session: should this process die while a serving call holds the group
                # stopped, the kernel continues it (with SIGHUP) instead of leaving it stopped.
                process_group=0,
            )
        if self.background:
            step_aside(child.pid)  # at once, not when it gets to it: its imports would compete with serving
            BACKGROUND_GROUPS.add(child.pid)
        with job.lock:
            job.children.add(child)
            if job.cancelled:
                _kill_group(child)
        try:
            stopped = self._watch(child)
        finally:
            with job.lock:  # cancel() must not signal the group once the child is reaped
                job.children.discard(child)
            BACKGROUND_GROUPS.discard(child.pid)  # nor may a serving call
            _kill_group(child)  # its helpers: compiler workers, servers, whatever it started
            code = child.wait()
        tail = output_tail(log_path)
        if stopped is None and code == 0 and answer_path.is_file():
            answer = Answer.from_json(answer_path.read_text())
            if answer.result.status == "failed":
                answer.result.log_tail = tail or answer.result.log_tail
            return answer
        # No answer: the child ended (or was stopped) at the stage it recorded last.
        stage = _read_text(stage_path) or "start"
        reason = stopped or self._reason(code, job.cancelled, tail)
        return Answer.failed(stage, reason, f"{child.pid}@{socket.gethostname()}", tail)

    def _watch(self, child: subprocess.Popen[bytes]) -> str | None:
        """Wait until the child ends, or stop it at its time or memory limit and say why.

        The child is left unreaped (a zombie) when it ends by itself, so that its process
        id, and with it the process group's, cannot be reused before the group is killed.
        """
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        limit = self.memory_limit_mb * 2**20 if self.memory_limit_mb else None
        while not _ended(child):
            if deadline is not None and time.monotonic() >= deadline:
                _kill_group(child)
                return f"timed out after {self.timeout_s:g} s"
            if limit is not None:
                held = memory.held_bytes(memory.group_members(child.pid))
                if held is not None and held > limit:
                    _kill_group(child)
                    return f"out of memory: {memory.over_limit(held, limit)}"
            time.sleep(memory.CHECK_INTERVAL_S)
        return None

    def _reason(self, code: int, cancelled: bool, tail: str) -> str:
        if cancelled:
            return "stopped: the strategy finished without it"
        if code == EXIT_OUT_OF_MEMORY or looks_out_of_memory(tail):
            return "out of memory: an allocation failed (the machine is full)"
        if code < 0:
            name = _signal_name(-code)
            return f"killed by {name}" + (" (the system may have run out of memory)" if name == "SIGKILL" else "")
        return f"worker exited with status {code} before writing a result"

    def cancel(self, handle: Any) -> None:
        job: _Job = handle
        with job.lock:
            job.cancelled = True
            for child in job.children:
                _kill_group(child)

    def unship(self, handle: Any) -> None:
        job: _Job = handle
        if not self.keep_files:
            shutil.rmtree(job.folder, ignore_errors=True)


def _share_cores(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // workers)


def _child_environment(threads: int | None = None) -> dict[str, str]:
    """This process's environment, with its module search path, so the child imports what it imports.

    threads: the cores the child may use, for its OpenMP pool and Inductor's compile workers alike.
    """
    env = {**os.environ, **(thread_limits(threads) if threads else {})}
    paths = list(dict.fromkeys(entry or os.getcwd() for entry in sys.path))
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONFAULTHANDLER"] = "1"
    env["AITUNE_CACHE_DIR"] = str(config.cache_dir.expanduser().absolute())  # builds go to this cache's builds/
    return env


_WAITS_WITHOUT_REAPING = hasattr(os, "waitid")
"""False on macOS before Python 3.13: there the child is reaped first and its group killed just after."""


def _ended(child: subprocess.Popen[bytes]) -> bool:
    """Whether the child has ended, without reaping it where the system allows that."""
    if child.returncode is not None:
        return True
    if not _WAITS_WITHOUT_REAPING:
        return child.poll() is not None
    try:
        return os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already
        return True


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    """Kill the child's process group: the child, if still running, and every helper it started."""
    if child.returncode is not None and _WAITS_WITHOUT_REAPING:
        return  # reaped by the final wait, after the group was killed
    with contextlib.suppress(ProcessLookupError, PermissionError):  # nothing left in the group
        os.killpg(child.pid, signal.SIGKILL)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _read_text(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def output_tail(path: Path, limit: int = 4000) -> str:
    """The end of a child's log file, for the reason a candidate failed."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
