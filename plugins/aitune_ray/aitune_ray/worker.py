"""The Ray task: one candidate on one Ray worker, answered as plain data and artifact bytes.

It runs the same code as a subprocess child (:func:`aitune_core.executors.child.run_payload`),
in a folder of its own on the worker's machine, since the driver's cache folder may not
exist there. That includes the module guard: a candidate that changes the module it
was shipped fails at that step, and the module is put back before the next candidate
this worker runs on the same graph. It is a generator, which Ray streams: it first yields who it is
(``pid@host``), so the driver knows where the candidate runs and starts its time limit
only then; then the record, as JSON; then the artifacts of an ahead-of-time backend,
bytes that stay in Ray's object store unless the driver fetches them for the winner, so
losing candidates' artifacts never cross the network.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aitune_core.executors.child import run_payload
from aitune_core.executors.payload import GraphPayload, pack_artifacts, worker_id

PackedArtifacts = dict[str, tuple[str, bytes]]


FOLDER_PREFIX = "aitune-candidate-"


def run_candidate_task(payload: GraphPayload, candidate: dict[str, Any]) -> Iterator[str | PackedArtifacts]:
    """Yields ``pid@host``, then the record as JSON, then ``{name: (path under the cache folder, bytes)}``."""
    yield worker_id()
    _remove_folders_of_dead_workers()
    cache_dir = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
    try:
        record = run_payload(payload, candidate, cache_dir)
        packed: PackedArtifacts = {}
        backend = record.backend
        if record.status == "passed" and backend is not None and not backend.get("is_jit"):
            packed = pack_artifacts(backend.get("artifacts", {}), cache_dir)
        yield record.to_json()
        yield packed
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def _remove_folders_of_dead_workers() -> None:
    """Build folders left by workers that died mid-candidate (a crash, a time limit) on this machine."""
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*-*"):
        pid = folder.name[len(FOLDER_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
