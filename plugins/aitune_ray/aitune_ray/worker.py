"""The Ray task: one candidate on one Ray worker, answered as JSON and artifact bytes.

It runs the same code as a subprocess child (:func:`aitune_core.plugin_api.executors.run_payload`),
in a folder of its own in its node's temporary folder, since the driver's cache folder
may not exist there, and with its node's own artifact store (:func:`aitune_ray.nodes.on_this_node`).
That includes the module guard: a candidate that changes the module it was shipped
fails at that step, and the module is put back before the next candidate this worker
runs on the same graph. It is a generator, which Ray streams: it first yields where it
runs (:class:`aitune_ray.nodes.Place`), so the driver knows the worker and its node and
starts its time limit only then; then the answer, as JSON; then the artifacts of an
ahead-of-time backend that passed (see :mod:`aitune_ray.artifacts`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aitune_core.plugin_api.executors import pid_alive, run_payload
from aitune_ray.artifacts import PackedArtifacts, pack_artifacts
from aitune_ray.nodes import Place, on_this_node

if TYPE_CHECKING:
    from aitune_core.plugin_api.executors import CandidateResult, GraphPayload

FOLDER_PREFIX = "aitune-candidate-"


def run_candidate_task(
    payload: GraphPayload, candidate: dict[str, Any]
) -> Iterator[dict[str, str] | str | PackedArtifacts]:
    """Yields its :class:`Place` as data, then the answer as JSON, then ``{name: (path under its folder, bytes)}``."""
    yield Place.here().to_data()
    _remove_folders_of_dead_workers()
    cache_dir = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
    try:
        answer = run_payload(on_this_node(payload), candidate, cache_dir)
        data = answer.result.backend_data or {}
        packed = pack_artifacts(data.get("artifacts", {}), cache_dir) if has_artifacts(answer.result) else {}
        yield answer.to_json()
        yield packed
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def has_artifacts(result: CandidateResult) -> bool:
    """A passed ahead-of-time backend: one restored from its files, which the driver must fetch."""
    return result.status == "passed" and result.backend_data is not None and not result.backend_data.get("is_jit")


def _remove_folders_of_dead_workers() -> None:
    """Build folders left by workers that died mid-candidate (a crash, a time limit) on this machine."""
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*-*"):
        pid = folder.name[len(FOLDER_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
