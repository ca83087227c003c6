"""The worker side of out-of-process executors: try one candidate, answer in plain data.

:func:`run_payload` is what any worker calls (a Ray task does); :func:`main` is the
child process the subprocess executor starts::

    python -m aitune_core.executors.child GRAPH_DIR CANDIDATE_JSON RESULT_JSON

A worker that runs several candidates of one graph (a Ray worker is reused) keeps that
graph open between them: the module is loaded once, and eager's outputs and timings
are computed once, so every candidate on the worker is compared with the same eager
numbers. Only the latest graph is kept, so a worker holds one module at a time.

Every step runs inside the session's module guard, exactly as in-process: a candidate
that changes the module it was shipped fails at that step with the same reason, and
the worker's module is put back from the guard's copy before the next candidate (or,
if it cannot be, loaded again from the payload).

Only the standard library is imported before the memory limit is set, so that the
limit covers torch and everything a backend loads. The child writes its result and
leaves with ``os._exit``: compiler worker pools and atexit handlers of a backend
cannot then hold up, or crash, a candidate whose answer is already written.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aitune_core.executors.payload import CandidateRecord, GraphPayload
    from aitune_core.strategies.candidates import GraphSession

EXIT_OUT_OF_MEMORY = 3
"""Exit status of a child that ran out of memory before it could write a result."""

_TAIL_EVENTS = 20

_open_graph: tuple[str, GraphSession] | None = None
"""The graph this worker process has open: ``(graph id, session)``."""


def _session(payload: GraphPayload, graph_id: str, cache_dir: Path, log: Any) -> GraphSession:
    """The session for this graph: the one already open in this process, or a new one."""
    global _open_graph
    if graph_id and _open_graph is not None and _open_graph[0] == graph_id:
        session = _open_graph[1]
    else:
        _open_graph = None  # let the previous graph's module go before this one is loaded
        session = payload.open(cache_dir, log)
        if graph_id:
            _open_graph = (graph_id, session)
    session.cache_dir, session.log, session.guard.log = cache_dir, log, log
    return session


def run_payload(payload: GraphPayload, candidate: dict[str, Any], cache_dir: Path) -> CandidateRecord:
    """Build, validate and profile one candidate here, exactly as in-process tuning would.

    Never raises for the candidate's own failures: they become a failed or rejected
    record, with the last events of this worker's log.
    """
    import torch

    from aitune_core.executors.payload import CandidateRecord, backend_from_ref, worker_id
    from aitune_core.guard import ModuleRestoreError
    from aitune_core.log import capture, get_logger
    from aitune_core.strategies.candidates import CandidateResult, release, run_candidate

    global _open_graph

    worker = worker_id()
    label = candidate.get("label", "")
    log = get_logger(module=payload.spec["module_name"], graph=payload.spec["graph"]["name"], worker=worker)
    with capture() as events:
        try:
            if candidate.get("threads"):
                torch.set_num_threads(int(candidate["threads"]))
            session = _session(payload, str(candidate.get("graph_id", "")), cache_dir, log)
            blueprint = backend_from_ref(candidate["backend"])
        except Exception as error:
            reason = f"{type(error).__name__}: {error}".strip()
            log.warning("worker could not start the candidate", backend=label, reason=reason)
            return CandidateRecord.failed("start", reason, worker, traceback.format_exc()[-4000:])
        result = CandidateResult(label or blueprint.describe(), "failed", key=blueprint.key(), blueprint=blueprint)
        backend_log = log.bind(backend=result.backend)
        with torch.no_grad():
            try:
                run_candidate(
                    session,
                    blueprint,
                    result,
                    correctness_check=bool(candidate.get("correctness_check", True)),
                    log=backend_log,
                )
            except ModuleRestoreError as error:  # the module here is damaged: the next candidate loads it anew
                _open_graph = None
                result.status, result.stage, result.reason = "failed", session.guard.changed_steps[-1], str(error)
        record = CandidateRecord.of(result, worker)
        release(result.instance)
    if record.status != "passed":
        record.log_tail = "\n".join(_line(event) for event in events[-_TAIL_EVENTS:])
    return record


def _line(event: dict[str, Any]) -> str:
    fields = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("event", "timestamp", "log_level"))
    return f"[{event.get('log_level', 'info')}] {event.get('event', '')} {fields}".rstrip()


def _limit_memory(limit_bytes: int | None) -> None:
    if not limit_bytes:
        return
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (int(limit_bytes), int(limit_bytes)))


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3:
        print("usage: python -m aitune_core.executors.child GRAPH_DIR CANDIDATE_JSON RESULT_JSON", file=sys.stderr)
        return 2
    graph_dir, candidate_file, result_file = (Path(arg) for arg in args)
    candidate = json.loads(candidate_file.read_text())
    _limit_memory(candidate.get("memory_limit_bytes"))
    started = time.perf_counter()
    try:
        from aitune_core.executors.payload import GraphPayload

        record = run_payload(GraphPayload.read(graph_dir), candidate, Path(candidate["cache_dir"]))
    except MemoryError:
        return EXIT_OUT_OF_MEMORY
    staging = result_file.with_name(result_file.name + ".partial")
    staging.write_text(record.to_json())
    os.replace(staging, result_file)  # the parent never reads half a result
    print(f"candidate finished: {record.status} in {time.perf_counter() - started:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
