"""The worker side of out-of-process executors: try one candidate, answer with its row.

:func:`run_payload` is what every worker calls (a Ray task does); run as a module, this
is the child process the subprocess executor starts::

    python -m aitune_core.executors.isolated.worker GRAPH_DIR CANDIDATE_JSON ANSWER_JSON STAGE_FILE

A worker that runs several candidates of one graph (a Ray worker is reused) keeps that
graph open between them: the module is loaded once, and eager's outputs are computed
once, so every candidate on the worker is compared with the same eager numbers. Only
the latest graph is kept, so a worker holds one module at a time.

Every step runs inside the session's module guard, exactly as in-process: a candidate
that changes the module it was shipped fails at that step with the same reason, and
the worker's module is put back from the guard's copy before the next candidate (or,
if it cannot be, loaded again from the payload). The guard also reports each step as
it starts: the child writes its name to STAGE_FILE, so that a child killed (or exiting)
mid-step leaves its stage behind. ANSWER_JSON is written once, with the real answer: a
child that ends without it has not answered, whatever its exit status. The child leaves
with ``os._exit``: compiler worker pools and atexit handlers of a backend cannot then
hold up, or crash, a candidate whose answer is already written.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from aitune_core.backends import build_folders
from aitune_core.backends.artifacts import seal_of
from aitune_core.evaluate.candidate import failure_reason, release, run_candidate
from aitune_core.evaluate.result import CandidateResult
from aitune_core.evaluate.session import GraphSession
from aitune_core.executors.isolated.answer import Answer, looks_out_of_memory
from aitune_core.executors.isolated.payload import GraphPayload, backend_from_ref
from aitune_core.executors.isolated.priority import step_aside
from aitune_core.extensions import ensure_plugins
from aitune_core.guard import ModuleGuard, ModuleRestoreError
from aitune_core.log import capture, get_logger

EXIT_OUT_OF_MEMORY = 3
"""Exit status of a child that ran out of memory before it could write its answer."""

_TAIL_EVENTS = 20
_NEXT_STAGE = {"build": "validation", "validation": "serialize"}
"""The stage of ``run_candidate`` that follows each guarded step once it is done."""

_open_graph: tuple[str, GraphSession] | None = None
"""The graph this worker process has open: ``(graph id, session)``."""


def _ignore(stage: str) -> None:
    pass


_on_stage: Callable[[str], None] = _ignore
"""Hears the stage of the candidate this process is running, as each starts."""


class StageGuard(ModuleGuard):
    """The worker's module guard: each step it runs is also the candidate's stage, told to ``_on_stage``."""

    @contextlib.contextmanager
    def step(self, step: str) -> Iterator[None]:
        _on_stage(step)
        with super().step(step):
            yield
        _on_stage(_NEXT_STAGE.get(step, step))


def worker_id() -> str:
    """``pid@host``: which process ran a candidate, as logs and the summary show it."""
    return f"{os.getpid()}@{socket.gethostname()}"


def _session(payload: GraphPayload, graph_id: str, cache_dir: Path, log: Any) -> GraphSession:
    """The session for this graph: the one already open in this process, or a new one."""
    global _open_graph
    if graph_id and _open_graph is not None and _open_graph[0] == graph_id:
        session = _open_graph[1]
    else:
        _open_graph = None  # let the previous graph's module go before this one is loaded
        session = payload.open(cache_dir, log)
        session.guard = StageGuard(session.module, session.module_name)
        if graph_id:
            _open_graph = (graph_id, session)
    session.cache_dir, session.log, session.guard.log = cache_dir, log, log
    return session


def run_payload(
    payload: GraphPayload, candidate: dict[str, Any], cache_dir: Path, on_stage: Callable[[str], None] | None = None
) -> Answer:
    """Build and validate one candidate here, exactly as in-process tuning would.

    Never raises for the candidate's own failures: they become a failed or rejected
    row, with the last events of this worker's log. ``on_stage`` hears each stage as it starts.
    """
    global _open_graph, _on_stage
    ensure_plugins()  # a worker is a process of its own: the candidate's backend class may come from a plugin
    _on_stage = on_stage or _ignore
    worker = worker_id()
    label = candidate.get("label", "")
    log = get_logger(module=payload.spec["module_name"], graph=payload.spec["graph"]["name"], worker=worker)
    with capture() as events:
        result = CandidateResult(label, "failed", stage="start", worker=worker)
        try:
            if candidate.get("threads"):
                torch.set_num_threads(int(candidate["threads"]))
            session = _session(payload, str(candidate.get("graph_id", "")), cache_dir, log)
            blueprint = backend_from_ref(candidate["backend"])
        except Exception as error:
            result.reason, result.log_tail = failure_reason(error), traceback.format_exc()[-4000:]
            log.warning("start failed", backend=label, reason=result.reason)
        else:
            result = CandidateResult(label or blueprint.describe(), "failed", key=blueprint.key(), worker=worker)
            check, backend_log = bool(candidate.get("correctness_check", True)), log.bind(backend=result.backend)
            with torch.no_grad():
                try:
                    run_candidate(session, blueprint, result, correctness_check=check, log=backend_log)
                except ModuleRestoreError as error:  # the module here is damaged: the next candidate loads it anew
                    _open_graph = None
                    result.status, result.stage, result.reason = "failed", session.guard.changed_steps[-1], str(error)
            _keep_what_restores(result)
            release(result.instance)
    if result.status != "passed" and not result.log_tail:
        result.log_tail = "\n".join(_line(event) for event in events[-_TAIL_EVENTS:])
    return Answer(result, [event for event in events if "backend" in event])


def _keep_what_restores(result: CandidateResult) -> None:
    """What the tuning process needs to make the winner again: its ``to_dict()``, JIT or not, and its seal."""
    backend = result.instance
    if result.status == "passed" and backend is not None:
        data = backend.to_dict()
        data["artifacts"] = {name: str(path) for name, path in data.get("artifacts", {}).items()}
        artifact_seal = seal_of(backend)  # what the worker validated: the winner is checked against it there
        result.backend_data = {
            **data,
            "is_jit": backend.is_jit,
            "seal": None if artifact_seal is None else artifact_seal.to_data(),
        }
    if result.status == "failed" and looks_out_of_memory(result.reason):
        result.reason = f"out of memory: {result.reason}"


def _line(event: dict[str, Any]) -> str:
    fields = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("event", "timestamp", "log_level"))
    return f"[{event.get('log_level', 'info')}] {event.get('event', '')} {fields}".rstrip()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 4:
        print(
            "usage: python -m aitune_core.executors.isolated.worker GRAPH_DIR CANDIDATE_JSON ANSWER_JSON STAGE_FILE",
            file=sys.stderr,
        )
        return 2
    graph_dir, candidate_file, answer_file, stage_file = (Path(arg) for arg in args)
    candidate = json.loads(candidate_file.read_text())
    build_folders.build_for(os.getppid())  # the tuning process restores the winner from here, after this exits
    if candidate.get("background"):
        print(f"background priority: {step_aside()}", file=sys.stderr)
    started = time.perf_counter()
    ensure_plugins()  # before reading: the payload's configs may hold types plugins teach the converter
    try:
        payload = GraphPayload.read(graph_dir)
        answer = run_payload(
            payload, candidate, Path(candidate["cache_dir"]), lambda stage: _write_whole(stage_file, stage)
        )
    except MemoryError:
        return EXIT_OUT_OF_MEMORY
    _write_whole(answer_file, answer.to_json())
    print(f"candidate finished: {answer.result.status} in {time.perf_counter() - started:.2f} s", file=sys.stderr)
    return 0


def _write_whole(path: Path, text: str) -> None:
    staging = path.with_name(path.name + ".partial")
    staging.write_text(text)
    os.replace(staging, path)  # the parent never reads half a file


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
