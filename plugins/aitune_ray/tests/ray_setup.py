"""The Rays the tests start: what their workers run with, and a cluster of several nodes on this machine.

:func:`start_cluster` starts Ray nodes here with ``ray.cluster_utils.Cluster``, each a
raylet with its own object store and its own environment (``env_vars`` of the node's
raylet, which its workers inherit): its own ``AITUNE_CACHE_DIR`` and ``TMPDIR``, so
that no two nodes, and no node and the driver, share a folder, as on machines that
share no disk. Every node listens on, and is reached at, 127.0.0.1 only.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs

LOOPBACK = "127.0.0.1"
OBJECT_STORE_BYTES = 80 * 2**20
"""Per node: the test's objects are a module of a few MB and artifacts of about as much."""


def worker_env(cache_dir: Path | None, *paths: Path, **extra: str) -> dict[str, str]:
    """What the tests' Ray workers run with: the driver's ``sys.path`` (after ``paths``), one thread.

    cache_dir: the workers' own cache folder (``AITUNE_CACHE_DIR``); None leaves it to each node.
    """
    entries = [*map(str, paths), *(entry or os.getcwd() for entry in sys.path)]
    env = {"PYTHONPATH": os.pathsep.join(dict.fromkeys(entries)), "OMP_NUM_THREADS": "1", **extra}
    if cache_dir is not None:
        env["AITUNE_CACHE_DIR"] = str(cache_dir)
    return env


@attrs.define(eq=False)
class NodeFolders:
    """A node's own folders: its aitune cache (``AITUNE_CACHE_DIR``) and its temporary folder (``TMPDIR``)."""

    cache: Path
    temp: Path

    @classmethod
    def under(cls, root: Path) -> NodeFolders:
        folders = cls(root / "cache", root / "tmp")
        folders.cache.mkdir(parents=True)
        folders.temp.mkdir(parents=True)
        return folders

    def env(self) -> dict[str, str]:
        return {"AITUNE_CACHE_DIR": str(self.cache), "TMPDIR": str(self.temp)}


@attrs.define(eq=False)
class LocalCluster:
    """Ray nodes started here under ``root``: ``nodes[i]`` with its own ``folders[i]``, ``nodes[0]`` the head."""

    cluster: Any
    root: Path
    nodes: list[Any] = attrs.field(factory=list)
    folders: list[NodeFolders] = attrs.field(factory=list)

    def add_node(self, resources: dict[str, float]) -> Any:
        """A node with one CPU, ``resources`` and folders of its own, on 127.0.0.1."""
        own = NodeFolders.under(self.root / f"node{len(self.nodes)}")
        node = self.cluster.add_node(
            num_cpus=1,
            resources=resources,
            node_ip_address=LOOPBACK,
            object_store_memory=OBJECT_STORE_BYTES,
            temp_dir=str(self.root / "ray"),
            env_vars=own.env(),
            **({"include_dashboard": False} if not self.nodes else {}),
        )
        self.nodes.append(node)
        self.folders.append(own)
        return node

    def node_by_id(self, node_id: str) -> Any:
        return next(node for node in self.nodes if node.node_id == node_id)

    def folders_of(self, node_id: str) -> NodeFolders:
        return self.folders[[node.node_id for node in self.nodes].index(node_id)]

    def stop(self, ray: Any) -> None:
        """Disconnect the driver and stop every node still running."""
        ray.shutdown()
        self.cluster.shutdown()


def start_cluster(
    ray: Any, root: Path, resources: list[dict[str, float]], namespace: str, driver_env: dict[str, str]
) -> LocalCluster:
    """One node per entry of ``resources`` (one CPU each, plus those custom resources), the driver connected to them.

    ``root`` must be short: Ray's sockets live under it (a Unix socket path has at most
    107 characters); ``RAY_TMPDIR`` should name it too, since ``Cluster`` writes the head's
    address under Ray's default temp folder. The driver's runtime env (``driver_env``)
    must not name the nodes' own variables, which it would override on every node alike.
    """
    from ray.cluster_utils import Cluster

    assert not {"AITUNE_CACHE_DIR", "TMPDIR"} & set(driver_env), "a job-wide variable is the same on every node"
    if ray.util.get_node_ip_address() != LOOPBACK:  # before any connection: Ray would use the network address
        raise RuntimeError(
            f"Ray would run on {ray.util.get_node_ip_address()}, not {LOOPBACK}: set "
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 before ray is imported (tests/conftest.py does)"
        )
    started = LocalCluster(Cluster(), root)
    try:
        for extra in resources:
            started.add_node(extra)
        address = started.cluster.address
        ray.init(address=address, namespace=namespace, log_to_driver=False, runtime_env={"env_vars": driver_env})
        addresses = {node["NodeManagerAddress"] for node in ray.nodes()}
        assert addresses == {LOOPBACK}, f"every node must be on {LOOPBACK}, got {addresses}"
    except BaseException:
        started.stop(ray)
        raise
    return started


def short_root() -> Path:
    """A new folder with a short path, outside any virtualenv (Ray refuses a temp folder inside one)."""
    return Path(tempfile.mkdtemp(prefix="aitune-ray-", dir="/tmp"))
