"""The Ray executor on a cluster of three Ray nodes started on this machine, sharing no folder.

Each node has its own cache folder and temporary folder (its raylet's environment,
which its workers inherit), and the driver another (``config.cache_dir``); every node
is on 127.0.0.1. Builds report where they ran to a Ray actor
(:class:`ray_backends.BuildLog`), never through a file, and wait there for the builds
they must meet, so which candidates run side by side is set by the test, not by
timing. Timings are scripted, so the routes do not depend on the machine's load.
"""

from __future__ import annotations

import gc
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from ray_backends import (
    BUILD_LOG,
    FAST_PROFILE,
    PLUGIN_SOURCE,
    BuildLog,
    ReportingAotBackend,
    ReportingJitBackend,
    SlowDemoMLP,
    StuckBackend,
)
from ray_setup import LOOPBACK, LocalCluster, short_root, start_cluster, worker_env

import aitune_core as ait
from aitune_core import TorchEagerBackend, TuneReport
from aitune_core.testing.engine import mlp_samples
from aitune_core.testing.fake_dists import write_fake_dist
from aitune_core.testing.fixtures import aitune_isolated_plugins  # noqa: F401  (the fixture)
from aitune_core.testing.timing import EAGER, ScriptedTimer
from aitune_ray import RayExecutor

pytestmark = pytest.mark.slow
PROFILE = attrs.evolve(FAST_PROFILE, sweep=True)  # timed at every batch size: a route per batch range
TIMEOUT_S = 120  # a safety net only: no verdict depends on it
LOG_NAME = "aitune-build-log"


@attrs.frozen
class ThreeNodes:
    ray: Any
    nodes: LocalCluster
    log: Any
    plugin: Path
    """A plugin distribution registering the reporting backends, on every worker's path."""


@pytest.fixture(scope="module")
def three_nodes() -> Iterator[ThreeNodes]:
    """A head node (which also holds the build log) and two nodes that a test may remove, one CPU each."""
    ray = pytest.importorskip("ray")
    root = short_root()
    plugin = write_fake_dist(root / "dists", "aitune-ray-test-backends", PLUGIN_SOURCE).path
    env = worker_env(None, plugin, **{BUILD_LOG: LOG_NAME})
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("RAY_TMPDIR", str(root))
            nodes = start_cluster(ray, root, [{"head": 1}, {"removable": 1}, {"removable": 1}], "aitune-test", env)
            try:
                log = ray.remote(BuildLog).options(name=LOG_NAME, num_cpus=0, resources={"head": 0.01}).remote()
                yield ThreeNodes(ray, nodes, log, plugin)
            finally:
                nodes.stop(ray)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def scripted_timer() -> ScriptedTimer:
    """The AOT candidate is the fastest at batch 1, the JIT one at batch 2; ``TorchEagerBackend()`` is eager's speed."""
    return ScriptedTimer(
        {
            EAGER: 1e-3,
            "ReportingAotBackend()": lambda batch: 2e-4 if batch == 1 else 9e-4,
            "ReportingJitBackend()": 4e-4,
        },
        default=1e-3,
    )


def tune(module: ait.Module, backends: list[ait.Backend], executor: Any) -> TuneReport:
    ait.config.timer = scripted_timer()
    strategy = ait.MaxThroughputStrategy(backends, profile=PROFILE)
    return ait.tune(module, mlp_samples(4), batch_sizes=[1, 2], strategy=strategy, executor=executor)


def rows(report: TuneReport) -> dict[str, Any]:
    return {row.backend: row for row in report.graphs[0].candidates}


def routes(report: TuneReport) -> list[tuple[str, str, str, str]]:
    """What each candidate became and what it serves: the tuning's outcome, without timings or workers."""
    return [(c.backend, c.status, c.reason, c.describe_serves()) for c in report.graphs[0].candidates]


def stored_entries(cache: Path) -> list[Path]:
    """The artifact store entries under a cache folder."""
    return sorted((cache / "store").rglob("entry.json"))


def demo_model(seed: int) -> SlowDemoMLP:
    """The same weights for the same seed: the same validation errors wherever it is tuned.

    Each test tunes other weights, so that no node's store holds a build an earlier
    test made (a candidate loaded from there is not built, and reports nothing).
    """
    torch.manual_seed(seed)
    return SlowDemoMLP().eval()


def assert_serves_as_eager(module: torch.nn.Module, model: torch.nn.Module) -> None:
    for batch in (1, 2):
        x = torch.randn(batch, 512)
        torch.testing.assert_close(module(x), model(x))


def test_candidates_run_on_other_nodes_share_no_folder_and_route_as_here(
    three_nodes: ThreeNodes,
    aitune_isolated_plugins: Any,  # noqa: F811
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    aitune_isolated_plugins.load(three_nodes.plugin)
    ray, nodes, log = three_nodes.ray, three_nodes.nodes, three_nodes.log
    candidates = [
        TorchEagerBackend(),
        TorchEagerBackend(autocast_enabled=True, autocast_dtype=torch.bfloat16),  # too far from eager: rejected
        ReportingJitBackend(),
        ReportingAotBackend(),
    ]
    ait.config.cache_dir = tmp_path / "here-cache"
    here = tune(ait.Module(demo_model(0), unique_name("here")), candidates, "inprocess")

    driver_cache = tmp_path / "driver-cache"
    ait.config.cache_dir = driver_cache
    ray.get(log.reset.remote(2))  # the two reporting builds run at once: on two nodes
    model = demo_model(0)
    module = ait.Module(model, unique_name("cluster"))
    executor = RayExecutor(timeout_s=TIMEOUT_S)
    report = tune(module, candidates, executor)
    executor.close()

    assert routes(report) == routes(here)
    assert rows(report)["ReportingAotBackend()"].describe_serves() == "batch 1"
    assert rows(report)["ReportingJitBackend()"].describe_serves() == "batch 2"

    builds = ray.get(log.seen.remote())
    assert sorted(build["backend"] for build in builds) == ["ReportingAotBackend()", "ReportingJitBackend()"]
    assert len({build["node_id"] for build in builds}) == 2
    for build in builds:  # each built in its own node's folders, which no other node or the driver uses
        own = nodes.folders_of(build["node_id"])
        assert (Path(build["cache_dir"]), Path(build["temp_dir"])) == (own.cache, own.temp)
        assert Path(build["build_dir"]).is_relative_to(own.temp)
    assert stored_entries(driver_cache) == []  # workers kept their builds in their nodes' stores, not here
    assert any(stored_entries(folders.cache) for folders in nodes.folders)

    assert_serves_as_eager(module, model)  # the AOT winner's weights came back through Ray
    checkpoint = ait.save(module, tmp_path / "checkpoint")
    del module  # a module of that name is loaded only once it is gone
    gc.collect()
    assert_serves_as_eager(ait.load(demo_model(0), checkpoint), model)


def remove_the_stuck_node(three_nodes: ThreeNodes) -> tuple[threading.Thread, list[str]]:
    """A thread that removes the node :class:`StuckBackend` reports from, once it has; the list gets the node's id."""
    removed: list[str] = []

    def remove() -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and not removed:
            builds = three_nodes.ray.get(three_nodes.log.seen.remote())
            stuck = [build["node_id"] for build in builds if build["backend"] == "StuckBackend()"]
            if stuck:
                three_nodes.nodes.cluster.remove_node(three_nodes.nodes.node_by_id(stuck[0]))
                removed.append(stuck[0])
            time.sleep(0.05)

    remover = threading.Thread(target=remove, daemon=True)
    remover.start()
    return remover, removed


def test_a_node_lost_mid_tune_fails_its_candidate_and_the_others_finish(
    three_nodes: ThreeNodes,
    aitune_isolated_plugins: Any,  # noqa: F811
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    aitune_isolated_plugins.load(three_nodes.plugin)
    ray, log = three_nodes.ray, three_nodes.log
    ray.get(log.reset.remote(2))  # the AOT build meets the stuck one, so it runs on the node that stays
    remover, removed = remove_the_stuck_node(three_nodes)
    model = demo_model(1)
    module = ait.Module(model, unique_name("lost"))
    executor = RayExecutor(timeout_s=TIMEOUT_S, resources={"removable": 1})  # never on the head node
    report = tune(module, [StuckBackend(), TorchEagerBackend(), ReportingAotBackend()], executor)
    executor.close()
    remover.join()

    (lost,) = removed
    found = rows(report)
    stuck = found["StuckBackend()"]
    assert (stuck.status, stuck.stage) == ("failed", "run")
    assert stuck.reason.startswith(f"node lost: node {lost} at {LOOPBACK} left the cluster while the candidate ran")
    assert found["ReportingAotBackend()"].status == "selected"
    assert found["TorchEagerBackend()"].status == "passed"
    (aot_build,) = [build for build in ray.get(log.seen.remote()) if build["backend"] == "ReportingAotBackend()"]
    assert aot_build["node_id"] != lost

    assert_serves_as_eager(module, model)
    checkpoint = ait.save(module, tmp_path / "checkpoint")
    del module, report, found, stuck  # a module of that name is loaded only once nothing holds it
    gc.collect()
    assert_serves_as_eager(ait.load(demo_model(1), checkpoint), model)


def test_a_node_lost_after_its_candidate_passed_takes_nothing_the_tuning_needs(
    three_nodes: ThreeNodes,
    aitune_isolated_plugins: Any,  # noqa: F811
    unique_name: Callable[[str], str],
) -> None:
    """The AOT candidate passes on a node, then the stuck one runs there and the node goes: the AOT one still wins."""
    aitune_isolated_plugins.load(three_nodes.plugin)
    doomed = three_nodes.nodes.add_node({"doomed": 1})
    three_nodes.ray.get(three_nodes.log.reset.remote(1))
    remover, removed = remove_the_stuck_node(three_nodes)
    model = demo_model(2)
    module = ait.Module(model, unique_name("after"))
    executor = RayExecutor(workers=1, timeout_s=TIMEOUT_S, resources={"doomed": 1})  # in order, all on that node
    report = tune(module, [ReportingAotBackend(), StuckBackend()], executor)
    executor.close()
    remover.join()

    assert removed == [doomed.node_id]
    found = rows(report)
    assert found["StuckBackend()"].reason.startswith(f"node lost: node {doomed.node_id} at {LOOPBACK}")
    assert found["ReportingAotBackend()"].status == "selected"  # its artifacts left the node when it passed
    assert_serves_as_eager(module, model)
