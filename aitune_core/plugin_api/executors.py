"""What an executor plugin needs beyond :mod:`aitune_core.plugin_api`: where candidates run.

A backend author never imports this module. An executor author (``aitune-ray`` is
one) ships graphs to workers and candidates' answers back: the executor contract,
the payload and answer sent as plain data, the worker-side run, the session and
result types an executor fills in, and the helpers that watch a candidate's process
tree for memory, whether a worker that left files behind still runs, the artifact
store, for workers that keep builds in a cache folder of their own, and the build
folders a winner's fetched files go to here, so that the cache can tell when they may go. Like the
backend surface, these names keep their meaning within a plugin API version.
"""

from __future__ import annotations

from aitune_core.backends.build_folders import builds_root, claim_build_folder
from aitune_core.evaluate.result import CandidateResult
from aitune_core.evaluate.session import GraphSession
from aitune_core.executors.base import DEFAULT_TIMEOUT_S, Executor, ExecutorError
from aitune_core.executors.isolated.answer import Answer
from aitune_core.executors.isolated.memory import default_limit_mb, held_bytes, over_limit, with_descendants
from aitune_core.executors.isolated.payload import GraphPayload
from aitune_core.executors.isolated.remote import RemoteExecutor
from aitune_core.executors.isolated.worker import EXIT_OUT_OF_MEMORY, run_payload, worker_id
from aitune_core.processes import pid_alive
from aitune_core.store.store import ArtifactStore

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "EXIT_OUT_OF_MEMORY",
    "Answer",
    "ArtifactStore",
    "CandidateResult",
    "Executor",
    "ExecutorError",
    "GraphPayload",
    "GraphSession",
    "RemoteExecutor",
    "builds_root",
    "claim_build_folder",
    "default_limit_mb",
    "held_bytes",
    "over_limit",
    "pid_alive",
    "run_payload",
    "with_descendants",
    "worker_id",
]
