"""What a Ray candidate keeps on its node and what the driver is told, against a stand-in for ``ray`` (no Ray).

The cluster test (``test_ray_cluster.py``) checks the same on real nodes; these pin
down each rule on its own: a worker's store is its node's, a passed candidate's
artifacts are written here as soon as it passes, a lost node is named in the row, and
a Ray started here shares this process's cache.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_ray import FakeRay

from aitune_core.plugin_api import config
from aitune_core.plugin_api.executors import Answer, ArtifactStore, CandidateResult, GraphPayload
from aitune_ray import executor as ray_executor
from aitune_ray.artifacts import unpack_artifacts
from aitune_ray.executor import RayExecutor
from aitune_ray.nodes import Place, on_this_node

PLACE = Place("7@node", "4f2a9c", "127.0.0.1")


def _run(executor: RayExecutor, graph_dir: Path) -> CandidateResult:
    graph = ray_executor._Graph("payload", executor.task_options(torch.device("cpu")), graph_dir)
    answer = executor.run(graph, {"label": "x", **executor.candidate_options()})
    record = answer.result
    record.backend_data = {**(record.backend_data or {}), "fetched": answer.fetch}
    return record


def test_a_worker_keeps_builds_in_its_own_nodes_store_not_the_drivers(tmp_path: Path) -> None:
    driver_store = {"root": str(tmp_path / "driver" / "store"), "max_bytes": 2**20}
    payload = GraphPayload({"store": driver_store}, b"", b"")
    config.cache_dir = tmp_path / "node"  # the worker's config: its node's AITUNE_CACHE_DIR

    own = ArtifactStore.from_data(on_this_node(payload).spec["store"])
    assert own is not None and own.root == (tmp_path / "node" / "store").absolute()
    assert payload.spec["store"] == driver_store  # the payload every worker shares is left as it was
    off = GraphPayload({"store": None}, b"", b"")
    assert on_this_node(off) is off  # the driver's store is off: no worker stores either
    config.store = False
    assert on_this_node(payload).spec["store"] is None  # the node's is off: not there


def test_a_passed_candidates_artifacts_are_written_here_when_it_passes(fake_ray: FakeRay, tmp_path: Path) -> None:
    data = {"artifacts": {"weights": "/elsewhere/builds/id/7-ab/weights.pt"}, "is_jit": False}
    passed = Answer(CandidateResult("x", "passed", backend_data=data))
    packed = {"weights": ("builds/id/7-ab/weights.pt", b"bytes"), "extra": ("extra/notes.txt", b"notes")}
    fake_ray.answers = [PLACE.to_data(), passed.to_json(), packed]
    config.cache_dir = tmp_path / "cache"
    record = _run(RayExecutor(), tmp_path / "cache" / "module" / "0")

    # Into a build folder of this process (the driver), which the cache sizes and removes as its own builds.
    assert record.backend_data is not None
    written = {name: Path(path) for name, path in record.backend_data["fetched"].items()}
    builds = (tmp_path / "cache" / "builds").absolute()
    weights_folder, extra_folder = written["weights"].parent, written["extra"].parent.parent
    assert weights_folder.parent == builds / "id" and written["weights"].name == "weights.pt"
    assert extra_folder.parent == builds / "fetched"  # the worker wrote it outside a build folder
    assert weights_folder.name.startswith(f"{os.getpid()}-") and extra_folder.name.startswith(f"{os.getpid()}-")
    assert written["weights"].read_bytes() == b"bytes" and written["extra"].read_bytes() == b"notes"
    assert not (tmp_path / "cache" / "module").exists()


@pytest.mark.parametrize("relative", ["builds/../x/weights.pt", "builds/.hidden/7-ab/weights.pt", "../weights.pt"])
def test_fetched_artifacts_never_land_outside_the_drivers_build_folders(tmp_path: Path, relative: str) -> None:
    with pytest.raises(ValueError, match="weights"):
        unpack_artifacts({"weights": (relative, b"bytes")}, tmp_path / "builds")
    assert not any(path.is_file() for path in tmp_path.rglob("*"))


def test_a_candidate_whose_node_left_is_a_failed_row_naming_the_node(fake_ray: FakeRay, tmp_path: Path) -> None:
    died = fake_ray.exceptions.NodeDiedError("Task failed because the node it was running on is dead or unavailable.")
    fake_ray.answers = [PLACE.to_data(), died]
    record = _run(RayExecutor(), tmp_path)
    assert (record.status, record.stage, record.worker) == ("failed", "run", "7@node")
    left = "left the cluster while the candidate ran (NodeDiedError)"
    assert record.reason == f"node lost: node 4f2a9c at 127.0.0.1 {left}"


@pytest.mark.parametrize("alive", [True, False])
def test_a_dead_worker_is_a_lost_node_only_when_the_node_is_gone(
    fake_ray: FakeRay, tmp_path: Path, alive: bool
) -> None:
    fake_ray.live_nodes = [{"NodeID": PLACE.node_id, "Alive": alive}]
    fake_ray.answers = [PLACE.to_data(), fake_ray.exceptions.RayError("the worker crashed")]
    reason = _run(RayExecutor(), tmp_path).reason
    if alive:
        assert reason == "worker died: FakeRayError: the worker crashed"
    else:
        assert reason.startswith("node lost: node 4f2a9c at 127.0.0.1 left the cluster")


def test_a_ray_started_here_shares_this_process_cache(fake_ray: FakeRay, tmp_path: Path) -> None:
    fake_ray.initialized = False
    config.cache_dir, config.store_max_mb = tmp_path / "driver", 321
    executor = RayExecutor()
    executor._ray()
    env: dict[str, Any] = fake_ray.init_options["runtime_env"]["env_vars"]
    assert env["AITUNE_CACHE_DIR"] == str((tmp_path / "driver").absolute()) and env["AITUNE_STORE_MAX_MB"] == "321"
    executor.close()
    assert not fake_ray.is_initialized()
